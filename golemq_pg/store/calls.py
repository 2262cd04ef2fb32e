"""Typed calls of store verbs, for logic written once over both kinds of store.

The producer plans (``golemq_pg.queue``) and the dashboard (``golemq_pg.web``) run on a
synchronous :class:`~golemq_pg.store.port.JobStore` (``PostgresStore``, ``InMemoryStore``) or
on an :class:`~golemq_pg.store.postgres.AsyncPostgresStore`. A :class:`StoreCall` is one
verb call bound to its arguments, written as a real method call on each kind of store, so
mypy checks the verb, its arguments and its result type on both paths; nothing names a
verb by a string. Each function below builds the call of the verb of the same name.

``result = yield from calls.job_get(job_id)`` in a plan yields the call to its driver and
receives the verb's result, typed ``JobSummary | None``; :func:`run_sync` and
:func:`run_async` make one call on a store of either kind.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from golemq_pg._types import (
    JobStatus,
    JobSummary,
    PausedType,
    Resource,
    ScheduleSummary,
    WorkerSummary,
    WorkflowSummary,
)
from golemq_pg.store.dashboard import (
    BULK_CAP,
    COUNT_CAP,
    DeadLetters,
    JobPage,
    JobQuery,
    MinuteCount,
    Overview,
    PoolState,
    TypeFinishes,
)
from golemq_pg.store.port import (
    CancelFilter,
    CancelledJob,
    EnqueueManyParams,
    EnqueueParams,
    EnqueueResult,
    FindParams,
    JobLinks,
    JobStore,
    NextTick,
    Reclaimed,
    ScheduleParams,
    TypeGauges,
    WorkflowCreated,
    WorkflowParams,
)
from golemq_pg.store.postgres import AsyncPostgresStore

R = TypeVar("R")

#: A store either kind of call runs on.
AnyStore = JobStore | AsyncPostgresStore


@dataclass(frozen=True, slots=True)
class StoreCall(Generic[R]):
    """One verb call: ``sync`` on a synchronous store, ``asynchronous`` on the async one."""

    sync: Callable[[JobStore], R]
    asynchronous: Callable[[AsyncPostgresStore], Awaitable[R]]

    def __iter__(self) -> Generator[StoreCall[Any], Any, R]:
        """``yield from call`` in a plan: the driver runs the call and sends its result."""
        result: R = yield self
        return result


def run_sync(store: JobStore, call: StoreCall[R]) -> R:
    """Make ``call`` on a synchronous store."""
    return call.sync(store)


async def run_async(
    store: AnyStore,
    call: StoreCall[R],
    to_thread: Callable[..., Awaitable[Any]] = asyncio.to_thread,
) -> R:
    """Make ``call`` from asyncio code: awaited on an ``AsyncPostgresStore``; on a synchronous
    store, its blocking verb runs in a worker thread (``to_thread``: asyncio's, or e.g.
    Starlette's thread pool)."""
    if isinstance(store, AsyncPostgresStore):
        return await call.asynchronous(store)
    result: R = await to_thread(call.sync, store)
    return result


# -- producer ---------------------------------------------------------------------------------
def job_enqueue(params: EnqueueParams, *, connection: Any = None) -> StoreCall[EnqueueResult]:
    """``job_enqueue(params, connection=connection)``."""
    return StoreCall(
        lambda s: s.job_enqueue(params, connection=connection),
        lambda s: s.job_enqueue(params, connection=connection),
    )


def job_enqueue_many(params: EnqueueManyParams, *, connection: Any = None) -> StoreCall[int]:
    """``job_enqueue_many(params, connection=connection)``."""
    return StoreCall(
        lambda s: s.job_enqueue_many(params, connection=connection),
        lambda s: s.job_enqueue_many(params, connection=connection),
    )


def workflow_create(
    params: WorkflowParams, *, connection: Any = None
) -> StoreCall[WorkflowCreated]:
    """``workflow_create(params, connection=connection)``."""
    return StoreCall(
        lambda s: s.workflow_create(params, connection=connection),
        lambda s: s.workflow_create(params, connection=connection),
    )


def workflow_create_many(
    params: Sequence[WorkflowParams], *, connection: Any = None
) -> StoreCall[list[WorkflowCreated]]:
    """``workflow_create_many(params, connection=connection)``."""
    return StoreCall(
        lambda s: s.workflow_create_many(params, connection=connection),
        lambda s: s.workflow_create_many(params, connection=connection),
    )


def workflow_get(workflow_id: str) -> StoreCall[WorkflowSummary | None]:
    """``workflow_get(workflow_id)``."""
    return StoreCall(lambda s: s.workflow_get(workflow_id), lambda s: s.workflow_get(workflow_id))


def workflow_cancel(workflow_id: str) -> StoreCall[list[CancelledJob]]:
    """``workflow_cancel(workflow_id)``."""
    return StoreCall(
        lambda s: s.workflow_cancel(workflow_id), lambda s: s.workflow_cancel(workflow_id)
    )


def job_links(job_id: str) -> StoreCall[JobLinks]:
    """``job_links(job_id)``."""
    return StoreCall(lambda s: s.job_links(job_id), lambda s: s.job_links(job_id))


def now() -> StoreCall[datetime]:
    """``now()``: the store's clock."""
    return StoreCall(lambda s: s.now(), lambda s: s.now())


# -- inspection and administration ------------------------------------------------------------
def job_get(job_id: str) -> StoreCall[JobSummary | None]:
    """``job_get(job_id)``."""
    return StoreCall(lambda s: s.job_get(job_id), lambda s: s.job_get(job_id))


def job_payload(job_id: str) -> StoreCall[bytes | None]:
    """``job_payload(job_id)``."""
    return StoreCall(lambda s: s.job_payload(job_id), lambda s: s.job_payload(job_id))


def job_wait(job_id: str, timeout: float | None) -> StoreCall[JobSummary]:
    """``job_wait(job_id, timeout)``."""
    return StoreCall(lambda s: s.job_wait(job_id, timeout), lambda s: s.job_wait(job_id, timeout))


def job_find(params: FindParams) -> StoreCall[list[JobSummary]]:
    """``job_find(params)``."""
    return StoreCall(lambda s: s.job_find(params), lambda s: s.job_find(params))


def job_count_by_status() -> StoreCall[dict[JobStatus, int]]:
    """``job_count_by_status()``."""
    return StoreCall(lambda s: s.job_count_by_status(), lambda s: s.job_count_by_status())


def job_stats() -> StoreCall[dict[str, int]]:
    """``job_stats()``."""
    return StoreCall(lambda s: s.job_stats(), lambda s: s.job_stats())


def job_retry_failed(params: FindParams) -> StoreCall[int]:
    """``job_retry_failed(params)``."""
    return StoreCall(lambda s: s.job_retry_failed(params), lambda s: s.job_retry_failed(params))


def job_prune(
    statuses: Sequence[JobStatus], *, before: datetime | None, age: float | None
) -> StoreCall[int]:
    """``job_prune(statuses, before=before, age=age)``."""
    return StoreCall(
        lambda s: s.job_prune(statuses, before=before, age=age),
        lambda s: s.job_prune(statuses, before=before, age=age),
    )


def job_cancel(selector: CancelFilter, reason: str | None) -> StoreCall[list[CancelledJob]]:
    """``job_cancel(selector, reason)``."""
    return StoreCall(
        lambda s: s.job_cancel(selector, reason), lambda s: s.job_cancel(selector, reason)
    )


def worker_list() -> StoreCall[list[WorkerSummary]]:
    """``worker_list()``."""
    return StoreCall(lambda s: s.worker_list(), lambda s: s.worker_list())


# -- control of single jobs and of types ------------------------------------------------------
def type_pause(job_type: str, reason: str | None) -> StoreCall[PausedType]:
    """``type_pause(job_type, reason)``."""
    return StoreCall(
        lambda s: s.type_pause(job_type, reason), lambda s: s.type_pause(job_type, reason)
    )


def type_resume(job_type: str) -> StoreCall[bool]:
    """``type_resume(job_type)``."""
    return StoreCall(lambda s: s.type_resume(job_type), lambda s: s.type_resume(job_type))


def type_paused() -> StoreCall[dict[str, PausedType]]:
    """``type_paused()``."""
    return StoreCall(lambda s: s.type_paused(), lambda s: s.type_paused())


def job_retry(job_id: str, reset_steps: bool = False) -> StoreCall[bool]:
    """``job_retry(job_id, reset_steps)``."""
    return StoreCall(
        lambda s: s.job_retry(job_id, reset_steps), lambda s: s.job_retry(job_id, reset_steps)
    )


def job_run_now(job_id: str) -> StoreCall[bool]:
    """``job_run_now(job_id)``."""
    return StoreCall(lambda s: s.job_run_now(job_id), lambda s: s.job_run_now(job_id))


def lease_requeue_stale(
    older_than: float, types: Sequence[str] | None, limit: int
) -> StoreCall[list[Reclaimed]]:
    """``lease_requeue_stale(older_than, types, limit)``."""
    return StoreCall(lambda s: s.lease_requeue_stale(older_than, types, limit),
                     lambda s: s.lease_requeue_stale(older_than, types, limit))


def job_delete(job_id: str) -> StoreCall[bool]:
    """``job_delete(job_id)``."""
    return StoreCall(lambda s: s.job_delete(job_id), lambda s: s.job_delete(job_id))


# -- schedules --------------------------------------------------------------------------------
def schedule_upsert(params: ScheduleParams) -> StoreCall[None]:
    """``schedule_upsert(params)``."""
    return StoreCall(lambda s: s.schedule_upsert(params), lambda s: s.schedule_upsert(params))


def schedule_delete(key: str) -> StoreCall[bool]:
    """``schedule_delete(key)``."""
    return StoreCall(lambda s: s.schedule_delete(key), lambda s: s.schedule_delete(key))


def schedule_list() -> StoreCall[list[ScheduleSummary]]:
    """``schedule_list()``."""
    return StoreCall(lambda s: s.schedule_list(), lambda s: s.schedule_list())


def schedule_pause(key: str) -> StoreCall[bool]:
    """``schedule_pause(key)``."""
    return StoreCall(lambda s: s.schedule_pause(key), lambda s: s.schedule_pause(key))


def schedule_resume(key: str, next_tick: NextTick) -> StoreCall[bool]:
    """``schedule_resume(key, next_tick)``."""
    return StoreCall(
        lambda s: s.schedule_resume(key, next_tick), lambda s: s.schedule_resume(key, next_tick)
    )


def schedule_run_now(key: str, default_max_attempts: int | None) -> StoreCall[str | None]:
    """``schedule_run_now(key, default_max_attempts)``."""
    return StoreCall(
        lambda s: s.schedule_run_now(key, default_max_attempts),
        lambda s: s.schedule_run_now(key, default_max_attempts),
    )


# -- the dashboard and the metrics gauges -----------------------------------------------------
def dashboard_overview(cap: int = COUNT_CAP) -> StoreCall[Overview]:
    """``dashboard_overview(cap)``."""
    return StoreCall(lambda s: s.dashboard_overview(cap), lambda s: s.dashboard_overview(cap))


def dashboard_throughput(minutes: int = 60) -> StoreCall[list[MinuteCount]]:
    """``dashboard_throughput(minutes)``."""
    return StoreCall(
        lambda s: s.dashboard_throughput(minutes), lambda s: s.dashboard_throughput(minutes)
    )


def dashboard_type_finishes(limit: int = 10) -> StoreCall[list[TypeFinishes]]:
    """``dashboard_type_finishes(limit)``."""
    return StoreCall(
        lambda s: s.dashboard_type_finishes(limit), lambda s: s.dashboard_type_finishes(limit)
    )


def dashboard_jobs(query: JobQuery) -> StoreCall[JobPage]:
    """``dashboard_jobs(query)``."""
    return StoreCall(lambda s: s.dashboard_jobs(query), lambda s: s.dashboard_jobs(query))


def dashboard_job_ids(query: JobQuery, cap: int = BULK_CAP) -> StoreCall[list[str]]:
    """``dashboard_job_ids(query, cap)``."""
    return StoreCall(
        lambda s: s.dashboard_job_ids(query, cap), lambda s: s.dashboard_job_ids(query, cap)
    )


def dashboard_dead_letters(cap: int = COUNT_CAP) -> StoreCall[DeadLetters]:
    """``dashboard_dead_letters(cap)``."""
    return StoreCall(
        lambda s: s.dashboard_dead_letters(cap), lambda s: s.dashboard_dead_letters(cap)
    )


def dashboard_retry_dead_letters(job_type: str, error: str | None) -> StoreCall[int]:
    """``dashboard_retry_dead_letters(job_type, error)``."""
    return StoreCall(
        lambda s: s.dashboard_retry_dead_letters(job_type, error),
        lambda s: s.dashboard_retry_dead_letters(job_type, error),
    )


def dashboard_pools(resources: Mapping[str, Resource]) -> StoreCall[list[PoolState]]:
    """``dashboard_pools(resources)``."""
    return StoreCall(
        lambda s: s.dashboard_pools(resources), lambda s: s.dashboard_pools(resources)
    )


def metrics_type_gauges(cap: int) -> StoreCall[list[TypeGauges]]:
    """``metrics_type_gauges(cap)``."""
    return StoreCall(
        lambda s: s.metrics_type_gauges(cap), lambda s: s.metrics_type_gauges(cap)
    )
