"""The producer logic of :class:`~golemq_pg.Queue` and :class:`~golemq_pg.AsyncQueue`,
written once: every method's validation, the store call it makes and what it returns.

Each public method is a plan (a generator, as the store verbs of
``golemq_pg.store.postgres._plans`` are): it validates its arguments before anything else
(bad input raises ``ValueError`` or ``QueuePayloadError`` and changes nothing), yields the
:class:`~golemq_pg.store.calls.StoreCall` it needs (``yield from calls.job_get(...)``) and
receives its result, typed, then notifies observers and returns. ``Queue`` runs the calls
on a synchronous store, ``AsyncQueue`` awaits them on an ``AsyncPostgresStore``; nothing
else differs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal, overload

from golemq_pg import _trace_hook
from golemq_pg._schedule import check_cron, check_timezone, next_cron_tick, resumed_tick
from golemq_pg._types import (
    Duration,
    JobStatus,
    JobSummary,
    JobType,
    MaxAttempts,
    ParentFailurePolicy,
    ScheduleSummary,
    ScopeLike,
    Transition,
    WorkerSummary,
    WorkflowRun,
    WorkflowSummary,
)
from golemq_pg._validation import (
    check_aware,
    check_every,
    check_int,
    check_job_id,
    check_job_type,
    check_name,
    check_positive_int,
    check_required_scope,
    check_scope,
    check_statuses,
    check_tags,
    check_text,
    check_timestamp,
    encode_payload,
    encode_payloads,
    to_seconds,
)
from golemq_pg.queue.core import (
    P,
    QueueCore,
    QueuePlan,
    _InferPayloadLast,
)
from golemq_pg.store import calls
from golemq_pg.store.port import (
    EnqueueManyParams,
    EnqueueParams,
    EnqueueResult,
    FindParams,
    ScheduleParams,
    WorkflowCreated,
    WorkflowJobParams,
    WorkflowParams,
)
from golemq_pg.workflow import (
    MAX_WORKFLOW_JOBS,
    JobSpec,
    Workflow,
    check_depends_on,
    check_policy,
    check_policy_has_parents,
    job_spec,
    when,
)

#: The smallest step of a timestamp: a cron tick exactly at ``start_at`` is its first one.
_TICK = timedelta(microseconds=1)


@overload
def add(
    q: QueueCore[Any],
    job_type: JobType[P],
    payload: P | _InferPayloadLast[P],
    *,
    scope: ScopeLike | None = ...,
    dedupe_key: str | None = ...,
    on_duplicate: Literal["reject", "replace"] = ...,
    run_at: datetime | None = ...,
    delay: Duration | None = ...,
    max_attempts: MaxAttempts = ...,
    priority: int = ...,
    tags: Iterable[str] | None = ...,
    depends_on: Sequence[str] | None = ...,
    on_parent_failure: ParentFailurePolicy = ...,
    connection: Any = ...,
) -> QueuePlan[str | None]: ...


@overload
def add(
    q: QueueCore[Any],
    job_type: str,
    payload: Mapping[str, Any],
    *,
    scope: ScopeLike | None = ...,
    dedupe_key: str | None = ...,
    on_duplicate: Literal["reject", "replace"] = ...,
    run_at: datetime | None = ...,
    delay: Duration | None = ...,
    max_attempts: MaxAttempts = ...,
    priority: int = ...,
    tags: Iterable[str] | None = ...,
    depends_on: Sequence[str] | None = ...,
    on_parent_failure: ParentFailurePolicy = ...,
    connection: Any = ...,
) -> QueuePlan[str | None]: ...


def add(
    q: QueueCore[Any],
    job_type: str | JobType[Any],
    payload: Mapping[str, Any],
    *,
    scope: ScopeLike | None = None,
    dedupe_key: str | None = None,
    on_duplicate: Literal["reject", "replace"] = "reject",
    run_at: datetime | None = None,
    delay: Duration | None = None,
    max_attempts: MaxAttempts = None,
    priority: int = 0,
    tags: Iterable[str] | None = None,
    depends_on: Sequence[str] | None = None,
    on_parent_failure: ParentFailurePolicy = "fail",
    connection: Any = None,
) -> QueuePlan[str | None]:
    """Enqueue one job; returns its id, or None when rejected as a duplicate.

    ``on_duplicate="replace"`` needs a ``dedupe_key`` (``ValueError`` without one).
    With ``connection`` (a psycopg connection) the row is written inside the caller's
    transaction and becomes visible when the caller commits. ``tags``: at most 16 labels
    for :meth:`find` (duplicates collapse); a replacing add replaces them with the
    payload. ``max_attempts``: a positive int, ``UNLIMITED`` (retried until it succeeds,
    fails terminally or is cancelled), or None: the JobType's, else the queue's
    ``default_max_attempts``.

    ``depends_on``: ids of jobs this one waits for: it is ``WAITING`` until every one
    has SUCCEEDED (one already SUCCEEDED counts as done), then due in the same transaction
    as the last one's completion. An id of no existing job raises ``ValueError`` and
    writes nothing; a grouped JobType cannot have parents. ``on_parent_failure``: what a
    parent that fails (or is cancelled) does to it: ``"fail"`` (default: dead-lettered,
    ``last_error`` naming the parent), ``"cancel"`` (cancelled) or ``"run"`` (due anyway);
    a parent already FAILED applies it at once.
    """
    spec = job_spec(
        job_type, payload, scope=scope, dedupe_key=dedupe_key, on_duplicate=on_duplicate,
        run_at=run_at, delay=delay, max_attempts=max_attempts, priority=priority, tags=tags,
        on_parent_failure=on_parent_failure,
    )
    parents = check_depends_on(depends_on)
    if parents and spec.grouped:
        raise ValueError(f"job type {spec.type!r} is grouped: it cannot have depends_on")
    check_policy_has_parents(spec.on_parent_failure, bool(parents), "depends_on")
    params = _enqueue_params(q, spec, parents)
    name, scope_v = spec.type, spec.scope
    result: EnqueueResult
    tracer = _trace_hook.tracer
    if tracer is None:
        result = yield from calls.job_enqueue(params, connection=connection)
    else:  # golemq_pg.tracing: a send span around the insert, its context stored
        with tracer.send(name) as span:
            params = dataclasses.replace(params, trace_context=span.carrier)
            result = yield from calls.job_enqueue(params, connection=connection)
            span.sent(result.id)
    if result.id is not None and result.inserted and q.observers:
        q._notify(Transition(result.id, name, scope_v, "enqueued", 0))
    return result.id


@overload
def add_many(
    q: QueueCore[Any],
    job_type: JobType[P],
    payloads: Iterable[P | _InferPayloadLast[P]],
    *,
    scope: ScopeLike | None = ...,
    max_attempts: MaxAttempts = ...,
    priority: int = ...,
    run_at: datetime | None = ...,
    delay: Duration | None = ...,
    tags: Iterable[str] | None = ...,
    depends_on: Sequence[str] | None = ...,
    on_parent_failure: ParentFailurePolicy = ...,
    connection: Any = ...,
) -> QueuePlan[int]: ...


@overload
def add_many(
    q: QueueCore[Any],
    job_type: str,
    payloads: Iterable[Mapping[str, Any]],
    *,
    scope: ScopeLike | None = ...,
    max_attempts: MaxAttempts = ...,
    priority: int = ...,
    run_at: datetime | None = ...,
    delay: Duration | None = ...,
    tags: Iterable[str] | None = ...,
    depends_on: Sequence[str] | None = ...,
    on_parent_failure: ParentFailurePolicy = ...,
    connection: Any = ...,
) -> QueuePlan[int]: ...


def add_many(
    q: QueueCore[Any],
    job_type: str | JobType[Any],
    payloads: Iterable[Mapping[str, Any]],
    *,
    scope: ScopeLike | None = None,
    max_attempts: MaxAttempts = None,
    priority: int = 0,
    run_at: datetime | None = None,
    delay: Duration | None = None,
    tags: Iterable[str] | None = None,
    depends_on: Sequence[str] | None = None,
    on_parent_failure: ParentFailurePolicy = "fail",
    connection: Any = None,
) -> QueuePlan[int]:
    """Enqueue many jobs of one type in one round trip (COPY); returns how many.

    Every payload is validated first: one bad payload rejects the whole call. ``tags``
    (as for :meth:`add`) go on every job. ``depends_on`` / ``on_parent_failure``: as for
    :meth:`add`; every job of the batch waits for the same parents.
    """
    name = check_job_type(job_type)
    scope_v = check_scope(scope)
    grouped = isinstance(job_type, JobType) and job_type.grouped
    if grouped and scope_v is None:
        raise ValueError(f"job type {name!r} is grouped: add_many() needs a scope")
    if isinstance(payloads, Mapping | str | bytes):
        raise ValueError("payloads must be an iterable of mappings, not a single value")
    run_at_v, delay_s = when(run_at, delay)
    attempts = q._max_attempts(max_attempts, job_type)
    prio = check_int(priority, "priority")
    tags_v = check_tags(tags)
    policy = check_policy(on_parent_failure)
    parents = check_depends_on(depends_on)
    if parents and grouped:
        raise ValueError(f"job type {name!r} is grouped: it cannot have depends_on")
    check_policy_has_parents(policy, bool(parents), "depends_on")
    encoded = encode_payloads(name, payloads)
    if not encoded:
        return 0
    params = EnqueueManyParams(
        type=name,
        payloads=encoded,
        scope=scope_v,
        run_at=run_at_v,
        delay=delay_s,
        max_attempts=attempts,
        priority=prio,
        tags=tags_v,
        depends_on=parents,
        on_parent_failure=policy,
    )
    count: int
    tracer = _trace_hook.tracer
    if tracer is None:
        count = yield from calls.job_enqueue_many(params, connection=connection)
        return count
    with tracer.send(name, len(encoded)) as span:  # one span and context for the call
        params = dataclasses.replace(params, trace_context=span.carrier)
        count = yield from calls.job_enqueue_many(params, connection=connection)
    return count


def _enqueue_params(q: QueueCore[Any], spec: JobSpec, parents: tuple[str, ...]) -> EnqueueParams:
    """The store's parameters of one checked job (the queue's default budget resolved)."""
    return EnqueueParams(
        type=spec.type,
        payload=spec.payload,
        scope=spec.scope,
        dedupe_key=spec.dedupe_key,
        on_duplicate=spec.on_duplicate,
        run_at=spec.run_at,
        delay=spec.delay,
        max_attempts=q._max_attempts(spec.max_attempts, spec.job_type),
        priority=spec.priority,
        tags=spec.tags,
        grouped=spec.grouped,
        depends_on=parents,
        on_parent_failure=spec.on_parent_failure,
    )


# -- workflows ---------------------------------------------------------------------------


def add_workflow(
    q: QueueCore[Any], workflow: Workflow, connection: Any = None
) -> QueuePlan[WorkflowRun]:
    """Add every job of ``workflow`` (a :class:`~golemq_pg.Workflow`) in one transaction;
    returns a :class:`~golemq_pg.WorkflowRun` (its id, and each node's job id).

    A job waits for the nodes it was added ``after`` (``WAITING``); the others are due as
    for ``add``. With ``connection`` the workflow commits (or rolls back) with the
    caller's transaction. A job rejected as a duplicate (``on_duplicate="reject"`` with
    its key held) fails the whole call with ``ValueError``, writing nothing. An empty
    workflow raises ``ValueError``. Many workflows at once: :meth:`add_workflows`.
    """
    if not isinstance(workflow, Workflow):
        raise ValueError("add_workflow() takes a Workflow")
    if not workflow.jobs:
        raise ValueError("the workflow has no jobs")
    created = yield from calls.workflow_create(_workflow_params(q, workflow),
                                               connection=connection)
    _announce_workflow(q, workflow, created)
    return WorkflowRun(created.id, {
        job.node: job_id for job, job_id in zip(workflow.jobs, created.job_ids, strict=True)})


def add_workflows(
    q: QueueCore[Any], workflows: Sequence[Workflow], *, connection: Any = None
) -> QueuePlan[list[str]]:
    """Add many workflows at once, atomically: every job of every workflow, or nothing;
    returns the workflows' ids, in order (``queue.workflow(id)`` reads one back).

    Each workflow is written as :meth:`add_workflow` writes it; workflows whose jobs have
    no ``dedupe_key`` are written together in one statement, whatever their number (the
    fast way to add thousands). With ``connection`` they commit (or roll back) with the
    caller's transaction. An empty list returns ``[]``. ``ValueError``, before any write:
    an item that is not a :class:`~golemq_pg.Workflow`, the same ``Workflow`` object twice,
    a workflow without jobs, more than 10,000 jobs in all (as one workflow may hold); and,
    writing nothing, a job rejected as a duplicate or a ``depends_on`` naming no job.
    """
    if isinstance(workflows, Workflow) or not isinstance(workflows, Sequence):
        raise ValueError("add_workflows() takes a list of Workflow objects")
    seen: set[int] = set()
    total = 0
    for number, workflow in enumerate(workflows):
        if not isinstance(workflow, Workflow):
            raise ValueError(f"add_workflows(): item {number} is not a Workflow")
        if id(workflow) in seen:
            raise ValueError(f"add_workflows(): item {number} is a Workflow given twice")
        seen.add(id(workflow))
        if not workflow.jobs:
            raise ValueError(f"add_workflows(): workflow {number} has no jobs")
        total += len(workflow.jobs)
    if total > MAX_WORKFLOW_JOBS:
        raise ValueError(f"add_workflows() writes at most {MAX_WORKFLOW_JOBS} jobs in one call "
                         f"({total} given): split the list")
    if not workflows:
        return []
    created = yield from calls.workflow_create_many(
        [_workflow_params(q, workflow) for workflow in workflows], connection=connection)
    for workflow, one in zip(workflows, created, strict=True):
        _announce_workflow(q, workflow, one)
    return [one.id for one in created]


def _workflow_params(q: QueueCore[Any], workflow: Workflow) -> WorkflowParams:
    return WorkflowParams(
        name=workflow.name,
        jobs=tuple(
            WorkflowJobParams(_enqueue_params(q, job.spec, ()), job.after)
            for job in workflow.jobs
        ),
    )


def _announce_workflow(q: QueueCore[Any], workflow: Workflow, created: WorkflowCreated) -> None:
    if q.observers:
        for job, job_id in zip(workflow.jobs, created.job_ids, strict=True):
            q._notify(Transition(job_id, job.spec.type, job.spec.scope, "enqueued", 0))


def workflow(q: QueueCore[Any], workflow_id: str) -> QueuePlan[WorkflowSummary | None]:
    """One workflow (:class:`~golemq_pg.WorkflowSummary`: status, jobs, edges), or None
    when no workflow has that id (never created, or pruned)."""
    found: WorkflowSummary | None = yield from calls.workflow_get(
        _check_workflow_id(workflow_id)
    )
    return found


def _check_workflow_id(workflow_id: object) -> str:
    try:
        return check_job_id(workflow_id)
    except ValueError:
        raise ValueError("workflow_id must be a workflow id as add_workflow() returns it") from None


# -- schedules ---------------------------------------------------------------------------


def schedule(
    q: QueueCore[Any],
    key: str,
    job_type: str | JobType[Any],
    payload: Mapping[str, Any],
    *,
    cron: str | None = None,
    every: Duration | None = None,
    timezone: str = "UTC",
    repeat_from: Literal["finished", "run_at"] = "finished",
    start_at: datetime | None = None,
    scope: ScopeLike | None = None,
    priority: int = 0,
    max_attempts: MaxAttempts = None,
) -> QueuePlan[None]:
    """Declare (or update) a recurring schedule; idempotent across processes by ``key``.

    Every process may declare the same schedule at start-up: the first declaration
    creates it, later ones update its type, payload, scope, priority and attempts, and
    keep its pending tick unless the timing (cron, every, timezone, repeat_from)
    changed. The first job is due at the first cron tick at or after ``start_at`` (or
    after now), or for ``every`` at ``start_at`` (or at once). See
    :mod:`golemq_pg._schedule` for the cadence rules and what happens after downtime.
    ``timezone`` is read by cron schedules only and ``repeat_from`` by ``every``
    schedules only: giving either to the other kind raises ``ValueError``.
    ``max_attempts`` (else the JobType's) is each tick's budget; without one, each tick's
    job gets the ``default_max_attempts`` of the worker that fires it (the jobs a worker
    enqueues itself follow its default, as a queue's follow the queue's).
    """
    check_name(key, "schedule key")
    name = check_job_type(job_type)
    scope_v = check_scope(scope)
    if isinstance(job_type, JobType) and job_type.grouped and scope_v is None:
        raise ValueError(f"job type {name!r} is grouped: schedule() needs a scope")
    if (cron is None) == (every is None):
        raise ValueError("give exactly one of cron= or every=")
    if repeat_from not in ("finished", "run_at"):
        raise ValueError("repeat_from must be 'finished' or 'run_at'")
    for text, what in ((cron, "cron"), (timezone, "timezone")):
        if isinstance(text, str):  # their own checks refuse other types
            check_text(text, what)
    check_timezone(timezone)
    # Options that only one kind of schedule reads are refused on the other, never ignored.
    if every is not None and timezone != "UTC":
        raise ValueError("timezone applies to cron= schedules only: every= counts seconds, "
                         "whatever the zone")
    if cron is not None and repeat_from != "finished":
        raise ValueError("repeat_from applies to every= schedules only: a cron= schedule "
                         "fires at its cron ticks")
    start: datetime | None = None
    if start_at is not None:
        start = check_timestamp(start_at, "start_at")
    every_s = check_every(every) if every is not None else None
    prio = check_int(priority, "priority")
    # No budget given (nor on the JobType): each tick takes the default of whoever enqueues
    # it (the firing worker's default_max_attempts).
    attempts = q._max_attempts(max_attempts, job_type, default=False)
    encoded = encode_payload(name, payload)
    now = yield from calls.now()
    first: datetime | None = start
    if cron is not None:
        check_cron(cron, timezone, now)
        # The first tick after now, or at or after a future start_at (the cron search
        # is strictly after its argument, so a tick exactly at start_at counts).
        after = now if start is None or start <= now else start - _TICK
        first = next_cron_tick(cron, timezone, after)
    yield from calls.schedule_upsert(ScheduleParams(
            key=key,
            type=name,
            payload=encoded,
            cron=cron,
            every_seconds=every_s,
            timezone=timezone,
            repeat_from=repeat_from,
            first_run_at=first,
            scope=scope_v,
            priority=prio,
            max_attempts=attempts,
        ),
    )


def unschedule(q: QueueCore[Any], key: str) -> QueuePlan[bool]:
    """Remove a schedule; True when it existed. Jobs it already enqueued stay."""
    found: bool = yield from calls.schedule_delete(check_name(key, "schedule key"))
    return found


def schedules(q: QueueCore[Any]) -> QueuePlan[list[ScheduleSummary]]:
    """Every declared schedule."""
    found: list[ScheduleSummary] = yield from calls.schedule_list()
    return found


def run_schedule_now(q: QueueCore[Any], key: str) -> QueuePlan[bool]:
    """Enqueue one job of schedule ``key`` now, as its tick would (same type, payload,
    scope, priority, attempts), even when the schedule is paused. Its cadence is kept (a
    ``repeat_from="finished"`` schedule counts its next run from this job's finish); a
    schedule without a budget of its own gives this job the queue's default. False for an
    unknown key."""
    found: str | None = yield from calls.schedule_run_now(
        check_name(key, "schedule key"), q.default_max_attempts
    )
    return found is not None


def pause_schedule(q: QueueCore[Any], key: str) -> QueuePlan[bool]:
    """Stop schedule ``key`` from firing until :meth:`resume_schedule`
    (``ScheduleSummary.paused``); jobs it already enqueued stay. False for an unknown key."""
    found: bool = yield from calls.schedule_pause(check_name(key, "schedule key"))
    return found


def resume_schedule(q: QueueCore[Any], key: str) -> QueuePlan[bool]:
    """Let a paused schedule fire again. The ticks it missed while paused are skipped:
    its next run is its first tick after now (an interval schedule repeating from the
    finish runs one interval after now), never a burst. False for an unknown key."""
    found: bool = yield from calls.schedule_resume(
        check_name(key, "schedule key"), resumed_tick
    )
    return found


# -- inspection and administration -------------------------------------------------------


def get(q: QueueCore[Any], job_id: str) -> QueuePlan[JobSummary | None]:
    """One job by id, or None."""
    found: JobSummary | None = yield from calls.job_get(check_job_id(job_id))
    return found


def wait(
    q: QueueCore[Any], job_id: str, *, timeout: Duration | None = None
) -> QueuePlan[JobSummary]:
    """Block until the job is terminal (SUCCEEDED or FAILED) and return its summary.

    ``timeout``: seconds or a timedelta (None: no limit, 0: look once). Raises
    ``TimeoutError`` past it, ``LookupError`` when the job does not exist or is deleted
    (cancelled, pruned, ``delete_on``) while waited for, and ``ValueError`` for a bad id
    or timeout, before anything else. Woken by the store's completion and cancel hints,
    with a poll as the fallback; on PostgreSQL every waiting thread of a store shares one
    listening connection and holds no pooled connection while it waits.
    """
    job = check_job_id(job_id)
    seconds = None if timeout is None else to_seconds(timeout, "timeout")
    found: JobSummary = yield from calls.job_wait(job, seconds)
    return found


def find_for_scope(q: QueueCore[Any], scope: ScopeLike) -> QueuePlan[list[JobSummary]]:
    """Every job of ``scope`` (newest first)."""
    scope_v = check_required_scope(scope)
    params = FindParams(scope_type=scope_v.type, scope_id=scope_v.id, limit=None)
    found: list[JobSummary] = yield from calls.job_find(params)
    return found


def find(
    q: QueueCore[Any],
    *,
    types: Sequence[str | JobType[Any]] | None = None,
    statuses: Sequence[JobStatus | str] | None = None,
    scope_type: str | None = None,
    scope_id: str | None = None,
    limit: int = 100,
    skip: int = 0,
    tags: Iterable[str] | None = None,
) -> QueuePlan[list[JobSummary]]:
    """Jobs matching every given filter, newest first; with ``tags``, only jobs carrying
    every listed tag. Statuses are accepted in any case ("FAILED", "failed")."""
    params = _find_params(types, statuses, scope_type, scope_id, limit, skip, need_limit=True)
    tags_v = check_tags(tags)
    if tags_v is not None:
        params = dataclasses.replace(params, tags=tags_v)
    found: list[JobSummary] = yield from calls.job_find(params)
    return found


def workers(q: QueueCore[Any]) -> QueuePlan[list[WorkerSummary]]:
    """Every registered worker (running, stopping, or lost: no heartbeat for three of its
    intervals), by id. A cleanly stopped worker is not listed."""
    found: list[WorkerSummary] = yield from calls.worker_list()
    return found


def count_by_status(q: QueueCore[Any]) -> QueuePlan[dict[JobStatus, int]]:
    """How many jobs are in each status (every status present)."""
    found: dict[JobStatus, int] = yield from calls.job_count_by_status()
    return found


def stats(q: QueueCore[Any]) -> QueuePlan[dict[str, int]]:
    """pending (due now), scheduled (future), running, succeeded, failed."""
    found: dict[str, int] = yield from calls.job_stats()
    return found


def retry_failed(
    q: QueueCore[Any],
    *,
    types: Sequence[str | JobType[Any]] | None = None,
    scope_type: str | None = None,
    scope_id: str | None = None,
    limit: int | None = None,
    skip: int | None = None,
) -> QueuePlan[int]:
    """Move dead letters back to PENDING (attempts reset); no limit => every match."""
    params = _find_params(
        types, [JobStatus.FAILED], scope_type, scope_id, limit, skip or 0, need_limit=False
    )
    found: int = yield from calls.job_retry_failed(params)
    return found


def prune(
    q: QueueCore[Any],
    *,
    older_than: datetime | Duration,
    statuses: Sequence[JobStatus | str] = (JobStatus.SUCCEEDED, JobStatus.FAILED),
) -> QueuePlan[int]:
    """Delete finished jobs older than a cut-off (aware datetime) or an age (duration)."""
    chosen = _statuses(statuses)
    if not chosen:
        raise ValueError("statuses must name at least one status")
    live = {JobStatus.PENDING, JobStatus.RUNNING} & set(chosen)
    if live:
        raise ValueError("prune only deletes finished jobs (succeeded, failed); use cancel")
    before: datetime | None = None
    age: float | None = None
    if isinstance(older_than, datetime):
        before = check_aware(older_than, "older_than")
    else:
        age = to_seconds(older_than, "older_than")
    found: int = yield from calls.job_prune(chosen, before=before, age=age)
    return found


def _statuses(statuses: Sequence[JobStatus | str] | None) -> list[JobStatus]:
    if statuses is None:
        return []
    return check_statuses(statuses)


def _find_params(
    types: Sequence[str | JobType[Any]] | None,
    statuses: Sequence[JobStatus | str] | None,
    scope_type: str | None,
    scope_id: str | None,
    limit: int | None,
    skip: int,
    *,
    need_limit: bool,
) -> FindParams:
    if isinstance(types, str | JobType):
        types = [types]
    type_names = None
    if types is not None:
        type_names = [check_job_type(t) for t in types]
    if scope_type is not None:
        check_name(scope_type, "scope_type")
    if scope_id is not None:
        check_name(scope_id, "scope_id")
    if limit is None and need_limit:
        raise ValueError("limit must be a positive integer")
    if limit is not None:
        check_positive_int(limit, "limit")
    if isinstance(skip, bool) or not isinstance(skip, int) or skip < 0:
        raise ValueError("skip must be an integer >= 0")
    return FindParams(
        types=type_names,
        statuses=_statuses(statuses) if statuses is not None else None,
        scope_type=scope_type,
        scope_id=scope_id,
        limit=limit,
        skip=skip,
    )
