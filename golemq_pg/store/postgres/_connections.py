"""How PostgresStore reaches the database: the pool, and one connection per verb.

The store owns a ``psycopg_pool.ConnectionPool`` (:func:`open_pool`, for
``PostgresStore.connect``) or wraps one. Its own connections are autocommit, so a
one-statement verb is one round trip, and set ``statement_timeout``, ``lock_timeout`` and
``idle_in_transaction_session_timeout`` at connection start-up. A store bound to the
caller's connection (``with_connection``) runs its verbs there and never commits.

:class:`StoreConnections` holds what every verb of the store needs (the shared state, the
connection and transaction helpers, the retried fenced write); the verb groups of
``PostgresStore`` derive from it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Concatenate, ParamSpec, TypedDict, TypeVar, Unpack

import psycopg
import structlog
from psycopg import errors as pg_errors
from psycopg_pool import ConnectionPool

from golemq_pg.store.postgres._claim import Claimer
from golemq_pg.store.postgres._plans import Plan, PlanContext, queue_identity
from golemq_pg.store.postgres._plans import channels as plan_channels
from golemq_pg.store.postgres._run_sync import run_plan
from golemq_pg.store.postgres._sql import Queries, queries_for
from golemq_pg.store.postgres._waiters import JobWaiters

log = structlog.get_logger("golemq_pg.store.postgres")

R = TypeVar("R")
P = ParamSpec("P")

#: Transient conflicts a fenced, idempotent batch write may simply run again: a deadlock
#: with a concurrent cancel, or a unique-index race with a concurrent "replace" enqueue.
RETRYABLE = (pg_errors.DeadlockDetected, pg_errors.SerializationFailure, pg_errors.UniqueViolation)
#: How many times a retryable write runs before its error propagates.
WRITE_ATTEMPTS = 3

# psycopg_pool retries a failed connection with a doubling delay (1, 2, 4, 8, 16, 32 s...) for
# reconnect_timeout, and while such an attempt waits no other one starts: after an outage of a
# minute the pool could stay empty for another minute although the server was back, and the
# worker would sit alive but idle. Giving up after a few seconds and starting over at once
# (_keep_reconnecting) caps the gap between attempts at 4 s.
RECONNECT_TIMEOUT = 5.0


def _keep_reconnecting(pool: ConnectionPool[Any]) -> None:
    """``reconnect_failed`` callback: start a fresh connection attempt (a new backoff)."""
    try:
        pool.check()  # grows the pool again when it has room and no attempt is running
    except Exception as exc:  # noqa: BLE001 - a closed pool, or the server still down
        log.debug("pool_reconnect_restart_failed", error=type(exc).__name__)


def _ms(seconds: float) -> int:
    return max(int(seconds * 1000), 0)


class ConnectionOptions(TypedDict, total=False):
    """The options of the connections a store opens, ``connect(dsn, **options)`` of
    ``PostgresStore`` and ``AsyncPostgresStore`` alike: timeouts in seconds (0 disables),
    set on every connection at start-up, and the ``application_name`` it shows in
    ``pg_stat_activity``. Defaults: 30, 10 and 60 seconds, ``"golemq-pg"``."""

    statement_timeout: float
    lock_timeout: float
    idle_in_transaction_session_timeout: float
    application_name: str


def connection_kwargs(**options: Unpack[ConnectionOptions]) -> dict[str, Any]:
    """The connection arguments of every connection a store opens (``PostgresStore.connect``
    and ``AsyncPostgresStore.connect`` alike): autocommit, and the session settings at
    start-up. The one place connection options are decided.
    """
    statement_timeout = options.get("statement_timeout", 30.0)
    lock_timeout = options.get("lock_timeout", 10.0)
    idle_in_transaction_session_timeout = options.get("idle_in_transaction_session_timeout", 60.0)
    application_name = options.get("application_name", "golemq-pg")
    settings = " ".join(
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
    return {"autocommit": True, "options": settings, "application_name": application_name}


def pool_options(
    *, schema: str, min_size: int, max_size: int, kwargs: dict[str, Any]
) -> dict[str, Any]:
    """The options of the pool a store owns (``ConnectionPool`` and ``AsyncConnectionPool``
    alike), its connections made with ``kwargs`` (:func:`connection_kwargs`)."""
    return {
        "min_size": min_size,
        "max_size": max_size,
        "kwargs": kwargs,
        "name": "golemq-" + schema,
        "reconnect_timeout": RECONNECT_TIMEOUT,
    }


def open_pool(dsn: str, **options: Any) -> ConnectionPool[Any]:
    """An open pool to ``dsn`` with :func:`pool_options` ``options``."""
    return ConnectionPool(
        dsn, **pool_options(**options), open=True, reconnect_failed=_keep_reconnecting
    )


class Shared:
    """State shared by a store and the connection-bound stores derived from it."""

    __slots__ = ("claimer", "ctx", "dsn", "owns_pool", "pool", "queries", "schema", "waiters")

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
        # What the verbs written as plans need (shared with AsyncPostgresStore's plans).
        self.ctx = PlanContext(self.queries, schema, queue_identity(pool.conninfo, schema))
        self.claimer = Claimer(self.queries, schema, rate_window)
        # queue.wait(): no thread or connection until the first wait.
        self.waiters = JobWaiters(pool, self.ctx, lambda: self.dsn)


class StoreConnections:
    """The connection side of PostgresStore, shared by its verb groups.

    ``_shared`` is the state of the store's family (pool, schema, statements, claimer);
    ``_bound`` is the caller's connection of a ``with_connection`` store, else None.
    """

    _shared: Shared
    _bound: psycopg.Connection[Any] | None

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
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            try:
                return {str(row[0]) for row in self._fetch(name, params)}
            except RETRYABLE as exc:
                if self._bound is not None or attempt == WRITE_ATTEMPTS:
                    raise
                log.info("store_write_retried", verb=name, error=type(exc).__name__)
        raise AssertionError("unreachable")  # pragma: no cover

    def channels(self) -> tuple[str, str]:
        """The NOTIFY channel names (jobs, cancel) of this schema, fetched once."""
        return self._run(plan_channels(self._shared.ctx))

    def _run(self, plan: Plan[R]) -> R:
        """Run a verb's plan (see ``_plans``) on this store's connection for one verb."""
        return run_plan(self._connection, plan, self._bound is None)


def sync_verb(
    plan: Callable[Concatenate[PlanContext, P], Plan[R]],
) -> Callable[Concatenate[StoreConnections, P], R]:
    """A store method running ``plan`` with the store's context and the caller's arguments
    (its name, docstring and signature are the plan's)."""

    def verb(self: StoreConnections, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return run_plan(
            self._connection, plan(self._shared.ctx, *args, **kwargs), self._bound is None
        )

    return functools.wraps(plan)(verb)
