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
from datetime import datetime
from types import TracebackType
from typing import Any, Self

import orjson
import psycopg
import structlog
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool

from golemq_pg._types import JobStatus, JobSummary
from golemq_pg._validation import check_schema
from golemq_pg.store.port import (
    HISTORY_LIMIT,
    LEASE_EXHAUSTED_ERROR,
    LEASE_EXPIRED_ERROR,
    ClaimedJob,
    ClaimRequest,
    EnqueueManyParams,
    EnqueueParams,
    EnqueueResult,
    FailItem,
    FindParams,
    LeaseRef,
    Listener,
    Reclaimed,
    ResultRef,
    RetryItem,
)
from golemq_pg.store.postgres import _rows as rows
from golemq_pg.store.postgres._cancel import CancelVerbs
from golemq_pg.store.postgres._connections import (
    RETRYABLE,
    WRITE_ATTEMPTS,
    Shared,
    open_pool,
)
from golemq_pg.store.postgres._control import ControlVerbs
from golemq_pg.store.postgres._listener import PgListener
from golemq_pg.store.postgres._metrics import MetricsVerbs
from golemq_pg.store.postgres._migrations import migrate as _migrate
from golemq_pg.store.postgres._registry import RegistryVerbs
from golemq_pg.store.postgres._schedules import ScheduleVerbs

log = structlog.get_logger("golemq_pg.store.postgres")


