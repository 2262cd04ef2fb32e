"""The dependency and workflow verbs of the PostgreSQL stores, as plans (see ``_plans``):
enqueueing with parents, ``workflow_create``, ``workflow_get``, ``workflow_cancel`` and
``job_links`` (statements in ``sql/queries/workflows.sql``). The release of children is not
here: the settle trigger on ``jobs`` (0016; a statement trigger walking the graph in a loop
since 0020) does it in the transaction that finishes a parent, whichever verb finishes it.

A job with parents is inserted WAITING and linked by ``link_jobs()`` (0016), which marks and
locks its live parents, records the edges and judges it at once, in the add's transaction.
Unkeyed jobs (a workflow's, many workflows', or one add's) are written by one call of
``insert_job_graphs()`` (0021): one round trip whatever their number; keyed ones keep a
statement or more each.
Marking a parent is a row write: an add whose parent is running under a transactional
handler (its claim transaction holds the row) waits for that transaction to end, up to the
session's ``lock_timeout``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from psycopg import errors as pg_errors

from golemq_pg._types import JobStatus, JobSummary, WorkflowStatus, WorkflowSummary
from golemq_pg.store.port import (
    CancelFilter,
    CancelledJob,
    EnqueueManyParams,
    EnqueueParams,
    EnqueueResult,
    JobLinks,
    WorkflowCreated,
    WorkflowParams,
)
from golemq_pg.store.postgres import _cancel
from golemq_pg.store.postgres import _rows as rows
from golemq_pg.store.postgres._plans import (
    IN_TRANSACTION,
    OWNED,
    Atomic,
    Count,
    Plan,
    PlanContext,
    Rows,
)
from golemq_pg.store.postgres._producer import enqueue_args

#: The statuses of a job still to run.
_LIVE = frozenset({JobStatus.WAITING, JobStatus.PENDING, JobStatus.RUNNING})


def _parent_ids(depends_on: Sequence[str]) -> list[int]:
    ids: list[int] = []
    for item in depends_on:
        number = rows.int_id(item)
        if number is None:
            raise ValueError(f"depends_on: job {item} does not exist")
        ids.append(number)
    return ids


def _check_parents(ctx: PlanContext, parents: list[int]) -> Plan[None]:
    """``ValueError`` naming the first parent that is no job, before any write."""
    if not parents:
        return
    missing = yield Rows(ctx.queries["job_parents_missing"], {"ids": parents})
    if missing:
        raise ValueError(f"depends_on: job {missing[0][0]} does not exist")


def job_enqueue_linked(ctx: PlanContext, params: EnqueueParams) -> Plan[EnqueueResult]:
    """``job_enqueue`` of a job with ``depends_on`` (see the port): the parents checked,
    then the insert and the link in one transaction (unkeyed: one statement)."""
    parents = _parent_ids(params.depends_on)
    yield from _check_parents(ctx, parents)
    if params.dedupe_key is None:
        _, ((job_id,),) = yield from _insert_graphs(ctx, [(None, [(params, ())])])
        return EnqueueResult(id=str(job_id), inserted=True)
    result: EnqueueResult = yield Atomic(_insert_linked(ctx, params, parents, None))
    return result


def _insert_linked(
    ctx: PlanContext, params: EnqueueParams, parents: list[int], workflow: int | None
) -> Plan[EnqueueResult]:
    """One job inserted WAITING (the dedupe rule applied, WAITING holders included) and
    linked; a replaced holder keeps its own parents (and joins ``workflow``)."""
    q = ctx.queries
    args = enqueue_args(params)
    args["dedupe_key"] = params.dedupe_key
    if params.dedupe_key is None:
        found = yield Rows(q["job_insert_waiting"], args)
    else:
        args["key_lock_prefix"] = ctx.schema + ":dedupe:"
        yield Rows(q["job_enqueue_key_lock"], args)
        if params.on_duplicate == "replace":
            args["grouped"] = params.grouped
            held = yield Rows(q["job_replace_held"], args)
            if held:
                if workflow is not None:  # it joins the workflow, keeping its own parents
                    yield Rows(q["job_node_join_workflow"],
                               {"id": held[0][0], "workflow": workflow})
                return EnqueueResult(id=str(held[0][0]), inserted=False, replaced=True)
            found = yield Rows(q["job_insert_waiting"], args)
        else:
            found = yield Rows(q["job_insert_waiting_reject"], args)
            if not found:
                return EnqueueResult(id=None, inserted=False)
    job_id = found[0][0]
    yield from _link(ctx, [job_id], parents, params.on_parent_failure, workflow)
    return EnqueueResult(id=str(job_id), inserted=True)


#: One group of :func:`_insert_graphs`: the workflow's name (None: no workflow) and its
#: jobs, each with the indexes of the earlier jobs of the group it waits for.
Group = tuple[str | None, Sequence[tuple[EnqueueParams, Sequence[int]]]]

_COLUMNS = ("groups", "types", "payloads", "scope_types", "scope_ids", "run_ats", "delays",
            "max_attempts", "priorities", "trace_contexts", "policies", "edge_parents",
            "edge_children", "outside_parents", "outside_children")


def _insert_graphs(
    ctx: PlanContext, groups: Sequence[Group]
) -> Plan[tuple[list[int | None], list[list[int]]]]:
    """Unkeyed jobs in groups, their links and verdicts, and a workflow record per named
    group: one statement (``insert_job_graphs``, 0021), so one round trip whatever the
    number of jobs and of groups. Returns the workflow id of each group (None without a
    name) and each group's job ids in order."""
    columns: dict[str, list[Any]] = {key: [] for key in _COLUMNS}
    tags: list[list[str] | None] = []
    offset = 0
    for number, (_, jobs) in enumerate(groups):
        for index, (job, after) in enumerate(jobs):
            _add_columns(columns, job, number)
            tags.append(None if job.tags is None else list(job.tags))
            for parent in dict.fromkeys(after):
                columns["edge_parents"].append(offset + parent)
                columns["edge_children"].append(offset + index)
            for outside in dict.fromkeys(_parent_ids(job.depends_on)):
                columns["outside_parents"].append(outside)
                columns["outside_children"].append(offset + index)
        offset += len(jobs)
    args: dict[str, Any] = {"names": [name for name, _ in groups],
                            "tags": rows.json_value(tags), **columns}
    try:
        found = yield Rows(ctx.queries["job_graphs_insert"], args)
    except pg_errors.ForeignKeyViolation as exc:  # an outside parent pruned since the check
        raise ValueError(str(exc.diag.message_primary or "depends_on: unknown job")) from None
    workflows, job_ids = found[0]
    ids = [int(i) for i in job_ids]
    split: list[list[int]] = []
    offset = 0
    for _, jobs in groups:
        split.append(ids[offset:offset + len(jobs)])
        offset += len(jobs)
    return [None if w is None else int(w) for w in workflows], split


