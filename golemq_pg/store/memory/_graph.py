"""The dependency graph of the in-memory store: edges, nodes, workflows, and how a parent's
outcome reaches its WAITING children.

Private to :mod:`golemq_pg.store.memory`. It mirrors migrations 0016 and 0020: ``edges`` are
``job_deps`` (kept after their jobs are gone, until pruned), ``nodes`` are ``job_nodes`` (one
per job that has parents or belongs to a workflow: its workflow, open parents, policy and
the parent it failed because of), ``workflows`` the workflow records. The jobs table tells
the graph (``JobTable.on_leave``) whenever a job with children leaves the live states; the
store then calls :meth:`Graph.settle` before its lock is released, which applies every such
outcome to the children, down the chain, from a worklist (``settle_dependents()``'s loop,
which the trigger ``jobs_settle_dependents`` calls): no recursion, whatever the depth.
Always called with the store's lock held.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from golemq_pg._types import JobStatus, WorkflowSummary
from golemq_pg.store.memory._rows import LIVE_STATUSES, JobRow, JobTable
from golemq_pg.store.port import PARENT_CANCELLED_ERROR, PARENT_FAILED_ERROR, JobLinks


@dataclass(slots=True)
class Node:
    """A job's place in the graph (a ``job_nodes`` row)."""

    workflow_id: int | None = None
    open_parents: int = 0
    policy: str = "fail"
    #: The parent whose failure or cancellation was applied to it (None: none).
    failed_parent: int | None = None


@dataclass(slots=True)
class WorkflowRow:
    """A workflow record (a ``workflows`` row)."""

    id: int
    name: str
    created_at: datetime
    cancelled_at: datetime | None = None


@dataclass(slots=True)
class Effects:
    """What a graph change must announce: types that became due, jobs that finished."""

    due_types: set[str] = field(default_factory=set)
    done: list[str] = field(default_factory=list)

    def merge(self, other: Effects) -> None:
        """Add ``other``'s announcements to these."""
        self.due_types |= other.due_types
        self.done.extend(other.done)


