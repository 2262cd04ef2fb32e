"""The listener thread: turns store notifications into claim-loop wake-ups and aborts.

* ``"jobs"`` naming a type this worker handles (or naming none: any type) is a hint to the
  claim loop: when the loop is idle the claim pass runs right here, on this thread (one
  thread wake-up less between the enqueue and the handler), else the loop is woken; either
  way an idle worker starts a new job within milliseconds, not a poll interval.
* ``"reconnected"`` (the store re-established LISTEN after a drop) forces a full re-poll:
  hints sent during the gap are lost, the jobs are not.
* ``"cancel"`` aborts the handlers of the listed job ids that run here (reason
  ``"cancelled"``; the rows are already gone, so nothing is written for them).
* ``"lost"`` (the LISTEN connection failed) is reported to observers' ``on_error`` (kind
  ``"listen"``, once per incident); the ``"reconnected"`` that follows ends the incident.

If the listener itself fails it is closed and reopened with backoff, followed by a re-poll.
Correctness never depends on a notification: the claim loop also polls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from golemq_pg.store.port import JobStore, Listener
from golemq_pg.worker.events import CANCELLED
from golemq_pg.worker.service import Service

if TYPE_CHECKING:
    from golemq_pg.worker.dispatcher import ClaimLoop
    from golemq_pg.worker.runtime import Runtime
    from golemq_pg.worker.supervisor import AbortIds

log = structlog.get_logger("golemq_pg.worker.listener")

#: How long one ``Listener.wait`` blocks; stopping closes the listener to cut it short.
WAIT_SECONDS = 0.25


def open_listener(store: JobStore, listen_dsn: str | None) -> Listener | None:
    """The store's listener, on ``listen_dsn`` when the worker was given one (a store whose
    ``open_listener`` takes no DSN is never passed one)."""
    if listen_dsn is None:
        return store.open_listener()
    return store.open_listener(listen_dsn)


class ListenerThread(Service):
    """Waits on the store's listener and dispatches what arrives: hints and re-polls to the
    claim loop (``dispatcher``), cancels to ``abort_ids`` (the supervisor's)."""

    def __init__(
        self,
        runtime: Runtime,
        dispatcher: ClaimLoop,
        listener: Listener | None,
        *,
        abort_ids: AbortIds,
    ) -> None:
        super().__init__("golemq-listener", runtime.owner)
        self.runtime = runtime
        self.dispatcher = dispatcher
        self.listener = listener
        self._abort_ids = abort_ids
        self._reopen = listener is None
        #: A step raised (the listener failed outside its own reconnects) since the last
        #: wait that returned.
        self._raised = False

    def step(self) -> float:
        """Wait for notifications once (opening the listener first if needed)."""
        listener = self.listener
        if listener is None:
            listener = open_listener(self.runtime.store, self.runtime.config.listen_dsn)
            if listener is None:  # the store has no wake-up source: poll only
                log.info("listener_unavailable", worker_id=self.runtime.owner)
                self.stop_event.set()
                return 0.0
            self.listener = listener
            if self._reopen:
                log.info("listener_reopened", worker_id=self.runtime.owner)
            self._reopen = True
            self.dispatcher.poll_now()
        try:
            notes = listener.wait(WAIT_SECONDS)
        except Exception:
            self.listener = None
            self._close_quietly(listener)
            if self.stop_event.is_set():
                return 0.0
            self.dispatcher.poll_now()
            raise
        errors = self.runtime.hub.errors
        if self._raised:
            self._raised = False
            errors.recovered("listen")
        for note in notes:
            if note.kind == "jobs":
                self.dispatcher.hint(note.items)
            elif note.kind == "cancel":
                if note.items:
                    self._abort_ids(note.items, CANCELLED)
            elif note.kind == "lost":
                errors.failed("listen", note.items[0] if note.items else "connection lost",
                              "connection")
            else:  # "reconnected" (or anything new): re-poll everything
                errors.recovered("listen", "connection")
                self.dispatcher.poll_now()
        return 0.0

    def failed(self, exc: BaseException, failures: int) -> float | None:
        """A step raised (opening the listener, or a listener's ``wait``): reported to
        observers' ``on_error`` once per incident, then logged and retried."""
        self._raised = True
        self.runtime.hub.errors.failed("listen", exc)
        return super().failed(exc, failures)

    def stop(self, timeout: float | None = None) -> None:
        """Close the listener (which ends a blocked wait) and join the thread."""
        self.stop_event.set()
        listener = self.listener
        if listener is not None:
            self._close_quietly(listener)
        super().stop(timeout)

    @staticmethod
    def _close_quietly(listener: Listener) -> None:
        try:
            listener.close()
        except Exception as exc:  # noqa: BLE001 - closing is best effort
            log.debug("listener_close_failed", error_type=type(exc).__name__)


__all__ = ["ListenerThread", "open_listener"]
