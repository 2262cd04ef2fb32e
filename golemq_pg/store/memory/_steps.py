"""The durable-step verbs of InMemoryStore: ``job_step_get``, ``job_step_save``,
``job_step_sweep``.

Private to :mod:`golemq_pg.store.memory`; a base of :class:`InMemoryStore`, whose lock and
table it uses. The semantics of ``sql/queries/steps.sql``: a save is fenced on the held
lease and the first write of a name wins. The steps are kept on the job's row, so they
vanish with it (cancel, prune, delete): there are no orphans to sweep.
"""

from __future__ import annotations

import threading
from typing import Any

import orjson

from golemq_pg.store.memory._rows import JobTable
from golemq_pg.store.port import LeaseRef, StepSweep


class StepVerbs:
    """The step verbs (see the module docstring)."""

    _lock: threading.Lock
    _jobs: JobTable

    def job_step_get(self, job_id: str) -> dict[str, Any]:
        """One job's steps, name -> value (empty: none, or no such job)."""
        with self._lock:
            row = self._jobs.get(job_id)
            if row is None:
                return {}
            return {name: orjson.loads(value) for name, value in row.steps.items()}

    def job_step_save(self, owner: str, item: LeaseRef, name: str, value_json: bytes) -> bool:
        """Store a step's value for a held lease; the first write of a name wins. False,
        nothing written, when the lease is not held."""
        with self._lock:
            row = self._jobs.get(item.id)
            if row is None or not row.holds(owner, item.token):
                return False
            row.steps.setdefault(name, bytes(value_json))
            return True

    def job_step_sweep(self, after: str | None, limit: int = 1_000) -> StepSweep:
        """Nothing to sweep: steps live on their job's row."""
        return StepSweep()
