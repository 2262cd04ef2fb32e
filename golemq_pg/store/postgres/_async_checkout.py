"""How an ``AsyncPostgresStore`` verb gets its connection and gives it back.

One checkout (:class:`AsyncCheckout`, the ``async with`` of a verb) over two sources of
connections, and one decision about a connection's end (``checkout_end``, shared with the
sync store):

* :class:`PooledConnections`: a pooled connection for each verb (a pool the application
  passed in: its other code draws from it too).
* :class:`HeldConnection`: for a pool the store opened itself, consecutive verbs share one
  connection instead of a pool checkout and return each. An ``AsyncQueue.add`` is one
  statement; the checkout around it (the pool's lock, its deque, the state checks on
  return) cost 7-18 us of client CPU in a ~130 us add (2,000-add A/B rounds on the 2-core
  machine), the largest of our layers above the driver. It holds while:

  - the verbs run one at a time. A verb that starts while the held connection is busy takes
    a pooled one as before, and the held one goes back to the pool when its verb ends, so
    concurrent verbs never wait for a connection a hold keeps from them;
  - each verb ends cleanly. An error of any kind (a cancelled task too) or a connection
    ``checkout_end`` throws away (closed, read-only, a pooler's prepared-statement clash)
    ends the hold, and the connection goes through the pool's own return path;
  - it is in use: :data:`HOLD_IDLE` seconds after its last verb it goes back to the pool,
    whose upkeep (``max_lifetime``, ``max_idle``, reconnection) then applies again. Code
    that borrows from ``store.pool`` directly waits at most that long for it;
  - it is young: a hold ends at the first verb end :data:`HOLD_MAX` seconds after it
    began, so a steady stream of adds still passes its connection through the pool's
    lifetime checks now and then.
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any, Protocol

import psycopg
import structlog
from psycopg_pool import AsyncConnectionPool

from golemq_pg.store.postgres._connections import (
    CheckoutEnd,
    PoolerReport,
    checkout_end,
    ensure_utc,
)

log = structlog.get_logger("golemq_pg.store.postgres")

AsyncConnection = psycopg.AsyncConnection[Any]

#: Seconds an idle held connection stays out of the pool after its last verb.
HOLD_IDLE = 0.05
#: Seconds after which a hold ends at its next verb's end, however busy.
HOLD_MAX = 30.0


async def end_checkout(
    conn: AsyncConnection, exc: BaseException | None, pooler: PoolerReport
) -> CheckoutEnd:
    """Do what ``checkout_end`` decides for ``conn`` after a verb that ended with ``exc``
    (commit, roll back, close) and return the decision; the caller gives the connection
    back (or keeps it). A pooler's prepared-statement error is raised as
    :class:`PreparedStatementsUnsupported`."""
    end = checkout_end(conn, exc)
    if end is CheckoutEnd.COMMIT:
        await conn.commit()
    elif end is CheckoutEnd.ROLLBACK:
        try:
            await conn.rollback()
        except Exception as exc2:  # noqa: BLE001 - the verb's error is the one to see
            log.warning("store_rollback_failed", error=type(exc2).__name__)
    elif end is not CheckoutEnd.KEEP:
        await conn.close()
        if end is CheckoutEnd.DISCARD_POOLER and exc is not None:
            raise pooler.translate(exc) from exc
    return end


class ConnectionSource(Protocol):
    """Where an :class:`AsyncCheckout` takes its connection from and gives it back to."""

    async def acquire(self) -> tuple[AsyncConnection, bool]:
        """A connection for one verb, and whether it is a held one (given to :meth:`release`)."""

    async def release(self, conn: AsyncConnection, is_held: bool, exc: BaseException | None
                      ) -> None:
        """End the verb's use of ``conn``, which ended with ``exc``."""


class PooledConnections:
    """A pool's connection for each verb (a pool the application passed in: its other code
    draws from it too). What ``pool.connection()`` does (commit on success, rollback on
    error, ``putconn``) without entering the connection's own ``async with`` block, whose
    exit awaits ``commit()`` (its lock and a wait) even on an idle autocommit connection:
    the sync store's ``PoolCheckout``, awaited."""

    __slots__ = ("_pool", "_pooler")

    def __init__(self, pool: AsyncConnectionPool[Any], pooler: PoolerReport) -> None:
        self._pool = pool
        self._pooler = pooler

    async def acquire(self) -> tuple[AsyncConnection, bool]:
        """A connection of the pool (never a held one)."""
        conn: AsyncConnection = await self._pool.getconn()
        return conn, False

    async def release(self, conn: AsyncConnection, is_held: bool, exc: BaseException | None
                      ) -> None:
        """Commit, roll back or close ``conn`` as ``checkout_end`` decides; give it back."""
        try:
            await end_checkout(conn, exc, self._pooler)
        finally:
            await self._pool.putconn(conn)