def _add_columns(columns: dict[str, list[Any]], job: EnqueueParams, group: int) -> None:
    scope = job.scope
    columns["groups"].append(group)
    columns["types"].append(job.type)
    columns["payloads"].append(job.payload.decode("utf-8"))
    columns["scope_types"].append(None if scope is None else scope[0])
    columns["scope_ids"].append(None if scope is None else scope[1])
    columns["run_ats"].append(job.run_at)
    columns["delays"].append(float(job.delay))
    columns["max_attempts"].append(job.max_attempts)
    columns["priorities"].append(job.priority)
    columns["trace_contexts"].append(rows.trace_text(job.trace_context))
    columns["policies"].append(job.on_parent_failure)


def _link(
    ctx: PlanContext, children: list[int], parents: list[int], policy: str,
    workflow: int | None,
) -> Plan[None]:
    args = {"children": children, "parents": parents, "policy": policy, "workflow": workflow}
    try:
        yield Rows(ctx.queries["job_link"], args)
    except pg_errors.ForeignKeyViolation as exc:  # a parent pruned since the check
        raise ValueError(str(exc.diag.message_primary or "depends_on: unknown job")) from None


def job_enqueue_many_linked(ctx: PlanContext, params: EnqueueManyParams) -> Plan[int]:
    """``job_enqueue_many`` of jobs with ``depends_on`` (see the port): one INSERT of every
    job WAITING and one link, in one transaction."""
    if not params.payloads:
        return 0
    parents = _parent_ids(params.depends_on)
    yield from _check_parents(ctx, parents)
    scope = params.scope
    args: dict[str, Any] = {
        "type": params.type,
        "payloads": [p.decode("utf-8") for p in params.payloads],
        "scope_type": None if scope is None else scope[0],
        "scope_id": None if scope is None else scope[1],
        "run_at": params.run_at,
        "delay": float(params.delay),
        "max_attempts": params.max_attempts,
        "priority": params.priority,
        "tags": None if params.tags is None else list(params.tags),
        "trace_context": rows.trace_jsonb(params.trace_context),
    }
    count: int = yield Atomic(_insert_many(ctx, args, parents, params.on_parent_failure))
    return count


