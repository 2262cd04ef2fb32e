"""Running one unit on a handler thread, up to the point its outcome is decided.

:meth:`Executor.execute` is the hot path of every buffered job: it marks the unit running
(unless an abort settled it while it waited in the buffer), arms its timeout with the
supervisor, builds the handler's event(s), calls the handler, writes the last progress
value, and settles the unit, handing the result to :class:`~golemq_pg.worker.outcomes.
Outcomes` unless someone else (an abort, the supervisor abandoning the handler) settled it
first, in which case the result is dropped.

An attempt is three steps around the handler call: :meth:`Executor.begin`,
:meth:`Executor.ended` and :meth:`Executor.settle`. ``execute`` runs them on a handler
thread; the event loop's task pool (:mod:`golemq_pg.worker.taskpool`) runs the same three
around an ``await``, so both kinds of handler share one outcome path.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from golemq_pg import _trace_hook
from golemq_pg.worker.backoff import HandlerReturnedFalse, encoded_result
from golemq_pg.worker.events import BatchEvent, WorkerSink, claimed_event
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
        started: deque[Unit] | None = None,
        kick_marker: Callable[[], None] | None = None,
    ) -> None:
        self.lock = runtime.lock
        #: Where a started unit goes for its start to be written (None: the claim wrote it;
        #: see :mod:`~golemq_pg.worker.starts`).
        self._started = started
        self._kick_marker = kick_marker or _nothing
        self.hub = runtime.hub
        self.supervisor = supervisor
        self.reporter = reporter
        # The bound method, looked up once rather than per job.
        self._decide = outcomes.decide

    def execute(self, pool: SlotPool, slot: Slot, unit: Unit) -> None:
        """Run ``unit``'s handler on this thread and hand its outcome to the completer."""
        argument = self.begin(pool, slot, unit, self.reporter)
        if argument is None:
            return
        spec = pool.spec
        error: BaseException | None
        tracer = _trace_hook.tracer  # golemq_pg.tracing: the attempt's CONSUMER span
        span = None if tracer is None else tracer.attempt(unit.jobs, unit.attempt)
        try:
            result = spec.fn(argument)
        except BaseException as exc:  # noqa: BLE001 - every handler failure is an outcome
            result, error = None, exc
        else:
            error = None
        error = self.ended(pool, unit, result, error)
        if span is not None:
            span.end(error, unit.signal.reason)
        reporter = self.reporter
        if spec.grouped:
            for event in argument.jobs:
                if event._progress_lock is not None:
                    reporter.finish(event)
        elif argument._progress_lock is not None:
            reporter.finish(argument)
        self.settle(pool, unit, error)

    # -- the steps of an attempt, shared by handler threads and the event loop -------------
    def begin(self, pool: SlotPool, slot: Slot, unit: Unit, reporter: WorkerSink) -> Any:
        """Start an attempt of ``unit`` on ``slot``: mark it running, arm its timeout, tell
        observers, and return the handler's argument (a JobEvent or a BatchEvent whose
        ``progress`` goes to ``reporter``); None when an abort settled the unit while it
        was buffered (nothing to run, nothing to write)."""
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
            return None
        spec = pool.spec
        unit.started_at = started = monotonic()
        marks = self._started
        if marks is not None:
            marks.append(unit)
            if len(marks) == 1:  # the marker may be waiting for a first start
                self._kick_marker()
        timeout = spec.timeout
        if timeout is not None:
            unit.deadline = deadline = started + timeout
            supervisor = self.supervisor
            if deadline < supervisor.planned:
                supervisor.kick()
        if self.hub.active:  # any observer attached (fixed for the worker's life)
            self.hub.started((unit.jobs, started - unit.claimed_at if unit.claimed_at else 0.0))
        signal = unit.signal
        if spec.grouped:
            return BatchEvent(
                type=pool.type, scope=unit.jobs[0].scope,
                jobs=[claimed_event(job, signal, reporter) for job in unit.jobs],
                attempt=unit.attempt, signal=signal,
            )
        return claimed_event(unit.jobs[0], signal, reporter, unit.links)

    def ended(
        self, pool: SlotPool, unit: Unit, result: object, error: BaseException | None
    ) -> BaseException | None:
        """The handler returned ``result`` or raised ``error``: stamp the end, fold the
        duration, and return the attempt's error (None: success, with a result to store
        encoded into ``unit.result``; False and an unencodable result are errors)."""
        if error is None and result is not None and result is not True:
            if result is False:
                error = HandlerReturnedFalse("handler returned False")
            elif not pool.spec.grouped:  # a BatchEvent's return value is not kept
                # Encoded here, on the handler's thread (or loop), not on the completer's.
                found: bytes | BaseException
                try:
                    found = encoded_result(result)
                except BaseException as exc:  # noqa: BLE001 - e.g. a Mapping whose items() raises
                    found = exc
                if isinstance(found, bytes):
                    unit.result = found
                else:
                    error = found
        unit.finished_at = finished = monotonic()
        pool.record_duration(finished - unit.started_at)
        return error

    def settle(self, pool: SlotPool, unit: Unit, error: BaseException | None) -> None:
        """Settle ``unit`` with the attempt's error and hand its outcome on, unless someone
        (an abort, the supervisor abandoning it) settled it first; then let go of it."""
        with self.lock:
            if unit.state == ABANDONED:  # written off by the supervisor; its outcome is decided
                return
            unit.state = FINISHED
            won = not unit.settled
            unit.settled = True
        if won:
            self._decide(unit, error)
        pool.active.pop(unit.key, None)


def _nothing() -> None:
    """No marker to wake."""


__all__ = ["Executor", "SlotPool"]
