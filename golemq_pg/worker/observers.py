"""Safe delivery of lifecycle transitions to observers.

An observer that raises is logged (its exception type, the job id, type and outcome; never
its message, which could quote a payload) and contained: it never breaks a worker thread.
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from golemq_pg._types import LifecycleObserver, Scope, Transition

log = structlog.get_logger("golemq_pg.worker.observers")


class ObserverHub:
    """Fans a transition out to every observer; ``bool(hub)`` is False when there are none,
    so the hot path can skip building transitions altogether."""

    __slots__ = ("_observers", "worker_id")

    def __init__(self, observers: Sequence[LifecycleObserver], worker_id: str) -> None:
        self._observers = tuple(observers)
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
        """Build one :class:`Transition` and deliver it to every observer."""
        if not self._observers:
            return
        self.notify(
            Transition(
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
        )

    def notify(self, transition: Transition) -> None:
        """Deliver ``transition``; exceptions (even BaseException) are logged and contained."""
        for observer in self._observers:
            try:
                observer.on_transition(transition)
            except BaseException as exc:  # noqa: BLE001 - an observer must never kill a worker thread
                log.warning(
                    "observer_failed",
                    observer=type(observer).__name__,
                    job_id=transition.job_id,
                    type=transition.type,
                    outcome=transition.outcome,
                    error_type=type(exc).__name__,
                )


__all__ = ["ObserverHub"]
