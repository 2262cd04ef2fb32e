"""Workflows: several jobs added together, each waiting for the nodes it comes ``after``.

``Workflow(name)`` is a builder (a value: it touches no store). ``wf.add(...)`` checks one
job as ``queue.add`` does (``ValueError`` / ``QueuePayloadError`` at once, naming the field)
and returns its :class:`~golemq_pg.WorkflowNode`; ``queue.add_workflow(wf)`` writes every
job, its dependencies and the workflow's record in one transaction and returns a
:class:`~golemq_pg.WorkflowRun`. Nodes are added parents first, so a workflow cannot hold a
cycle.

:class:`JobSpec` and :func:`job_spec` are the checks ``queue.add`` shares with
``Workflow.add``: everything about one job that needs no store and no queue default.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from golemq_pg._types import (
    PARENT_FAILURE_POLICIES,
    Duration,
    JobType,
    MaxAttempts,
    ParentFailurePolicy,
    Scope,
    ScopeLike,
    WorkflowNode,
    check_attempt_budget,
)
from golemq_pg._validation import (
    check_int,
    check_job_id,
    check_job_type,
    check_name,
    check_scope,
    check_tags,
    check_text,
    check_timestamp,
    encode_payload,
    to_seconds,
)

__all__ = ["JobSpec", "Workflow", "WorkflowNode", "check_depends_on", "check_policy", "job_spec"]

#: Most jobs in one workflow (one transaction writes them all).
MAX_WORKFLOW_JOBS = 10_000
#: Most parents of one job.
MAX_PARENTS = 10_000


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One job's checked options (what ``queue.add`` and ``Workflow.add`` take, the
    payload already encoded); ``max_attempts`` is still the caller's value (None: the
    JobType's, else the queue's default)."""

    type: str
    grouped: bool
    payload: bytes
    scope: Scope | None
    dedupe_key: str | None
    on_duplicate: Literal["reject", "replace"]
    run_at: datetime | None
    delay: float
    max_attempts: MaxAttempts
    priority: int
    tags: tuple[str, ...] | None
    on_parent_failure: ParentFailurePolicy
    #: The JobType itself when one was given (the queue reads its ``max_attempts``).
    job_type: str | JobType[Any]


def check_policy(value: object) -> ParentFailurePolicy:
    """``on_parent_failure``: one of ``"fail"``, ``"cancel"``, ``"run"``."""
    if value == "fail":
        return "fail"
    if value == "cancel":
        return "cancel"
    if value == "run":
        return "run"
    raise ValueError(
        "on_parent_failure must be one of " + ", ".join(repr(p) for p in PARENT_FAILURE_POLICIES)
    )


def check_policy_has_parents(policy: ParentFailurePolicy, has_parents: bool, field: str) -> None:
    """A policy other than the default ``"fail"`` on a job without parents would be
    accepted and never applied: refused, naming the field that gives parents."""
    if policy != "fail" and not has_parents:
        raise ValueError(
            f"on_parent_failure={policy!r} needs parents: give {field}, or leave the default"
        )


def check_depends_on(depends_on: object) -> tuple[str, ...]:
    """``depends_on``: job ids (strings of digits, as ``queue.add`` returns them); None or
    empty: none. Duplicates collapse, order kept."""
    if depends_on is None:
        return ()
    if isinstance(depends_on, str | bytes | Mapping) or not isinstance(depends_on, Iterable):
        raise ValueError("depends_on must be a sequence of job ids")
    ids: dict[str, None] = {}
    for item in depends_on:
        try:
            ids[check_job_id(item)] = None
        except ValueError:
            raise ValueError("depends_on must hold job ids as returned by add()") from None
        if len(ids) > MAX_PARENTS:
            raise ValueError(f"depends_on names more than {MAX_PARENTS} jobs")
    return tuple(ids)


def job_spec(
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
    on_parent_failure: ParentFailurePolicy = "fail",
    what: str = "add()",
) -> JobSpec:
    """Check one job's options (see ``queue.add``); ``ValueError`` naming the field, or
    ``QueuePayloadError`` for the payload, before anything is written."""
    name = check_job_type(job_type)
    scope_v = check_scope(scope)
    grouped = isinstance(job_type, JobType) and job_type.grouped
    if grouped and scope_v is None:
        raise ValueError(f"job type {name!r} is grouped: {what} needs a scope")
    if dedupe_key is not None:
        check_name(dedupe_key, "dedupe_key")
    if on_duplicate not in ("reject", "replace"):
        raise ValueError("on_duplicate must be 'reject' or 'replace'")
    if on_duplicate == "replace" and dedupe_key is None:
        # Replacing is by key: without one there is nothing to replace, and the job would
        # be enqueued as a new one, silently unlike what was asked.
        raise ValueError("on_duplicate='replace' needs a dedupe_key (it replaces by key)")
    run_at_v, delay_s = when(run_at, delay)
    if max_attempts is not None:
        check_attempt_budget(max_attempts, "max_attempts")
    prio = check_int(priority, "priority")
    tags_v = check_tags(tags)
    policy = check_policy(on_parent_failure)
    encoded = encode_payload(name, payload)
    return JobSpec(
        type=name, grouped=grouped, payload=encoded, scope=scope_v, dedupe_key=dedupe_key,
        on_duplicate=on_duplicate, run_at=run_at_v, delay=delay_s, max_attempts=max_attempts,
        priority=prio, tags=tags_v, on_parent_failure=policy, job_type=job_type,
    )


