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

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import structlog
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool

from golemq_pg.store.postgres._claim import Claimer
from golemq_pg.store.postgres._sql import Queries, queries_for
from golemq_pg.store.postgres._waiters import JobWaiters

log = structlog.get_logger("golemq_pg.store.postgres")

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
_RECONNECT_TIMEOUT = 5.0


def _keep_reconnecting(pool: ConnectionPool[Any]) -> None:
    """``reconnect_failed`` callback: start a fresh connection attempt (a new backoff)."""
    try:
        pool.check()  # grows the pool again when it has room and no attempt is running
    except Exception as exc:  # noqa: BLE001 - a closed pool, or the server still down
        log.debug("pool_reconnect_restart_failed", error=type(exc).__name__)


def _ms(seconds: float) -> int:
    return max(int(seconds * 1000), 0)


# -- TCP keepalives and user timeout (a silent network partition) -------------------------------
#: Seconds of unacknowledged data, or of unanswered keepalive probes on an idle connection,
#: before the kernel drops a connection: the default of ``PostgresStore.connect``.
DEFAULT_TCP_USER_TIMEOUT = 10.0
#: The largest ``tcp_user_timeout`` accepted (an hour; beyond that the kernel's own minutes
#: are as good).
MAX_TCP_USER_TIMEOUT = 3600.0


def check_tcp_user_timeout(value: object) -> float:
    """``value`` as seconds: 0 (leave the kernel's defaults) or 1 to 3600; else ValueError."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError("tcp_user_timeout must be a number of seconds")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0 or 0 < seconds < 1:
        raise ValueError("tcp_user_timeout must be 0 (kernel defaults) or at least 1 second")
    if seconds > MAX_TCP_USER_TIMEOUT:
        raise ValueError("tcp_user_timeout must be at most 3600 seconds")
    return seconds


def tcp_keepalive_params(tcp_user_timeout: float, dsn: str = "") -> dict[str, str]:
    """libpq connection parameters that bound how long a half-open connection goes unnoticed.

    With ``tcp_user_timeout`` T seconds: keepalive probes start after T/2 s of silence and
    repeat every T/6 s (at least 1 s), and ``tcp_user_timeout`` (T, in ms) makes the kernel
    drop the connection once sent data, or those probes, went unacknowledged for T s. So a
    blocked statement and an idle connection (the LISTEN one) both fail within about T s
    instead of the kernel's 15 minutes of retransmissions or 2 hours of keepalive idle. 0
    returns nothing (the kernel's and the DSN's settings apply). A parameter the ``dsn``
    sets itself is left out: the DSN wins. libpq ignores all of them on a Unix socket.
    """
    if tcp_user_timeout == 0:
        return {}
    params = {
        "keepalives": "1",
        "keepalives_idle": str(max(math.ceil(tcp_user_timeout / 2), 1)),
        "keepalives_interval": str(max(math.ceil(tcp_user_timeout / 6), 1)),
        "keepalives_count": "3",
        "tcp_user_timeout": str(_ms(tcp_user_timeout)),
    }
    given = conninfo_to_dict(dsn) if dsn else {}
    return {key: value for key, value in params.items() if key not in given}


def server_keepalive_settings(tcp_user_timeout: float) -> dict[str, str]:
    """The same bounds for the server's end of the connection (session settings).

    A partition leaves the backend waiting on a client that is gone: without these, a
    transaction open at that moment keeps its row and advisory locks until
    ``idle_in_transaction_session_timeout``, and an idle session lingers for the kernel's
    two hours. With them the server ends the session (rolling back) within about
    ``tcp_user_timeout`` too. Ignored by the server on a Unix socket; behind PgBouncer they
    apply to PgBouncer's own server connections, and PgBouncer's ``tcp_keepalive`` settings
    bound the client side.
    """
    if tcp_user_timeout == 0:
        return {}
    params = tcp_keepalive_params(tcp_user_timeout)
    return {
        "tcp_keepalives_idle": params["keepalives_idle"],
        "tcp_keepalives_interval": params["keepalives_interval"],
        "tcp_keepalives_count": params["keepalives_count"],
        "tcp_user_timeout": params["tcp_user_timeout"],
    }
# -- end of TCP keepalives ----------------------------------------------------------------------


def open_pool(
    dsn: str,
    *,
    schema: str,
    min_size: int,
    max_size: int,
    statement_timeout: float,
    lock_timeout: float,
    idle_in_transaction_session_timeout: float,
    application_name: str,
    tcp_user_timeout: float = DEFAULT_TCP_USER_TIMEOUT,
) -> ConnectionPool[Any]:
    """An open pool of autocommit connections to ``dsn`` with the store's session settings.

    Timeouts are seconds (0 disables), set on every connection at start-up;
    ``tcp_user_timeout``: see :func:`tcp_keepalive_params` (the LISTEN connections copy the
    pool's connection parameters, so they get the same keepalives).
    """
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
            *("-c " + name + "=" + value
              for name, value in server_keepalive_settings(tcp_user_timeout).items()),
        )
    )
    return ConnectionPool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        kwargs={
            "autocommit": True, "options": options, "application_name": application_name,
            **tcp_keepalive_params(tcp_user_timeout, dsn),
        },
        name="golemq-" + schema,
        open=True,
        reconnect_timeout=_RECONNECT_TIMEOUT,
        reconnect_failed=_keep_reconnecting,
    )


class Shared:
    """State shared by a store and the connection-bound stores derived from it."""

    __slots__ = (
        "channels", "claimer", "dsn", "owns_pool", "pool", "queries", "schema", "waiters"
    )

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
        # queue.wait(): no thread or connection until the first wait.
        self.waiters = JobWaiters(pool, self.queries, lambda: self.dsn)


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
        found = self._shared.channels
        if found is None:
            row = self._fetch("channel_names")[0]
            found = self._shared.channels = (row[0], row[1])
        return found