def _insert_many(
    ctx: PlanContext, args: dict[str, Any], parents: list[int], policy: str
) -> Plan[int]:
    found = yield Rows(ctx.queries["job_insert_waiting_many"], args)
    ids = [row[0] for row in found]
    yield from _link(ctx, ids, parents, policy, None)
    return len(ids)


def _check_workflow(params: WorkflowParams, number: int | None) -> list[int]:
    """``ValueError`` for a workflow without jobs or with an ``after`` that names no
    earlier job (``number``: its position in a list, None for a single one); returns the
    ids of the outside jobs it waits for."""
    if not params.jobs:
        raise ValueError("the workflow has no jobs" if number is None
                         else f"workflow {number} has no jobs")
    external: list[int] = []
    for index, job in enumerate(params.jobs):
        if any(not 0 <= a < index for a in job.after):
            where = "workflow" if number is None else f"workflow {number}"
            raise ValueError(f"{where} job {index}: after must name earlier jobs")
        external += _parent_ids(job.job.depends_on)
    return external


def workflow_create(ctx: PlanContext, params: WorkflowParams) -> Plan[WorkflowCreated]:
    """A workflow and its jobs, in one transaction (see the port). In a caller's open
    transaction the writes are made under a savepoint, so a failure leaves none of them."""
    created: list[WorkflowCreated] = yield from workflow_create_many(
        ctx, [params], single=True)
    return created[0]


def workflow_create_many(
    ctx: PlanContext, params: Sequence[WorkflowParams], *, single: bool = False
) -> Plan[list[WorkflowCreated]]:
    """Workflows and their jobs, all or nothing, in one transaction (see the port):
    unkeyed ones in one statement, whatever their number. In a caller's open transaction
    the writes are made under a savepoint, so a failure leaves none of them. ``single``:
    one workflow (the errors name "the workflow", not its position)."""
    if not params:
        return []
    external: list[int] = []
    for number, one in enumerate(params):
        external += _check_workflow(one, None if single else number)
    yield from _check_parents(ctx, sorted(set(external)))
    # Unkeyed jobs: one statement, atomic by itself. Keyed ones: a statement or more per
    # job (the advisory lock of the key, reject or replace) in one transaction.
    keyed = any(job.job.dedupe_key is not None for one in params for job in one.jobs)
    savepoint = bool((yield IN_TRANSACTION)) and not (yield OWNED)
    if not savepoint:
        created: list[WorkflowCreated] = (
            (yield Atomic(_create_each(ctx, params))) if keyed
            else (yield from _create_graphs(ctx, params)))
        return created
    q = ctx.queries
    yield Count(q["workflow_savepoint"])
    try:
        created = (
            (yield Atomic(_create_each(ctx, params))) if keyed
            else (yield from _create_graphs(ctx, params)))
    except BaseException:
        yield Count(q["workflow_savepoint_rollback"])
        raise
    yield Count(q["workflow_savepoint_release"])
    return created


def _create_graphs(
    ctx: PlanContext, params: Sequence[WorkflowParams]
) -> Plan[list[WorkflowCreated]]:
    workflows, ids = yield from _insert_graphs(
        ctx, [(one.name, [(job.job, job.after) for job in one.jobs]) for one in params])
    return [WorkflowCreated(id=str(workflow), job_ids=tuple(str(i) for i in job_ids))
            for workflow, job_ids in zip(workflows, ids, strict=True)]


def _create_each(
    ctx: PlanContext, params: Sequence[WorkflowParams]
) -> Plan[list[WorkflowCreated]]:
    created: list[WorkflowCreated] = []
    for one in params:
        created.append((yield from _create(ctx, one)))
    return created


def _create(ctx: PlanContext, params: WorkflowParams) -> Plan[WorkflowCreated]:
    workflow = (yield Rows(ctx.queries["workflow_insert"], {"name": params.name}))[0][0]
    ids: list[int] = []
    for index, job in enumerate(params.jobs):
        parents = [ids[a] for a in job.after] + _parent_ids(job.job.depends_on)
        result = yield from _insert_linked(ctx, job.job, list(dict.fromkeys(parents)), workflow)
        if result.id is None:
            raise ValueError(
                f"workflow job {index} (type {job.job.type}) is a duplicate of a live job")
        ids.append(int(result.id))
    return WorkflowCreated(id=str(workflow), job_ids=tuple(str(i) for i in ids))