class Graph:
    """Edges, nodes and workflow records, and the settling of children (see the module)."""

    def __init__(self) -> None:
        self.nodes: dict[int, Node] = {}
        #: child -> its parents, in the order they were linked (distinct).
        self.parents: dict[int, list[int]] = {}
        #: parent -> its children, in the order they were linked (distinct).
        self.children: dict[int, list[int]] = {}
        self.workflows: dict[int, WorkflowRow] = {}
        #: Parents deleted while live (cancelled): a retry of a child they failed is refused.
        self.cancelled: set[int] = set()
        #: Parents that left the live states since the last settle, with their outcome.
        self.left: list[tuple[int, JobStatus | None]] = []
        self._last_workflow = 0

    # -- bookkeeping ------------------------------------------------------------------------
    def on_leave(self, row: JobRow, outcome: JobStatus | None) -> None:
        """``JobTable.on_leave``: remember a parent to settle (a job without children is
        not: the trigger's ``WHEN (OLD.has_dependents)``)."""
        if row.id in self.children:
            self.left.append((row.id, outcome))
            if outcome is None:
                self.cancelled.add(row.id)

    def new_workflow(self, name: str, now: datetime) -> WorkflowRow:
        """A new workflow record (ids only grow)."""
        self._last_workflow += 1
        record = WorkflowRow(self._last_workflow, name, now)
        self.workflows[record.id] = record
        return record

    def link(self, child: int, parents: Sequence[int]) -> list[tuple[int, int]]:
        """Record the edges ``parent -> child``; returns those that were new."""
        added = []
        mine = self.parents.setdefault(child, [])
        for parent in parents:
            if parent in mine:
                continue
            mine.append(parent)
            self.children.setdefault(parent, []).append(child)
            added.append((parent, child))
        if not mine:
            del self.parents[child]
        return added

    def unlink(self, edges: Iterable[tuple[int, int]]) -> None:
        """Remove edges (a workflow that failed half-way takes back what it linked)."""
        for parent, child in edges:
            _drop(self.parents, child, parent)
            _drop(self.children, parent, child)

    # -- settling ---------------------------------------------------------------------------
    def settle(self, table: JobTable, now: datetime) -> Effects:
        """Apply every remembered outcome to the children, until nothing is left to
        apply (a child failed or cancelled here is itself a parent that left)."""
        effects = Effects()
        # Parents that left together are taken in id order, as migration 0020 judges them
        # (a child failed by two of them names the smaller id).
        self.left.sort(key=lambda left: left[0])
        while self.left:
            parent, outcome = self.left.pop(0)
            kids = list(self.children.get(parent, ()))
            if outcome is JobStatus.SUCCEEDED:
                ready = []
                for child in kids:
                    node = self.nodes.get(child)
                    if node is None:
                        continue
                    node.open_parents -= 1
                    if node.open_parents <= 0:
                        ready.append(child)
                self.release(table, ready, now, effects)
                continue
            self._judge(table, parent, outcome, kids, now, effects)
        return effects

    def _judge(
        self, table: JobTable, parent: int, outcome: JobStatus | None, kids: list[int],
        now: datetime, effects: Effects,
    ) -> None:
        """A failed or cancelled parent: each WAITING child's policy (one already failed
        or cancelled by another parent keeps that verdict)."""
        template = PARENT_FAILED_ERROR if outcome is JobStatus.FAILED else PARENT_CANCELLED_ERROR
        ready = []
        for child in sorted(kids):
            row = table.rows.get(child)
            node = self.nodes.get(child)
            if row is None or node is None or row.status is not JobStatus.WAITING:
                continue
            if node.policy == "run":
                node.open_parents -= 1
                if node.failed_parent is None:
                    node.failed_parent = parent
                if node.open_parents <= 0:
                    ready.append(child)
                continue
            node.failed_parent = parent
            if node.policy == "fail":
                self.fail_waiting(table, row, template.format(parent=parent), now)
            else:
                table.delete(row)
            effects.done.append(str(child))
        self.release(table, ready, now, effects)

    @staticmethod
    def fail_waiting(table: JobTable, row: JobRow, error: str, now: datetime) -> None:
        """A WAITING job dead-lettered because of a parent: FAILED, ``last_error`` naming
        it, attempts and history untouched (no attempt ran)."""
        row.last_error = error
        table.finish(row, JobStatus.FAILED, now)

    @staticmethod
    def release(table: JobTable, ids: Iterable[int], now: datetime, effects: Effects) -> None:
        """WAITING jobs among ``ids`` become PENDING, due at ``max(run_at, now)``; a keyed
        one whose key a PENDING job holds is superseded by it (deleted, so cancelled for
        its own children), as ``release_waiting`` (0016) does."""
        for job_id in sorted(ids):
            row = table.rows.get(job_id)
            if row is None or row.status is not JobStatus.WAITING:
                continue
            key = row.dedupe_key
            if key is not None and table.pending_with_key(row.type, key) is not None:
                table.delete(row)
                continue
            table.set_status(row, JobStatus.PENDING)
            row.run_at = max(row.run_at, now)
            row.updated_at = now
            if row.run_at <= now:
                effects.due_types.add(row.type)

    # -- retry ------------------------------------------------------------------------------
    def retry_refused(self, table: JobTable, row: JobRow) -> bool:
        """Whether ``job_retry`` must refuse ``row`` (``retry_job``, 0016): a parent of it is
        FAILED now (whatever failed the job itself), or the parent that failed it is gone
        (cancelled, pruned) and its policy is not "run"."""
        for parent in self.parents.get(row.id, ()):
            found = table.rows.get(parent)
            if found is not None and found.status is JobStatus.FAILED:
                return True
        node = self.nodes.get(row.id)
        return (
            node is not None
            and node.failed_parent is not None
            and node.policy != "run"
            and node.failed_parent not in table.rows
        )

    def rearm(self, table: JobTable, revived: list[JobRow], now: datetime) -> Effects:
        """Put revived dead letters (already PENDING, due now) back in the graph: one with
        parents not all SUCCEEDED waits again (WAITING), and the children dead-lettered
        because of a revived job are revived and re-armed likewise, down the chain
        (``revive_and_rearm``, 0016). Returns the types left due."""
        effects = Effects()
        seen: set[int] = set()
        frontier = revived
        while frontier:
            for row in frontier:
                seen.add(row.id)
                self._rewait(table, row)
            following = []
            for row in frontier:
                for child in self.children.get(row.id, ()):
                    found = table.rows.get(child)
                    node = self.nodes.get(child)
                    if (
                        found is None or node is None or child in seen
                        or found.status is not JobStatus.FAILED
                        or node.policy != "fail" or node.failed_parent != row.id
                        or not _free_key(table, found)
                    ):
                        continue
                    revive(table, found, now)
                    following.append(found)
            frontier = following
        for job_id in seen:
            found = table.rows.get(job_id)
            if found is not None and found.status is JobStatus.PENDING:
                effects.due_types.add(found.type)
        return effects

    def _rewait(self, table: JobTable, row: JobRow) -> None:
        node = self.nodes.get(row.id)
        if node is None:
            return
        node.open_parents = sum(
            1
            for parent in self.parents.get(row.id, ())
            if (found := table.rows.get(parent)) is not None
            and found.status is not JobStatus.SUCCEEDED
        )
        node.failed_parent = None
        if node.open_parents > 0 and row.status is JobStatus.PENDING:
            key = row.dedupe_key
            if key is None or table.waiting_with_key(row.type, key) is None:
                table.set_status(row, JobStatus.WAITING)

    # -- reads ------------------------------------------------------------------------------
    def links(self, table: JobTable, job_id: int) -> JobLinks:
        """``job_links``: the job's workflow, its parents that exist, its children that
        exist."""
        node = self.nodes.get(job_id)
        parents = [
            found.summary()
            for parent in sorted(self.parents.get(job_id, ()))
            if (found := table.rows.get(parent)) is not None
        ]
        children = [
            str(child) for child in sorted(self.children.get(job_id, ())) if child in table.rows
        ]
        workflow = None if node is None or node.workflow_id is None else str(node.workflow_id)
        return JobLinks(workflow_id=workflow, parents=tuple(parents), children=tuple(children))

    def members(self, workflow_id: int) -> list[int]:
        """The ids of a workflow's jobs, existing or not, by id."""
        return sorted(i for i, node in self.nodes.items() if node.workflow_id == workflow_id)

    def summary(self, table: JobTable, record: WorkflowRow) -> WorkflowSummary:
        """``workflow_get`` of an existing record."""
        members = self.members(record.id)
        inside = set(members)
        rows = [table.rows[i] for i in members if i in table.rows]
        edges = sorted(
            (parent, child)
            for child in members
            for parent in self.parents.get(child, ())
            if parent in inside
        )
        statuses = {row.status for row in rows}
        finished_at: datetime | None = None
        if record.cancelled_at is not None:
            status = "cancelled"
            finished_at = record.cancelled_at
        elif statuses & LIVE_STATUSES:
            status = "running"
        else:
            status = "failed" if JobStatus.FAILED in statuses else "succeeded"
            ends = [row.finished_at for row in rows if row.finished_at is not None]
            finished_at = max(ends) if ends else record.created_at
        return WorkflowSummary(
            id=str(record.id),
            name=record.name,
            status=status,  # type: ignore[arg-type]
            created_at=record.created_at,
            finished_at=finished_at,
            jobs=[row.summary() for row in rows],
            edges=[(str(parent), str(child)) for parent, child in edges],
        )

    # -- retention --------------------------------------------------------------------------
    def has_waiting_child(self, table: JobTable, job_id: int) -> bool:
        """Whether a child of the job is still WAITING (it is kept: the child reads it)."""
        return any(
            (row := table.rows.get(child)) is not None and row.status is JobStatus.WAITING
            for child in self.children.get(job_id, ())
        )

    def forget(self, table: JobTable, cutoff: datetime) -> None:
        """After a prune: the nodes of jobs gone outside a workflow, and the workflows
        created before the cut-off none of whose jobs exists any more (records and nodes);
        then the edges whose two jobs are gone and whose child has no node left
        (``job_nodes_prune`` / ``job_deps_prune``)."""
        for record in list(self.workflows.values()):
            members = self.members(record.id)
            if record.created_at < cutoff and not any(i in table.rows for i in members):
                del self.workflows[record.id]
                for job_id in members:
                    del self.nodes[job_id]
        for job_id in [i for i, n in self.nodes.items() if n.workflow_id is None]:
            if job_id not in table.rows:
                del self.nodes[job_id]
        gone = [
            (parent, child)
            for child, parents in self.parents.items()
            for parent in parents
            if child not in table.rows and child not in self.nodes and parent not in table.rows
        ]
        self.unlink(gone)
        self.cancelled &= set(self.children)


def revive(table: JobTable, row: JobRow, now: datetime) -> None:
    """A dead letter back to PENDING, due now: attempts 0, ``last_error`` cleared, history
    kept (``revive_dead_letters``)."""
    table.set_status(row, JobStatus.PENDING)
    row.attempts = 0
    row.last_error = None
    row.run_at = now
    row.finished_at = None
    row.updated_at = now


def _free_key(table: JobTable, row: JobRow) -> bool:
    """Whether no live job holds the row's dedupe key (a re-armed dead letter would take
    it)."""
    key = row.dedupe_key
    return key is None or table.live_holder(row.type, key) is None


def _drop(index: dict[int, list[int]], key: int, value: int) -> None:
    values = index.get(key)
    if values is not None and value in values:
        values.remove(value)
        if not values:
            del index[key]


__all__ = ["Effects", "Graph", "Node", "WorkflowRow", "revive"]
