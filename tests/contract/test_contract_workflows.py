"""Contract: dependencies between jobs and workflows (the port's "Dependencies", and
``workflow_create`` / ``workflow_get`` / ``workflow_cancel`` / ``job_links``), on every store.

WAITING jobs are never claimed and hold their dedupe key; a parent's outcome reaches its
children in the write that finishes it (completion, failure, cancel), with the child's
policy propagating; retry re-arms; prune keeps a parent its children still wait for.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from datetime import timedelta

import orjson
import pytest

from golemq_pg._types import JobStatus
from golemq_pg._validation import encode_payload
from golemq_pg.store.port import (
    CancelFilter,
    EnqueueManyParams,
    EnqueueParams,
    EnqueueResult,
    FailItem,
    JobStore,
    Listener,
    WorkflowJobParams,
    WorkflowParams,
)
from tests.support.store_port import SHORT_LEASE, add, claim, count_rows, ids, refs, slots


def job(
    job_type: str, *, parents: Sequence[str] = (), policy: str = "fail",
    dedupe_key: str | None = None, on_duplicate: str = "reject", payload: dict | None = None,
) -> EnqueueParams:
    """The port's parameters of one job (``parents``: its ``depends_on``)."""
    return EnqueueParams(
        type=job_type,
        payload=encode_payload(job_type, payload or {}),
        dedupe_key=dedupe_key,
        on_duplicate=on_duplicate,  # type: ignore[arg-type]
        depends_on=tuple(parents),
        on_parent_failure=policy,  # type: ignore[arg-type]
    )


def put(store: JobStore, job_type: str, *parents: str, policy: str = "fail",
        **kwargs: object) -> EnqueueResult:
    """Enqueue one job waiting for ``parents``."""
    return store.job_enqueue(job(job_type, parents=parents, policy=policy, **kwargs))  # type: ignore[arg-type]


def child(store: JobStore, job_type: str, *parents: str, policy: str = "fail") -> str:
    """Enqueue one job waiting for ``parents``, which must be inserted; its id."""
    result = put(store, job_type, *parents, policy=policy)
    assert result.inserted, result
    assert result.id is not None
    return result.id


def status(store: JobStore, job_id: str) -> JobStatus | None:
    """The job's status; None when it no longer exists."""
    found = store.job_get(job_id)
    return None if found is None else found.status


def succeed(store: JobStore, job_type: str) -> list[str]:
    """Claim every due job of ``job_type`` and complete them in one call; their ids."""
    claimed = claim(store, job_type)
    assert store.job_complete_many("w1", refs(claimed)) == set(ids(claimed))
    return ids(claimed)


def fail(store: JobStore, job_type: str, error: str = "boom") -> list[str]:
    """Claim every due job of ``job_type`` and dead-letter them in one call; their ids."""
    claimed = claim(store, job_type)
    items = [FailItem(id=j.id, token=j.lease_token, error=error) for j in claimed]
    assert store.job_fail_many("w1", items) == set(ids(claimed))
    return ids(claimed)


def workflow(*jobs: tuple[EnqueueParams, Sequence[int]], name: str = "wf") -> WorkflowParams:
    """A workflow of (job, after indexes) pairs."""
    return WorkflowParams(name=name, jobs=[WorkflowJobParams(j, tuple(a)) for j, a in jobs])


