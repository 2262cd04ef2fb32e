"""The durable-step verbs of PostgresStore (a base of the class): the reads run the plans
of ``_steps``; the fenced write is the worker's, so only the sync store has it."""

from __future__ import annotations

from golemq_pg.store.port import LeaseRef
from golemq_pg.store.postgres import _rows as rows
from golemq_pg.store.postgres import _steps
from golemq_pg.store.postgres._connections import StoreConnections, retrying, sync_verb


class StepVerbs(StoreConnections):
    """``job_step_get``, ``job_step_save``, ``job_step_sweep`` of PostgresStore (a base of
    the class; the read plans are shared with AsyncPostgresStore)."""

    job_step_get = sync_verb(_steps.job_step_get)
    job_step_sweep = sync_verb(_steps.job_step_sweep)

    def job_step_save(self, owner: str, item: LeaseRef, name: str, value_json: bytes) -> bool:
        """Store a step's value for a held lease (fenced; the first write wins); False and
        nothing written when the lease is no longer held. On a bound store (a transactional
        handler's connection) the write is part of that transaction."""
        job_id = rows.int_id(item.id)
        if job_id is None:
            return False
        args = {
            "id": job_id,
            "token": item.token,
            "owner": owner,
            "name": name,
            "value": rows.jsonb(value_json),
        }
        return retrying(
            "job_step_save", lambda: bool(self._fetch("job_step_save", args)),
            once=self._bound is not None,
        )

