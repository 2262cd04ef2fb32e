"""Coalesced progress writes: ``job.progress(value)`` without a round trip per call.

The first report of a job is written at once; later ones at most every ``interval``
seconds, the latest value winning (a deferred write is scheduled on the supervisor). When
the handler returns, the latest unwritten value is written before the job's outcome, so the
final progress is never lost. Writes are fenced like every lease write: a job whose lease
is gone records nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog

from golemq_pg.store.port import JobLinks, JobStore, LeaseRef

if TYPE_CHECKING:
    from golemq_pg.worker.events import JobEvent

log = structlog.get_logger("golemq_pg.worker.progress")

_NOTHING: Any = None
_CREATE_LOCK = threading.Lock()


#: Runs a callback at a monotonic time, on a timer thread (the supervisor's ``call_at``).
Schedule = Callable[[float, Callable[[], None]], None]


class ProgressReporter:
    """Writes ``JobEvent.progress`` values through ``store.job_progress``, coalesced.

    Not a loop of its own: a deferred write is a timer on ``schedule``.
    """

    def __init__(
        self, store: JobStore, owner: str, *, schedule: Schedule, interval: float = 0.2
    ) -> None:
        self.store = store
        self.owner = owner
        self.interval = interval
        self._schedule = schedule

    def links(self, job_id: str) -> JobLinks:
        """The job's workflow and parents, read through the store (``JobEvent.parents``)."""
        return self.store.job_links(job_id)

    def report(self, event: JobEvent[Any], value: float | dict[str, Any]) -> None:
        """Record ``value`` for ``event``; write now or schedule a coalesced write."""
        lock = event._progress_lock
        if lock is None:
            with _CREATE_LOCK:
                lock = event._progress_lock
                if lock is None:
                    lock = event._progress_lock = threading.Lock()
        with lock:
            event._progress_pending = value
            now = time.monotonic()
            due = event._progress_at + self.interval
            if now >= due:
                self._write_locked(event, now)
            elif not event._progress_scheduled:
                event._progress_scheduled = True
                self._schedule(due, lambda: self._deferred(event))

    def finish(self, event: JobEvent[Any]) -> None:
        """Write the latest unwritten value before the job's outcome (handler thread)."""
        lock = event._progress_lock
        if lock is None:
            return
        with lock:
            if event._progress_pending is not _NOTHING:
                self._write_locked(event, time.monotonic())

    def _deferred(self, event: JobEvent[Any]) -> None:
        lock = event._progress_lock
        if lock is None:  # pragma: no cover - scheduled only after the lock exists
            return
        with lock:
            event._progress_scheduled = False
            if event._progress_pending is not _NOTHING and not event.signal.cancelled:
                self._write_locked(event, time.monotonic())

    # -- durable steps (JobEvent.step): not coalesced, each write awaited by the handler ----
    def step_load(self, event: JobEvent[Any]) -> dict[str, Any]:
        """The stored steps of ``event``'s job (read once per attempt, at its first step)."""
        return self.store.job_step_get(event.id)

    def step_save(self, event: JobEvent[Any], name: str, value: bytes) -> bool:
        """Store one step, fenced by ``event``'s lease; False when the lease is gone."""
        return self.store.job_step_save(self.owner, LeaseRef(event.id, event._token), name, value)

    def _write_locked(self, event: JobEvent[Any], now: float) -> None:
        value = event._progress_pending
        if value is None:
            return
        event._progress_pending = _NOTHING
        event._progress_at = now
        try:
            self.store.job_progress(self.owner, LeaseRef(event.id, event._token), value)
        except Exception as exc:  # noqa: BLE001 - progress is best effort; the job goes on
            log.warning(
                "progress_write_failed", job_id=event.id, type=event.type,
                attempt=event.attempt, error_type=type(exc).__name__,
            )


__all__ = ["ProgressReporter", "Schedule"]
