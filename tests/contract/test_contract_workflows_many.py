"""Contract: many workflows written at once (``workflow_create_many``): in order, each as
``workflow_create`` writes it, all or nothing. The spec of both stores: see the JobStore
docstring in store/port.py."""

from __future__ import annotations

from typing import Any

import pytest

from golemq_pg._types import JobStatus
from golemq_pg._validation import encode_payload
from golemq_pg.store.port import (
    EnqueueParams,
    JobStore,
    ResultRef,
    WorkflowJobParams,
    WorkflowParams,
)
from tests.support.store_port import add, claim, count_rows, ids

# The contract of the producer verbs holds on the async path too (AsyncPostgresStore).
pytestmark = pytest.mark.async_store_too


def _job(job_type: str, *, depends_on: tuple[str, ...] = (), **options: Any) -> EnqueueParams:
    return EnqueueParams(type=job_type, payload=encode_payload(job_type, {}),
                         depends_on=depends_on, **options)


def _fan(name: str, prefix: str, width: int = 2) -> WorkflowParams:
    """``prefix.root -> width x prefix.page -> prefix.join``."""
    pages = [WorkflowJobParams(_job(f"{prefix}.page"), after=(0,)) for _ in range(width)]
    return WorkflowParams(name=name, jobs=[
        WorkflowJobParams(_job(f"{prefix}.root")),
        *pages,
        WorkflowJobParams(_job(f"{prefix}.join"), after=tuple(range(1, width + 1))),
    ])


def _status(store: JobStore, job_id: str) -> JobStatus | None:
    job = store.job_get(job_id)
    return None if job is None else job.status


def test_workflows_are_written_in_order_each_as_one_workflow(store: JobStore) -> None:
    created = store.workflow_create_many([_fan("first", "x"), _fan("second", "y", width=3)])
    assert [len(c.job_ids) for c in created] == [4, 5]
    assert int(created[0].id) < int(created[1].id)
    every = [int(i) for c in created for i in c.job_ids]
    assert every == sorted(every)  # parents before children, workflow after workflow
    for one, name in zip(created, ["first", "second"], strict=True):
        summary = store.workflow_get(one.id)
        assert summary is not None
        assert summary.name == name
        assert summary.status == "running"
        assert [j.id for j in summary.jobs] == list(one.job_ids)
        root, *pages, join = one.job_ids
        assert sorted(summary.edges) == sorted(
            [(root, p) for p in pages] + [(p, join) for p in pages])
        assert store.job_links(join).workflow_id == one.id
        assert _status(store, root) is JobStatus.PENDING
        assert {_status(store, j) for j in [*pages, join]} == {JobStatus.WAITING}
    # each workflow's roots are released on their own; completing one releases its pages only
    (root,) = claim(store, "x.root")
    store.job_complete_many("w1", [ResultRef(root.id, root.lease_token, None)])
    assert sorted(ids(claim(store, "x.page", "y.page"))) == sorted(created[0].job_ids[1:3])


def test_no_workflows_write_nothing(store: JobStore) -> None:
    assert store.workflow_create_many([]) == []
    assert count_rows(store) == 0


def test_a_duplicate_in_one_workflow_writes_none_of_them(store: JobStore) -> None:
    add(store, "held", dedupe_key="k")
    before = count_rows(store)
    keyed = WorkflowParams(name="keyed", jobs=[
        WorkflowJobParams(_job("k.root")),
        WorkflowJobParams(_job("held", dedupe_key="k", on_duplicate="reject"), after=(0,)),
    ])
    with pytest.raises(ValueError, match="duplicate"):
        store.workflow_create_many([_fan("fine", "x"), keyed])
    assert count_rows(store) == before
    assert claim(store, "x.root", "k.root") == []


def test_an_unknown_parent_in_one_workflow_writes_none_of_them(store: JobStore) -> None:
    stray = WorkflowParams(name="stray", jobs=[
        WorkflowJobParams(_job("s.a", depends_on=("987654",)))])
    with pytest.raises(ValueError, match="987654"):
        store.workflow_create_many([_fan("fine", "x"), stray])
    assert count_rows(store) == 0


def test_a_workflow_without_jobs_is_refused_naming_its_position(store: JobStore) -> None:
    with pytest.raises(ValueError, match="workflow 1 has no jobs"):
        store.workflow_create_many([_fan("fine", "x"), WorkflowParams(name="empty", jobs=[])])
    with pytest.raises(ValueError, match="workflow 0 job 1: after"):
        store.workflow_create_many([WorkflowParams(name="loop", jobs=[
            WorkflowJobParams(_job("a")), WorkflowJobParams(_job("b"), after=(1,))])])
    assert count_rows(store) == 0


def test_a_workflow_waiting_for_an_outside_job_beside_others(store: JobStore) -> None:
    outside = add(store, "outside")
    waits = WorkflowParams(name="waits", jobs=[
        WorkflowJobParams(_job("w.a", depends_on=(outside,))),
        WorkflowJobParams(_job("w.b"), after=(0,)),
    ])
    first, second = store.workflow_create_many([_fan("fine", "x"), waits])
    a, b = second.job_ids
    assert _status(store, first.job_ids[0]) is JobStatus.PENDING
    assert (_status(store, a), _status(store, b)) == (JobStatus.WAITING, JobStatus.WAITING)
    assert store.job_links(a).workflow_id == second.id
    assert store.job_links(first.job_ids[0]).workflow_id == first.id
    (job,) = claim(store, "outside")
    store.job_complete_many("w1", [ResultRef(job.id, job.lease_token, None)])
    assert _status(store, a) is JobStatus.PENDING
