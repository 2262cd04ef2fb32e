"""Safe delivery of lifecycle transitions to observers.

An observer that raises is logged (its exception type, the job id, type and outcome; never
its message, which could quote a payload) and contained: it never breaks a worker thread.

Observers come in three kinds, told apart once, when the hub is built:

* a batch counter has ``count_transitions(outcome, counted)``
  (:class:`~golemq_pg._types.BatchTransitionCounter`, such as the Prometheus observer): it
  gets one call per batch of transitions to one outcome (the jobs of a unit that started,
  the outcomes of one completion write), with a ``(type, seconds)`` pair per transition;
* a counter has ``count_transition(type, outcome, duration, wait)``
  (:class:`~golemq_pg._types.TransitionCounter`): one call per transition;
* any other observer gets a :class:`Transition` per transition (``on_transition``).

Counters need no job id, scope or attempt, so no :class:`Transition` is built for them: on a
fast drain building one per event, and a Python call per event and observer, was most of an
observer's cost. The hot paths (a unit starting, a completion write) ask :attr:`counts` and
:attr:`each` and give the counters a batch and the others their transitions.

A worker's system errors (a claim, a completion write, a renewal, the LISTEN connection, a
maintenance task failing; a slow transaction) go to the observers that define ``on_error``,
through the hub's :class:`ErrorReports`: once per incident, so a database outage is one
report per failing service, not one per retry.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import structlog

from golemq_pg._errortext import error_text
from golemq_pg._types import LifecycleObserver, Scope, Transition, WorkerError, WorkerErrorKind
from golemq_pg.store.port import ClaimedJob

log = structlog.get_logger("golemq_pg.worker.observers")

_Batch = Callable[[str, Sequence[tuple[str, float | None]]], None]
_Count = Callable[[str, str, float | None, float | None], None]
_Later = Callable[[tuple[Sequence[ClaimedJob], float]], None]
_OnError = Callable[[WorkerError], None]

#: A failure this soon (seconds) after a service's recovery continues the same incident:
#: after an outage a pool may still hand out a few of its dead connections, one by one.
RELAPSE_WINDOW = 1.0


class ErrorReports:
    """A worker's system errors, reported to the observers' ``on_error`` once per incident.

    A service calls :meth:`failed` on every failure and :meth:`recovered` after a success
    (cheap when nothing is failing). The first failure of a kind after a healthy period is
    reported; repeats are not while any source of that kind (a service, a maintenance task,
    a transactional handler thread) still fails, nor within :data:`RELAPSE_WINDOW` of the
    kind's recovery. Without an observer defining ``on_error`` every call returns at once.
    """

    __slots__ = (
        "_clock", "_failing", "_lock", "_observers", "_recovered_at", "active", "worker_id",
    )

    def __init__(self, observers: Sequence[object], worker_id: str, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        found: list[tuple[object, _OnError]] = []
        for observer in observers:
            method = getattr(observer, "on_error", None)
            if callable(method):
                found.append((observer, method))
        self._observers = tuple(found)
        #: Some observer defines ``on_error``.
        self.active = bool(found)
        self.worker_id = worker_id
        self._clock = clock
        self._lock = threading.Lock()
        #: Kind -> the sources of that kind failing now (absent: none is).
        self._failing: dict[str, set[str]] = {}
        #: Kind -> monotonic time its last incident ended.
        self._recovered_at: dict[str, float] = {}

    def failed(self, kind: WorkerErrorKind, error: BaseException | str,
               source: str = "") -> None:
        """A failure of ``source`` (a service of ``kind``); reported if it opens an
        incident. ``error``: the exception (its type and first line are reported) or text
        already bounded."""
        if not self.active:
            return
        now = self._clock()
        with self._lock:
            failing = self._failing.get(kind)
            if failing is None:
                self._failing[kind] = {source}
                ended = self._recovered_at.get(kind)
                opens = ended is None or now - ended >= RELAPSE_WINDOW
            else:
                failing.add(source)
                opens = False
        if opens:
            text = error if isinstance(error, str) else error_text(error, with_type=True)
            self.report(kind, text)

    def recovered(self, kind: WorkerErrorKind, source: str = "") -> None:
        """``source`` (a service of ``kind``) succeeded: its part of an incident is over."""
        if not self._failing:
            return
        with self._lock:
            failing = self._failing.get(kind)
            if failing is None:
                return
            failing.discard(source)
            if not failing:
                del self._failing[kind]
                self._recovered_at[kind] = self._clock()

    def report(self, kind: WorkerErrorKind, text: str) -> None:
        """Give one :class:`WorkerError` with ``text`` (bounded, no payload) to every
        observer defining ``on_error`` (not deduplicated: the caller decides it is due)."""
        if not self.active:
            return
        event = WorkerError(kind=kind, error=text, worker_id=self.worker_id,
                            at=datetime.now(UTC))
        for observer, on_error in self._observers:
            try:
                on_error(event)
            except BaseException as exc:  # noqa: BLE001 - an observer must never kill a worker thread
                log.warning("observer_failed", observer=type(observer).__name__,
                            kind=kind, outcome="error", error_type=type(exc).__name__)


class ObserverHub:
    """Fans a transition out to every observer; ``bool(hub)`` (and :attr:`active`) is False
    when there are none, so the hot path can skip building transitions altogether."""

    __slots__ = (
        "_counting", "_later", "_observers", "_transitions", "active", "counts", "each",
        "errors", "started", "worker_id",
    )

    def __init__(self, observers: Sequence[LifecycleObserver], worker_id: str) -> None:
        self._observers = tuple(observers)
        counting: list[tuple[object, _Count | None, _Batch | None]] = []
        later: list[tuple[object, _Later | None]] = []
        transitions: list[LifecycleObserver] = []
        for observer in self._observers:
            one = getattr(observer, "count_transition", None)
            many = getattr(observer, "count_transitions", None)
            one = one if callable(one) else None
            many = many if callable(many) else None
            if one is None and many is None:
                transitions.append(observer)
                continue
            counting.append((observer, one, many))
            sink = getattr(observer, "count_started_later", None)
            # Only a batch counter's: its next batch is what counts what was deferred.
            later.append((observer, sink if callable(sink) and many is not None else None))
        #: Each counter with its per-transition method and its batch method (either None).
        self._counting = tuple(counting)
        #: Each counter with its deferred-start sink (None: it has none).
        self._later = tuple(later)
        self._transitions = tuple(transitions)
        #: ``started((jobs, buffered))``: the jobs of one unit started, each
        #: ``job.waited + buffered`` seconds after it was due. With one observer, a counter
        #: that defers starts, it is that observer's sink itself (a deque's append: no
        #: Python frame per unit on the handler thread; nothing there can raise).
        self.started: _Later = self._started
        if len(later) == 1 and not transitions and later[0][1] is not None:
            self.started = later[0][1]
        #: Some observer is attached (attributes, not methods: the hot paths test them for
        #: every unit and every outcome, and a ``__bool__`` call is a Python frame each).
        self.active = bool(self._observers)
        #: Some observer counts: give it batches with :meth:`count` / :meth:`started`.
        self.counts = bool(counting)
        #: Some observer wants one :class:`Transition` per transition
        #: (:meth:`emit_transition`).
        self.each = bool(transitions)
        self.worker_id = worker_id
        #: System errors, to the observers defining ``on_error`` (once per incident).
        self.errors = ErrorReports(self._observers, worker_id)

    def __bool__(self) -> bool:
        return self.active

    def emit(
        self,
        job_id: str,
        job_type: str,
        scope: Scope | None,
        outcome: str,
        attempts: int,
        *,
        error: str | None = None,
        duration: float | None = None,
        wait: float | None = None,
        result: Any = None,
        stuck_for: float | None = None,
    ) -> None:
        """Report one transition to every observer: counted by the counters, one
        :class:`Transition` built for the others."""
        if self.counts:
            for observer, one, many in self._counting:
                try:
                    if one is not None:
                        one(job_type, outcome, duration, wait)
                    elif many is not None:
                        many(outcome, [(job_type, wait if wait is not None else duration)])
                except BaseException as exc:  # noqa: BLE001 - an observer must never kill a worker thread
                    self._failed(observer, exc, job_id, job_type, outcome)
        if self.each:
            self.emit_transition(job_id, job_type, scope, outcome, attempts, error=error,
                                 duration=duration, wait=wait, result=result,
                                 stuck_for=stuck_for)

    def _started(self, started: tuple[Sequence[ClaimedJob], float]) -> None:
        """:attr:`started` for any mix of observers."""
        jobs, buffered = started
        job = jobs[0]
        for (observer, one, many), (_, later) in zip(self._counting, self._later, strict=True):
            try:
                if later is not None:
                    later(started)
                elif len(jobs) == 1 and one is not None:
                    one(job.type, "started", None, job.waited + buffered)
                elif many is not None:
                    many("started", [(member.type, member.waited + buffered)
                                     for member in jobs])
                elif one is not None:
                    for member in jobs:
                        one(member.type, "started", None, member.waited + buffered)
            except BaseException as exc:  # noqa: BLE001 - an observer must never kill a worker thread
                self._failed(observer, exc, job.id, job.type, "started")
        if self.each:
            for job in jobs:
                self.emit_transition(job.id, job.type, job.scope, "started", job.attempt,
                                     wait=job.waited + buffered)

    def count(self, outcome: str, counted: Sequence[tuple[str, float | None]]) -> None:
        """Count a batch of transitions to ``outcome`` (one ``(type, seconds)`` each:
        ``seconds`` the wait on "started", the run time otherwise) for the counters only;
        the caller gives the other observers their transitions (:meth:`emit_transition`)."""
        if counted:
            self._count(outcome, counted, None)

    def _count(
        self, outcome: str, counted: Sequence[tuple[str, float | None]], job_id: str | None
    ) -> None:
        started = outcome == "started"
        for observer, one, many in self._counting:
            try:
                if many is not None:
                    many(outcome, counted)
                elif one is not None:
                    for job_type, seconds in counted:
                        if started:
                            one(job_type, outcome, None, seconds)
                        else:
                            one(job_type, outcome, seconds, None)
            except BaseException as exc:  # noqa: BLE001 - an observer must never kill a worker thread
                self._failed(observer, exc, job_id, counted[0][0], outcome)

    def emit_transition(
        self,
        job_id: str,
        job_type: str,
        scope: Scope | None,
        outcome: str,
        attempts: int,
        *,
        error: str | None = None,
        duration: float | None = None,
        wait: float | None = None,
        result: Any = None,
        stuck_for: float | None = None,
    ) -> None:
        """Build one :class:`Transition` for the observers that are not counters (the
        caller counts it for the counters with :meth:`count`)."""
        transition = Transition(
            job_id=job_id,
            type=job_type,
            scope=scope,
            outcome=outcome,
            attempts=attempts,
            error=error,
            duration=duration,
            worker_id=self.worker_id,
            wait=wait,
            result=result,
            stuck_for=stuck_for,
        )
        for observer in self._transitions:
            try:
                observer.on_transition(transition)
            except BaseException as exc:  # noqa: BLE001 - an observer must never kill a worker thread
                self._failed(observer, exc, job_id, job_type, outcome)

    def notify(self, transition: Transition) -> None:
        """Deliver ``transition`` to every observer; exceptions (even BaseException) are
        logged and contained."""
        for observer in self._observers:
            try:
                observer.on_transition(transition)
            except BaseException as exc:  # noqa: BLE001 - an observer must never kill a worker thread
                self._failed(observer, exc, transition.job_id, transition.type,
                             transition.outcome)

    @staticmethod
    def _failed(
        observer: object, exc: BaseException, job_id: str | None, job_type: str, outcome: str
    ) -> None:
        # job_id is None for a batch of many jobs (the log names the type and outcome).
        log.warning(
            "observer_failed",
            observer=type(observer).__name__,
            job_id=job_id,
            type=job_type,
            outcome=outcome,
            error_type=type(exc).__name__,
        )


__all__ = ["RELAPSE_WINDOW", "ErrorReports", "ObserverHub"]
