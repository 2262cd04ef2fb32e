"""How PostgresStore reaches the database: the pool, and one connection per verb.

The store owns a ``psycopg_pool.ConnectionPool`` (:func:`open_pool`, for
``PostgresStore.connect``) or wraps one. Its own connections are autocommit, so a
one-statement verb is one round trip, and are set up by :class:`ConnectionOptions`: no
``options`` startup parameter (PgBouncer refuses it), one ``session_settings`` statement
once opened (TimeZone, jit, the timeouts), timestamptz decoded as UTC on the client, and
with ``prepare=False`` no prepared statement at all. A store bound to the caller's
connection (``with_connection``) runs its verbs there and never commits.

:class:`StoreConnections` holds what every verb of the store needs (the shared state, the
connection and transaction helpers, the retried fenced write); the verb groups of
``PostgresStore`` derive from it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from types import TracebackType
from typing import Any, Concatenate, Generic, ParamSpec, Self, TypedDict, TypeVar

import psycopg
import structlog
from psycopg import errors as pg_errors
from psycopg import pq
from psycopg.abc import Buffer
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.datetime import TimestamptzBinaryLoader, TimestamptzLoader
from psycopg_pool import ConnectionPool

from golemq_pg.errors import PreparedStatementsUnsupported, QueueConfigError
from golemq_pg.store.postgres._claim import Claimer
from golemq_pg.store.postgres._plans import Plan, PlanContext, queue_identity
from golemq_pg.store.postgres._plans import channels as plan_channels
from golemq_pg.store.postgres._refusals import data_refusals
from golemq_pg.store.postgres._rows import id_text_set
from golemq_pg.store.postgres._run_sync import run_plan
from golemq_pg.store.postgres._sql import Queries, queries_for
from golemq_pg.store.postgres._waiters import JobWaiters

log = structlog.get_logger("golemq_pg.store.postgres")

_IDLE = pq.TransactionStatus.IDLE

R = TypeVar("R")
P = ParamSpec("P")

#: Transient conflicts a fenced, idempotent batch write may simply run again: a deadlock
#: with a concurrent cancel, or a unique-index race with a concurrent "replace" enqueue.
RETRYABLE = (pg_errors.DeadlockDetected, pg_errors.SerializationFailure, pg_errors.UniqueViolation)
#: How many times a retryable write runs before its error propagates.
WRITE_ATTEMPTS = 3


def retry_or_raise(verb: str, exc: BaseException, attempt: int, *, once: bool) -> None:
    """The one retry policy of the store's writes, for a conflict in :data:`RETRYABLE` met
    by try number ``attempt`` (from 1): raise ``exc`` when no try is left (:data:`WRITE_ATTEMPTS`
    in all; ``once``: a single try, inside a caller's transaction, which the conflict has
    aborted), else log the retry with ``verb`` and return. :func:`retrying` is its loop for
    a callable; a plan (``_cancel``) loops itself around an ``Atomic`` step."""
    if once or attempt >= WRITE_ATTEMPTS:
        raise exc
    log.info("store_write_retried", verb=verb, error=type(exc).__name__)


def retrying(verb: str, write: Callable[[], R], *, once: bool) -> R:
    """``write()``, run again on a conflict as :func:`retry_or_raise` decides."""
    attempt = 1
    while True:
        try:
            return write()
        except RETRYABLE as exc:
            retry_or_raise(verb, exc, attempt, once=once)
            attempt += 1


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


# -- connection options: prepare=, session settings, pooler errors ---------------------------
# One place for every store that opens connections (PostgresStore, AsyncPostgresStore): how a
# connection is opened (connect_kwargs), what it runs once opened (session_setup: the
# session_settings statement), how timestamps stay UTC (ensure_utc, at every checkout) and
# how a pooler's prepared-statement errors are reported (pooler_error).

#: What a store tells a user whose prepared statements a pooler cannot hold.
PREPARE_FIX = (
    "the server lost or shares this connection's prepared statements: a pooler in "
    "transaction mode that cannot hold them (PgBouncer < 1.21) is in the way; connect with "
    "PostgresStore.connect(..., prepare=False)"
)


@dataclass(frozen=True, slots=True)
class ConnectionOptions:
    """How the store sets up every connection it opens (see README "Behind PgBouncer").

    ``prepare=False``: no server-side prepared statement ever (psycopg's
    ``prepare_threshold=None``, which also overrides an explicit ``prepare=True``). Timeouts
    are seconds (0 disables). Nothing goes into the ``options`` startup parameter.
    """

    prepare: bool = True
    application_name: str = "golemq-pg"
    statement_timeout: float = 30.0
    lock_timeout: float = 10.0
    idle_in_transaction_session_timeout: float = 60.0
    #: TCP keepalives and user timeout, both ends (see :func:`tcp_keepalive_params`).
    tcp_user_timeout: float = DEFAULT_TCP_USER_TIMEOUT

    def __post_init__(self) -> None:
        if not isinstance(self.prepare, bool):
            raise QueueConfigError("prepare must be True or False")
        object.__setattr__(self, "tcp_user_timeout", check_tcp_user_timeout(self.tcp_user_timeout))
        for name in ("statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
                raise QueueConfigError(f"{name} must be a number of seconds >= 0")

    def connect_kwargs(self, dsn: str = "") -> dict[str, Any]:
        """Keyword arguments for ``psycopg.connect`` (pool connections and LISTEN ones): the
        keepalive parameters ``dsn`` does not set itself included."""
        kwargs: dict[str, Any] = {
            "autocommit": True, "application_name": self.application_name,
            **tcp_keepalive_params(self.tcp_user_timeout, dsn),
        }
        if not self.prepare:
            kwargs["prepare_threshold"] = None
        return kwargs

    def session_params(self) -> dict[str, str | None]:
        """Parameters of the ``session_settings`` statement (milliseconds, as text; the
        server's keepalive settings None when ``tcp_user_timeout`` is 0: left as they are)."""
        server = server_keepalive_settings(self.tcp_user_timeout)
        return {
            "statement_timeout": str(_ms(self.statement_timeout)),
            "lock_timeout": str(_ms(self.lock_timeout)),
            "idle_timeout": str(_ms(self.idle_in_transaction_session_timeout)),
            "ka_idle": server.get("tcp_keepalives_idle"),
            "ka_interval": server.get("tcp_keepalives_interval"),
            "ka_count": server.get("tcp_keepalives_count"),
            "user_timeout": server.get("tcp_user_timeout"),
        }


class ConnectOptions(TypedDict, total=False):
    """The connection options of ``PostgresStore.connect`` and ``AsyncPostgresStore.connect``
    (the fields of :class:`ConnectionOptions`, with its defaults): ``statement_timeout``,
    ``lock_timeout``, ``idle_in_transaction_session_timeout`` (seconds, 0 disables),
    ``application_name``, ``prepare`` and ``tcp_user_timeout``."""

    statement_timeout: float
    lock_timeout: float
    idle_in_transaction_session_timeout: float
    application_name: str
    prepare: bool
    tcp_user_timeout: float


class UtcTimestamptzLoader(TimestamptzLoader):
    """timestamptz as a UTC datetime whatever the session's TimeZone (which a pooler's
    server connection may have from another client)."""

    def load(self, data: Buffer) -> datetime:
        """The instant the server sent, in UTC."""
        return super().load(data).astimezone(UTC)


class UtcTimestamptzBinaryLoader(TimestamptzBinaryLoader):
    """:class:`UtcTimestamptzLoader` for rows in the binary format (the claim's)."""

    def load(self, data: Buffer) -> datetime:
        """The instant the server sent, in UTC."""
        return super().load(data).astimezone(UTC)


def ensure_utc(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
    """Make every timestamptz on ``conn`` decode as UTC (no round trip).

    psycopg labels a timestamptz with the zone libpq last heard the server report: UTC once
    ``session_settings`` ran, so the fast built-in loader is kept. Any other zone (another
    client's ``SET TimeZone`` on a pooler's shared server session, a ``SET`` behind the
    store's back) gets :class:`UtcTimestamptzLoader` on this connection from then on.
    Called on every checkout: one libpq lookup.
    """
    if conn.pgconn.parameter_status(b"TimeZone") != b"UTC":
        conn.adapters.register_loader("timestamptz", UtcTimestamptzLoader)
        conn.adapters.register_loader("timestamptz", UtcTimestamptzBinaryLoader)


def pooler_error(exc: BaseException) -> PreparedStatementsUnsupported | None:
    """The clear error for a prepared-statement failure a pooler causes, else None.

    ``DuplicatePreparedStatement``: the server connection already holds another client's
    ``_pg3_N``; ``InvalidSqlStatementName``: this connection's statement was prepared on a
    server connection it no longer runs on.
    """
    if isinstance(exc, pg_errors.DuplicatePreparedStatement | pg_errors.InvalidSqlStatementName):
        return PreparedStatementsUnsupported(PREPARE_FIX)
    return None


class PoolerReport:
    """Turns a pooler's prepared-statement error into :class:`PreparedStatementsUnsupported`,
    logging the fix once per store (sync and async stores alike)."""

    __slots__ = ("schema", "warned")

    def __init__(self, schema: str) -> None:
        self.schema = schema
        self.warned = False

    def translate(self, exc: BaseException) -> BaseException:
        """``exc``, or the clear error naming ``prepare=False`` when a pooler refused this
        store's prepared statements."""
        clear = pooler_error(exc)
        if clear is None:
            return exc
        if not self.warned:
            self.warned = True
            log.error("store_prepared_statements_refused", schema=self.schema,
                      error_type=type(exc).__name__, fix="prepare=False")
        return clear


# -- what becomes of a pooled connection at the end of a verb ----------------------------------
class CheckoutEnd(Enum):
    """What a checkout does with its connection once the verb ended (:func:`checkout_end`)."""

    #: The verb succeeded and the connection is idle (autocommit): give it back as it is.
    KEEP = "keep"
    #: The verb succeeded inside a transaction the checkout opened (a wrapped pool's
    #: non-autocommit connection): commit, then give it back.
    COMMIT = "commit"
    #: The verb failed: roll back whatever it left open, then give it back.
    ROLLBACK = "rollback"
    #: Throw the connection away. A session that started read-only (``default_transaction_
    #: read_only`` on the role or database for a while, a standby behind a failover address)
    #: stays so for its whole life: the pool would hand out the same refusing connections
    #: forever, while a fresh one sees the current setting. Also a connection already closed.
    DISCARD = "discard"
    #: Throw it away and raise :class:`PreparedStatementsUnsupported`: a pooler mixed
    #: prepared statements across clients, so this connection's statement cache no longer
    #: matches its server session.
    DISCARD_POOLER = "discard-pooler"


def checkout_end(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any],
                 exc: BaseException | None) -> CheckoutEnd:
    """What the checkout does with ``conn`` once its verb ended with ``exc`` (None: success):
    the one decision of the sync and the async checkouts, which only differ in awaiting
    what it asks for."""
    if exc is None:
        if conn.closed:
            return CheckoutEnd.DISCARD
        idle = conn.pgconn.transaction_status == _IDLE
        return CheckoutEnd.KEEP if idle else CheckoutEnd.COMMIT
    if pooler_error(exc) is not None:
        return CheckoutEnd.DISCARD_POOLER
    if conn.closed or isinstance(exc, pg_errors.ReadOnlySqlTransaction):
        return CheckoutEnd.DISCARD
    return CheckoutEnd.ROLLBACK


#: Sets up a connection the store just opened (pooled or LISTEN).
Setup = Callable[[psycopg.Connection[Any]], None]


def log_server_warning(diag: psycopg.errors.Diagnostic) -> None:
    """A ``WARNING`` that one of the schema's functions raised goes to the store's log: the
    reaper's row set aside (migration 0020: its job id and the error's SQLSTATE, never row
    data). Every other notice is left alone, as before."""
    message = diag.message_primary or ""
    if diag.severity_nonlocalized == "WARNING" and message.startswith("golemq-pg "):
        log.warning("server_warning", message=message, sqlstate=diag.sqlstate)


def session_setup(schema: str, options: ConnectionOptions) -> Setup:
    """What runs on each connection the store opens: the ``session_settings`` statement
    (one round trip), then :func:`ensure_utc`; the schema's warnings are logged
    (:func:`log_server_warning`)."""
    statement = queries_for(schema)["session_settings"]
    params = options.session_params()

    def setup(conn: psycopg.Connection[Any]) -> None:
        conn.execute(statement, params)
        ensure_utc(conn)
        conn.add_notice_handler(log_server_warning)

    return setup


def pool_options(
    *, schema: str, min_size: int, max_size: int, options: ConnectionOptions, dsn: str = ""
) -> dict[str, Any]:
    """The options of the pool a store owns (``ConnectionPool`` and ``AsyncConnectionPool``
    alike), its connections made with ``options.connect_kwargs()``; the caller adds its own
    ``configure`` (sync or async :func:`session_setup`)."""
    return {
        "min_size": min_size,
        "max_size": max_size,
        "kwargs": options.connect_kwargs(dsn),
        "name": "golemq-" + schema,
        "reconnect_timeout": RECONNECT_TIMEOUT,
    }


def open_pool(
    dsn: str, *, schema: str, min_size: int, max_size: int, setup: Setup,
    options: ConnectionOptions,
) -> ConnectionPool[Any]:
    """An open pool of autocommit connections to ``dsn``, each set up by ``setup``."""
    return ConnectionPool(
        dsn,
        **pool_options(schema=schema, min_size=min_size, max_size=max_size, options=options,
                       dsn=dsn),
        configure=setup,
        open=True,
        reconnect_failed=_keep_reconnecting,
    )


# -- end of connection options ----------------------------------------------------------------


class Shared:
    """State shared by a store and the connection-bound stores derived from it."""

    __slots__ = (
        "claimer", "ctx", "dsn", "listen_dsn", "owns_pool", "pool", "pooler", "queries",
        "schema", "setup", "waiters",
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
        # What the verbs written as plans need (shared with AsyncPostgresStore's plans).
        self.ctx = PlanContext(
            self.queries, schema, queue_identity(pool.conninfo, schema), rate_window
        )
        self.claimer = Claimer(self.queries, schema, rate_window)
        #: Where LISTEN connections go instead of the pool's server (connect(listen_dsn=)).
        self.listen_dsn: str | None = None
        #: What each LISTEN connection runs once open (the session settings of an owned
        #: pool's connections; None for a wrapped pool: its connections are the caller's).
        self.setup: Setup | None = None
        self.pooler = PoolerReport(schema)
        # queue.wait(): no thread or connection until the first wait.
        self.waiters = JobWaiters(pool, self.ctx, lambda: self.listen_dsn or self.dsn,
                                  on_error=self.pooler.translate, setup=lambda: self.setup,
                                  on_checkout=self.checked_out)

    def checked_out(self, conn: psycopg.Connection[Any]) -> None:
        """What a connection of the pool gets at each checkout: UTC decoding, on a pool the
        store opened (a wrapped pool's connections are the caller's to set up)."""
        if self.setup is not None:
            ensure_utc(conn)



class PoolCheckout:
    """``with PoolCheckout(shared) as conn``: a connection of the store's pool for one verb,
    given back at the end (see ``StoreConnections._pooled``).

    What ``pool.connection()`` does (commit on success, rollback on error, then ``putconn``)
    without its cost on the hot path of an add: that context manager enters the
    connection's own ``with`` block, whose exit runs ``commit()`` (a lock and a wait) even
    on an idle autocommit connection, and keeps usage statistics. Here the commit runs
    only when a transaction is open (a wrapped pool's non-autocommit connection), as
    ``commit()`` itself would decide; measured at about 15 us less client CPU an add.
    """

    __slots__ = ("_conn", "_shared")

    def __init__(self, shared: Shared) -> None:
        self._shared = shared
        self._conn: psycopg.Connection[Any] | None = None

    def __enter__(self) -> psycopg.Connection[Any]:
        pool = self._shared.pool
        conn: psycopg.Connection[Any] = pool.getconn()
        try:
            self._shared.checked_out(conn)
        except BaseException:
            pool.putconn(conn)
            raise
        self._conn = conn
        return conn

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        conn = self._conn
        assert conn is not None  # noqa: S101 - __enter__ ran
        self._conn = None
        end = checkout_end(conn, exc)
        try:
            if end is CheckoutEnd.COMMIT:
                conn.commit()
            elif end is CheckoutEnd.ROLLBACK:
                try:
                    conn.rollback()
                except Exception as exc2:  # noqa: BLE001 - the verb's error is the one to see
                    log.warning("store_rollback_failed", error=type(exc2).__name__)
            elif end is not CheckoutEnd.KEEP:
                conn.close()
                if end is CheckoutEnd.DISCARD_POOLER and exc is not None:
                    raise self._shared.pooler.translate(exc) from exc
        finally:
            self._shared.pool.putconn(conn)


StateT = TypeVar("StateT")
ConnT = TypeVar("ConnT")


class Bindable(Generic[StateT, ConnT]):
    """How a store clones itself for ``with_connection``, the same for both stores: the
    clone shares the family's state (``_shared``: pool, statements, waiters, ...) and runs
    its verbs on ``_bound``, the caller's connection (None: the store's own pool)."""

    _shared: StateT
    _bound: ConnT | None

    def _bind(self, conn: ConnT) -> Self:
        """A store of this family whose verbs run on ``conn``."""
        bound = object.__new__(type(self))
        bound._shared = self._shared
        bound._bound = conn
        return bound


class StoreConnections(Bindable[Shared, psycopg.Connection[Any]]):
    """The connection side of PostgresStore, shared by its verb groups.

    ``_shared`` is the state of the store's family (pool, schema, statements, claimer);
    ``_bound`` is the caller's connection of a ``with_connection`` store, else None.
    """

    @property
    def _q(self) -> Queries:
        return self._shared.queries

    def _pooled(self) -> AbstractContextManager[psycopg.Connection[Any]]:
        """A connection from the pool; one found read-only is thrown away.

        A prepared-statement error a pooler causes becomes
        :class:`PreparedStatementsUnsupported` (the connection is thrown away too).

        A session that started read-only (``default_transaction_read_only`` set on the role
        or database for a while, or a standby behind a failover address) stays read-only for
        its whole life, so the pool would hand the same refusing connections out forever.
        Closing it makes the pool open a fresh one, which sees the current setting.
        """
        return PoolCheckout(self._shared)

    def _connection(self) -> AbstractContextManager[psycopg.Connection[Any]]:
        """A connection for one statement (autocommit on our pool: its own transaction)."""
        if self._bound is not None:
            return nullcontext(self._bound)
        return PoolCheckout(self._shared)

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
                yield conn  # PoolCheckout commits it at the end

    def _fetch(self, name: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
        with self._connection() as conn:
            return conn.execute(self._q[name], params).fetchall()

    def _write_ids(self, name: str, params: dict[str, Any]) -> set[str]:
        """Run a fenced batch write and return the ids it changed (retried on conflicts;
        ``WriteRefused`` when its data is refused: ``_refusals``)."""
        with data_refusals():
            return retrying(name, lambda: {str(row[0]) for row in self._fetch(name, params)},
                            once=self._bound is not None)

    def _write_id_text(self, name: str, params: dict[str, Any]) -> set[str]:
        """:meth:`_write_ids` for a statement returning the ids it changed as one
        comma-separated text (NULL: none)."""
        with data_refusals():
            return retrying(name, lambda: id_text_set(self._fetch(name, params)),
                            once=self._bound is not None)

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
