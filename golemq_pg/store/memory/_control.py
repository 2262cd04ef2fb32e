"""The control verbs of InMemoryStore: pause / resume a type, retry or run one job now.

Private to :mod:`golemq_pg.store.memory`; a base of :class:`InMemoryStore`, whose lock,
table, clock and notifications it uses. The same semantics as PostgreSQL's
``sql/queries/control.sql``: each verb checks the row's current state under the store's lock
and changes nothing when it is not the state it names; what becomes claimable is announced
with its type name. The pause itself is enforced by the claim (``_claim.ClaimPass``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import datetime

from golemq_pg._types import JobStatus, PausedType
from golemq_pg.store.memory._graph import Graph, revive
from golemq_pg.store.memory._rows import JobTable
from golemq_pg.store.port import Notification


class ControlVerbs:
    """``type_pause``, ``type_resume``, ``type_paused``, ``job_retry``, ``job_run_now``,
    ``job_run_now_types``, ``job_delete`` (see the module docstring)."""

    _lock: threading.Lock
    _jobs: JobTable
    _graph: Graph
    _paused: dict[str, PausedType]
    _read_clock: Callable[[], datetime]
    _publish: Callable[[Notification], None]

    def type_pause(self, job_type: str, reason: str | None) -> PausedType:
        """Pause ``job_type`` (again: the reason is replaced, ``paused_at`` kept)."""
        with self._lock:
            before = self._paused.get(job_type)
            paused_at = before.paused_at if before is not None else self._read_clock()
            paused = self._paused[job_type] = PausedType(job_type, paused_at, reason)
            return paused

    def type_resume(self, job_type: str) -> bool:
        """Resume ``job_type`` and wake its idle workers; False when it was not paused."""
        with self._lock:
            if self._paused.pop(job_type, None) is None:
                return False
            self._publish(Notification(kind="jobs", items=(job_type,)))
            return True

    def type_paused(self) -> dict[str, PausedType]:
        """Every paused type, by name."""
        with self._lock:
            return dict(sorted(self._paused.items()))

    def job_retry(self, job_id: str, reset_steps: bool = False) -> bool:
        """FAILED -> PENDING due now, attempts 0, ``last_error`` cleared, history kept; its
        durable steps kept, or cleared with ``reset_steps``.

        False (nothing changed) when the job is not FAILED, unknown, keyed while a
        PENDING job holds its key, or dead-lettered because of a parent that is still
        FAILED (or was cancelled). A job with parents not all SUCCEEDED waits for them
        again (WAITING), and the dependents dead-lettered because of it are re-armed, down
        the chain (see the port).
        """
        with self._lock:
            row = self._jobs.get(job_id)
            if row is None or row.status is not JobStatus.FAILED:
                return False
            if row.dedupe_key is not None and self._jobs.pending_with_key(
                row.type, row.dedupe_key
            ) is not None:
                return False
            if self._graph.retry_refused(self._jobs, row):
                return False
            now = self._read_clock()
            if reset_steps:
                row.steps.clear()
            revive(self._jobs, row, now)
            effects = self._graph.rearm(self._jobs, [row], now)
            if effects.due_types:
                self._publish(Notification(kind="jobs", items=tuple(sorted(effects.due_types))))
            return True

    def job_run_now(self, job_id: str) -> bool:
        """A PENDING job with a future ``run_at`` becomes due now; False otherwise."""
        with self._lock:
            row = self._jobs.get(job_id)
            now = self._read_clock()
            if row is None or row.status is not JobStatus.PENDING or row.run_at <= now:
                return False
            row.run_at = now
            row.updated_at = now
            self._publish(Notification(kind="jobs", items=(row.type,)))
            return True

    def job_delete(self, job_id: str) -> bool:
        """Delete one finished job (SUCCEEDED or FAILED); False when it is live or
        unknown (the counts are counted, so they stay exact)."""
        with self._lock:
            row = self._jobs.get(job_id)
            if row is None or row.status not in (JobStatus.SUCCEEDED, JobStatus.FAILED):
                return False
            self._jobs.delete(row)
            return True

    def job_run_now_types(self, types: Sequence[str]) -> int:
        """Every future PENDING job of ``types`` (paused types excepted) becomes due now."""
        with self._lock:
            wanted = set(types) - set(self._paused)
            now = self._read_clock()
            moved = [
                row
                for row in self._jobs.pending.values()
                if row.type in wanted and row.run_at > now
            ]
            for row in moved:
                row.run_at = now
                row.updated_at = now
            if moved:
                hinted = tuple(sorted({row.type for row in moved}))
                self._publish(Notification(kind="jobs", items=hinted))
            return len(moved)
