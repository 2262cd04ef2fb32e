"""The supervisor: fires timeouts, abandons handlers that ignore their signal, runs timers.

It sleeps until the earliest thing it has to do. Rather than one timer per job (which would
grow with throughput), it scans the running units when it wakes: there are never more than
the worker's slots. A handler thread that starts a job due earlier than the supervisor's
planned wake-up kicks it; while a scan is in progress ``planned`` is 0, so any start
during the scan kicks too and nothing is missed.
"""

from __future__ import annotations

import heapq
import itertools
import math
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog

from golemq_pg.worker.events import TIMEOUT
from golemq_pg.worker.execution import abandon
from golemq_pg.worker.units import RUNNING

if TYPE_CHECKING:
    from golemq_pg.worker.runtime import Runtime

log = structlog.get_logger("golemq_pg.worker.supervisor")

#: Even with nothing to watch, look around this often (cheap; guards against a lost kick).
MAX_SLEEP = 1.0


class Supervisor:
    """Timeouts, abandon deadlines and small timed callbacks, on one thread."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        #: Monotonic time of the next planned wake-up; read without a lock by handlers.
        self.planned = 0.0
        self._cond = threading.Condition()
        self._dirty = False
        self._stopped = False
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the supervisor thread."""
        self._thread = threading.Thread(target=self._loop, name="golemq-supervisor", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """End the thread."""
        with self._cond:
            self._stopped = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout)

    def kick(self) -> None:
        """Re-scan now (a job started with an earlier deadline, or a signal fired)."""
        with self._cond:
            self._dirty = True
            self._cond.notify()

    def call_at(self, when: float, callback: Callable[[], None]) -> None:
        """Run ``callback`` on the supervisor thread at monotonic time ``when``."""
        with self._cond:
            heapq.heappush(self._timers, (when, next(self._seq), callback))
            if when < self.planned:
                self._dirty = True
                self._cond.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                if self._stopped:
                    return
                self._dirty = False
                self.planned = 0.0
            try:
                next_at = min(self._scan(), self._run_timers())
            except BaseException as exc:
                log.exception("supervisor_internal_error", error_type=type(exc).__name__)
                next_at = time.monotonic() + 0.1
            with self._cond:
                if self._stopped:
                    return
                if self._dirty:
                    continue
                now = time.monotonic()
                next_at = min(next_at, now + MAX_SLEEP)
                self.planned = next_at
                self._cond.wait(max(next_at - now, 0.0))

    def _run_timers(self) -> float:
        while True:
            with self._cond:
                if not self._timers:
                    return math.inf
                when = self._timers[0][0]
                if when > time.monotonic():
                    return when
                _, _, callback = heapq.heappop(self._timers)
            try:
                callback()
            except Exception as exc:  # noqa: BLE001 - one timer must not stop the others
                log.warning("timer_failed", error_type=type(exc).__name__)

    def _scan(self) -> float:
        """Fire due timeouts, abandon overdue handlers; return the next deadline."""
        runtime = self.runtime
        grace = runtime.config.abandon_grace
        now = time.monotonic()
        next_at = math.inf
        for unit in runtime.units() + runtime.tx_units():
            if unit.state != RUNNING:
                continue
            if unit.abandon_at is not None and unit.pool.transactional:
                continue  # its thread owns the transaction: never abandoned
            if unit.abandon_at is not None:
                if now >= unit.abandon_at:
                    if abandon(runtime, unit):
                        job = unit.jobs[0]
                        log.warning(
                            "handler_abandoned", worker_id=runtime.owner, job_id=job.id,
                            type=job.type, attempt=job.attempt, reason=unit.signal.reason,
                            jobs=len(unit.jobs),
                        )
                else:
                    next_at = min(next_at, unit.abandon_at)
            elif unit.deadline is not None:
                if now >= unit.deadline:
                    unit.abandon_at = now + grace
                    if unit.signal.fire(TIMEOUT):
                        job = unit.jobs[0]
                        log.info(
                            "job_timed_out", worker_id=runtime.owner, job_id=job.id,
                            type=job.type, attempt=job.attempt,
                            timeout=unit.pool.spec.timeout,
                        )
                        if unit.pool.transactional:
                            # A transactional handler cannot be abandoned: cancel the
                            # statement it may be blocked in instead.
                            unit.pool.interrupt(unit)
                    next_at = min(next_at, unit.abandon_at)
                else:
                    next_at = min(next_at, unit.deadline)
        return next_at

    def fire_all(self, reason: str) -> int:
        """Fire ``reason`` on every running unit and arm its abandon deadline (shutdown)."""
        runtime = self.runtime
        now = time.monotonic()
        fired = 0
        for unit in runtime.units() + runtime.tx_units():
            if unit.state == RUNNING and unit.abandon_at is None:
                unit.abandon_at = now + runtime.config.abandon_grace
                if unit.signal.fire(reason):
                    fired += 1
                    if unit.pool.transactional:
                        unit.pool.interrupt(unit)
        self.kick()
        return fired


__all__ = ["Supervisor"]