def hinted(listener: Listener, kind: str, item: str, timeout: float = 5.0) -> bool:
    """Whether a notification of ``kind`` naming ``item`` arrives within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for note in listener.wait(max(deadline - time.monotonic(), 0.01)):
            if note.kind == kind and item in note.items:
                return True
    return False


# -- waiting and release -----------------------------------------------------------------


def test_a_waiting_job_is_never_claimed_and_is_released_by_its_parents_success(
    store: JobStore,
) -> None:
    parent = add(store, "p")
    kid = child(store, "c", parent)
    assert status(store, kid) is JobStatus.WAITING
    assert claim(store, "c") == []
    assert store.job_oldest_due_age() is not None  # the parent, not the child
    assert succeed(store, "p") == [parent]
    assert status(store, kid) is JobStatus.PENDING
    assert succeed(store, "c") == [kid]


def test_a_diamond_releases_each_level_once_its_parents_are_done(store: JobStore) -> None:
    top = add(store, "top")
    left = child(store, "mid", top)
    right = child(store, "mid", top)
    bottom = child(store, "bottom", left, right)
    assert succeed(store, "top") == [top]
    assert {status(store, left), status(store, right)} == {JobStatus.PENDING}
    assert status(store, bottom) is JobStatus.WAITING
    first = claim(store, "mid")
    assert sorted(ids(first)) == sorted([left, right])
    store.job_complete_many("w1", refs(first[:1]))
    assert status(store, bottom) is JobStatus.WAITING  # one parent still running
    store.job_complete_many("w1", refs(first[1:]))
    assert status(store, bottom) is JobStatus.PENDING
    assert succeed(store, "bottom") == [bottom]


def test_a_fan_in_is_released_exactly_once_when_its_parents_finish_together(
    store: JobStore,
) -> None:
    parents = [add(store, "fan", {"n": n}) for n in range(5)]
    joined = child(store, "join", *parents)
    listener = store.open_listener()
    try:
        assert sorted(succeed(store, "fan")) == sorted(parents)
        assert status(store, joined) is JobStatus.PENDING
        assert hinted(listener, "jobs", "join")  # idle workers are woken, as by an add
    finally:
        listener.close()
    assert succeed(store, "join") == [joined]
    assert claim(store, "join") == []


def test_a_parent_already_succeeded_counts_as_done(store: JobStore) -> None:
    parent = add(store, "p")
    succeed(store, "p")
    kid = child(store, "c", parent)
    assert status(store, kid) is JobStatus.PENDING
    assert ids(claim(store, "c")) == [kid]


def test_an_unknown_parent_raises_and_writes_nothing(store: JobStore) -> None:
    parent = add(store, "p")
    before = count_rows(store)
    with pytest.raises(ValueError, match="depends_on: job 987654 does not exist"):
        put(store, "c", parent, "987654")
    with pytest.raises(ValueError, match="987654"):
        store.job_enqueue_many(EnqueueManyParams(
            type="c", payloads=[encode_payload("c", {})] * 3, depends_on=(parent, "987654"),
        ))
    assert count_rows(store) == before
    assert store.job_links(parent).children == ()


def test_add_many_with_parents_waits_for_them_all(store: JobStore) -> None:
    parent = add(store, "p")
    count = store.job_enqueue_many(EnqueueManyParams(
        type="page", payloads=[encode_payload("page", {"n": n}) for n in range(3)],
        depends_on=(parent,),
    ))
    assert count == 3
    assert store.job_count_by_status()[JobStatus.WAITING] == 3
    assert len(store.job_links(parent).children) == 3
    succeed(store, "p")
    assert len(succeed(store, "page")) == 3


# -- policies ------------------------------------------------------------------------------


def test_fail_policy_dead_letters_the_chain_naming_each_parent(store: JobStore) -> None:
    root = add(store, "root")
    kid = child(store, "kid", root)
    grandkid = child(store, "grandkid", kid)
    assert fail(store, "root") == [root]
    kid_now = store.job_get(kid)
    assert kid_now is not None
    assert kid_now.status is JobStatus.FAILED
    assert kid_now.last_error == f"parent {root} failed"
    assert kid_now.attempts == 0
    assert kid_now.errors == ()
    grand_now = store.job_get(grandkid)
    assert grand_now is not None
    assert grand_now.status is JobStatus.FAILED
    assert grand_now.last_error == f"parent {kid} failed"


def test_cancel_policy_cancels_the_chain(store: JobStore) -> None:
    root = add(store, "root")
    kid = child(store, "kid", root, policy="cancel")
    grandkid = child(store, "grandkid", kid, policy="fail")
    fail(store, "root")
    assert status(store, kid) is None  # cancelled: deleted
    grand_now = store.job_get(grandkid)
    assert grand_now is not None
    assert grand_now.status is JobStatus.FAILED
    assert grand_now.last_error == f"parent {kid} was cancelled"


def test_run_policy_runs_anyway_and_its_own_outcome_propagates(store: JobStore) -> None:
    root = add(store, "root")
    other = add(store, "other")
    kid = child(store, "kid", root, other, policy="run")
    grandkid = child(store, "grandkid", kid)
    fail(store, "root")
    assert status(store, kid) is JobStatus.WAITING  # "other" is still open
    succeed(store, "other")
    assert status(store, kid) is JobStatus.PENDING
    assert status(store, grandkid) is JobStatus.WAITING
    succeed(store, "kid")
    assert status(store, grandkid) is JobStatus.PENDING


def test_a_child_failed_by_one_parent_keeps_that_verdict_when_the_other_succeeds(
    store: JobStore,
) -> None:
    first = add(store, "first")
    second = add(store, "second")
    kid = child(store, "kid", first, second)
    fail(store, "first")
    succeed(store, "second")
    found = store.job_get(kid)
    assert found is not None
    assert found.status is JobStatus.FAILED
    assert found.last_error == f"parent {first} failed"
    assert claim(store, "kid") == []


@pytest.mark.parametrize(
    ("policy", "expected"),
    [("fail", JobStatus.FAILED), ("cancel", None), ("run", JobStatus.PENDING)],
)
def test_a_parent_already_failed_applies_the_policy_at_add(
    store: JobStore, policy: str, expected: JobStatus | None
) -> None:
    parent = add(store, "p")
    fail(store, "p")
    result = put(store, "c", parent, policy=policy)
    assert result.inserted
    assert result.id is not None
    assert status(store, result.id) is expected
    if expected is JobStatus.FAILED:
        found = store.job_get(result.id)
        assert found is not None
        assert found.last_error == f"parent {parent} failed"
        assert found.attempts == 0


def test_cancelling_a_parent_applies_the_childrens_policies(store: JobStore) -> None:
    parent = add(store, "p")
    failing = child(store, "c", parent)
    dropped = child(store, "c", parent, policy="cancel")
    running = child(store, "c", parent, policy="run")
    cancelled = store.job_cancel(CancelFilter(job_ids=[parent]), None)
    assert [c.id for c in cancelled] == [parent]  # the children are not listed
    found = store.job_get(failing)
    assert found is not None
    assert found.status is JobStatus.FAILED
    assert found.last_error == f"parent {parent} was cancelled"
    assert status(store, dropped) is None
    assert status(store, running) is JobStatus.PENDING


def test_a_waiting_job_is_cancelled_as_a_pending_one(store: JobStore) -> None:
    parent = add(store, "p")
    kid = child(store, "c", parent)
    cancelled = store.job_cancel(CancelFilter(job_ids=[kid], pending_only=True), None)
    assert [c.id for c in cancelled] == [kid]
    assert status(store, kid) is None
    succeed(store, "p")  # nothing left to release
    assert claim(store, "c") == []


# -- retry ----------------------------------------------------------------------------------


def test_retrying_a_failed_parent_rearms_its_dependents_down_the_chain(
    store: JobStore,
) -> None:
    root = add(store, "root")
    kid = child(store, "kid", root)
    grandkid = child(store, "grandkid", kid)
    fail(store, "root")
    assert store.job_retry(kid) is False  # its parent is still FAILED
    assert status(store, kid) is JobStatus.FAILED
    assert store.job_retry(root) is True
    for job_id in (kid, grandkid):
        found = store.job_get(job_id)
        assert found is not None
        assert found.status is JobStatus.WAITING
        assert found.last_error is None
        assert found.attempts == 0
    succeed(store, "root")
    assert status(store, kid) is JobStatus.PENDING
    succeed(store, "kid")
    assert succeed(store, "grandkid") == [grandkid]


def test_retrying_a_dependent_whose_parent_was_cancelled_returns_false(
    store: JobStore,
) -> None:
    parent = add(store, "p")
    kid = child(store, "c", parent)
    store.job_cancel(CancelFilter(job_ids=[parent]), None)
    assert status(store, kid) is JobStatus.FAILED
    assert store.job_retry(kid) is False
    assert status(store, kid) is JobStatus.FAILED


def test_a_dependent_failed_by_its_own_handler_is_retried_as_any_job(
    store: JobStore,
) -> None:
    parent = add(store, "p")
    kid = child(store, "c", parent)
    succeed(store, "p")
    fail(store, "c")
    assert store.job_retry(kid) is True
    assert status(store, kid) is JobStatus.PENDING


# -- dedupe, delete_on, prune ----------------------------------------------------------------


def test_a_waiting_job_holds_its_dedupe_key(store: JobStore) -> None:
    parent = add(store, "p")
    held = put(store, "c", parent, dedupe_key="k", payload={"v": 1})
    assert held.inserted
    assert held.id is not None
    assert put(store, "c", dedupe_key="k").id is None  # reject, no parents
    assert put(store, "c", parent, dedupe_key="k").id is None  # reject, with parents
    replaced = put(store, "c", dedupe_key="k", on_duplicate="replace", payload={"v": 2})
    assert (replaced.id, replaced.inserted, replaced.replaced) == (held.id, False, True)
    assert orjson.loads(store.job_payload(held.id) or b"null") == {"v": 2}
    assert status(store, held.id) is JobStatus.WAITING  # still waits for its parent
    assert store.job_count_by_status()[JobStatus.WAITING] == 1


def test_delete_on_keeps_a_parent_whose_children_wait(store: JobStore) -> None:
    parent = add(store, "p")
    lonely = add(store, "p")
    kid = child(store, "c", parent)
    claimed = claim(store, "p")
    assert store.job_complete_many("w1", refs(claimed), delete_types=["p"]) == {parent, lonely}
    assert status(store, lonely) is None  # deleted as asked
    assert status(store, parent) is JobStatus.SUCCEEDED  # kept: its child reads it
    assert status(store, kid) is JobStatus.PENDING
    assert [p.id for p in store.job_links(kid).parents] == [parent]


def test_prune_keeps_a_parent_whose_child_still_waits(store: JobStore) -> None:
    done = add(store, "p")
    blocker = add(store, "blocker")
    kid = child(store, "c", done, blocker)
    succeed(store, "p")
    later = store.now() + timedelta(hours=1)
    assert store.job_prune([JobStatus.SUCCEEDED], before=later, age=None) == 0
    assert status(store, done) is JobStatus.SUCCEEDED
    succeed(store, "blocker")
    succeed(store, "c")
    assert store.job_prune([JobStatus.SUCCEEDED], before=later, age=None) == 3
    assert status(store, kid) is None


# -- counts -----------------------------------------------------------------------------------


def test_waiting_jobs_are_counted_as_waiting_and_never_as_due(store: JobStore) -> None:
    parent = add(store, "p")
    child(store, "c", parent)
    child(store, "c", parent)
    stats = store.job_stats()
    assert stats["waiting"] == 2
    assert stats["pending"] == 1
    assert stats["scheduled"] == 0
    assert store.job_stats_by_type()["c"]["waiting"] == 2
    assert store.job_count_by_status()[JobStatus.WAITING] == 2
    gauges = {g.type: g for g in store.metrics_type_gauges(100)}
    assert gauges["c"].waiting == 2
    assert gauges["c"].pending == 0


# -- workflows --------------------------------------------------------------------------------


def test_a_workflow_runs_to_succeeded_with_its_edges(store: JobStore) -> None:
    created = store.workflow_create(workflow(
        (job("fetch"), ()), (job("page"), (0,)), (job("page"), (0,)), (job("index"), (1, 2)),
        name="ingest",
    ))
    fetch, page1, page2, index = created.job_ids
    summary = store.workflow_get(created.id)
    assert summary is not None
    assert (summary.name, summary.status, summary.finished_at) == ("ingest", "running", None)
    assert [j.id for j in summary.jobs] == [fetch, page1, page2, index]
    assert summary.edges == [(fetch, page1), (fetch, page2), (page1, index), (page2, index)]
    assert [j.status for j in summary.jobs] == [
        JobStatus.PENDING, JobStatus.WAITING, JobStatus.WAITING, JobStatus.WAITING,
    ]
    for job_type in ("fetch", "page", "index"):
        succeed(store, job_type)
    done = store.workflow_get(created.id)
    assert done is not None
    assert done.status == "succeeded"
    assert done.finished_at == max(j.finished_at for j in done.jobs if j.finished_at)
    assert store.job_links(index).workflow_id == created.id


def test_a_workflow_with_a_dead_letter_and_nothing_left_to_run_is_failed(
    store: JobStore,
) -> None:
    created = store.workflow_create(workflow((job("a"), ()), (job("b"), (0,))))
    fail(store, "a")
    summary = store.workflow_get(created.id)
    assert summary is not None
    assert summary.status == "failed"
    assert {j.status for j in summary.jobs} == {JobStatus.FAILED}


def test_a_workflow_with_a_duplicate_writes_nothing(store: JobStore) -> None:
    add(store, "keyed", dedupe_key="k")
    before = count_rows(store)
    with pytest.raises(ValueError, match=r"workflow job 1 \(type keyed\) is a duplicate"):
        store.workflow_create(workflow(
            (job("a"), ()), (job("keyed", dedupe_key="k"), (0,)), (job("z"), (0,)),
        ))
    assert count_rows(store) == before
    assert claim(store, "a") == []


def test_a_workflow_naming_an_unknown_parent_writes_nothing(store: JobStore) -> None:
    before = count_rows(store)
    with pytest.raises(ValueError, match="987654"):
        store.workflow_create(workflow((job("a"), ()), (job("b", parents=["987654"]), (0,))))
    assert count_rows(store) == before


def test_a_workflow_job_may_wait_for_a_job_outside_it(store: JobStore) -> None:
    outside = add(store, "outside")
    created = store.workflow_create(workflow((job("inside", parents=[outside]), ())))
    (inside,) = created.job_ids
    assert status(store, inside) is JobStatus.WAITING
    links = store.job_links(inside)
    assert [p.id for p in links.parents] == [outside]
    assert store.job_links(outside).children == (inside,)
    assert store.job_links(outside).workflow_id is None
    summary = store.workflow_get(created.id)
    assert summary is not None
    assert summary.edges == []
    succeed(store, "outside")
    assert status(store, inside) is JobStatus.PENDING


def test_cancelling_a_workflow_cancels_its_live_jobs_once(store: JobStore) -> None:
    created = store.workflow_create(workflow(
        (job("a"), ()), (job("b"), (0,)), (job("c"), (1,)),
    ))
    a, b, c = created.job_ids
    succeed(store, "a")
    outside = child(store, "outside", b)
    cancelled = store.workflow_cancel(created.id)
    assert sorted(x.id for x in cancelled) == sorted([b, c])
    summary = store.workflow_get(created.id)
    assert summary is not None
    assert summary.status == "cancelled"
    assert summary.finished_at is not None
    assert [j.id for j in summary.jobs] == [a]
    assert summary.edges == [(a, b), (b, c)]  # kept after their jobs went
    found = store.job_get(outside)  # outside the workflow: its policy applies
    assert found is not None
    assert found.last_error == f"parent {b} was cancelled"
    assert store.workflow_cancel(created.id) == []
    again = store.workflow_get(created.id)
    assert again is not None
    assert again.finished_at == summary.finished_at


def test_unknown_workflows_and_links(store: JobStore) -> None:
    assert store.workflow_get("987654") is None
    assert store.workflow_cancel("987654") == []
    lone = add(store, "lone")
    assert store.job_links(lone).workflow_id is None
    assert store.job_links(lone).parents == ()
    assert store.job_links(lone).children == ()
    assert store.job_links("987654").parents == ()


def test_job_links_list_existing_parents_and_children(store: JobStore) -> None:
    first = add(store, "p")
    second = add(store, "p")
    kid = child(store, "c", first, second)
    dropped = child(store, "c", first, policy="cancel")
    links = store.job_links(kid)
    assert [p.id for p in links.parents] == [first, second]
    assert {p.status for p in links.parents} == {JobStatus.PENDING}
    assert store.job_links(first).children == (kid, dropped)
    store.job_cancel(CancelFilter(job_ids=[second]), None)
    assert [p.id for p in store.job_links(kid).parents] == [first]
    assert store.job_links(first).children == (kid, dropped)  # kid is FAILED, still linked
    assert status(store, dropped) is JobStatus.WAITING  # "cancel" only for its own parent


def test_a_workflow_is_pruned_with_its_last_job(store: JobStore) -> None:
    created = store.workflow_create(workflow((job("a"), ()), (job("b"), (0,))))
    succeed(store, "a")
    succeed(store, "b")
    later = store.now() + timedelta(hours=1)
    assert store.job_prune([JobStatus.SUCCEEDED], before=later, age=None) == 2
    assert store.workflow_get(created.id) is None


def test_a_released_child_keeps_its_delay(store: JobStore) -> None:
    parent = add(store, "p")
    kid = store.job_enqueue(dataclasses.replace(job("c", parents=[parent]), delay=3600)).id
    assert kid is not None
    succeed(store, "p")
    found = store.job_get(kid)
    assert found is not None and found.status is JobStatus.PENDING
    assert found.run_at > store.now() + timedelta(minutes=50)
    assert claim(store, "c") == []


def test_the_reapers_dead_letter_settles_the_children(store: JobStore) -> None:
    parent = add(store, "p", max_attempts=1)
    kid = child(store, "c", parent, policy="run")
    claim(store, slots("p", lease=SHORT_LEASE))
    time.sleep(SHORT_LEASE + 0.3)
    store.lease_recover_expired()
    assert status(store, parent) is JobStatus.FAILED
    assert status(store, kid) is JobStatus.PENDING
