"""Durable steps on PostgreSQL (migration 0018, ``sql/queries/steps.sql``): the plans of
the step reads (shared with AsyncPostgresStore), and the worker's fenced step write.

Steps live in ``job_steps``, beside the job: the summaries of ``job_get``, ``job_find`` and
``job_wait`` get them from one more statement (:func:`attach_steps`), made only when there
is a summary to fill, so the statements that read jobs are unchanged.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson

from golemq_pg._types import JobSummary
from golemq_pg.store.port import LeaseRef, StepSweep
from golemq_pg.store.postgres import _rows as rows
from golemq_pg.store.postgres._connections import StoreConnections, retrying, sync_verb
from golemq_pg.store.postgres._plans import Count, Plan, PlanContext, Rows


def job_step_get(ctx: PlanContext, job_id: str) -> Plan[dict[str, Any]]:
    """The stored steps of one job, name -> value (empty: none, or no such job)."""
    number = rows.int_id(job_id)
    if number is None:
        return {}
    found = yield Rows(ctx.queries["job_step_get"], {"id": number})
    text = found[0][0] if found else None
    return {} if text is None else dict(orjson.loads(text))


def attach_steps(ctx: PlanContext, summaries: list[JobSummary]) -> Plan[list[JobSummary]]:
    """``summaries`` with their ``steps`` filled: one statement for all of them, none when
    there are none."""
    if not summaries:
        return summaries
    ids = rows.int_ids([s.id for s in summaries])
    found = yield Rows(ctx.queries["job_step_get_many"], {"ids": ids})
    if not found:
        return summaries
    by_id = {str(job_id): orjson.loads(text) for job_id, text in found}
    return [
        dataclasses.replace(s, steps=by_id[s.id]) if s.id in by_id else s for s in summaries
    ]


def reset_steps(ctx: PlanContext, number: int) -> Plan[int]:
    """Delete one job's steps (``retry(job_id, reset_steps=True)``, inside its transaction)."""
    removed: int = yield Count(ctx.queries["job_step_reset"], {"id": number})
    return removed


def job_step_sweep(ctx: PlanContext, after: str | None, limit: int = 1_000) -> Plan[StepSweep]:
    """One bounded pass of the orphan sweep (see ``job_steps_sweep`` in steps.sql)."""
    start = 0 if after is None else rows.int_id(after)
    args = {"after": start if start is not None else 0, "limit": max(int(limit), 1)}
    removed, last = (yield Rows(ctx.queries["job_steps_sweep"], args, prepare=False))[0]
    return StepSweep(removed=int(removed), after=None if last is None else str(last))


class StepVerbs(StoreConnections):
    """``job_step_get``, ``job_step_save``, ``job_step_sweep`` of PostgresStore (a base of
    the class; the read plans are shared with AsyncPostgresStore)."""

    job_step_get = sync_verb(job_step_get)
    job_step_sweep = sync_verb(job_step_sweep)

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

