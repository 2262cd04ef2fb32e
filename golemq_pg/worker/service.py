"""The base of every background loop of the worker: one named thread, one ``step`` at a time.

A loop subclasses :class:`Service` and implements :meth:`Service.step`. The base owns the
thread, the stop event and the error handling, so no loop hand-rolls them; a loop whose
timing needs its own wait primitive (a condition, the claim loop's wake event, the
completer's two events) overrides the hooks instead:

* :meth:`Service.pause` waits between steps; it receives what ``step`` returned;
* :meth:`Service.kick` cuts a pause short (``stop`` kicks too, so a paused loop sees it);
* :meth:`Service.failed` logs a step that raised and says what to pause for;
* :meth:`Service.running` decides whether another step is due (a loop that must drain
  before it ends keeps going after the stop).

This module sits low in the worker's layers: it knows nothing of the runtime or of other
services.
"""

from __future__ import annotations

import threading

import structlog

from golemq_pg._errortext import error_text

log = structlog.get_logger("golemq_pg.worker")


class Service:
    """A named background thread that runs ``step`` until stopped and never dies.

    By default ``step`` does one unit of work and returns how long to wait before the next
    one (None: until kicked), and an exception is logged and retried with a capped backoff,
    so a bug or a database outage slows the loop down but never leaves the worker
    alive-but-idle.
    """

    def __init__(self, name: str, owner: str, *, kick_event: threading.Event | None = None) -> None:
        self.name = name
        self.owner = owner
        self.stop_event = threading.Event()
        #: Ends the default pause early; a loop may share an event others set (the claim
        #: loop waits on the runtime's wake event).
        self.kick_event = kick_event if kick_event is not None else threading.Event()
        self._thread: threading.Thread | None = None

    # -- what a loop implements or overrides --------------------------------------------------
    def step(self) -> float | None:
        """One iteration; returns what :meth:`pause` waits for (by default seconds, None:
        until kicked)."""
        raise NotImplementedError

    def pause(self, wait: float | None) -> None:
        """Wait between two steps: up to ``wait`` seconds (None: until kicked)."""
        if wait is None or wait > 0:
            self.kick_event.wait(wait)
        self.kick_event.clear()

    def kick(self) -> None:
        """Run the next step now."""
        self.kick_event.set()

    def failed(self, exc: BaseException, failures: int) -> float | None:
        """A step raised (``failures`` in a row): log it, return what to pause for.

        Called inside the ``except`` block, so an override may log the traceback.
        """
        wait: float = min(0.05 * 2 ** min(failures, 10), 5.0)
        if failures == 1 or failures % 20 == 0:
            log.warning(
                "service_error", service=self.name, worker_id=self.owner,
                failures=failures, error_type=type(exc).__name__,
                error=error_text(exc), retry_in=round(wait, 3),
            )
        return wait

    def running(self) -> bool:
        """Whether to run another step (by default: until stopped)."""
        return not self.stop_event.is_set()

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        """Start the thread (daemon: an abandoned worker never blocks interpreter exit)."""
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Ask the loop to end and wait up to ``timeout`` seconds for it."""
        self.stop_event.set()
        self.kick()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                # Shutdown moves on; a daemon thread still busy (a write stuck on the
                # database) ends with the process or when its call returns.
                log.warning("worker_thread_still_running", worker_id=self.owner,
                            thread=self.name,
                            waited=None if timeout is None else round(timeout, 3))

    def _run(self) -> None:
        failures = 0
        while self.running():
            try:
                wait = self.step()
                failures = 0
            except BaseException as exc:  # noqa: BLE001 - a service thread must never die
                failures += 1
                wait = self.failed(exc, failures)
            if not self.running():
                break
            self.pause(wait)


__all__ = ["Service"]
