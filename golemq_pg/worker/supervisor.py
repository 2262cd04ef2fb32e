"""The supervisor: takes units away from their handlers, and abandons handlers that ignore it.

* **Timeouts**: a running unit past its deadline gets its signal fired (reason
  ``"timeout"``) and an abandon deadline ``abandon_grace`` later.
* **Lease deadlines**: a running unit past its local lease deadline (no renewal came back
  in time: the renewer is blocked on a dead connection, e.g. a network partition) is
  aborted with reason ``"lease-lost"``, without waiting for the renewal to fail; another
  worker may take the job as soon as the database sees the lease expired.
* **Aborts** (:meth:`Supervisor.abort`): the single path by which a unit is taken away for
  cancellation or lease loss. The unit is settled (so nothing its handler returns is
  written), its signal fires, and it is abandoned if its handler does not return within
  ``abandon_grace``. The listener, the renewer, the reconcile pass and in-process cancels
  all come here.
* **Abandon**: a handler still running past its abandon deadline is written off; its slot is
  replaced so the type keeps its concurrency, and the unit's outcome is decided now.
* **Slow transactions**: a transactional handler's transaction still open past its
  ``transaction_warning`` is logged (``transaction_slow``, no payload) and reported to
  observers' ``on_error`` as a ``"transaction-slow"`` WorkerError, once per attempt.
* **Timers**: small timed callbacks (deferred progress writes) run on this thread.

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
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import structlog

from golemq_pg.worker.backoff import JobTimeout
from golemq_pg.worker.events import CANCELLED, LEASE_LOST, TIMEOUT
from golemq_pg.worker.runtime import LOG_IDS
from golemq_pg.worker.service import Service
from golemq_pg.worker.units import ABANDONED, BUFFERED, RUNNING, Unit

if TYPE_CHECKING:
    from golemq_pg.worker.outcomes import Outcomes
    from golemq_pg.worker.runtime import Runtime

log = structlog.get_logger("golemq_pg.worker.supervisor")
#: Aborts log under the package's logger, as they did when the runtime aborted units.
_abort_log = structlog.get_logger("golemq_pg.worker")

#: Takes units away from their handlers with a reason (:meth:`Supervisor.abort`); returns
#: how many were aborted.
Abort = Callable[[Iterable[Unit], str], int]
#: The same for the held units containing any of the given job ids
#: (:meth:`Supervisor.abort_ids`).
AbortIds = Callable[[Iterable[str], str], int]

#: Even with nothing to watch, look around this often (cheap; guards against a lost kick).
MAX_SLEEP = 1.0


class Supervisor(Service):
    """Timeouts, aborts, abandon deadlines and small timed callbacks, on one thread.

    Its steps return the monotonic time of the next thing to do, which its pause waits for
    on a condition (a kick or a sooner timer ends the wait).
    """

    def __init__(self, runtime: Runtime, outcomes: Outcomes) -> None:
        super().__init__("golemq-supervisor", runtime.owner)
        self.runtime = runtime
        self.outcomes = outcomes
        #: Monotonic time of the next planned wake-up; read without a lock by handlers.
        self.planned = 0.0
        self._cond = threading.Condition()
        self._dirty = False
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()

    # -- the loop (hooks of Service) ----------------------------------------------------------
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

    def step(self) -> float:
        """Scan the running units and run due timers; return when to look again."""
        with self._cond:
            self._dirty = False
            self.planned = 0.0
        return min(self._scan(), self._run_timers())

    def pause(self, wait: float | None) -> None:
        """Sleep until monotonic time ``wait`` (at most :data:`MAX_SLEEP`), a kick or a stop."""
        next_at = math.inf if wait is None else wait
        with self._cond:
            if self.stop_event.is_set() or self._dirty:
                return
            now = time.monotonic()
            next_at = min(next_at, now + MAX_SLEEP)
            self.planned = next_at
            self._cond.wait(max(next_at - now, 0.0))

    def failed(self, exc: BaseException, failures: int) -> float:
        """A scan failed (a bug): log it and look again shortly."""
        del failures
        log.exception("supervisor_internal_error", error_type=type(exc).__name__)
        return time.monotonic() + 0.1

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
        """Fire due timeouts, abandon overdue handlers, abort units whose lease ran out;
        return the next deadline."""
        runtime = self.runtime
        grace = runtime.config.abandon_grace
        now = time.monotonic()
        next_at = math.inf
        lost: list[Unit] = []
        renewed = runtime.units()
        leased = len(renewed)  # transactional units (after them) hold a row lock, no lease
        for index, unit in enumerate(renewed + runtime.tx_units()):
            if unit.state != RUNNING:
                continue
            if unit.warn_at is not None:
                if now >= unit.warn_at:
                    self._slow_transaction(unit, now)
                else:
                    next_at = min(next_at, unit.warn_at)
            if index < leased and unit.abandon_at is None and not unit.settled:
                if now >= unit.lease_deadline:
                    lost.append(unit)
                    continue
                next_at = min(next_at, unit.lease_deadline)
            pool = unit.pool
            if unit.abandon_at is not None and not pool.abandonable:
                continue  # its thread owns the transaction: never abandoned
            if unit.abandon_at is not None:
                if now >= unit.abandon_at:
                    if self.abandon(unit):
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
                            timeout=pool.spec.timeout,
                        )
                        # A handler that cannot be abandoned (transactional) gets the
                        # statement it may be blocked in cancelled instead; other pools
                        # have nothing to interrupt.
                        pool.interrupt(unit)
                    next_at = min(next_at, unit.abandon_at)
                else:
                    next_at = min(next_at, unit.deadline)
        if lost:
            self.abort(lost, LEASE_LOST)
            next_at = min(next_at, now + grace)
        return next_at

    def _slow_transaction(self, unit: Unit, now: float) -> None:
        """Report ``unit``'s transaction, open past its ``transaction_warning`` (once)."""
        warning = unit.pool.spec.transaction_warning
        opened = unit.warn_at - warning if unit.warn_at is not None and warning else now
        unit.warn_at = None
        job = unit.jobs[0]
        runtime = self.runtime
        log.warning("transaction_slow", worker_id=runtime.owner, job_id=job.id, type=job.type,
                    attempt=job.attempt, open_for=round(now - opened, 3),
                    transaction_warning=warning)
        runtime.hub.errors.report(
            "transaction-slow",
            f"the transaction of job {job.id} ({job.type!r}, attempt {job.attempt}) has been "
            f"open for over {warning:g}s (transaction_warning)",
        )

    # -- taking units away ------------------------------------------------------------------
    def abort(self, units: Iterable[Unit], reason: str, *, error: str | None = None) -> int:
        """Take ``units`` away from their handlers: settle, fire the signal, notify observers.

        Nothing is written for them: the row is gone (cancelled) or belongs to someone else
        (lease lost). Returns how many units were aborted (already settled ones are skipped).
        """
        runtime = self.runtime
        aborted: list[Unit] = []
        now = time.monotonic()
        kick = False
        with runtime.lock:
            # The signal fires under the lock: whoever settles a unit has fired its signal
            # before anyone can see it settled, so a synchronous cancel that lost the race to
            # the NOTIFY path still returns after the handler was signalled.
            for unit in units:
                if unit.settled:
                    continue
                unit.settled = True
                unit.signal.fire(reason)
                if unit.state == RUNNING:
                    unit.abandon_at = now + runtime.config.abandon_grace
                    kick = True
                aborted.append(unit)
        if not aborted:
            return 0
        if kick:
            self.kick()
        for unit in aborted:
            if unit.state == RUNNING:
                # A transactional handler's transaction must end for the cancel to land;
                # other pools have nothing to interrupt.
                unit.pool.interrupt(unit)
        outcome = "cancelled" if reason == CANCELLED else "lease-lost"
        jobs = [job for unit in aborted for job in unit.jobs]
        event = _abort_log.info if outcome == "cancelled" else _abort_log.warning
        event(
            "jobs_aborted" if outcome == "cancelled" else "lease_lost",
            worker_id=runtime.owner,
            reason=reason,
            count=len(jobs),
            job_ids=[job.id for job in jobs[:LOG_IDS]],
            types=sorted({job.type for job in jobs}),
            attempts=[job.attempt for job in jobs[:LOG_IDS]],
        )
        hub = runtime.hub
        if hub:
            for job in jobs:
                hub.emit(job.id, job.type, job.scope, outcome, job.attempt, error=error)
        # A buffered unit frees its capacity when its handler thread skips it; wake the
        # claim loop so it can refill sooner.
        if any(unit.state == BUFFERED for unit in aborted):
            runtime.wake_claimer()
        return len(aborted)

    def abort_ids(self, job_ids: Iterable[str], reason: str, *, error: str | None = None) -> int:
        """Abort every held unit (transactional ones included) containing one of ``job_ids``."""
        wanted = {str(job_id) for job_id in job_ids}
        if not wanted:
            return 0
        runtime = self.runtime
        units = [u for u in runtime.held_units() if u.holds(wanted)]
        units += [u for u in runtime.tx_units() if not u.settled and u.holds(wanted)]
        return self.abort(units, reason, error=error)

    def abandon(self, unit: Unit) -> bool:
        """Write off the thread running ``unit`` (it ignored its signal); True when done.

        The slot is replaced so the type keeps its concurrency, and the unit's outcome is
        decided now (a timed-out attempt fails and is retried; a shutdown-aborted one is
        released). The stuck thread exits whenever its handler returns; its result is
        dropped.
        """
        runtime = self.runtime
        with runtime.lock:
            if unit.state != RUNNING:
                return False
            unit.state = ABANDONED
            won = not unit.settled
            unit.settled = True
        unit.finished_at = time.monotonic()
        pool = unit.pool
        slot = unit.slot
        if won:
            self.outcomes.decide(
                unit, JobTimeout("handler ignored its signal past abandon_grace")
            )
        pool.active.pop(unit.key, None)
        if slot is not None:
            pool.write_off(slot)
        runtime.wake_claimer()
        return True

    def fire_all(self, reason: str) -> int:
        """Fire ``reason`` on every running unit and arm its abandon deadline (shutdown)."""
        runtime = self.runtime
        return self.fire(runtime.units() + runtime.tx_units(), reason)

    def fire(self, units: Iterable[Unit], reason: str) -> int:
        """Fire ``reason`` on those of ``units`` that run and arm their abandon deadline
        (shutdown; ``Worker.remove_handler`` past its timeout)."""
        runtime = self.runtime
        now = time.monotonic()
        fired = 0
        for unit in units:
            if unit.state == RUNNING and unit.abandon_at is None:
                unit.abandon_at = now + runtime.config.abandon_grace
                if unit.signal.fire(reason):
                    fired += 1
                    unit.pool.interrupt(unit)  # a no-op unless the pool is transactional
        self.kick()
        return fired


__all__ = ["Abort", "AbortIds", "Supervisor"]
