"""golemq-pg: a Postgres-native, high-throughput durable job queue for Python."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from golemq_pg._types import (
        UNLIMITED,
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
        WorkerError,
        WorkerSummary,
        WorkflowNode,
        WorkflowRun,
        WorkflowSummary,
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
    from golemq_pg.worker import BatchEvent, CancelSignal, JobEvent, Middleware, Worker
    from golemq_pg.workflow import Workflow

#: Where each public name lives. Imported on first use (PEP 562), so ``import golemq_pg``
#: (and the CLI's ``--help``, which imports it) loads no database driver: ``from golemq_pg
#: import Queue`` imports exactly what ``Queue`` needs.
_EXPORTS: dict[str, str] = {
    "AsyncPostgresStore": "golemq_pg.store.postgres",
    "AsyncQueue": "golemq_pg.queue",
    "AttemptError": "golemq_pg._types",
    "BatchEvent": "golemq_pg.worker",
    "CancelSignal": "golemq_pg.worker",
    "InMemoryStore": "golemq_pg.store",
    "JobAborted": "golemq_pg.errors",
    "JobEvent": "golemq_pg.worker",
    "JobStatus": "golemq_pg._types",
    "JobStore": "golemq_pg.store",
    "JobSummary": "golemq_pg._types",
    "JobType": "golemq_pg._types",
    "LifecycleObserver": "golemq_pg._types",
    "Middleware": "golemq_pg.worker",
    "MigrationLockTimeout": "golemq_pg.errors",
    "PausedType": "golemq_pg._types",
    "PostgresStore": "golemq_pg.store",
    "PreparedStatementsUnsupported": "golemq_pg.errors",
    "Queue": "golemq_pg.queue",
    "QueueConfigError": "golemq_pg.errors",
    "QueuePayloadError": "golemq_pg.errors",
    "Resource": "golemq_pg._types",
    "Retention": "golemq_pg._types",
    "RetryContext": "golemq_pg._types",
    "RetryableJobError": "golemq_pg.errors",
    "ScheduleSummary": "golemq_pg._types",
    "Scope": "golemq_pg._types",
    "TerminalJobError": "golemq_pg.errors",
    "Transition": "golemq_pg._types",
    "UNLIMITED": "golemq_pg._types",
    "Worker": "golemq_pg.worker",
    "WorkerError": "golemq_pg._types",
    "WorkerSummary": "golemq_pg._types",
    "Workflow": "golemq_pg.workflow",
    "WorkflowNode": "golemq_pg._types",
    "WorkflowRun": "golemq_pg._types",
    "WorkflowSummary": "golemq_pg._types",
}


__all__ = [
    "UNLIMITED",
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
    "Middleware",
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
    "WorkerError",
    "WorkerSummary",
    "Workflow",
    "WorkflowNode",
    "WorkflowRun",
    "WorkflowSummary",
]

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """Import a public name on first use (then cached in the module's namespace)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'golemq_pg' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