class PostgresStore(CancelVerbs, ScheduleVerbs, RegistryVerbs, ControlVerbs, MetricsVerbs):
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
        statement_timeout: float = 30.0,
        lock_timeout: float = 10.0,
        idle_in_transaction_session_timeout: float = 60.0,
        rate_window: float = 60.0,
        application_name: str = "golemq-pg",
    ) -> PostgresStore:
        """A store owning a connection pool to ``dsn`` (closed by :meth:`close`).

        Timeouts are seconds, applied to every pooled connection at start-up (0 disables).
        """
        check_schema(schema)
        pool = open_pool(
            dsn,
            schema=schema,
            min_size=min_size,
            max_size=max_size,
            statement_timeout=statement_timeout,
            lock_timeout=lock_timeout,
            idle_in_transaction_session_timeout=idle_in_transaction_session_timeout,
            application_name=application_name,
        )
        store = cls(pool, schema=schema, rate_window=rate_window)
        store._shared.dsn = dsn
        store._shared.owns_pool = True
        return store

    def with_connection(self, conn: psycopg.Connection[Any]) -> PostgresStore:
        """A store whose verbs run on ``conn`` (the caller's transaction), never committing it."""
        bound = object.__new__(PostgresStore)
        bound._shared = self._shared
        bound._bound = conn
        return bound

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
        conninfo = self._shared.pool.conninfo
        info: dict[str, Any] = {}
        if isinstance(conninfo, str):  # a callable conninfo cannot be read without calling it
            try:
                info = conninfo_to_dict(conninfo)
            except psycopg.ProgrammingError:
                info = {}
        keys = ("host", "hostaddr", "port", "dbname", "user")
        return (*(str(info.get(k) or "") for k in keys), self.schema)

    @property
    def pool(self) -> ConnectionPool[Any]:
        """The connection pool in use."""
        return self._shared.pool

    def migrate(self) -> list[str]:
        """Apply pending migrations (idempotent); returns the names applied now."""
        if self._bound is not None:
            return _migrate(self._bound, self.schema)
        with self._shared.pool.connection() as conn:
            return _migrate(conn, self.schema)

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

    # -- producer ----------------------------------------------------------------------------------
    def job_enqueue(self, params: EnqueueParams, *, connection: Any = None) -> EnqueueResult:
        """Insert one job, applying the dedupe rule; with ``connection``, inside it."""
        store = self if connection is None else self.with_connection(connection)
        scope = params.scope
        args: dict[str, Any] = {
            "type": params.type,
            "payload": rows.jsonb(params.payload),
            "scope_type": None if scope is None else scope[0],
            "scope_id": None if scope is None else scope[1],
            "run_at": params.run_at,
            "delay": float(params.delay),
            "max_attempts": params.max_attempts,
            "priority": params.priority,
            "tags": None if params.tags is None else list(params.tags),
        }
        if params.dedupe_key is None:
            found = store._fetch("job_enqueue", args)
            return EnqueueResult(id=str(found[0][0]), inserted=True)
        args["dedupe_key"] = params.dedupe_key
        args["key_lock_prefix"] = self._shared.schema + ":dedupe:"
        if params.on_duplicate == "replace":
            job_id, inserted = store._keyed("job_enqueue_replace", args)[0]
            return EnqueueResult(id=str(job_id), inserted=inserted, replaced=not inserted)
        found = store._keyed("job_enqueue_reject", args)
        if not found:
            return EnqueueResult(id=None, inserted=False)
        return EnqueueResult(id=str(found[0][0]), inserted=True)

    def _keyed(self, name: str, args: dict[str, Any]) -> list[tuple[Any, ...]]:
        """A keyed add: the (type, dedupe_key) advisory lock, then statement ``name``, in one
        transaction: ours, or the caller's, which then holds the lock to its commit (as the
        unique index would hold a second add of the key)."""
        with self._transaction() as conn:
            conn.execute(self._q["job_enqueue_key_lock"], args)
            return conn.execute(self._q[name], args).fetchall()

    def job_enqueue_many(self, params: EnqueueManyParams, *, connection: Any = None) -> int:
        """Insert many jobs of one type with one COPY; returns the count."""
        if not params.payloads:
            return 0
        store = self if connection is None else self.with_connection(connection)
        scope = params.scope
        # No explicit transaction: the COPY is one statement, atomic on its own (on an
        # autocommit connection its own transaction), and the due-time read needs none, so
        # BEGIN and COMMIT would only add two round trips.
        with store._connection() as conn:
            run_at: datetime | None = params.run_at
            if run_at is None and params.delay > 0:
                run_at = conn.execute(
                    store._q["job_due_at"], {"delay": float(params.delay)}
                ).fetchone()[0]  # type: ignore[index]
            fields = [
                rows.copy_field(None if scope is None else scope[0]),
                rows.copy_field(None if scope is None else scope[1]),
            ]
            if run_at is not None:
                fields.append(rows.copy_field(run_at.isoformat()))
            fields += [rows.copy_field(params.max_attempts), rows.copy_field(params.priority)]
            if params.tags:
                fields.append(rows.copy_tags(params.tags))
            # Every row is "<type>\t<payload>\t<constant tail>\n": built with one join.
            head = rows.copy_field(params.type) + b"\t"
            tail = b"\t" + b"\t".join(fields) + b"\n"
            data = head + rows.copy_join(params.payloads, tail + head) + tail
            name = "job_copy_in_now" if run_at is None else "job_copy_in"
            query = store._q[name + "_tagged" if params.tags else name]
            with conn.cursor() as cur, cur.copy(query) as copy:
                copy.write(data)
        return len(params.payloads)

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
        self, owner: str, items: Sequence[LeaseRef], *, delete_types: Sequence[str] = ()
    ) -> set[str]:
        """RUNNING -> SUCCEEDED for leases still held; returns the ids written.

        Without a result in the batch and without ``delete_types`` this is the hot-path
        statement; with results, its variant that stores them; with ``delete_types``, the
        variant that also deletes (``delete_on``).
        """
        if not items:
            return set()
        args = rows.lease_args(owner, items)
        if not delete_types and not any(isinstance(i, ResultRef) for i in items):
            return self._write_ids("job_complete_many", args)  # the hot path
        args["results"] = [
            i.result.decode() if isinstance(i, ResultRef) and i.result is not None else None
            for i in items
        ]
        if delete_types:
            args["delete_types"] = list(delete_types)
            return self._write_ids("job_complete_many_deleting", args)
        return self._write_ids("job_complete_many_with_results", args)

    def job_retry_many(self, owner: str, items: Sequence[RetryItem]) -> set[str]:
        """RUNNING -> PENDING after a delay (attempt refunded unless consumed)."""
        if not items:
            return set()
        args = rows.lease_args(owner, items)
        args["delays"] = [float(i.delay) for i in items]
        args["errors"] = [i.error for i in items]
        args["consume"] = [bool(i.consume_attempt) for i in items]
        args["history"] = HISTORY_LIMIT
        return self._write_ids("job_retry_many", args)

    def job_fail_many(
        self, owner: str, items: Sequence[FailItem], *, delete_types: Sequence[str] = ()
    ) -> set[str]:
        """RUNNING -> FAILED (dead letter); types in ``delete_types`` are deleted instead."""
        if not items:
            return set()
        args = rows.lease_args(owner, items)
        args["errors"] = [i.error for i in items]
        args["delete_types"] = list(delete_types)
        args["history"] = HISTORY_LIMIT
        return self._write_ids("job_fail_many", args)

    def job_release_many(self, owner: str, items: Sequence[LeaseRef]) -> set[str]:
        """RUNNING -> PENDING, due now, attempt refunded (claimed but never started)."""
        if not items:
            return set()
        return self._write_ids("job_release_many", rows.lease_args(owner, items))

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

    def lease_recover_expired(self, limit: int = 500) -> list[Reclaimed]:
        """Reaper: expired RUNNING leases go back to PENDING, or FAILED past their budget."""
        args = {
            "limit": limit,
            "expired_error": LEASE_EXPIRED_ERROR,
            "exhausted_error": LEASE_EXHAUSTED_ERROR,
            "history": HISTORY_LIMIT,
        }
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            try:
                return [rows.reclaimed(r) for r in self._fetch("lease_recover_expired", args)]
            except RETRYABLE:
                if self._bound is not None or attempt == WRITE_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

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

    # -- inspection and administration -----------------------------------------------------------
    def job_get(self, job_id: str) -> JobSummary | None:
        """One job, or None."""
        number = rows.int_id(job_id)
        if number is None:
            return None
        found = self._fetch("job_get", {"id": number})
        return rows.summary(found[0]) if found else None

    def job_wait(self, job_id: str, timeout: float | None) -> JobSummary:
        """Block until the job is terminal and return it; ``LookupError`` when it does not
        exist or is deleted meanwhile, ``TimeoutError`` past ``timeout`` seconds.

        Every waiting thread shares the store's one LISTEN connection and holds no pooled
        connection while it waits (see ``_waiters``).
        """
        return self._shared.waiters.wait(job_id, timeout)

    def job_find(self, params: FindParams) -> list[JobSummary]:
        """Jobs matching the filters, newest first."""
        args = rows.filter_args(params)
        args["statuses"] = (
            None if params.statuses is None else [JobStatus(s).value for s in params.statuses]
        )
        if params.tags:  # an empty list filters nothing, as on the in-memory store
            args["tags"] = list(params.tags)
            return [rows.summary(r) for r in self._fetch("job_find_tagged", args)]
        return [rows.summary(r) for r in self._fetch("job_find", args)]

    def job_payload(self, job_id: str) -> bytes | None:
        """One job's payload as its JSON encoding, or None when the job does not exist."""
        number = rows.int_id(job_id)
        if number is None:
            return None
        found = self._fetch("job_payload", {"id": number})
        return str(found[0][0]).encode("utf-8") if found else None

    def job_count_by_status(self) -> dict[JobStatus, int]:
        """Counts of every status (0 when none)."""
        counts = dict.fromkeys(JobStatus, 0)
        for status, count in self._fetch("job_count_by_status"):
            counts[JobStatus(status)] = int(count)
        return counts

    def job_stats(self) -> dict[str, int]:
        """pending (due now), scheduled (future), running, succeeded, failed."""
        row = self._fetch("job_stats")[0]
        keys = ("pending", "scheduled", "running", "succeeded", "failed")
        return {key: int(value) for key, value in zip(keys, row, strict=True)}

    def job_stats_by_type(self) -> dict[str, dict[str, int]]:
        """``job_stats`` buckets per job type."""
        keys = ("pending", "scheduled", "running", "succeeded", "failed")
        return {
            str(row[0]): {key: int(value) for key, value in zip(keys, row[1:], strict=True)}
            for row in self._fetch("job_stats_by_type")
        }

    def job_oldest_due_age(self) -> float | None:
        """Seconds the oldest due PENDING job has waited; None when nothing is due."""
        value = self._fetch("job_oldest_due_age")[0][0]
        return None if value is None else max(float(value), 0.0)

    def job_retry_failed(self, params: FindParams) -> int:
        """FAILED -> PENDING with attempts reset; ``params.limit=None`` means all."""
        jobs_channel = self.channels()[0]
        with self._transaction() as conn:
            revived = conn.execute(self._q["job_retry_failed"], rows.filter_args(params)).fetchall()
            types = sorted({row[1] for row in revived})
            if types:
                chunks = rows.json_array_chunks(types)
                payload = chunks[0] if len(chunks) == 1 else ""
                conn.execute(self._q["notify"], {"channel": jobs_channel, "payload": payload})
        return len(revived)

    def job_prune(
        self,
        statuses: Sequence[JobStatus],
        *,
        before: datetime | None,
        age: float | None,
        limit: int | None = None,
    ) -> int:
        """Delete finished rows older than the cut-off (``before`` or ``age`` seconds)."""
        if before is None and age is None:
            raise ValueError("job_prune needs before or age")
        args = {
            "statuses": [JobStatus(s).value for s in statuses],
            "before": before,
            "age": None if age is None else float(age),
            "limit": limit,
        }
        with self._connection() as conn:
            cur = conn.execute(self._q["job_prune"], args)
            return max(cur.rowcount, 0)

    # -- plumbing ----------------------------------------------------------------------------------
    def now(self) -> datetime:
        """The database clock: ``now()``."""
        value: datetime = self._fetch("now")[0][0]
        return value

    def open_listener(self) -> Listener | None:
        """A dedicated LISTEN connection (outside the pool) on the jobs and cancel channels."""
        jobs_channel, cancel_channel = self.channels()
        pool = self._shared.pool
        conninfo = pool.conninfo() if callable(pool.conninfo) else pool.conninfo
        kwargs = pool.kwargs() if callable(pool.kwargs) else pool.kwargs
        return PgListener(
            self._shared.dsn or conninfo,
            {jobs_channel: "jobs", cancel_channel: "cancel"},
            connect_kwargs=kwargs,
        )

