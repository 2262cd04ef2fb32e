"""Safe delivery of lifecycle transitions to observers.

An observer that raises is logged (its exception type, the job id, type and outcome; never
its message, which could quote a payload) and contained: it never breaks a worker thread.

An observer that also has ``count_transition(type, outcome, duration, wait)`` (a
:class:`~golemq_pg._types.TransitionCounter`, such as the Prometheus observer) gets that
call instead of ``on_transition``: it needs no job id, scope or attempt, so no
:class:`Transition` is built for it, which on a fast drain is most of an observer's cost.
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from golemq_pg._types import LifecycleObserver, Scope, Transition

log = structlog.get_logger("golemq_pg.worker.observers")


class ObserverHub:
    """Fans a transition out to every observer; ``bool(hub)`` is False when there are none,
    so the hot path can skip building transitions altogether."""

    __slots__ = ("_counters", "_observers", "_transitions", "worker_id")

    def __init__(self, observers: Sequence[LifecycleObserver], worker_id: str) -> None:
        self._observers = tuple(observers)
        counting = [getattr(o, "count_transition", None) for o in self._observers]
        self._counters = tuple((o, c) for o, c in zip(self._observers, counting, strict=True)
                               if callable(c))
        self._transitions = tuple(o for o, c in zip(self._observers, counting, strict=True)
                                  if not callable(c))
        self.worker_id = worker_id

    def __bool__(self) -> bool:
        return bool(self._observers)

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
    ) -> None:
        """Count it for the counting observers; build one :class:`Transition` for the others."""
        for observer, count in self._counters:
            try:
                count(job_type, outcome, duration, wait)
            except BaseException as exc:  # noqa: BLE001 - an observer must never kill a worker thread
                self._failed(observer, exc, job_id, job_type, outcome)
        if not self._transitions:
            return
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
        observer: object, exc: BaseException, job_id: str, job_type: str, outcome: str
    ) -> None:
        log.warning(
            "observer_failed",
            observer=type(observer).__name__,
            job_id=job_id,
            type=job_type,
            outcome=outcome,
            error_type=type(exc).__name__,
        )


__all__ = ["ObserverHub"]
