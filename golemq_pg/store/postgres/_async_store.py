"""AsyncPostgresStore: the producer side of the PostgreSQL store for asyncio applications.

It owns a ``psycopg_pool.AsyncConnectionPool`` (``await AsyncPostgresStore.connect(dsn)``)
or wraps the application's (``AsyncPostgresStore(pool)``), and runs the verbs an
:class:`~golemq_pg.AsyncQueue` and the dashboard need, each a typed coroutine method: the
very plans ``PostgresStore`` runs (``_producer``, ``_cancel``, ``_schedules``, ``_control``,
``_registry``, ``_dashboard``, ``_metrics``), driven by the asyncio executor (``_run_async``)
instead of the synchronous one. Nothing about a verb (statement, parameters,
transaction, retries, decoding) is written here: only how its steps reach the database.

Consumers (``Worker``) stay on ``PostgresStore``: the worker owns its threads and event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, Self, TypeVar, Unpack

import psycopg
from psycopg_pool import AsyncConnectionPool

from golemq_pg._types import JobSummary
from golemq_pg._validation import check_schema
from golemq_pg.store.port import (
    EnqueueManyParams,
    EnqueueParams,
    EnqueueResult,
    WorkflowCreated,
    WorkflowParams,
)
from golemq_pg.store.postgres import (
    _cancel,
    _control,
    _dashboard,
    _metrics,
    _registry,
    _schedules,
    _steps,
)
from golemq_pg.store.postgres import _producer as producer
from golemq_pg.store.postgres import _workflows as workflows
from golemq_pg.store.postgres._async_checkout import (
    AsyncCheckout,
    HeldConnection,
    PooledConnections,
)
from golemq_pg.store.postgres._async_waiters import AsyncJobWaiters
from golemq_pg.store.postgres._connections import (
    Bindable,
    ConnectionOptions,
    ConnectOptions,
    PoolerReport,
    ensure_utc,
    pool_options,
)
from golemq_pg.store.postgres._migrations import (
    DEFAULT_LOCK_RETRIES,
    DEFAULT_LOCK_TIMEOUT,
    LockPolicy,
)
from golemq_pg.store.postgres._migrations import migrate as _migrate
from golemq_pg.store.postgres._plans import Plan, PlanContext, queue_identity
from golemq_pg.store.postgres._run_async import run_plan_async
from golemq_pg.store.postgres._sql import queries_for

P = ParamSpec("P")
R = TypeVar("R")

async def _keep_reconnecting(pool: AsyncConnectionPool[Any]) -> None:
    """``reconnect_failed``: start a fresh connection attempt (see ``_connections``)."""
    # A closed pool, or the server still down: the next failure calls again.
    with contextlib.suppress(Exception):
        await pool.check()


class AsyncShared:
    """State shared by an async store and the connection-bound stores derived from it."""

    __slots__ = ("ctx", "dsn", "held", "owns_pool", "pool", "pooled", "pooler", "schema",
                 "waiters")

    def __init__(self, pool: AsyncConnectionPool[Any], schema: str) -> None:
        self.pool = pool
        self.schema = schema
        self.ctx = PlanContext(queries_for(schema), schema, queue_identity(pool.conninfo, schema))
        self.waiters = AsyncJobWaiters(pool, self.ctx)
        self.pooler = PoolerReport(schema)
        self.pooled = PooledConnections(pool, self.pooler)
        self.owns_pool = False
        self.dsn: str | None = None
        #: The producer's held connection, on a pool the store opened (``_async_checkout``).
        self.held: HeldConnection | None = None


def async_verb(
    plan: Callable[Concatenate[PlanContext, P], Plan[R]],
) -> Callable[Concatenate[AsyncPostgresStore, P], Coroutine[Any, Any, R]]:
    """A coroutine method of ``AsyncPostgresStore`` running ``plan`` on its connections (the
    twin of ``_connections.sync_verb``; name, docstring and signature are the plan's)."""

    async def verb(self: AsyncPostgresStore, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await self._run(plan(self._shared.ctx, *args, **kwargs))

    return functools.wraps(plan)(verb)


class AsyncPostgresStore(Bindable[AsyncShared, psycopg.AsyncConnection[Any]]):
    """The PostgreSQL store for :class:`~golemq_pg.AsyncQueue` and the dashboard (see the
    module docstring).

    ``AsyncPostgresStore(pool, schema=...)`` wraps an application's ``AsyncConnectionPool``
    (its connections may be in autocommit mode or not: a verb that needs a transaction
    opens and commits its own); ``await AsyncPostgresStore.connect(dsn)`` opens one the
    store owns. ``async with`` closes it.
    """

    def __init__(self, pool: AsyncConnectionPool[Any], *, schema: str = "golemq") -> None:
        """Wrap an existing (open or not yet open) ``AsyncConnectionPool``."""
        check_schema(schema)
        self._shared = AsyncShared(pool, schema)
        self._bound = None

    @classmethod
    async def connect(
        cls,
        dsn: str,
        *,
        schema: str = "golemq",
        min_size: int = 1,
        max_size: int = 10,
        **options: Unpack[ConnectOptions],
    ) -> AsyncPostgresStore:
        """A store owning an ``AsyncConnectionPool`` to ``dsn`` (closed by :meth:`close`);
        the options as for ``PostgresStore.connect`` (timeouts in seconds, 0 disables;
        ``application_name``; ``prepare=False`` behind a pooler that cannot hold prepared
        statements; ``tcp_user_timeout``: keepalives bounding a half-open connection)."""
        check_schema(schema)
        chosen = ConnectionOptions(**options)
        settings = pool_options(schema=schema, min_size=min_size, max_size=max_size,
                                options=chosen, dsn=dsn)
        statement = queries_for(schema)["session_settings"]
        params = chosen.session_params()

        async def setup(conn: psycopg.AsyncConnection[Any]) -> None:
            # The same session settings as PostgresStore's connections (session_setup).
            await conn.execute(statement, params)
            ensure_utc(conn)

        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            dsn, **settings, configure=setup, open=False, reconnect_failed=_keep_reconnecting
        )
        await pool.open()
        store = cls(pool, schema=schema)
        store._shared.owns_pool = True
        store._shared.dsn = dsn
        store._shared.held = HeldConnection(pool, store._shared.pooler)
        return store

    def with_connection(self, conn: psycopg.AsyncConnection[Any]) -> AsyncPostgresStore:
        """A store whose verbs run on ``conn`` (the caller's transaction), never committing it."""
        return self._bind(conn)

    # -- properties and lifecycle ---------------------------------------------------------------
    @property
    def schema(self) -> str:
        """The schema this store's queue lives in."""
        return self._shared.schema

    @property
    def dsn(self) -> str | None:
        """The DSN given to :meth:`connect` (None when wrapping an existing pool)."""
        return self._shared.dsn

    @property
    def identity(self) -> tuple[str, ...]:
        """Which queue this is (server, database, user, schema): the same as a
        ``PostgresStore``'s on that queue, so a cancel aborts this process's handlers."""
        return self._shared.ctx.identity

    @property
    def pool(self) -> AsyncConnectionPool[Any]:
        """The connection pool in use."""
        return self._shared.pool

    @property
    def waiters(self) -> AsyncJobWaiters:
        """The waiting tasks and their one LISTEN connection (for tests and diagnostics)."""
        return self._shared.waiters

    async def migrate(
        self,
        *,
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
        lock_retries: int = DEFAULT_LOCK_RETRIES,
    ) -> list[str]:
        """Apply pending migrations (idempotent); returns the names applied now.

        The migration runner of ``PostgresStore`` itself (``lock_timeout`` and
        ``lock_retries`` as there), on a connection of its own made from the pool's conninfo
        and options, in a worker thread (migrations are rare, administrative, and must not
        run twice in two copies).
        """
        policy = LockPolicy(lock_timeout=lock_timeout, retries=lock_retries)
        pool = self._shared.pool
        conninfo = self._shared.dsn or pool.conninfo
        kwargs = dict(pool.kwargs) if isinstance(pool.kwargs, dict) else {}
        if not isinstance(conninfo, str):
            raise TypeError("migrate() needs a pool with a string conninfo")
        kwargs["autocommit"] = True
        schema = self._shared.schema

        def run() -> list[str]:
            with psycopg.connect(conninfo, **kwargs) as conn:
                return _migrate(conn, schema, policy=policy)

        return await asyncio.to_thread(run)

    async def close(self) -> None:
        """Close the pool when this store owns it (a bound store closes nothing); waits in
        progress end (``RuntimeError``) and the waiters' LISTEN connection closes."""
        if self._bound is None:
            await self._shared.waiters.close()
            if self._shared.held is not None:
                await self._shared.held.close()
            if self._shared.owns_pool:
                await self._shared.pool.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        bound = " bound" if self._bound is not None else ""
        return f"<AsyncPostgresStore schema={self.schema!r}{bound}>"

    # -- the verbs: the plans PostgresStore runs, on this store's async connections --------------
    async def job_enqueue(
        self, params: EnqueueParams, *, connection: psycopg.AsyncConnection[Any] | None = None
    ) -> EnqueueResult:
        """Insert one job, applying the dedupe rule; with ``connection``, inside the caller's
        transaction."""
        store = self if connection is None else self._bind(connection)
        plan = workflows.job_enqueue_linked if params.depends_on else producer.job_enqueue
        return await store._run(plan(self._shared.ctx, params))

    async def job_enqueue_many(
        self,
        params: EnqueueManyParams,
        *,
        connection: psycopg.AsyncConnection[Any] | None = None,
    ) -> int:
        """Insert many jobs of one type with one COPY; returns the count."""
        store = self if connection is None else self._bind(connection)
        if params.depends_on:
            return await store._run(workflows.job_enqueue_many_linked(self._shared.ctx, params))
        return await store._run(producer.job_enqueue_many(self._shared.ctx, params))

    async def workflow_create(
        self,
        params: WorkflowParams,
        *,
        connection: psycopg.AsyncConnection[Any] | None = None,
    ) -> WorkflowCreated:
        """A workflow and every job of it in one transaction (with ``connection``: inside
        the caller's); see the port."""
        store = self if connection is None else self._bind(connection)
        return await store._run(workflows.workflow_create(self._shared.ctx, params))

    async def workflow_create_many(
        self,
        params: Sequence[WorkflowParams],
        *,
        connection: psycopg.AsyncConnection[Any] | None = None,
    ) -> list[WorkflowCreated]:
        """Workflows and their jobs in one transaction (with ``connection``: inside the
        caller's), unkeyed ones in one statement; see the port."""
        store = self if connection is None else self._bind(connection)
        return await store._run(workflows.workflow_create_many(self._shared.ctx, params))

    workflow_get = async_verb(workflows.workflow_get)
    workflow_cancel = async_verb(workflows.workflow_cancel)
    job_links = async_verb(workflows.job_links)
    job_get = async_verb(producer.job_get)
    job_find = async_verb(producer.job_find)
    job_payload = async_verb(producer.job_payload)
    job_count_by_status = async_verb(producer.job_count_by_status)
    job_stats = async_verb(producer.job_stats)
    job_stats_by_type = async_verb(producer.job_stats_by_type)
    job_oldest_due_age = async_verb(producer.job_oldest_due_age)
    job_retry_failed = async_verb(producer.job_retry_failed)
    job_prune = async_verb(producer.job_prune)
    now = async_verb(producer.now)
    job_cancel = async_verb(_cancel.job_cancel)
    schedule_upsert = async_verb(_schedules.schedule_upsert)
    schedule_delete = async_verb(_schedules.schedule_delete)
    schedule_list = async_verb(_schedules.schedule_list)
    schedule_pause = async_verb(_schedules.schedule_pause)
    schedule_resume = async_verb(_schedules.schedule_resume)
    schedule_run_now = async_verb(_schedules.schedule_run_now)
    type_pause = async_verb(_control.type_pause)
    type_resume = async_verb(_control.type_resume)
    type_paused = async_verb(_control.type_paused)
    job_retry = async_verb(_control.job_retry)
    job_run_now = async_verb(_control.job_run_now)
    job_delete = async_verb(_control.job_delete)
    lease_requeue_stale = async_verb(_control.lease_requeue_stale)
    worker_list = async_verb(_registry.worker_list)
    # -- the dashboard's reads and its bulk retry, and the metrics gauges
    dashboard_overview = async_verb(_dashboard.dashboard_overview)
    dashboard_throughput = async_verb(_dashboard.dashboard_throughput)
    dashboard_jobs = async_verb(_dashboard.dashboard_jobs)
    dashboard_job_ids = async_verb(_dashboard.dashboard_job_ids)
    dashboard_type_finishes = async_verb(_dashboard.dashboard_type_finishes)
    dashboard_dead_letters = async_verb(_dashboard.dashboard_dead_letters)
    dashboard_retry_dead_letters = async_verb(_dashboard.dashboard_retry_dead_letters)
    dashboard_pools = async_verb(_dashboard.dashboard_pools)
    metrics_type_gauges = async_verb(_metrics.metrics_type_gauges)
    job_step_get = async_verb(_steps.job_step_get)

    async def job_wait(self, job_id: str, timeout: float | None) -> JobSummary:
        """Wait until the job is terminal and return it (see ``_async_waiters``): every
        waiting task shares one LISTEN connection and holds no pooled connection."""
        found = await self._shared.waiters.wait(job_id, timeout)
        return (await self._run(_steps.attach_steps(self._shared.ctx, [found])))[0]

    async def _run(self, plan: Plan[R]) -> R:
        """Run a verb's plan on this store's connection for one verb."""
        return await run_plan_async(self._connection, plan, self._bound is None)

    def _connection(self) -> AbstractAsyncContextManager[psycopg.AsyncConnection[Any]]:
        # This is the hot path of an add: no generator-based context manager; a connection
        # found read-only is thrown away by the checkout (checkout_end).
        if self._bound is not None:
            return _given(self._bound)
        shared = self._shared
        return AsyncCheckout(shared.held if shared.held is not None else shared.pooled)



@asynccontextmanager
async def _given(conn: psycopg.AsyncConnection[Any]) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    yield conn
