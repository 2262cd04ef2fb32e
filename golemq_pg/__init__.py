"""golemq-pg: a Postgres-native, high-throughput durable job queue for Python."""

from golemq_pg._types import (
    AttemptError,
    JobStatus,
    JobSummary,
    JobType,
    LifecycleObserver,
    PausedType,
    Resource,
    Retention,
    RetryContext,
    ScheduleSummary,
    Scope,
    Transition,
    WorkerSummary,
)
from golemq_pg.errors import (
    JobAborted,
    MigrationLockTimeout,
    PreparedStatementsUnsupported,
    QueueConfigError,
    QueuePayloadError,
    RetryableJobError,
    TerminalJobError,
)
from golemq_pg.queue import AsyncQueue, Queue
from golemq_pg.store import InMemoryStore, JobStore, PostgresStore
from golemq_pg.store.postgres import AsyncPostgresStore
from golemq_pg.worker import BatchEvent, CancelSignal, JobEvent, Worker

__all__ = [
    "AsyncPostgresStore",
    "AsyncQueue",
    "AttemptError",
    "BatchEvent",
    "CancelSignal",
    "InMemoryStore",
    "JobAborted",
    "JobEvent",
    "JobStatus",
    "JobStore",
    "JobSummary",
    "JobType",
    "LifecycleObserver",
    "MigrationLockTimeout",
    "PausedType",
    "PostgresStore",
    "PreparedStatementsUnsupported",
    "Queue",
    "QueueConfigError",
    "QueuePayloadError",
    "Resource",
    "Retention",
    "RetryContext",
    "RetryableJobError",
    "ScheduleSummary",
    "Scope",
    "TerminalJobError",
    "Transition",
    "Worker",
    "WorkerSummary",
]

__version__ = "0.1.0"