def when(run_at: datetime | None, delay: Duration | None) -> tuple[datetime | None, float]:
    """``run_at`` / ``delay`` checked: (absolute due time or None, seconds from now)."""
    if run_at is not None and delay is not None:
        raise ValueError("give run_at or delay, not both")
    if run_at is not None:
        return check_timestamp(run_at, "run_at"), 0.0
    if delay is not None:
        return None, to_seconds(delay, "delay")
    return None, 0.0


@dataclass(frozen=True, slots=True)
class WorkflowJob:
    """A node's job as the builder keeps it: its checked spec and its parents' indexes."""

    node: WorkflowNode
    spec: JobSpec
    after: tuple[int, ...]


class Workflow:
    """A set of jobs and their dependencies, added at once by ``queue.add_workflow``.

    ``Workflow(name)``: ``name`` is a label (at most 200 characters; not unique).
    ``wf.add(job_type, payload, *, after=(), ...)`` takes ``queue.add``'s options except
    ``depends_on`` and ``connection``; ``after``: nodes of this workflow the job waits for
    (a fan-in names several; a fan-out is several nodes after one). A job of a grouped
    JobType cannot come after anything.
    """

    __slots__ = ("_jobs", "name")

    def __init__(self, name: str) -> None:
        if not isinstance(name, str):
            raise ValueError("workflow name must be a string")
        self.name = check_text(name, "workflow name")
        if not self.name or len(self.name) > 200:
            raise ValueError("workflow name must be 1 to 200 characters")
        self._jobs: list[WorkflowJob] = []

    def add(
        self,
        job_type: str | JobType[Any],
        payload: Mapping[str, Any],
        *,
        after: Sequence[WorkflowNode] = (),
        scope: ScopeLike | None = None,
        dedupe_key: str | None = None,
        on_duplicate: Literal["reject", "replace"] = "reject",
        run_at: datetime | None = None,
        delay: Duration | None = None,
        max_attempts: MaxAttempts = None,
        priority: int = 0,
        tags: Iterable[str] | None = None,
        on_parent_failure: ParentFailurePolicy = "fail",
    ) -> WorkflowNode:
        """Add one job; returns its node. Checked at once, as ``queue.add`` checks (the
        workflow is unchanged when this raises)."""
        if len(self._jobs) >= MAX_WORKFLOW_JOBS:
            raise ValueError(f"a workflow holds at most {MAX_WORKFLOW_JOBS} jobs")
        spec = job_spec(
            job_type, payload, scope=scope, dedupe_key=dedupe_key, on_duplicate=on_duplicate,
            run_at=run_at, delay=delay, max_attempts=max_attempts, priority=priority,
            tags=tags, on_parent_failure=on_parent_failure, what="Workflow.add()",
        )
        parents = self._parents(after)
        if parents and spec.grouped:
            raise ValueError(f"job type {spec.type!r} is grouped: it cannot have parents")
        check_policy_has_parents(spec.on_parent_failure, bool(parents), "after")
        node = WorkflowNode(len(self._jobs), spec.type)
        self._jobs.append(WorkflowJob(node, spec, parents))
        return node

    def _parents(self, after: object) -> tuple[int, ...]:
        if isinstance(after, WorkflowNode):
            after = (after,)
        if isinstance(after, str | bytes | Mapping) or not isinstance(after, Iterable):
            raise ValueError("after must be a sequence of nodes of this workflow")
        indexes: dict[int, None] = {}
        for node in after:
            if (
                not isinstance(node, WorkflowNode)
                or node.index >= len(self._jobs)
                or self._jobs[node.index].node is not node
            ):
                raise ValueError("after must name nodes of this workflow (added before)")
            indexes[node.index] = None
        return tuple(indexes)

    @property
    def jobs(self) -> tuple[WorkflowJob, ...]:
        """Its jobs in the order added (parents before children)."""
        return tuple(self._jobs)

    def __len__(self) -> int:
        return len(self._jobs)

    def __repr__(self) -> str:
        return f"Workflow({self.name!r}, jobs={len(self._jobs)})"
