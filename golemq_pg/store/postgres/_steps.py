"""Durable steps on PostgreSQL (migration 0018, ``sql/queries/steps.sql``): the plans of
the step reads, shared with AsyncPostgresStore (the worker's fenced write, a method of
PostgresStore only, is in ``_step_verbs``).

Steps live in ``job_steps``, beside the job: the summaries of ``job_get``, ``job_find`` and
``job_wait`` get them from one more statement (:func:`attach_steps`), made only when there
is a summary to fill, so the statements that read jobs are unchanged.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson

from golemq_pg._types import JobSummary
from golemq_pg.store.port import StepSweep
from golemq_pg.store.postgres import _rows as rows
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
