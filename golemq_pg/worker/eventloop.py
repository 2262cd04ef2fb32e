"""The worker's event loop thread, where ``async def`` handlers run as tasks.

A worker starts it only when an async handler is registered, and only one, however many
async types it serves (each type's :class:`~golemq_pg.worker.taskpool.TaskPool` creates its
tasks on it). Nothing of the worker's own runs on the loop except the steps of an attempt
(:class:`~golemq_pg.worker.execution.Executor`'s ``begin`` / ``ended`` / ``settle``: a
brief lock, a deque append, no I/O). What would block, the store writes behind
``job.progress()``, goes to one helper thread of this service (:meth:`EventLoop.offload`),
created on first use. A handler that blocks the loop itself is reported
(``event_loop_blocked``, see :meth:`EventLoop.watch`).

It is a :class:`~golemq_pg.worker.service.Service` whose one long step is
``loop.run_forever()``; ``stop`` stops the loop, cancels the tasks still on it (handlers
already written off: every attempt's outcome was decided before shutdown gets here), gives
them a moment, and closes the loop.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import structlog

from golemq_pg.worker.service import Service

log = structlog.get_logger("golemq_pg.worker.eventloop")

#: How long the tasks still on the loop at stop (written-off handlers) get to end once
#: cancelled again, before the loop is left to the garbage collector.
CLOSE_WAIT = 0.5
#: A loop that has run nothing for this long (seconds) is reported as blocked: a handler
#: made a blocking call on it (``event_loop_blocked``, at most every :data:`REPORT_EVERY`).
BLOCKED_AFTER = 1.0
REPORT_EVERY = 10.0
#: How often the loop records that it is alive, and the watch looks.
_BEAT = 0.25
_LOOK = 0.5

#: Runs a callback at a monotonic time on a timer thread (the supervisor's ``call_at``).
Schedule = Callable[[float, Callable[[], None]], None]

#: How long ``stop`` waits for the loop thread. Past it, a handler is blocking the loop
#: (a sync call in an ``async def``): its attempts were written off already, so the stop
#: goes on, as it does for a stuck handler thread.
STOP_JOIN = CLOSE_WAIT + 1.5


class EventLoop(Service):
    """One thread running one asyncio event loop for the worker's async handlers."""

    def __init__(self, owner: str) -> None:
        super().__init__("golemq-event-loop", owner)
        self.loop = asyncio.new_event_loop()
        self._helper: ThreadPoolExecutor | None = None
        self._helper_lock = threading.Lock()
        #: Monotonic time the loop last ran its beat (see :meth:`watch`).
        self.beat_at = time.monotonic()
        self._reported_at = -REPORT_EVERY
        self._schedule: Schedule | None = None

    # -- what other threads call ----------------------------------------------------------
    def call_soon(self, callback: Callable[..., object], *args: Any) -> bool:
        """Run ``callback(*args)`` on the loop soon (from any thread); False once closed."""
        try:
            self.loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:  # the loop is closed: the worker has stopped
            return False
        return True

    def offload(self, fn: Callable[..., object], *args: Any) -> Future[Any]:
        """Run ``fn(*args)`` on the helper thread, in call order (the loop must not block).

        One thread, so two calls for one job never overtake each other: the last progress
        value handed over is the last one written. Raises ``RuntimeError`` once stopped.
        """
        helper = self._helper
        if helper is None:
            with self._helper_lock:
                helper = self._helper
                if helper is None:
                    helper = self._helper = ThreadPoolExecutor(
                        max_workers=1, thread_name_prefix="golemq-async-helper"
                    )
        return helper.submit(fn, *args)

    def watch(self, schedule: Schedule) -> None:
        """Warn when the loop is blocked: a beat runs on the loop, and a timer on
        ``schedule`` (another thread) checks that it keeps running. Call before ``start``."""
        self._schedule = schedule
        self.call_soon(self._beat)
        schedule(time.monotonic() + _LOOK, self._look)

    def _beat(self) -> None:
        self.beat_at = time.monotonic()
        if not self.stop_event.is_set():
            self.loop.call_later(_BEAT, self._beat)

    def _look(self) -> None:
        now = time.monotonic()
        late = now - self.beat_at
        if late > BLOCKED_AFTER and now - self._reported_at >= REPORT_EVERY:
            self._reported_at = now
            log.warning("event_loop_blocked", worker_id=self.owner, seconds=round(late, 1),
                        hint="an async handler made a blocking call; use asyncio.to_thread")
        schedule = self._schedule
        if schedule is not None and not self.stop_event.is_set():
            schedule(now + _LOOK, self._look)

    # -- the loop (hooks of Service) ----------------------------------------------------------
    def step(self) -> None:
        """Run the loop until :meth:`kick` stops it; on the way out, close it."""
        loop = self.loop
        asyncio.set_event_loop(loop)
        loop.run_forever()
        if self.stop_event.is_set():
            self._close()

    def pause(self, wait: float | None) -> None:
        """Nothing to wait for between two runs of the loop."""
        del wait

    def kick(self) -> None:
        """Stop ``run_forever`` (``Service.stop`` calls this after setting the stop event)."""
        self.call_soon(self.loop.stop)

    def stop(self, timeout: float | None = None) -> None:
        """Stop and close the loop, then let the helper thread finish what it was given."""
        super().stop(STOP_JOIN if timeout is None else min(timeout, STOP_JOIN))
        helper = self._helper
        if helper is not None:
            helper.shutdown(wait=False)

    def _close(self) -> None:
        loop = self.loop
        tasks = asyncio.all_tasks(loop)
        for task in tasks:
            task.cancel()
        if tasks:
            loop.run_until_complete(asyncio.wait(tasks, timeout=CLOSE_WAIT))
            left = [task for task in tasks if not task.done()]
            if left:
                # Handlers that ignore cancellation; their attempts were written off long
                # ago. Closing the loop under them would raise in their next await.
                log.warning("async_handlers_left_running", worker_id=self.owner,
                            count=len(left))
                return
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


__all__ = ["BLOCKED_AFTER", "CLOSE_WAIT", "REPORT_EVERY", "STOP_JOIN", "EventLoop", "Schedule"]