class AsyncCheckout:
    """``async with``: a connection of ``source`` for one verb, given back at the end."""

    __slots__ = ("_conn", "_is_held", "_source")

    def __init__(self, source: ConnectionSource) -> None:
        self._source = source
        self._conn: AsyncConnection | None = None
        self._is_held = False

    async def __aenter__(self) -> AsyncConnection:
        self._conn, self._is_held = await self._source.acquire()
        return self._conn

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        conn = self._conn
        assert conn is not None  # noqa: S101 - __aenter__ ran
        self._conn = None
        await self._source.release(conn, self._is_held, exc)


class HeldConnection:
    """The connections of a store that owns its pool: one held across consecutive verbs
    (see the module docstring); a :class:`ConnectionSource` of :class:`AsyncCheckout`."""

    __slots__ = ("_busy", "_closed", "_held", "_held_since", "_last_used", "_pool",
                 "_pooler", "_returns", "_running", "_timer", "_timer_loop")

    def __init__(self, pool: AsyncConnectionPool[Any], pooler: PoolerReport) -> None:
        self._pool = pool
        self._pooler = pooler
        self._held: AsyncConnection | None = None
        self._busy = False  # a verb is running on the held connection
        self._running = 0  # verbs between their checkout and its end
        self._last_used = 0.0
        self._held_since = 0.0
        self._closed = False
        self._timer: asyncio.TimerHandle | None = None
        self._timer_loop: asyncio.AbstractEventLoop | None = None
        self._returns: set[asyncio.Task[None]] = set()

    @property
    def held(self) -> bool:
        """Whether a connection is held now (for tests and diagnostics)."""
        return self._held is not None

    async def acquire(self) -> tuple[AsyncConnection, bool]:
        """A connection for a verb, and whether it is the held one."""
        self._running += 1
        held = self._held
        if held is not None and not self._busy and not held.closed:
            self._busy = True
            # Another client's SET TimeZone on a pooler's shared server session: timestamps
            # still decode as UTC (one libpq lookup), as at each pool checkout.
            ensure_utc(held)
            return held, True
        try:
            conn: AsyncConnection = await self._pool.getconn()
        except BaseException:
            self._running -= 1
            raise
        ensure_utc(conn)
        if self._running == 1 and not self._closed:
            if self._held is not None:  # closed under it: the pool throws it away
                self._release_held()
            self._held = conn
            self._held_since = asyncio.get_running_loop().time()
            self._busy = True
            return conn, True
        return conn, False

    async def release(self, conn: AsyncConnection, is_held: bool, exc: BaseException | None
                      ) -> None:
        """End a verb's use of ``conn``: keep it held for the next verb when it was the held
        one, its verb was alone and clean; otherwise give it back to the pool."""
        self._running -= 1
        keep = False
        try:
            end = await end_checkout(conn, exc, self._pooler)
            if is_held and exc is None and not self._closed and self._running == 0 \
                    and end in (CheckoutEnd.KEEP, CheckoutEnd.COMMIT):
                now = asyncio.get_running_loop().time()
                keep = now - self._held_since < HOLD_MAX
                self._last_used = now
        finally:
            if is_held:
                self._busy = False
                if keep:
                    self._arm()
                else:
                    self._held = None
            if not keep:
                await self._pool.putconn(conn)

    async def close(self) -> None:
        """Give the held connection back (before the pool closes); no verb holds one after."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        held, self._held = self._held, None
        if held is not None and not self._busy:
            await self._pool.putconn(held)
        if self._returns:
            await asyncio.gather(*self._returns, return_exceptions=True)

    # -- the idle timer: one per hold, re-armed from the last use ----------------------------
    def _arm(self) -> None:
        loop = asyncio.get_running_loop()
        if self._timer is not None and self._timer_loop is loop:
            return  # armed: it looks at _last_used when it fires
        self._timer_loop = loop
        self._timer = loop.call_later(HOLD_IDLE, self._idle_check)

    def _idle_check(self) -> None:
        self._timer = None
        held = self._held
        if held is None:
            return
        loop = asyncio.get_running_loop()
        left = self._last_used + HOLD_IDLE - loop.time()
        if self._busy or left > 0:
            self._timer = loop.call_later(max(left, HOLD_IDLE / 10), self._idle_check)
            return
        self._release_held()

    def _release_held(self) -> None:
        """Give the (idle) held connection back to the pool, in a task of its own."""
        held, self._held = self._held, None
        if held is None:
            return
        task = asyncio.get_running_loop().create_task(self._pool.putconn(held))
        self._returns.add(task)
        task.add_done_callback(self._returns.discard)
