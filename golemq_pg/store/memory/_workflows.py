"""The producer and workflow verbs of InMemoryStore that know about dependencies.

Private to :mod:`golemq_pg.store.memory`; a base of :class:`InMemoryStore`, whose lock,
table, graph, clock and notifications it uses. ``job_enqueue`` (the dedupe rule, WAITING
holders included), ``job_enqueue_many`` with parents, ``workflow_create`` (all or nothing:
a journal takes back what a failing workflow wrote), ``workflow_get``, ``workflow_cancel``
and ``job_links``, with the semantics of the port (``JobStore``, "Dependencies") and of
PostgreSQL's ``link_jobs`` (migration 0016).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from golemq_pg._types import JobStatus, Scope, WorkflowSummary
from golemq_pg.store.memory import _admin as admin
from golemq_pg.store.memory._graph import Effects, Graph, Node
from golemq_pg.store.memory._rows import LIVE_STATUSES, JobRow, JobTable, copy_trace
from golemq_pg.store.port import (
    PARENT_CANCELLED_ERROR,
    PARENT_FAILED_ERROR,
    CancelFilter,
    CancelledJob,
    EnqueueManyParams,
    EnqueueParams,
    EnqueueResult,
    JobLinks,
    Notification,
    WorkflowCreated,
    WorkflowParams,
)

NewRow = Callable[
    [str, bytes, Scope | None, int, datetime, int | None, str | None, datetime], JobRow
]


def _check_workflow(params: WorkflowParams, number: int | None) -> None:
    """``ValueError`` for a workflow without jobs or with an ``after`` that names no earlier
    job (``number``: its position in a list, None for a single one), as the PostgreSQL
    stores check it."""
    where = "the workflow" if number is None else f"workflow {number}"
    if not params.jobs:
        raise ValueError(f"{where} has no jobs")
    for index, job in enumerate(params.jobs):
        for earlier in job.after:
            if not 0 <= earlier < index:
                raise ValueError(
                    f"{'workflow' if number is None else where} job {index}: after index "
                    f"{earlier} must name an earlier job of the workflow"
                )


@dataclass(slots=True)
class Journal:
    """What a workflow wrote so far, to take it back when a later job of it fails."""

    rows: list[JobRow] = field(default_factory=list)
    edges: list[tuple[int, int]] = field(default_factory=list)
    nodes: dict[int, Node | None] = field(default_factory=dict)
    replaced: list[tuple[JobRow, tuple[Any, ...]]] = field(default_factory=list)

    def node(self, graph: Graph, job_id: int) -> None:
        """Remember a node as it was before its first change."""
        if job_id not in self.nodes:
            before = graph.nodes.get(job_id)
            self.nodes[job_id] = None if before is None else Node(
                before.workflow_id, before.open_parents, before.policy, before.failed_parent
            )

    def replace(self, row: JobRow) -> None:
        """Remember a held row's replaceable fields before a replace."""
        self.replaced.append((row, _replaceable(row)))

    def undo(self, table: JobTable, graph: Graph) -> None:
        """Take everything back (ids are not reused: a sequence is not rolled back)."""
        for row in reversed(self.rows):
            table.discard(row)
        graph.unlink(self.edges)
        for job_id, before in self.nodes.items():
            if before is None:
                graph.nodes.pop(job_id, None)
            else:
                graph.nodes[job_id] = before
        for row, fields in reversed(self.replaced):
            (row.payload, row.scope, row.priority, row.tags, row.trace_context,
             row.created_at, row.updated_at) = fields


def _replaceable(row: JobRow) -> tuple[Any, ...]:
    return (row.payload, row.scope, row.priority, row.tags, row.trace_context,
            row.created_at, row.updated_at)


