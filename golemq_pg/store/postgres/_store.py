"""PostgresStore: the JobStore port on PostgreSQL, and the only code that issues SQL.

Statements come from ``sql/queries/*.sql`` (see ``_sql``), composed once per schema. The
store owns a ``psycopg_pool.ConnectionPool`` (``connect``) or wraps one (``PostgresStore(pool)``);
how it uses its connections is in ``_connections``. ``with_connection(conn)`` gives a store
whose verbs run inside the caller's transaction and never commit it.

This module holds the class and most of its verbs; the cancel verb (``_cancel``), the
schedule verbs (``_schedules``) and the control verbs (``_control``: pause, retry, run now)
are written in their own modules, as bases of the class.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Self, Unpack

import orjson
import psycopg
import structlog
from psycopg_pool import ConnectionPool

from golemq_pg._errortext import bounded_traceback, stored_error
from golemq_pg._types import JobSummary
from golemq_pg._validation import check_dsn, check_schema
from golemq_pg.store.port import (
    HISTORY_LIMIT,
    LEASE_EXHAUSTED_ERROR,
    LEASE_EXPIRED_ERROR,
    ClaimedJob,
    ClaimRequest,
    CompleteAndClaimParams,
    CompleteAndClaimResult,
    EnqueueManyParams,
    EnqueueParams,
    EnqueueResult,
    FailItem,
    HistoryUpkeep,
    LeaseRef,
    Listener,
    Reclaimed,
    ResultRef,
    RetryItem,
    WorkflowCreated,
    WorkflowParams,
)
from golemq_pg.store.postgres import _producer as producer
from golemq_pg.store.postgres import _rows as rows
from golemq_pg.store.postgres import _workflows as workflows
from golemq_pg.store.postgres._cancel import CancelVerbs
from golemq_pg.store.postgres._connections import (
    ConnectionOptions,
    ConnectOptions,
    Shared,
    open_pool,
    retrying,
    session_setup,
    sync_verb,
)
from golemq_pg.store.postgres._control import ControlVerbs
from golemq_pg.store.postgres._dashboard import DashboardVerbs
from golemq_pg.store.postgres._listener import PgListener
from golemq_pg.store.postgres._metrics import MetricsVerbs
from golemq_pg.store.postgres._migrations import (
    DEFAULT_LOCK_RETRIES,
    DEFAULT_LOCK_TIMEOUT,
    LockPolicy,
)
from golemq_pg.store.postgres._migrations import migrate as _migrate
from golemq_pg.store.postgres._refusals import data_refusals
from golemq_pg.store.postgres._registry import RegistryVerbs
from golemq_pg.store.postgres._schedules import ScheduleVerbs
from golemq_pg.store.postgres._step_verbs import StepVerbs
from golemq_pg.store.postgres._steps import attach_steps

log = structlog.get_logger("golemq_pg.store.postgres")


class PostgresStore(
    CancelVerbs, ScheduleVerbs, RegistryVerbs, ControlVerbs, DashboardVerbs, MetricsVerbs,
    StepVerbs,
):
    """The JobStore port on PostgreSQL (see the module docstring)."""

    def __init__(
        self,
        pool: ConnectionPool[Any],
        *,
        schema: str = "golemq",
        rate_window: float = 60.0,
    ) -> None:
        """Wrap an existing pool. ``rate_window``: resource-pool rate window in seconds."""
        check_schema(schema)
        if not rate_window > 0:
            raise ValueError("rate_window must be > 0")
        self._shared = Shared(pool, schema, rate_window, None, owns_pool=False)
        self._bound: psycopg.Connection[Any] | None = None

    @classmethod
    def connect(
        cls,
        dsn: str,
        *,
        schema: str = "golemq",
        min_size: int = 1,
        max_size: int = 10,
        rate_window: float = 60.0,
        listen_dsn: str | None = None,
        **options: Unpack[ConnectOptions],
    ) -> Self:
        """A store owning a connection pool to ``dsn`` (closed by :meth:`close`).

        ``options`` (``ConnectOptions``): ``statement_timeout`` (30), ``lock_timeout`` (10),
        ``idle_in_transaction_session_timeout`` (60), in seconds, set on every pooled
        connection once it opens (0 disables); ``application_name`` ("golemq-pg").
        ``prepare=False``: no server-side prepared statements (PgBouncer < 1.21 in transaction
        mode). ``listen_dsn``: where the LISTEN connections go (workers' wake-ups, waits)
        instead of ``dsn``, e.g. the database directly while ``dsn`` is PgBouncer.
        ``tcp_user_timeout`` (seconds, 1-3600; 0 keeps the kernel's defaults): TCP keepalives
        and a user timeout on every connection the store opens (pool, LISTEN connections),
        and the same bounds on the server's end, so a half-open connection (a silent network
        partition) fails within about that long.
        """
        check_schema(schema)
        if listen_dsn is not None:
            check_dsn(listen_dsn, "listen_dsn")
        settings = ConnectionOptions(**options)
        setup = session_setup(schema, settings)
        pool = open_pool(dsn, schema=schema, min_size=min_size, max_size=max_size,
                         setup=setup, options=settings)
        store = cls(pool, schema=schema, rate_window=rate_window)
        store._shared.setup = setup
        store._shared.dsn = dsn
        store._shared.listen_dsn = listen_dsn
        store._shared.owns_pool = True
        store._shared.claimer.prepare = settings.prepare
        return store

    def with_connection(self, conn: psycopg.Connection[Any]) -> PostgresStore:
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
        """Which queue this is (server, database, schema): stores sharing it in one process
        abort each other's local handlers synchronously on cancel (see golemq_pg._local)."""
        return self._shared.ctx.identity

    @property
    def pool(self) -> ConnectionPool[Any]:
        """The connection pool in use."""
        return self._shared.pool

    def migrate(
        self,
        *,
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
        lock_retries: int = DEFAULT_LOCK_RETRIES,
    ) -> list[str]:
        """Apply pending migrations (idempotent); returns the names applied now.

        Each step waits at most ``lock_timeout`` seconds for a lock (0: no limit), so that a
        long transaction on the queue's tables never makes it queue every enqueue and claim
        behind itself; a step refused its lock is tried again ``lock_retries`` times after a
        growing pause, then :class:`~golemq_pg.errors.MigrationLockTimeout` names the
        migration. Concurrent callers apply each migration once.
        """
        policy = LockPolicy(lock_timeout=lock_timeout, retries=lock_retries)
        if self._bound is not None:
            return _migrate(self._bound, self.schema, policy=policy)
        with self._shared.pool.connection() as conn:
            return _migrate(conn, self.schema, policy=policy)

    def close(self) -> None:
        """Close the pool when this store owns it (a bound store closes nothing); waits
        in progress end (``RuntimeError``) and the waiters' LISTEN connection closes."""
        if self._bound is None:
            self._shared.waiters.close()
            if self._shared.owns_pool:
                self._shared.pool.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        bound = " bound" if self._bound is not None else ""
        return f"<PostgresStore schema={self.schema!r}{bound}>"

    # -- producer (plans shared with AsyncPostgresStore: see _producer) ------------------------
    def job_enqueue(self, params: EnqueueParams, *, connection: Any = None) -> EnqueueResult:
        """Insert one job, applying the dedupe rule; with ``connection``, inside it."""
        store = self if connection is None else self.with_connection(connection)
        plan = workflows.job_enqueue_linked if params.depends_on else producer.job_enqueue
        return store._run(plan(self._shared.ctx, params))

    def job_enqueue_many(self, params: EnqueueManyParams, *, connection: Any = None) -> int:
        """Insert many jobs of one type with one COPY; returns the count."""
        store = self if connection is None else self.with_connection(connection)
        if params.depends_on:
            return store._run(workflows.job_enqueue_many_linked(self._shared.ctx, params))
        return store._run(producer.job_enqueue_many(self._shared.ctx, params))

    def workflow_create(
        self, params: WorkflowParams, *, connection: Any = None
    ) -> WorkflowCreated:
        """A workflow and every job of it in one transaction (see the port)."""
        store = self if connection is None else self.with_connection(connection)
        return store._run(workflows.workflow_create(self._shared.ctx, params))

    def workflow_create_many(
        self, params: Sequence[WorkflowParams], *, connection: Any = None
    ) -> list[WorkflowCreated]:
        """Workflows and their jobs in one transaction, unkeyed ones in one statement
        (see the port)."""
        store = self if connection is None else self.with_connection(connection)
        return store._run(workflows.workflow_create_many(self._shared.ctx, params))

    workflow_get = sync_verb(workflows.workflow_get)
    workflow_cancel = sync_verb(workflows.workflow_cancel)
    job_links = sync_verb(workflows.job_links)
    job_parents_many = sync_verb(workflows.job_parents_many)

    # -- consumer ----------------------------------------------------------------------------------
    def job_claim(self, request: ClaimRequest) -> list[ClaimedJob]:
        """Lease up to the requested number of due jobs, honouring every guard.

        Returns a :class:`~golemq_pg.store.port.ClaimBatch` (a list) whose ``blocked`` map
        says why guarded types with due work got nothing.
        """
        claimer = self._shared.claimer
        if self._bound is not None:
            return claimer.run(self._bound, request, managed=self._bound.autocommit)
        with self._pooled() as conn:
            return claimer.run(conn, request, managed=True)

    @contextmanager
    def job_claim_transactional(
        self, request: ClaimRequest
    ) -> Iterator[tuple[ClaimedJob, psycopg.Connection[Any]] | None]:
        """Claim one job inside an open transaction and yield it with that connection.

        For transactional handlers: the handler's writes and the job's completion (through
        ``with_connection(conn)``) commit together with the claim. If the block raises, the
        handler's writes are rolled back (a savepoint), the claim still commits (the attempt
        counts) and the exception propagates; the caller then records the retry or failure
        with the ordinary fenced verbs. Yields None when nothing is due.
        """
        first = next((s for s in request.types if s.limit > 0), None)
        if first is None:
            yield None
            return
        single = ClaimRequest(
            owner=request.owner,
            types=[dataclasses.replace(first, limit=1)],
            resources=request.resources,
        )
        error: BaseException | None = None
        with self._pooled() as conn, conn.transaction():
            jobs = self._shared.claimer.run(conn, single, managed=False)
            if not jobs:
                yield None
                return
            try:
                with conn.transaction():
                    yield jobs[0], conn
            except BaseException as exc:  # noqa: BLE001 - re-raised after the claim commits
                error = exc
        if error is not None:
            raise error

    def job_interrupt_transactional(self, conn: psycopg.Connection[Any]) -> None:
        """Cancel the statement running on a transactional claim's connection.

        Safe from any thread (a protocol-level cancel request, no SQL); the server ignores
        it when the connection is between statements. A timed-out or aborted transactional
        handler blocked in a long statement thereby gets an error and its writes roll back.
        """
        try:
            conn.cancel_safe(timeout=5.0)
        except (psycopg.Error, OSError) as exc:
            log.info("transactional_interrupt_failed", error=type(exc).__name__)

    def job_complete_many(
        self, owner: str, items: Sequence[LeaseRef], *, delete_types: Sequence[str] = (),
        started: Sequence[float | None] | None = None,
    ) -> set[str]:
        """RUNNING -> SUCCEEDED for leases still held; returns the ids written.

        Without a result in the batch and without ``delete_types`` this is the hot-path
        statement; with results, its variant that stores them; with ``delete_types``, the
        variant that also deletes (``delete_on``).
        """
        if not items:
            return set()
        with data_refusals():  # the results' text is built here, before the write
            return self._write_id_text(*_completion(owner, items, delete_types, started))

    def job_complete_and_claim(self, params: CompleteAndClaimParams) -> CompleteAndClaimResult:
        """``job_complete_many`` and then the claim of ``params.claim`` in one transaction:
        one pipeline (one round trip) with prepared statements (see
        ``Claimer.run_after_write``); retried whole on a deadlock or serialization failure."""
        name, args = _completion(params.owner, params.items, params.delete_types,
                                 params.started)
        request = ClaimRequest(
            owner=params.owner, types=[params.claim], resources=params.resources,
            defer_start=params.defer_start,
        )
        write = (self._q[name], args)
        claimer = self._shared.claimer
        if self._bound is not None:
            bound = self._bound
            with bound.transaction():
                found, batch = claimer.run_after_write(bound, write, request, managed=False)
            return CompleteAndClaimResult(rows.id_text_set(found), batch)

        def complete_and_claim() -> CompleteAndClaimResult:
            with self._pooled() as conn:
                found, batch = claimer.run_after_write(conn, write, request, managed=True)
            return CompleteAndClaimResult(rows.id_text_set(found), batch)

        with data_refusals():
            return retrying("job_complete_and_claim", complete_and_claim, once=False)

    def job_retry_many(
        self, owner: str, items: Sequence[RetryItem], *,
        started: Sequence[float | None] | None = None,
    ) -> set[str]:
        """RUNNING -> PENDING after a delay (attempt refunded unless consumed)."""
        if not items:
            return set()
        items, started = rows.in_id_order(items, started)
        args = rows.lease_args(owner, items)
        args["delays"] = [float(i.delay) for i in items]
        args["errors"] = [stored_error(i.error) for i in items]
        args["tracebacks"] = [bounded_traceback(i.traceback) for i in items]
        args["consume"] = [bool(i.consume_attempt) for i in items]
        args["history"] = HISTORY_LIMIT
        args["started"] = rows.seconds_array(started)
        return self._write_ids("job_retry_many", args)

    def job_fail_many(
        self, owner: str, items: Sequence[FailItem], *, delete_types: Sequence[str] = (),
        started: Sequence[float | None] | None = None,
    ) -> set[str]:
        """RUNNING -> FAILED (dead letter); types in ``delete_types`` are deleted instead."""
        if not items:
            return set()
        items, started = rows.in_id_order(items, started)
        args = rows.lease_args(owner, items)
        args["errors"] = [stored_error(i.error) for i in items]
        args["tracebacks"] = [bounded_traceback(i.traceback) for i in items]
        args["delete_types"] = list(delete_types)
        args["history"] = HISTORY_LIMIT
        args["started"] = rows.seconds_array(started)
        return self._write_ids("job_fail_many", args)

    def job_release_many(self, owner: str, items: Sequence[LeaseRef]) -> set[str]:
        """RUNNING -> PENDING, due now, attempt refunded (claimed but never started)."""
        if not items:
            return set()
        return self._write_ids("job_release_many", rows.lease_args(owner, items))

    def job_mark_started(
        self, owner: str, items: Sequence[LeaseRef], started: Sequence[float]
    ) -> set[str]:
        """Record the handler starts of held jobs that have none yet (see the port)."""
        if not items:
            return set()
        args = rows.lease_args(owner, items)
        args["started"] = rows.seconds_array(started)
        return self._write_ids("job_mark_started", args)

    def lease_renew(self, owner: str, items: Sequence[LeaseRef], seconds: float) -> set[str]:
        """Extend the given held, unexpired leases to now() + seconds; returns the ids renewed."""
        if not items:
            return set()
        args = rows.lease_args(owner, items)
        args["seconds"] = float(seconds)
        return self._write_ids("lease_renew", args)

    def lease_held(self, owner: str, items: Sequence[LeaseRef]) -> set[str]:
        """Which of these leases this owner still holds (the reconcile pass)."""
        if not items:
            return set()
        return {str(row[0]) for row in self._fetch("lease_held", rows.lease_args(owner, items))}

    def lease_recover_expired(
        self, limit: int = 500, delete_types: Sequence[str] = ()
    ) -> list[Reclaimed]:
        """Reaper: expired RUNNING leases go back to PENDING, or FAILED past their budget
        (deleted instead for a type in ``delete_types``)."""
        args = {
            "limit": limit,
            "delete_types": list(delete_types),
            "expired_error": LEASE_EXPIRED_ERROR,
            "exhausted_error": LEASE_EXHAUSTED_ERROR,
            "history": HISTORY_LIMIT,
        }
        return retrying(
            "lease_recover_expired",
            lambda: [rows.reclaimed(r) for r in self._fetch("lease_recover_expired", args)],
            once=self._bound is not None)

    def history_upkeep(self, days_ahead: int = 3, legacy_limit: int = 5_000) -> HistoryUpkeep:
        """``history_upkeep()`` (migration 0008): the history's day partitions for yesterday
        to ``days_ahead`` days ahead, the count deltas folded, up to ``legacy_limit`` finished
        rows of an older release moved out of ``jobs``."""
        args = {"days_ahead": max(int(days_ahead), 0), "legacy": max(int(legacy_limit), 0)}
        done = self._fetch("history_upkeep", args)[0][0]
        return HistoryUpkeep(created=int(done["created"]), folded=int(done["folded"]),
                             moved=int(done["moved"]))

    def job_progress(self, owner: str, item: LeaseRef, progress: float | dict[str, Any]) -> bool:
        """Persist progress for a held lease."""
        job_id = rows.int_id(item.id)
        if job_id is None:
            return False
        args = {
            "id": job_id,
            "token": item.token,
            "owner": owner,
            "progress": rows.jsonb(orjson.dumps(progress)),
        }
        return bool(self._fetch("job_progress", args))

    # -- inspection and administration (plans shared with AsyncPostgresStore) ---------------
    job_get = sync_verb(producer.job_get)
    job_find = sync_verb(producer.job_find)
    job_payload = sync_verb(producer.job_payload)
    job_count_by_status = sync_verb(producer.job_count_by_status)
    job_stats = sync_verb(producer.job_stats)
    job_stats_by_type = sync_verb(producer.job_stats_by_type)
    job_oldest_due_age = sync_verb(producer.job_oldest_due_age)
    job_retry_failed = sync_verb(producer.job_retry_failed)
    job_prune = sync_verb(producer.job_prune)
    now = sync_verb(producer.now)

    def job_wait(self, job_id: str, timeout: float | None) -> JobSummary:
        """Block until the job is terminal and return it; ``LookupError`` when it does not
        exist or is deleted meanwhile, ``TimeoutError`` past ``timeout`` seconds.

        Every waiting thread shares the store's one LISTEN connection and holds no pooled
        connection while it waits (see ``_waiters``).
        """
        found = self._shared.waiters.wait(job_id, timeout)
        return self._run(attach_steps(self._shared.ctx, [found]))[0]

    # -- plumbing ----------------------------------------------------------------------------------
    def open_listener(self, dsn: str | None = None) -> Listener | None:
        """A dedicated LISTEN connection (outside the pool) on the jobs and cancel channels:
        to ``dsn`` when given (a worker's ``listen_dsn``), else the store's ``listen_dsn``,
        else its own database."""
        jobs_channel, cancel_channel = self.channels()
        pool = self._shared.pool
        conninfo = pool.conninfo() if callable(pool.conninfo) else pool.conninfo
        kwargs = pool.kwargs() if callable(pool.kwargs) else pool.kwargs
        return PgListener(
            dsn or self._shared.listen_dsn or self._shared.dsn or conninfo,
            {jobs_channel: "jobs", cancel_channel: "cancel"},
            connect_kwargs=kwargs,
            setup=self._shared.setup,
        )


def _completion(
    owner: str, items: Sequence[LeaseRef], delete_types: Sequence[str],
    started: Sequence[float | None] | None = None,
) -> tuple[str, dict[str, Any]]:
    """The completing statement for ``items`` and its parameters: the hot path without
    results and deletes, else its variant storing results, or deleting (``delete_on``). Each
    returns the ids it wrote as one comma-separated text (``rows.id_text_set``)."""
    items, started = rows.in_id_order(items, started)
    args = rows.lease_args(owner, items)
    args["started"] = rows.seconds_array(started)
    # The item types, collected at C speed (a per-item isinstance loop cost more here than
    # the rest of the call): the worker's items are its claimed jobs themselves.
    if not delete_types and ResultRef not in set(map(type, items)):
        return "job_complete_many", args  # the hot path
    # One JSON array of the results in the order of the ids (null: none); each result is
    # already validated JSON text (encode_result).
    args["results"] = (b"[" + b",".join([
        i.result if type(i) is ResultRef and i.result is not None else b"null"
        for i in items
    ]) + b"]").decode()
    if delete_types:
        args["delete_types"] = list(delete_types)
        return "job_complete_many_deleting", args
    return "job_complete_many_with_results", args