def workflow_get(ctx: PlanContext, workflow_id: str) -> Plan[WorkflowSummary | None]:
    """One workflow, or None (see the port): one statement."""
    number = rows.int_id(workflow_id)
    if number is None:
        return None
    found = yield Rows(ctx.queries["workflow_get"], {"id": number})
    if not found:
        return None
    _, name, created_at, cancelled_at = found[0][:4]
    jobs: list[JobSummary] = []
    edges: list[tuple[int, int]] = []
    for row in found:
        kind = row[4]
        if kind == "job":
            jobs.append(rows.summary(row[7:]))
        elif kind == "edge":
            edges.append((int(row[5]), int(row[6])))
    jobs.sort(key=lambda j: int(j.id))
    status, finished_at = _workflow_state(jobs, created_at, cancelled_at)
    return WorkflowSummary(
        id=str(number), name=str(name), status=status, created_at=created_at,
        finished_at=finished_at, jobs=jobs,
        edges=[(str(p), str(c)) for p, c in sorted(edges)],
    )


def _workflow_state(
    jobs: list[JobSummary], created_at: datetime, cancelled_at: datetime | None
) -> tuple[WorkflowStatus, datetime | None]:
    if cancelled_at is not None:
        return "cancelled", cancelled_at
    if any(j.status in _LIVE for j in jobs):
        return "running", None
    finished = [j.finished_at for j in jobs if j.finished_at is not None]
    end = max(finished) if finished else created_at
    if any(j.status is JobStatus.FAILED for j in jobs):
        return "failed", end
    return "succeeded", end


def workflow_cancel(ctx: PlanContext, workflow_id: str) -> Plan[list[CancelledJob]]:
    """Cancel a workflow's live jobs as ``job_cancel`` does, then mark it cancelled when
    any was (see the port)."""
    number = rows.int_id(workflow_id)
    if number is None:
        return []
    live = yield Rows(ctx.queries["workflow_members_live"], {"id": number})
    if not live:
        return []
    selector = CancelFilter(job_ids=[str(row[0]) for row in live])
    cancelled: list[CancelledJob] = yield from _cancel.job_cancel(
        ctx, selector, "workflow cancelled")
    if cancelled:
        yield Rows(ctx.queries["workflow_mark_cancelled"], {"id": number})
    return cancelled


def job_links(ctx: PlanContext, job_id: str) -> Plan[JobLinks]:
    """A job's workflow, parents and children (see the port): one statement."""
    number = rows.int_id(job_id)
    if number is None:
        return JobLinks()
    found = yield Rows(ctx.queries["job_links"], {"id": number})
    if not found:
        return JobLinks()
    workflow, children = found[0][0], found[0][1]
    parents = tuple(rows.summary(row[2:]) for row in found if row[2] is not None)
    return JobLinks(
        workflow_id=None if workflow is None else str(workflow),
        parents=parents,
        children=tuple(str(c) for c in children or ()),
    )


def job_parents_many(ctx: PlanContext, job_ids: Sequence[str]) -> Plan[dict[str, JobLinks]]:
    """The workflow and parents of each job that has any (see the port): one statement,
    each parent read once however many of the jobs share it."""
    numbers = [n for n in (rows.int_id(i) for i in job_ids) if n is not None]
    if not numbers:
        return {}
    found = yield Rows(ctx.queries["job_parents_many"], {"ids": numbers})
    summaries = {row[4]: rows.summary(row[4:]) for row in found if row[0] == "parent"}
    workflows: dict[str, int | None] = {}
    parents: dict[str, list[JobSummary]] = {}
    for row in found:
        if row[0] != "edge":
            continue
        job_id = str(row[1])
        workflows[job_id] = row[2]
        mine = parents.setdefault(job_id, [])
        summary = summaries.get(row[3])
        if summary is not None:  # NULL: no parents; absent: a parent gone
            mine.append(summary)
    return {
        job_id: JobLinks(
            workflow_id=None if workflow is None else str(workflow),
            parents=tuple(sorted(parents[job_id], key=lambda p: int(p.id))),
        )
        for job_id, workflow in workflows.items()
    }
