"""Honest running: a claimed job is RUNNING for readers only once its handler started.

The worker's claims leave a job's ``started_at`` empty (``ClaimRequest.defer_start``): a job
leased into a type's buffer, waiting for a free handler thread, is reported PENDING by every
reader (``stats()``, the dashboard, the metrics). When its handler starts, the start is
recorded in one of two ways, so no extra statement is spent on fast jobs:

* the write that finishes the job carries it (``started=`` of the completion, retry and fail
  verbs: see :mod:`~golemq_pg.worker.completer`);
* a job still running :data:`MARK_AFTER` seconds after its handler started gets it from
  :class:`StartMarker`, one batched, fenced ``job_mark_started`` per pass, so a long job shows
  as running promptly.
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING

import structlog

from golemq_pg._errortext import error_text
from golemq_pg.worker.service import Service
from golemq_pg.worker.units import RUNNING

if TYPE_CHECKING:
    from golemq_pg.worker.runtime import Runtime
    from golemq_pg.worker.units import Unit

log = structlog.get_logger("golemq_pg.worker.starts")

#: A job whose handler is still running this long after it started gets its start written
#: by the marker (seconds); a shorter one's start travels with its outcome.
MARK_AFTER = 0.05
#: Most starts written by one statement.
_CHUNK = 1000


class StartMarker(Service):
    """Writes the handler starts of the jobs still running :data:`MARK_AFTER` seconds after
    their handlers started. Handler threads append each started unit to :attr:`started`
    (no lock); the marker takes them in start order."""

    def __init__(self, runtime: Runtime) -> None:
        super().__init__("golemq-starts", runtime.owner)
        self.runtime = runtime
        #: Units whose handlers started, oldest first (``Executor.begin`` appends).
        self.started: deque[Unit] = deque()

    def step(self) -> float | None:
        """Write the starts that are due; pause until the next one is (None: until kicked)."""
        queue = self.started
        due: list[Unit] = []
        now = time.monotonic()
        while queue:
            unit = queue[0]
            if unit.state != RUNNING:
                queue.popleft()  # finished already: its outcome carries the start
                continue
            if unit.started_at > now - MARK_AFTER:
                break
            due.append(queue.popleft())
        if due:
            self._write(due, now)
        if not queue:
            return None  # a handler thread kicks the marker when the next one starts
        return max(queue[0].started_at + MARK_AFTER - time.monotonic(), 0.0)

    def _write(self, units: list[Unit], now: float) -> None:
        runtime = self.runtime
        refs = [job for unit in units for job in unit.jobs]
        ago = [now - unit.started_at for unit in units for _ in unit.jobs]
        for start in range(0, len(refs), _CHUNK):
            try:
                runtime.store.job_mark_started(
                    runtime.owner, refs[start:start + _CHUNK], ago[start:start + _CHUNK])
            except Exception as exc:  # noqa: BLE001 - only what readers show depends on it
                # Not retried: the job's outcome still carries its start.
                log.warning("start_write_failed", worker_id=runtime.owner, jobs=len(refs),
                            error_type=type(exc).__name__, error=error_text(exc))
                return


__all__ = ["MARK_AFTER", "StartMarker"]