class WorkflowVerbs:
    """``job_enqueue``, ``job_enqueue_many``, ``workflow_create``, ``workflow_get``,
    ``workflow_cancel``, ``job_links`` (see the module docstring)."""

    _lock: threading.Lock
    _jobs: JobTable
    _graph: Graph
    _read_clock: Callable[[], datetime]
    _publish: Callable[[Notification], None]
    _new_row: NewRow
    _announce: Callable[[Effects], None]
    _settle: Callable[[datetime], None]

    # -- producer -------------------------------------------------------------------------
    def job_enqueue(self, params: EnqueueParams, *, connection: Any = None) -> EnqueueResult:
        """Insert one job, applying the dedupe rule of the PostgreSQL store (a WAITING job
        holds its key as a PENDING one does); with ``depends_on``, linked to its parents
        (see the port)."""
        _refuse_connection(connection)
        with self._lock:
            now = self._read_clock()
            parents = self._parent_ids(params.depends_on)
            effects = Effects()
            result = self._add(params, parents, now, None, None, effects)
            self._announce(effects)
            return result

    def job_enqueue_many(self, params: EnqueueManyParams, *, connection: Any = None) -> int:
        """Insert many jobs of one type (no dedupe keys), each waiting for
        ``params.depends_on`` when given; returns the count (jobs the "cancel" policy
        dropped at once included)."""
        _refuse_connection(connection)
        with self._lock:
            now = self._read_clock()
            parents = self._parent_ids(params.depends_on)
            run_at = _due_time(params.run_at, params.delay, now)
            tags = params.tags or ()
            trace = copy_trace(params.trace_context)  # one for the call, never mutated
            effects = Effects()
            for payload in params.payloads:
                row = self._new_row(
                    params.type, payload, params.scope, params.priority, run_at,
                    params.max_attempts, None, now,
                )
                row.tags = tags
                row.trace_context = trace
                if parents:
                    self._link_new(row, parents, params.on_parent_failure, now, None, None,
                                   effects)
                else:
                    self._jobs.insert(row)
                    if row.run_at <= now:
                        effects.due_types.add(row.type)
            self._announce(effects)
            return len(params.payloads)

    def _parent_ids(self, depends_on: Sequence[str]) -> list[int]:
        """The parents' ids; ``ValueError`` naming the lowest one no job has (before any
        write)."""
        missing = [p for p in depends_on if self._jobs.get(p) is None]
        if missing:
            raise ValueError(f"depends_on: job {min(missing, key=_id_order)} does not exist")
        return list(dict.fromkeys(int(p) for p in depends_on))

    def _add(
        self, params: EnqueueParams, parents: list[int], now: datetime, workflow: int | None,
        journal: Journal | None, effects: Effects,
    ) -> EnqueueResult:
        """One job with the dedupe rule, then linked when it has parents or a workflow."""
        key = params.dedupe_key
        if key is not None:
            holder = self._jobs.live_holder(params.type, key)
            if holder is not None:
                if params.on_duplicate == "reject":
                    return EnqueueResult(id=None, inserted=False)
                self._replace(holder, params, now, workflow, journal)
                return EnqueueResult(id=str(holder.id), inserted=False, replaced=True)
            if params.on_duplicate == "reject" and self._jobs.running_with_key(params.type, key):
                return EnqueueResult(id=None, inserted=False)
        row = self._new_row(
            params.type, params.payload, params.scope, params.priority,
            _due_time(params.run_at, params.delay, now), params.max_attempts, key, now,
        )
        row.tags = params.tags or ()
        row.trace_context = copy_trace(params.trace_context)
        if not parents and workflow is None:
            self._jobs.insert(row)
            if row.run_at <= now:
                effects.due_types.add(row.type)
            return EnqueueResult(id=str(row.id), inserted=True)
        return self._link_new(row, parents, params.on_parent_failure, now, workflow, journal,
                              effects)

    def _replace(
        self, holder: JobRow, params: EnqueueParams, now: datetime, workflow: int | None,
        journal: Journal | None,
    ) -> None:
        """Replace in place: same id, same place in line (run_at, created_at), same parents;
        a grouped type's job moves to the end of its group (its arrival, created_at,
        becomes this add's), as in job_enqueue_replace. In a workflow, the held job then
        belongs to it."""
        if journal is not None:
            journal.replace(holder)
        if params.grouped:
            holder.created_at = now
        holder.payload = params.payload
        holder.scope = params.scope
        holder.priority = params.priority
        holder.tags = params.tags or ()  # replaced with the payload
        holder.trace_context = copy_trace(params.trace_context)
        holder.updated_at = now
        if workflow is not None:
            if journal is not None:
                journal.node(self._graph, holder.id)
            node = self._graph.nodes.get(holder.id)
            if node is None:
                node = self._graph.nodes[holder.id] = Node()
            node.workflow_id = workflow

    def _link_new(
        self, row: JobRow, parents: list[int], policy: str, now: datetime,
        workflow: int | None, journal: Journal | None, effects: Effects,
    ) -> EnqueueResult:
        """Insert a new job WAITING, link it to its parents and judge it at once (as
        ``link_jobs``): an open parent keeps it WAITING; a failed one (FAILED, or a job of
        the same workflow cancelled at its add) applies its policy; else it is released."""
        table, graph = self._jobs, self._graph
        row.status = JobStatus.WAITING
        table.insert(row)
        edges = graph.link(row.id, parents)
        if journal is not None:
            journal.rows.append(row)
            journal.edges.extend(edges)
            journal.node(graph, row.id)
        open_n = 0
        failed: list[tuple[int, str]] = []
        for parent in graph.parents.get(row.id, ()):
            found = table.rows.get(parent)
            if found is None:  # a job of this workflow its "cancel" policy dropped
                failed.append((parent, PARENT_CANCELLED_ERROR))
            elif found.status in LIVE_STATUSES:
                open_n += 1
            elif found.status is JobStatus.FAILED:
                failed.append((parent, PARENT_FAILED_ERROR))
        node = graph.nodes[row.id] = Node(workflow, open_n, policy)
        if failed:
            parent, template = min(failed)
            node.failed_parent = parent
            if policy == "fail":
                graph.fail_waiting(table, row, template.format(parent=parent), now)
                effects.done.append(str(row.id))
                return EnqueueResult(id=str(row.id), inserted=True)
            if policy == "cancel":
                table.delete(row)
                effects.done.append(str(row.id))
                return EnqueueResult(id=str(row.id), inserted=True)
        if open_n == 0:
            graph.release(table, [row.id], now, effects)
        return EnqueueResult(id=str(row.id), inserted=True)

    # -- workflows --------------------------------------------------------------------------
    def workflow_create(
        self, params: WorkflowParams, *, connection: Any = None
    ) -> WorkflowCreated:
        """A workflow record and every job of it, all or nothing (see the port)."""
        return self._create_workflows([params], connection, single=True)[0]

    def workflow_create_many(
        self, params: Sequence[WorkflowParams], *, connection: Any = None
    ) -> list[WorkflowCreated]:
        """Workflows and every job of them, in order, all or nothing (see the port)."""
        return self._create_workflows(params, connection, single=False)

    def _create_workflows(
        self, params: Sequence[WorkflowParams], connection: Any, *, single: bool
    ) -> list[WorkflowCreated]:
        _refuse_connection(connection)
        with self._lock:
            now = self._read_clock()
            for number, one in enumerate(params):
                _check_workflow(one, None if single else number)
            external = [p for one in params for job in one.jobs for p in job.job.depends_on]
            self._parent_ids(external)
            journal = Journal()
            effects = Effects()
            records: list[int] = []
            created: list[WorkflowCreated] = []
            try:
                for one in params:
                    record = self._graph.new_workflow(one.name, now)
                    records.append(record.id)
                    ids = self._add_nodes(one, record.id, now, journal, effects)
                    created.append(WorkflowCreated(id=str(record.id), job_ids=tuple(ids)))
            except BaseException:
                journal.undo(self._jobs, self._graph)
                for record_id in records:
                    del self._graph.workflows[record_id]
                raise
            self._announce(effects)
            return created

    def _add_nodes(
        self, params: WorkflowParams, workflow: int, now: datetime, journal: Journal,
        effects: Effects,
    ) -> list[str]:
        """Every job of a workflow, in index order; ``ValueError`` at a duplicate."""
        ids: list[str] = []
        for index, job in enumerate(params.jobs):
            parents = list(dict.fromkeys(
                [int(p) for p in job.job.depends_on] + [int(ids[a]) for a in job.after]
            ))
            result = self._add(job.job, parents, now, workflow, journal, effects)
            if result.id is None:
                raise ValueError(
                    f"workflow job {index} (type {job.job.type}) is a duplicate of a live job"
                )
            ids.append(result.id)
        return ids

    def workflow_get(self, workflow_id: str) -> WorkflowSummary | None:
        """A workflow (status, jobs, edges), or None when unknown (see the port)."""
        with self._lock:
            record = self._graph.workflows.get(_number(workflow_id))
            return None if record is None else self._graph.summary(self._jobs, record)

    def workflow_cancel(self, workflow_id: str) -> list[CancelledJob]:
        """Cancel every live job of the workflow (running ones announced) and mark it
        cancelled; the dependents outside it get their policy. Unknown id: []."""
        with self._lock:
            record = self._graph.workflows.get(_number(workflow_id))
            if record is None:
                return []
            now = self._read_clock()
            members = tuple(str(i) for i in self._graph.members(record.id))
            cancelled = admin.cancel(self._jobs, CancelFilter(job_ids=members)) if members else []
            if record.cancelled_at is None:
                record.cancelled_at = now
            aborted = tuple(c.id for c in cancelled if c.was_running)
            if aborted:
                self._publish(Notification(kind="cancel", items=aborted))
            self._settle(now)
            return cancelled

    def job_links(self, job_id: str) -> JobLinks:
        """The job's workflow, parents and children; ``JobLinks()`` when it has none."""
        with self._lock:
            return self._graph.links(self._jobs, _number(job_id))

    def job_parents_many(self, job_ids: Sequence[str]) -> dict[str, JobLinks]:
        """The workflow and parents of each job that has any (see the port)."""
        found: dict[str, JobLinks] = {}
        with self._lock:
            for job_id in job_ids:
                number = _number(job_id)
                if number in self._graph.nodes:
                    links = self._graph.links(self._jobs, number)
                    found[job_id] = JobLinks(workflow_id=links.workflow_id, parents=links.parents)
        return found


def _number(text: object) -> int:
    """A port-level id as an int; -1 (no row, no workflow) when it is not one."""
    try:
        return int(str(text))
    except ValueError:
        return -1


def _id_order(job_id: str) -> tuple[int, str]:
    return (_number(job_id), job_id)


def _refuse_connection(connection: object) -> None:
    if connection is not None:
        raise TypeError(
            "InMemoryStore does not support connection=: there is no database transaction "
            "to enqueue into (use PostgresStore for transactional enqueue)"
        )


def _due_time(run_at: datetime | None, delay: float, now: datetime) -> datetime:
    if run_at is not None:
        return run_at.astimezone(UTC)
    return now + timedelta(seconds=delay)


__all__ = ["WorkflowVerbs"]
