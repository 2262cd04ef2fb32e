"""The dependency and workflow verbs of the PostgreSQL stores, as plans (see ``_plans``):
enqueueing with parents, ``workflow_create``, ``workflow_get``, ``workflow_cancel`` and
``job_links`` (statements in ``sql/queries/workflows.sql``; the release of children is done
by the database itself, migration 0016's trigger on ``jobs``)."""

from __future__ import annotations

from golemq_pg._types import WorkflowSummary
from golemq_pg.store.port import (
    CancelledJob,
    EnqueueManyParams,
    EnqueueParams,
    EnqueueResult,
    JobLinks,
    WorkflowCreated,
    WorkflowParams,
)
from golemq_pg.store.postgres._plans import Plan, PlanContext


def job_enqueue_linked(ctx: PlanContext, params: EnqueueParams) -> Plan[EnqueueResult]:
    """``job_enqueue`` of a job with ``depends_on`` (see the port)."""
    raise NotImplementedError
    yield


def job_enqueue_many_linked(ctx: PlanContext, params: EnqueueManyParams) -> Plan[int]:
    """``job_enqueue_many`` of jobs with ``depends_on`` (see the port)."""
    raise NotImplementedError
    yield


def workflow_create(ctx: PlanContext, params: WorkflowParams) -> Plan[WorkflowCreated]:
    """A workflow and its jobs, in one transaction (see the port)."""
    raise NotImplementedError
    yield


def workflow_get(ctx: PlanContext, workflow_id: str) -> Plan[WorkflowSummary | None]:
    """One workflow, or None (see the port)."""
    raise NotImplementedError
    yield


def workflow_cancel(ctx: PlanContext, workflow_id: str) -> Plan[list[CancelledJob]]:
    """Cancel a workflow's live jobs (see the port)."""
    raise NotImplementedError
    yield


def job_links(ctx: PlanContext, job_id: str) -> Plan[JobLinks]:
    """A job's workflow, parents and children (see the port)."""
    raise NotImplementedError
    yield
