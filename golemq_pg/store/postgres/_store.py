"""PostgresStore: the JobStore port on PostgreSQL, and the only code that issues SQL.

Statements come from ``sql/queries/*.sql`` (see ``_sql``), composed once per schema. The
store owns a ``psycopg_pool.ConnectionPool`` (``connect``) or wraps one (``PostgresStore(pool)``);
its own connections are autocommit, so a one-statement verb is one round trip, and set
``statement_timeout``, ``lock_timeout`` and ``idle_in_transaction_session_timeout`` at
connection start-up. ``with_connection(conn)`` gives a store whose verbs run inside the
caller's transaction and never commit it.
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
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool

from golemq_pg import _local
from golemq_pg._types import JobStatus, JobSummary, ScheduleSummary
from golemq_pg._validation import check_schema
from golemq_pg.store.port import (
    LEASE_EXHAUSTED_ERROR,
    LEASE_EXPIRED_ERROR,
    CancelFilter,
    CancelledJob,
    ClaimedJob,
    ClaimRequest,
    DueSchedule,
    EnqueueManyParams,
    EnqueueParams,
    EnqueueResult,
    FailItem,
    FindParams,
    LeaseRef,
    Listener,
    NextTick,
    Reclaimed,
    RetryItem,
    ScheduleParams,
)
from golemq_pg.store.postgres import _rows as rows
from golemq_pg.store.postgres._claim import Claimer
from golemq_pg.store.postgres._listener import PgListener
from golemq_pg.store.postgres._migrations import migrate as _migrate
from golemq_pg.store.postgres._migrations import migration_script
from golemq_pg.store.postgres._sql import Queries, queries_for

__all__ = ["PostgresStore", "migration_script"]

log = structlog.get_logger("golemq_pg.store.postgres")

# Transient conflicts a fenced, idempotent batch write may simply run again: a deadlock
# with a concurrent cancel, or a unique-index race with a concurrent "replace" enqueue.
_RETRYABLE = (pg_errors.DeadlockDetected, pg_errors.SerializationFailure, pg_errors.UniqueViolation)
_WRITE_ATTEMPTS = 3
#: How long a cancel's DELETE first waits for a row lock before it announces the locked rows
#: (held by transactional handlers) to their workers and waits for real.
_CANCEL_BRIEF_WAIT_MS = 100


# psycopg_pool retries a failed connection with a doubling delay (1, 2, 4, 8, 16, 32 s...) for
# reconnect_timeout, and while such an attempt waits no other one starts: after an outage of a
# minute the pool could stay empty for another minute although the server was back, and the
# worker would sit alive but idle. Giving up after a few seconds and starting over at once
# (_keep_reconnecting) caps the gap between attempts at 4 s.
_RECONNECT_TIMEOUT = 5.0


def _keep_reconnecting(pool: ConnectionPool[Any]) -> None:
    """``reconnect_failed`` callback: start a fresh connection attempt (a new backoff)."""
    try:
        pool.check()  # grows the pool again when it has room and no attempt is running
    except Exception as exc:  # noqa: BLE001 - a closed pool, or the server still down
        log.debug("pool reconnect restart failed", error=type(exc).__name__)


def _ms(seconds: float) -> int:
    return max(int(seconds * 1000), 0)


class _Shared:
    """State shared by a store and the connection-bound stores derived from it."""

    __slots__ = ("channels", "claimer", "dsn", "owns_pool", "pool", "queries", "schema")

    def __init__(
        self,
        pool: ConnectionPool[Any],
        schema: str,
        rate_window: float,
        dsn: str | None,
        owns_pool: bool,
    ) -> None:
        self.pool = pool
        self.schema = schema
        self.dsn = dsn
        self.owns_pool = owns_pool
        self.queries: Queries = queries_for(schema)
        self.claimer = Claimer(self.queries, schema, rate_window)
        self.channels: tuple[str, str] | None = None


class PostgresStore:
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
        self._shared = _Shared(pool, schema, rate_window, None, owns_pool=False)
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
        options = " ".join(
            (
                # Timestamps come back as UTC datetimes whatever the server's default zone.
                "-c TimeZone=UTC",
                # The claim's per-type LIMIT is not a constant, so on a large backlog its
                # estimated cost crosses jit_above_cost although it touches ~100 rows; JIT
                # compilation would then cost more than the statement itself.
                "-c jit=off",
                "-c statement_timeout=" + str(_ms(statement_timeout)),
                "-c lock_timeout=" + str(_ms(lock_timeout)),
                "-c idle_in_transaction_session_timeout="
                + str(_ms(idle_in_transaction_session_timeout)),
            )
        )
        pool: ConnectionPool[Any] = ConnectionPool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            kwargs={"autocommit": True, "options": options, "application_name": application_name},
            name="golemq-" + schema,
            open=True,
            reconnect_timeout=_RECONNECT_TIMEOUT,
            reconnect_failed=_keep_reconnecting,
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
        """Close the pool when this store owns it (a bound store closes nothing)."""
        if self._bound is None and self._shared.owns_pool:
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

    # -- connection helpers -----------------------------------------------------------------------
    @property
    def _q(self) -> Queries:
        return self._shared.queries

    @contextmanager
    def _pooled(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection from the pool; one found read-only is thrown away.

        A session that started read-only (``default_transaction_read_only`` set on the role
        or database for a while, or a standby behind a failover address) stays read-only for
        its whole life, so the pool would hand the same refusing connections out forever.
        Closing it makes the pool open a fresh one, which sees the current setting.
        """
        with self._shared.pool.connection() as conn:
            try:
                yield conn
            except pg_errors.ReadOnlySqlTransaction:
                conn.close()
                raise

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection for one statement (autocommit on our pool: its own transaction)."""
        if self._bound is not None:
            yield self._bound
        else:
            with self._pooled() as conn:
                yield conn

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Connection[Any]]:
        """An atomic unit: our own transaction, or the caller's (never committed here)."""
        if self._bound is not None:
            conn = self._bound
            if conn.autocommit:
                with conn.transaction():
                    yield conn
            else:
                yield conn
            return
        with self._pooled() as conn:
            if conn.autocommit:
                with conn.transaction():
                    yield conn
            else:
                yield conn  # the pool's context manager commits

    def _fetch(self, name: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
        with self._connection() as conn:
            return conn.execute(self._q[name], params).fetchall()

    def _write_ids(self, name: str, params: dict[str, Any]) -> set[str]:
        """Run a fenced batch write and return the ids it changed (retried on conflicts)."""
        for attempt in range(1, _WRITE_ATTEMPTS + 1):
            try:
                return {str(row[0]) for row in self._fetch(name, params)}
            except _RETRYABLE as exc:
                if self._bound is not None or attempt == _WRITE_ATTEMPTS:
                    raise
                log.info("store write retried", verb=name, error=type(exc).__name__)
        raise AssertionError("unreachable")  # pragma: no cover

    def channels(self) -> tuple[str, str]:
        """The NOTIFY channel names (jobs, cancel) of this schema, fetched once."""
        found = self._shared.channels
        if found is None:
            row = self._fetch("channel_names")[0]
            found = self._shared.channels = (row[0], row[1])
        return found

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
            # Every row is "<type>\t<payload>\t<constant tail>\n": built with one join.
            head = rows.copy_field(params.type) + b"\t"
            tail = b"\t" + b"\t".join(fields) + b"\n"
            data = head + rows.copy_join(params.payloads, tail + head) + tail
            query = store._q["job_copy_in_now" if run_at is None else "job_copy_in"]
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
            log.info("transactional interrupt failed", error=type(exc).__name__)

    def job_complete_many(self, owner: str, items: Sequence[LeaseRef]) -> set[str]:
        """RUNNING -> SUCCEEDED for leases still held; returns the ids written."""
        if not items:
            return set()
        return self._write_ids("job_complete_many", _lease_args(owner, items))

    def job_retry_many(self, owner: str, items: Sequence[RetryItem]) -> set[str]:
        """RUNNING -> PENDING after a delay (attempt refunded unless consumed)."""
        if not items:
            return set()
        args = _lease_args(owner, items)
        args["delays"] = [float(i.delay) for i in items]
        args["errors"] = [i.error for i in items]
        args["consume"] = [bool(i.consume_attempt) for i in items]
        return self._write_ids("job_retry_many", args)

    def job_fail_many(self, owner: str, items: Sequence[FailItem]) -> set[str]:
        """RUNNING -> FAILED (dead letter)."""
        if not items:
            return set()
        args = _lease_args(owner, items)
        args["errors"] = [i.error for i in items]
        return self._write_ids("job_fail_many", args)

    def job_release_many(self, owner: str, items: Sequence[LeaseRef]) -> set[str]:
        """RUNNING -> PENDING, due now, attempt refunded (claimed but never started)."""
        if not items:
            return set()
        return self._write_ids("job_release_many", _lease_args(owner, items))

    def lease_renew(self, owner: str, items: Sequence[LeaseRef], seconds: float) -> set[str]:
        """Extend the given held, unexpired leases to now() + seconds; returns the ids renewed."""
        if not items:
            return set()
        args = _lease_args(owner, items)
        args["seconds"] = float(seconds)
        return self._write_ids("lease_renew", args)

    def lease_held(self, owner: str, items: Sequence[LeaseRef]) -> set[str]:
        """Which of these leases this owner still holds (the reconcile pass)."""
        if not items:
            return set()
        return {str(row[0]) for row in self._fetch("lease_held", _lease_args(owner, items))}

    def lease_recover_expired(self, limit: int = 500) -> list[Reclaimed]:
        """Reaper: expired RUNNING leases go back to PENDING, or FAILED past their budget."""
        args = {
            "limit": limit,
            "expired_error": LEASE_EXPIRED_ERROR,
            "exhausted_error": LEASE_EXHAUSTED_ERROR,
        }
        for attempt in range(1, _WRITE_ATTEMPTS + 1):
            try:
                return [rows.reclaimed(r) for r in self._fetch("lease_recover_expired", args)]
            except _RETRYABLE:
                if self._bound is not None or attempt == _WRITE_ATTEMPTS:
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

    def job_find(self, params: FindParams) -> list[JobSummary]:
        """Jobs matching the filters, newest first."""
        args = _filter_args(params)
        args["statuses"] = (
            None if params.statuses is None else [JobStatus(s).value for s in params.statuses]
        )
        return [rows.summary(r) for r in self._fetch("job_find", args)]

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

    def job_cancel(self, selector: CancelFilter, reason: str | None) -> list[CancelledJob]:
        """Delete matching live jobs; NOTIFY the ids of running ones on the cancel channel.

        ``reason`` is for the caller's own signalling; it is not stored or sent.

        Rows held by transactional handlers (an open claim transaction locks the row): the
        DELETE first waits for row locks only briefly; if that runs out, the rows of the
        selector that are locked are announced on the cancel channel (and to this process's
        workers), so their workers abort the handlers and end their transactions, and the
        DELETE runs again, waiting for real. Pending-only cancels skip locked rows: they are
        running work. See ``sql/queries/cancel.sql``.
        """
        if selector.job_ids:
            kind = "ids"
            args: dict[str, Any] = {"ids": rows.int_ids(selector.job_ids)}
        elif selector.scope is not None:
            kind = "scope"
            args = {"scope_type": selector.scope[0], "scope_id": selector.scope[1]}
        elif selector.type is not None and selector.dedupe_keys:
            kind = "keys"
            args = {"type": selector.type, "keys": list(selector.dedupe_keys)}
        else:
            return []
        if selector.pending_only:
            name = "job_cancel_pending_" + kind
        else:
            name = "job_cancel_" + kind
            args["pending_only"] = False
        cancel_channel = self.channels()[1]
        # Not inside a caller's transaction: a lock timeout would abort it, and an
        # announcement would only be delivered at its commit. There the DELETE just waits.
        brief = not selector.pending_only and self._bound is None
        deadlocks = 0
        while True:
            try:
                with self._transaction() as conn:
                    if brief:
                        conn.execute(self._q["cancel_brief_lock_wait"],
                                     {"ms": str(_CANCEL_BRIEF_WAIT_MS)})
                    found = conn.execute(self._q[name], args).fetchall()
                    deleted = [rows.cancelled(r) for r in found]
                    running = [int(job.id) for job in deleted if job.was_running]
                    for chunk in rows.json_array_chunks(running):
                        conn.execute(
                            self._q["notify"], {"channel": cancel_channel, "payload": chunk}
                        )
                break
            except pg_errors.LockNotAvailable:
                if not brief:
                    raise
                brief = False
                self._announce_locked(kind, args, cancel_channel, reason)
            except pg_errors.DeadlockDetected:
                # Deleting many rows can deadlock with a batch write locking them in another
                # order; the delete is idempotent, so run it again.
                deadlocks += 1
                if self._bound is not None or deadlocks >= _WRITE_ATTEMPTS:
                    raise
        if deleted:
            log.info("jobs cancelled", count=len(deleted), running=len(running))
        return deleted

    def _announce_locked(
        self, kind: str, args: dict[str, Any], channel: str, reason: str | None
    ) -> None:
        """NOTIFY (committed at once) the live rows of a cancel that another transaction
        holds locked, and abort them in this process's workers, before the DELETE waits."""
        locked = [int(r[0]) for r in self._fetch("job_cancel_locked_" + kind, args)]
        if not locked:
            return
        with self._connection() as conn:
            for chunk in rows.json_array_chunks(locked):
                conn.execute(self._q["notify"], {"channel": channel, "payload": chunk})
        _local.abort(self, [str(i) for i in locked], reason or "cancelled")
        log.info("cancel announced locked jobs", count=len(locked))

    def job_retry_failed(self, params: FindParams) -> int:
        """FAILED -> PENDING with attempts reset; ``params.limit=None`` means all."""
        jobs_channel = self.channels()[0]
        with self._transaction() as conn:
            revived = conn.execute(self._q["job_retry_failed"], _filter_args(params)).fetchall()
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

    # -- schedules ---------------------------------------------------------------------------------
    def schedule_upsert(self, params: ScheduleParams) -> None:
        """Create or update a schedule by key."""
        scope = params.scope
        args = {
            "key": params.key,
            "type": params.type,
            "payload": rows.jsonb(params.payload),
            "scope_type": None if scope is None else scope[0],
            "scope_id": None if scope is None else scope[1],
            "priority": params.priority,
            "max_attempts": params.max_attempts,
            "cron": params.cron,
            "every_seconds": params.every_seconds,
            "timezone": params.timezone,
            "repeat_from": params.repeat_from,
            "first_run_at": params.first_run_at,
        }
        with self._connection() as conn:
            conn.execute(self._q["schedule_upsert"], args)

    def schedule_delete(self, key: str) -> bool:
        """Remove a schedule; True when it existed."""
        return bool(self._fetch("schedule_delete", {"key": key}))

    def schedule_list(self) -> list[ScheduleSummary]:
        """Every schedule, by key."""
        return [rows.schedule(r) for r in self._fetch("schedule_list")]

    def schedule_fire_due(self, next_tick: NextTick, limit: int = 100) -> list[str]:
        """Enqueue one job per due schedule and advance it; returns the new job ids."""
        with self._transaction() as conn:
            conn.execute(self._q["schedule_resume_finished"])
            due = conn.execute(self._q["schedule_claim_due"], {"limit": limit}).fetchall()
            keys: list[str] = []
            nexts: list[datetime | None] = []
            for key, job_type, cron, every, timezone, repeat_from, next_run_at, db_now in due:
                tick = DueSchedule(
                    key=key,
                    type=job_type,
                    cron=cron,
                    every_seconds=every,
                    timezone=timezone,
                    repeat_from=repeat_from,
                    next_run_at=next_run_at,
                )
                try:
                    nxt = next_tick(tick, db_now)
                except Exception as exc:  # noqa: BLE001 - one bad schedule must not stop the rest
                    log.warning(
                        "schedule next tick failed",
                        key=key,
                        type=job_type,
                        error=type(exc).__name__,
                    )
                    continue
                keys.append(key)
                nexts.append(nxt)
            if not keys:
                return []
            fired = conn.execute(
                self._q["schedule_fire"], {"keys": keys, "next_run_ats": nexts}
            ).fetchall()
        return [str(row[0]) for row in fired]

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


def _plain_id(value: str) -> bool:
    """A decimal string that fits a bigint: what our ids look like."""
    return 0 < len(value) < 19 and value.isascii() and value.isdigit()


def _lease_args(owner: str, items: Sequence[LeaseRef | RetryItem | FailItem]) -> dict[str, Any]:
    # Ids and tokens travel as text array literals ("{1,2,3}", cast to bigint[] in SQL):
    # psycopg dumps a Python list element by element, which costs more than the statement
    # for a batch of a hundred. Ids are our decimal strings; one that cannot be ours becomes
    # -1, which matches no job.
    ids = ",".join(i.id if _plain_id(i.id) else "-1" for i in items)
    tokens = ",".join(str(int(i.token)) for i in items)
    return {"owner": owner, "ids": "{" + ids + "}", "tokens": "{" + tokens + "}"}


def _filter_args(params: FindParams) -> dict[str, Any]:
    return {
        "types": None if params.types is None else list(params.types),
        "scope_type": params.scope_type,
        "scope_id": params.scope_id,
        "limit": params.limit,
        "skip": params.skip or 0,
    }
