"""Running one unit on a handler thread, up to the point its outcome is decided.

:meth:`Executor.execute` is the hot path of every buffered job: it marks the unit running
(unless an abort settled it while it waited in the buffer), arms its timeout with the
supervisor, builds the handler's event(s), calls the handler, writes the last progress
value, and settles the unit, handing the result to :class:`~golemq_pg.worker.outcomes.
Outcomes` unless someone else (an abort, the supervisor abandoning the handler) settled it
first, in which case the result is dropped.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Protocol

from golemq_pg.worker.backoff import HandlerReturnedFalse, encoded_result
from golemq_pg.worker.events import BatchEvent, JobEvent
from golemq_pg.worker.units import ABANDONED, FINISHED, RUNNING, Slot, Unit, UnitPool

if TYPE_CHECKING:
    from golemq_pg.worker.outcomes import Outcomes
    from golemq_pg.worker.progress import ProgressReporter
    from golemq_pg.worker.runtime import Runtime
    from golemq_pg.worker.supervisor import Supervisor

monotonic = time.monotonic


class SlotPool(UnitPool, Protocol):
    """What :meth:`Executor.execute` needs from the buffered pool whose slot runs a unit."""

    def record_duration(self, seconds: float) -> None:
        """Fold one handler duration into the pool's running average."""


class Executor:
    """Runs units on the calling handler thread (shared by every buffered pool)."""

    def __init__(
        self,
        runtime: Runtime,
        outcomes: Outcomes,
        supervisor: Supervisor,
        reporter: ProgressReporter,
    ) -> None:
        self.lock = runtime.lock
        self.hub = runtime.hub
        self.supervisor = supervisor
        self.reporter = reporter
        # The bound method, looked up once rather than per job.
        self._decide = outcomes.decide

    def execute(self, pool: SlotPool, slot: Slot, unit: Unit) -> None:
        """Run ``unit``'s handler on this thread and hand its outcome to the completer."""
        lock = self.lock
        with lock:
            if unit.settled:  # aborted while buffered: nothing to run, nothing to write
                unit.state = FINISHED
                skipped = True
            else:
                unit.state = RUNNING
                unit.slot = slot
                skipped = False
        if skipped:
            pool.active.pop(unit.key, None)
            return
        spec = pool.spec
        unit.started_at = started = monotonic()
        timeout = spec.timeout
        if timeout is not None:
            unit.deadline = deadline = started + timeout
            supervisor = self.supervisor
            if deadline < supervisor.planned:
                supervisor.kick()
        reporter = self.reporter
        events = [_job_event(reporter, job, unit) for job in unit.jobs]
        hub = self.hub
        if hub:
            buffered = started - unit.claimed_at if unit.claimed_at else 0.0
            for job in unit.jobs:
                hub.emit(job.id, job.type, job.scope, "started", job.attempt,
                         wait=job.waited + buffered)
        argument: Any
        if spec.grouped:
            argument = BatchEvent(
                type=pool.type, scope=unit.jobs[0].scope, jobs=events, attempt=unit.attempt,
                signal=unit.signal,
            )
        else:
            argument = events[0]
        error: BaseException | None
        try:
            result = spec.fn(argument)
            if result is None or result is True:
                error = None
            elif result is False:
                error = HandlerReturnedFalse("handler returned False")
            elif spec.grouped:  # a BatchEvent's return value is not kept
                error = None
            else:  # encoded here, on the handler thread, not on the completer's
                found = encoded_result(result)
                if isinstance(found, bytes):
                    unit.result = found
                    error = None
                else:
                    error = found
        except BaseException as exc:  # noqa: BLE001 - every handler failure is an outcome
            error = exc
        unit.finished_at = finished = monotonic()
        pool.record_duration(finished - started)
        for event in events:
            if event._progress_lock is not None:
                reporter.finish(event)
        with lock:
            if unit.state == ABANDONED:  # written off by the supervisor; its outcome is decided
                return
            unit.state = FINISHED
            won = not unit.settled
            unit.settled = True
        if won:
            self._decide(unit, error)
        pool.active.pop(unit.key, None)


def _job_event(reporter: ProgressReporter, job: Any, unit: Unit) -> JobEvent[Any]:
    event: JobEvent[Any] = JobEvent(
        id=job.id,
        type=job.type,
        payload=job.payload,
        attempt=job.attempt,
        max_attempts=job.max_attempts,
        scope=job.scope,
        signal=unit.signal,
        priority=job.priority,
        enqueued_at=job.enqueued_at,
    )
    event._reporter = reporter
    event._token = job.lease_token
    return event


__all__ = ["Executor", "SlotPool"]
