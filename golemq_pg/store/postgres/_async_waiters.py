"""``AsyncQueue.wait`` on PostgreSQL: every task waiting on one store (one event loop: an
``AsyncConnectionPool`` belongs to the loop it was opened in) shares one LISTEN connection.

The same design as ``_waiters`` (read it first), with tasks for threads: a waiter registers
with the shared :class:`~golemq_pg.store.postgres._waiters.WaiterRegistry`, looks at its job
once (one pooled statement, the connection returned at once), then awaits its own
``asyncio.Event`` holding no connection. One listener task, started by the first waiter that
has to sleep and gone ``LINGER`` seconds after the last one left, owns a dedicated
``AsyncConnection`` outside the pool that LISTENs on the schema's ``done`` and ``cancel``
channels (the completion hint every completing statement already sends). A hint is checked
with one statement (the ``job_get_many`` plan); every waited job is checked again every
``POLL_INTERVAL`` seconds, after each reconnect and when the listener starts, so a lost hint
only delays a wake-up. An error on the listening connection closes it; the task reconnects
after ``RETRY_SECONDS`` and checks everything again.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar

import psycopg
import structlog
from psycopg_pool import AsyncConnectionPool

from golemq_pg._types import JobSummary
from golemq_pg.store.port import Notification, wait_missing, wait_timed_out
from golemq_pg.store.postgres import _rows as rows
from golemq_pg.store.postgres import _waiters as shared
from golemq_pg.store.postgres._listener import Kind, parse_notification
from golemq_pg.store.postgres._plans import PlanContext
from golemq_pg.store.postgres._producer import job_get_many
from golemq_pg.store.postgres._run_async import run_plan_async
from golemq_pg.store.postgres._sql import listen_statement

log = structlog.get_logger("golemq_pg.store.waiters")

T = TypeVar("T")

#: After a first hint, how long the listener gathers the others of a burst (seconds).
_BURST_SECONDS = 0.002


class AsyncJobWaiters(shared.WaiterRegistry):
    """The waiting tasks of one ``AsyncPostgresStore`` and their listener task."""

    def __init__(self, pool: AsyncConnectionPool[Any], ctx: PlanContext) -> None:
        super().__init__(asyncio.Event)
        self._pool = pool
        self._ctx = ctx
        self._task: asyncio.Task[None] | None = None
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._failures = 0

    async def wait(self, job_id: str, timeout: float | None) -> JobSummary:
        """Wait until ``job_id`` is terminal and return its summary (see ``_waiters``)."""
        number = rows.int_id(job_id)
        if number is None:
            raise wait_missing(job_id)
        waiter = self._register(number)
        try:
            finished = shared.first_look(job_id, await self.fetch([number]))
            if finished is not None:
                return finished
            waiter.sleeping = True
            if self._task is None and not self._closed:
                self._task = asyncio.get_running_loop().create_task(
                    self._serve(), name="golemq-async-waiters"
                )
            try:
                await asyncio.wait_for(waiter.event.wait(), timeout)
            except TimeoutError:
                raise wait_timed_out(job_id, timeout or 0.0) from None
            return shared.outcome(job_id, waiter)
        finally:
            self._unregister(waiter)

    async def fetch(self, job_ids: Sequence[int]) -> list[JobSummary]:
        """The summaries of those of ``job_ids`` that exist: one pooled statement."""
        return await run_plan_async(self._pool.connection, job_get_many(self._ctx, job_ids), True)

    @property
    def listening(self) -> bool:
        """Whether the listener task runs (for tests and diagnostics)."""
        return self._task is not None

    @property
    def connection(self) -> psycopg.AsyncConnection[Any] | None:
        """The current LISTEN connection, if any (for tests and diagnostics)."""
        return self._conn

    async def close(self) -> None:
        """Wake every waiter (``RuntimeError``), stop the listener task and close its
        connection; later waits raise ``RuntimeError``. Idempotent."""
        with self._lock:
            self._close_waiters()
        task, self._task = self._task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    # -- the listener task -----------------------------------------------------------------
    async def _serve(self) -> None:
        me = asyncio.current_task()
        try:
            while not self._closed:
                try:
                    await self._listen()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - reconnect, and look at everything
                    self._failures += 1
                    if self._failures == 1 or self._failures % 20 == 0:
                        log.warning(
                            "async_wait_listener_failed",
                            error=type(exc).__name__,
                            failures=self._failures,
                        )
                    await asyncio.sleep(shared.RETRY_SECONDS)
                    if not self._waiting:
                        return
                else:
                    return  # nobody waited for LINGER seconds
        finally:
            if self._task is me:
                self._task = None

    async def _listen(self) -> None:
        async with self._pool.connection() as pooled:
            cancel = await (await pooled.execute(self._ctx.queries["channel_names"])).fetchall()
            done = await (await pooled.execute(self._ctx.queries["channel_done"])).fetchall()
        kinds: dict[str, Kind] = {done[0][0]: "done", cancel[0][1]: "cancel"}
        pool = self._pool
        conninfo = await _resolved(pool.conninfo() if callable(pool.conninfo) else pool.conninfo)
        given = await _resolved(pool.kwargs() if callable(pool.kwargs) else pool.kwargs)
        kwargs: dict[str, Any] = dict(given or {})
        kwargs["autocommit"] = True
        conn = await psycopg.AsyncConnection.connect(str(conninfo), **kwargs)
        self._conn = conn
        try:
            for channel in kinds:
                await conn.execute(listen_statement(channel))
            await self._check(None)  # what finished before the LISTEN was in place
            self._failures = 0
            await self._loop(conn, kinds)
        finally:
            self._conn = None
            with contextlib.suppress(psycopg.Error):
                await conn.close()

    async def _loop(self, conn: psycopg.AsyncConnection[Any], kinds: dict[str, Kind]) -> None:
        next_poll = time.monotonic() + shared.POLL_INTERVAL
        idle_since: float | None = None
        while not self._closed:
            now = time.monotonic()
            if self._waiting:
                idle_since = None
            elif idle_since is None:
                idle_since = now
            elif now - idle_since >= shared.LINGER:
                # Said at once (no await before it): a waiter arriving while this task
                # closes its connection starts a new listener instead of counting on it.
                if self._task is asyncio.current_task():
                    self._task = None
                return
            window = next_poll - now if idle_since is None else shared.POLL_INTERVAL
            notes = await _receive(conn, kinds, max(window, 0.001), 1)
            if notes:
                notes += await _receive(conn, kinds, _BURST_SECONDS, shared.BURST)
            full, named = shared.hints_of(notes)
            if full or time.monotonic() >= next_poll:
                await self._check(None)
                next_poll = time.monotonic() + shared.POLL_INTERVAL
            elif named:
                await self._check(named)

    async def _check(self, job_ids: set[int] | None) -> None:
        """Wake the waiters of the terminal and the vanished ones among the waited jobs
        (``None``: all of them); one statement."""
        seq, wanted = self._wanted(job_ids)
        if wanted:
            self._wake(wanted, {int(s.id): s for s in await self.fetch(wanted)}, seq)


async def _receive(
    conn: psycopg.AsyncConnection[Any], kinds: dict[str, Kind], timeout: float, most: int
) -> list[Notification]:
    """The notifications that arrive within ``timeout`` seconds, at most ``most`` of them."""
    return [
        parse_notification(kinds.get(note.channel, "done"), note.payload)
        async for note in conn.notifies(timeout=timeout, stop_after=most)
    ]


async def _resolved(value: T | Awaitable[T]) -> T:
    """A pool's conninfo / kwargs: a value, or what its callable's coroutine returns."""
    if inspect.isawaitable(value):
        return await value
    return value
