"""The durable-step verbs of PostgresStore (a base of the class): the reads run the plans
of ``_steps``; the fenced write is the worker's, so only the sync store has it."""

from __future__ import annotations

import time

import psycopg
import structlog

from golemq_pg.store.port import LeaseRef
from golemq_pg.store.postgres import _rows as rows
from golemq_pg.store.postgres import _steps
from golemq_pg.store.postgres._connections import StoreConnections, retrying, sync_verb

log = structlog.get_logger("golemq_pg.store.postgres")

#: How long a step's save keeps trying after its connection failed. Past it the error
#: propagates (the attempt fails and is retried, the step's function called again); within
#: it a save goes on with a fresh connection, so a dropped connection alone never throws
#: the value away. Longer than any lease is pointless: a save after the lease ran out is
#: fenced out anyway (``JobAborted("lease-lost")``).
STEP_SAVE_PATIENCE = 60.0
#: The pause after each failed try: doubling from the first, capped at the last.
STEP_SAVE_PAUSES = (0.05, 2.0)


class StepVerbs(StoreConnections):
    """``job_step_get``, ``job_step_save``, ``job_step_sweep`` of PostgresStore (a base of
    the class; the read plans are shared with AsyncPostgresStore)."""

    job_step_get = sync_verb(_steps.job_step_get)
    job_step_sweep = sync_verb(_steps.job_step_sweep)

    def job_step_save(self, owner: str, item: LeaseRef, name: str, value_json: bytes) -> bool:
        """Store a step's value for a held lease (fenced; the first write wins); False and
        nothing written when the lease is no longer held. On a bound store (a transactional
        handler's connection) the write is part of that transaction.

        A lost connection (``OperationalError``, ``InterfaceError``) is retried with a
        fresh one for up to :data:`STEP_SAVE_PATIENCE` seconds: the write is idempotent
        (the first value of a name wins, and a save that committed before its reply was
        lost finds its row and answers True), and fenced, so a retry after the lease was
        taken back writes nothing and answers False."""
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
        once = self._bound is not None

        def save() -> bool:
            return retrying("job_step_save", lambda: bool(self._fetch("job_step_save", args)),
                            once=once)

        if once:  # the caller's transaction: a dropped connection ended it
            return save()
        give_up = time.monotonic() + STEP_SAVE_PATIENCE
        pause, cap = STEP_SAVE_PAUSES
        failures = 0
        while True:
            try:
                return save()
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                failures += 1
                if time.monotonic() + pause > give_up:
                    raise
                log.warning("step_save_retried", job_id=item.id, failures=failures,
                            error_type=type(exc).__name__)
                time.sleep(pause)
                pause = min(pause * 2, cap)
