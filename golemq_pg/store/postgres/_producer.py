"""The producer and inspection verbs of the PostgreSQL stores, as plans (see ``_plans``).

``PostgresStore`` runs them on ``psycopg.Connection`` and ``AsyncPostgresStore`` on
``psycopg.AsyncConnection``; the statements, their parameters and the decoding of their
rows are only here.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from golemq_pg._types import JobStatus, JobSummary
from golemq_pg.store.port import EnqueueManyParams, EnqueueParams, EnqueueResult, FindParams
from golemq_pg.store.postgres import _rows as rows
from golemq_pg.store.postgres._plans import (
    Atomic,
    CopyIn,
    Count,
    Plan,
    PlanContext,
    Rows,
    channels,
)
from golemq_pg.store.postgres._steps import attach_steps

#: Most node rows and edges of jobs gone one prune removes (the rest: the next prune).
_GRAPH_PRUNE_BATCH = 10_000

_STATS_KEYS = ("pending", "scheduled", "running", "succeeded", "failed", "waiting")


def enqueue_args(params: EnqueueParams) -> dict[str, Any]:
    """The parameters every insert of one job takes (jobs.sql, workflows.sql)."""
    scope = params.scope
    return {
        "type": params.type,
        "payload": rows.jsonb(params.payload),
        "scope_type": None if scope is None else scope[0],
        "scope_id": None if scope is None else scope[1],
        "run_at": params.run_at,
        "delay": float(params.delay),
        "max_attempts": params.max_attempts,
        "priority": params.priority,
        "tags": None if params.tags is None else list(params.tags),
        "trace_context": rows.trace_jsonb(params.trace_context),
    }


def job_enqueue(ctx: PlanContext, params: EnqueueParams) -> Plan[EnqueueResult]:
    """Insert one job, applying the dedupe rule (a job with parents: ``_workflows``)."""
    args = enqueue_args(params)
    q = ctx.queries
    if params.dedupe_key is None:
        found = yield Rows(q["job_enqueue"], args)
        return EnqueueResult(id=str(found[0][0]), inserted=True)
    args["dedupe_key"] = params.dedupe_key
    args["key_lock_prefix"] = ctx.schema + ":dedupe:"
    if params.on_duplicate == "replace":
        args["grouped"] = params.grouped
        job_id, inserted = (yield Atomic(keyed(ctx, "job_enqueue_replace", args)))[0]
        return EnqueueResult(id=str(job_id), inserted=inserted, replaced=not inserted)
    found = yield Atomic(keyed(ctx, "job_enqueue_reject", args))
    if not found:
        return EnqueueResult(id=None, inserted=False)
    return EnqueueResult(id=str(found[0][0]), inserted=True)


def keyed(ctx: PlanContext, name: str, args: dict[str, Any]) -> Plan[list[tuple[Any, ...]]]:
    """A keyed add: the (type, dedupe_key) advisory lock, then statement ``name``, in one
    transaction: ours, or the caller's, which then holds the lock to its commit (as the
    unique index would hold a second add of the key)."""
    yield Rows(ctx.queries["job_enqueue_key_lock"], args)
    found: list[tuple[Any, ...]] = yield Rows(ctx.queries[name], args)
    return found


def job_enqueue_many(ctx: PlanContext, params: EnqueueManyParams) -> Plan[int]:
    """Insert many jobs of one type with one COPY; returns the count."""
    if not params.payloads:
        return 0
    scope = params.scope
    # No explicit transaction: the COPY is one statement, atomic on its own (on an
    # autocommit connection its own transaction), and the due-time read needs none, so
    # BEGIN and COMMIT would only add two round trips.
    run_at: datetime | None = params.run_at
    if run_at is None and params.delay > 0:
        run_at = (yield Rows(ctx.queries["job_due_at"], {"delay": float(params.delay)}))[0][0]
    fields = [
        rows.copy_field(None if scope is None else scope[0]),
        rows.copy_field(None if scope is None else scope[1]),
    ]
    if run_at is not None:
        fields.append(rows.copy_field(run_at.isoformat()))
    fields += [rows.copy_field(params.max_attempts), rows.copy_field(params.priority)]
    traced = params.trace_context is not None
    if params.tags or traced:
        fields.append(rows.copy_tags(params.tags) if params.tags else b"\\N")
    if traced:
        fields.append(rows.copy_trace(params.trace_context))
    # Every row is "<type>\t<payload>\t<constant tail>\n": built with one join.
    head = rows.copy_field(params.type) + b"\t"
    tail = b"\t" + b"\t".join(fields) + b"\n"
    data = head + rows.copy_join(params.payloads, tail + head) + tail
    name = "job_copy_in_now" if run_at is None else "job_copy_in"
    suffix = "_traced" if traced else "_tagged" if params.tags else ""
    yield CopyIn(ctx.queries[name + suffix], data)
    return len(params.payloads)


def job_get(ctx: PlanContext, job_id: str) -> Plan[JobSummary | None]:
    """One job, or None."""
    number = rows.int_id(job_id)
    if number is None:
        return None
    found = yield Rows(ctx.queries["job_get"], {"id": number})
    if not found:
        return None
    return (yield from attach_steps(ctx, [rows.summary(found[0])]))[0]


def job_get_many(ctx: PlanContext, job_ids: Sequence[int]) -> Plan[list[JobSummary]]:
    """The summaries of those of ``job_ids`` that exist (one statement: the waiters' check)."""
    found = yield Rows(ctx.queries["job_get_many"], {"ids": list(job_ids)})
    return [rows.summary(row) for row in found]


def job_find(ctx: PlanContext, params: FindParams) -> Plan[list[JobSummary]]:
    """Jobs matching the filters, newest first."""
    args = rows.filter_args(params)
    args.update(rows.status_args(params.statuses))
    name = "job_find"
    if params.tags:  # an empty list filters nothing, as on the in-memory store
        args["tags"] = list(params.tags)
        name = "job_find_tagged"
    found = [rows.summary(r) for r in (yield Rows(ctx.queries[name], args))]
    return (yield from attach_steps(ctx, found))


def job_payload(ctx: PlanContext, job_id: str) -> Plan[bytes | None]:
    """One job's payload as its JSON encoding, or None when the job does not exist."""
    number = rows.int_id(job_id)
    if number is None:
        return None
    found = yield Rows(ctx.queries["job_payload"], {"id": number})
    return str(found[0][0]).encode("utf-8") if found else None


def job_count_by_status(ctx: PlanContext) -> Plan[dict[JobStatus, int]]:
    """Counts of every status (0 when none)."""
    counts = dict.fromkeys(JobStatus, 0)
    for status, count in (yield Rows(ctx.queries["job_count_by_status"])):
        counts[JobStatus(status)] = int(count)
    return counts


def job_stats(ctx: PlanContext) -> Plan[dict[str, int]]:
    """pending (due now), scheduled (future), running, succeeded, failed."""
    row = (yield Rows(ctx.queries["job_stats"]))[0]
    return {key: int(value) for key, value in zip(_STATS_KEYS, row, strict=True)}


def job_stats_by_type(ctx: PlanContext) -> Plan[dict[str, dict[str, int]]]:
    """``job_stats`` buckets per job type."""
    return {
        str(row[0]): {key: int(value) for key, value in zip(_STATS_KEYS, row[1:], strict=True)}
        for row in (yield Rows(ctx.queries["job_stats_by_type"]))
    }


def job_oldest_due_age(ctx: PlanContext) -> Plan[float | None]:
    """Seconds the oldest due PENDING job has waited; None when nothing is due."""
    value = (yield Rows(ctx.queries["job_oldest_due_age"]))[0][0]
    return None if value is None else max(float(value), 0.0)


def job_retry_failed(ctx: PlanContext, params: FindParams) -> Plan[int]:
    """FAILED -> PENDING with attempts reset; ``params.limit=None`` means all."""
    jobs_channel = (yield from channels(ctx))[0]
    return int((yield Atomic(_revive(ctx, params, jobs_channel))))


def _revive(ctx: PlanContext, params: FindParams, jobs_channel: str) -> Plan[int]:
    revived = yield Rows(ctx.queries["job_retry_failed"], rows.filter_args(params))
    types = sorted({row[1] for row in revived})
    if types:
        chunks = rows.json_array_chunks(types)
        payload = chunks[0] if len(chunks) == 1 else ""
        yield Count(ctx.queries["notify"], {"channel": jobs_channel, "payload": payload})
    return len(revived)


def job_prune(
    ctx: PlanContext,
    statuses: Sequence[JobStatus],
    *,
    before: datetime | None,
    age: float | None,
    limit: int | None = None,
) -> Plan[int]:
    """Delete finished rows older than the cut-off (``before`` or ``age`` seconds): the
    history's day partitions wholly before it dropped, the rest swept (``history_prune``)."""
    if before is None and age is None:
        raise ValueError("job_prune needs before or age")
    args = {
        "statuses": [JobStatus(s).value for s in statuses],
        "before": before,
        "age": None if age is None else float(age),
        "limit": limit,
    }
    # One statement a dropped day partition (the lock its DROP takes is held until that
    # statement commits, not through the rest of the prune), then one sweep by rows.
    removed = 0
    while True:
        count, dropped = (yield Rows(ctx.queries["job_prune"], args, prepare=False))[0]
        removed += max(int(count), 0)
        if not dropped:
            break
    # The dependency graph of jobs gone (0016): node rows, finished workflows' records, then
    # edges; bounded per call, the rest on the next prune.
    graph = {"before": before, "age": args["age"], "limit": limit or _GRAPH_PRUNE_BATCH}
    yield Rows(ctx.queries["job_nodes_prune"], graph, prepare=False)
    yield Count(ctx.queries["job_deps_prune"], graph)
    return removed


def now(ctx: PlanContext) -> Plan[datetime]:
    """The database clock: ``now()``."""
    value: datetime = (yield Rows(ctx.queries["now"]))[0][0]
    return value
