"""Contract: job dependencies and workflows on the port (``depends_on`` on the enqueue verbs,
the release of a WAITING job by its last parent's completion on every finishing verb, the
three failure policies and their propagation, retry re-arming, cancel, delete_on and prune
keeping a parent, ``workflow_create`` / ``workflow_get`` / ``workflow_cancel``,
``job_links``). The spec of both stores: see the JobStore docstring in store/port.py."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import orjson
import pytest

from golemq_pg._types import JobStatus, Scope
from golemq_pg._validation import encode_payload
from golemq_pg.store.port import (
    PARENT_CANCELLED_ERROR,
    PARENT_FAILED_ERROR,
    CancelFilter,
    CompleteAndClaimParams,
    EnqueueManyParams,
    EnqueueParams,
    EnqueueResult,
    FailItem,
    FindParams,
    JobStore,
    Listener,
    ResultRef,
    RetryItem,
    WorkflowJobParams,
    WorkflowParams,
)
from tests.support.store_port import SHORT_LEASE, add, claim, count_rows, ids, refs, slots

# The contract of the producer verbs holds on the async path too (AsyncPostgresStore).
pytestmark = pytest.mark.async_store_too


def params(
    job_type: str,
    payload: dict[str, Any] | None = None,
    *,
    depends_on: tuple[str, ...] = (),
    policy: str = "fail",
    dedupe_key: str | None = None,
    on_duplicate: str = "reject",
    delay: float = 0.0,
) -> EnqueueParams:
    return EnqueueParams(
        type=job_type,
        payload=encode_payload(job_type, payload or {}),
        depends_on=depends_on,
        on_parent_failure=policy,  # type: ignore[arg-type]
        dedupe_key=dedupe_key,
        on_duplicate=on_duplicate,  # type: ignore[arg-type]
        delay=delay,
    )


def child(store: JobStore, job_type: str, *parents: str, policy: str = "fail", **kw: Any) -> str:
    result = store.job_enqueue(params(job_type, depends_on=parents, policy=policy, **kw))
    assert result.id is not None
    return result.id


def status(store: JobStore, job_id: str) -> JobStatus | None:
    job = store.job_get(job_id)
    return None if job is None else job.status


def run_one(store: JobStore, job_type: str, result: bytes | None = None) -> str:
    """Claim exactly one job of ``job_type`` and complete it (with ``result``)."""
    (job,) = claim(store, slots(job_type, limit=1))
    written = store.job_complete_many("w1", [ResultRef(job.id, job.lease_token, result)])
    assert written == {job.id}
    return job.id


def fail_one(store: JobStore, job_type: str) -> str:
    (job,) = claim(store, slots(job_type, limit=1))
    assert store.job_fail_many("w1", [FailItem(job.id, job.lease_token, "boom")]) == {job.id}
    return job.id


# -- WAITING and its release ----------------------------------------------------------------


def test_a_child_waits_is_not_claimed_and_is_counted_as_waiting(store: JobStore) -> None:
    parent = add(store, "p")
    kid = child(store, "c", parent)
    assert status(store, kid) is JobStatus.WAITING
    assert claim(store, "c") == []
    assert store.job_stats()["waiting"] == 1
    assert store.job_stats()["pending"] == 1
    assert store.job_count_by_status()[JobStatus.WAITING] == 1
    assert store.job_stats_by_type()["c"]["waiting"] == 1
    assert store.job_oldest_due_age() is not None  # the parent's, not the child's
    found = store.job_find(FindParams(statuses=[JobStatus.WAITING]))
    assert [j.id for j in found] == [kid]


def test_the_last_parents_completion_makes_the_child_due(store: JobStore) -> None:
    a, b = add(store, "p", {"n": 1}), add(store, "p", {"n": 2})
    kid = child(store, "c", a, b)
    run_one(store, "p")
    assert status(store, kid) is JobStatus.WAITING
    run_one(store, "p")
    assert status(store, kid) is JobStatus.PENDING
    assert ids(claim(store, "c")) == [kid]


def test_a_parent_already_succeeded_counts_as_done(store: JobStore) -> None:
    parent = add(store, "p")
    run_one(store, "p")
    kid = child(store, "c", parent)
    assert status(store, kid) is JobStatus.PENDING


def test_an_unknown_parent_raises_and_writes_nothing(store: JobStore) -> None:
    parent = add(store, "p")
    before = count_rows(store)
    with pytest.raises(ValueError, match="depends_on"):
        store.job_enqueue(params("c", depends_on=(parent, "987654321")))
    with pytest.raises(ValueError, match="depends_on"):
        store.job_enqueue_many(EnqueueManyParams(
            type="c", payloads=[b"{}", b"{}"], depends_on=("987654321",)))
    assert count_rows(store) == before
    assert store.job_links(parent).children == ()


def test_add_many_children_all_wait_for_the_same_parents(store: JobStore) -> None:
    parent = add(store, "p")
    assert store.job_enqueue_many(EnqueueManyParams(
        type="c", payloads=[b'{"n": 1}', b'{"n": 2}', b'{"n": 3}'], depends_on=(parent,))) == 3
    assert store.job_stats()["waiting"] == 3
    run_one(store, "p")
    assert len(claim(store, "c")) == 3


def test_a_released_child_keeps_its_delay(store: JobStore) -> None:
    parent = add(store, "p")
    kid = child(store, "c", parent, delay=3600)
    run_one(store, "p")
    job = store.job_get(kid)
    assert job is not None
    assert job.status is JobStatus.PENDING
    assert job.run_at > store.now() + timedelta(minutes=50)
    assert claim(store, "c") == []


def test_the_reapers_dead_letter_settles_the_children(store: JobStore) -> None:
    parent = add(store, "p", max_attempts=1)
    kid = child(store, "c", parent, policy="run")
    claim(store, slots("p", lease=SHORT_LEASE))
    time.sleep(SHORT_LEASE + 0.3)
    store.lease_recover_expired()
    assert status(store, parent) is JobStatus.FAILED
    assert status(store, kid) is JobStatus.PENDING


# -- failure policies --------------------------------------------------------------------------


def test_fail_policy_dead_letters_the_child_naming_the_parent_and_propagates(
    store: JobStore,
) -> None:
    parent = add(store, "p", max_attempts=1)
    kid = child(store, "c", parent)
    grandkid = child(store, "g", kid)
    fail_one(store, "p")
    job = store.job_get(kid)
    assert job is not None
    assert job.status is JobStatus.FAILED
    assert job.last_error == PARENT_FAILED_ERROR.format(parent=parent)
    grand = store.job_get(grandkid)
    assert grand is not None
    assert grand.status is JobStatus.FAILED
    assert grand.last_error == PARENT_FAILED_ERROR.format(parent=kid)


def test_cancel_policy_cancels_the_child_and_propagates(store: JobStore) -> None:
    parent = add(store, "p", max_attempts=1)
    kid = child(store, "c", parent, policy="cancel")
    grandkid = child(store, "g", kid)  # "fail": its parent was cancelled
    fail_one(store, "p")
    assert store.job_get(kid) is None
    grand = store.job_get(grandkid)
    assert grand is not None
    assert grand.status is JobStatus.FAILED
    assert grand.last_error == PARENT_CANCELLED_ERROR.format(parent=kid)


def test_run_policy_makes_the_child_due_anyway(store: JobStore) -> None:
    a, b = add(store, "p", max_attempts=1), add(store, "q")
    kid = child(store, "c", a, b, policy="run")
    fail_one(store, "p")
    assert status(store, kid) is JobStatus.WAITING  # b still open
    run_one(store, "q")
    assert status(store, kid) is JobStatus.PENDING


def test_a_parent_already_failed_applies_the_policy_at_once(store: JobStore) -> None:
    parent = add(store, "p", max_attempts=1)
    fail_one(store, "p")
    failed = child(store, "c", parent)
    assert status(store, failed) is JobStatus.FAILED
    cancelled = store.job_enqueue(params("c", depends_on=(parent,), policy="cancel"))
    assert cancelled.id is not None
    assert store.job_get(cancelled.id) is None
    ran = child(store, "c", parent, policy="run")
    assert status(store, ran) is JobStatus.PENDING


def test_cancelling_a_parent_applies_the_childrens_policy(store: JobStore) -> None:
    parent = add(store, "p")
    failing = child(store, "c", parent)
    running = child(store, "c", parent, policy="run")
    gone = store.job_cancel(CancelFilter(job_ids=[parent]), "test")
    assert [g.id for g in gone] == [parent]
    job = store.job_get(failing)
    assert job is not None
    assert job.status is JobStatus.FAILED
    assert job.last_error == PARENT_CANCELLED_ERROR.format(parent=parent)
    assert status(store, running) is JobStatus.PENDING


def test_a_waiting_job_can_be_cancelled(store: JobStore) -> None:
    parent = add(store, "p")
    kid = child(store, "c", parent)
    assert [g.id for g in store.job_cancel(CancelFilter(job_ids=[kid]), None)] == [kid]
    run_one(store, "p")  # its completion finds no child left, and succeeds
    assert status(store, parent) is JobStatus.SUCCEEDED


# -- retry ------------------------------------------------------------------------------------


def test_retrying_a_failed_parent_rearms_the_children_it_failed(store: JobStore) -> None:
    parent = add(store, "p", max_attempts=1)
    kid = child(store, "c", parent)
    grandkid = child(store, "g", kid)
    fail_one(store, "p")
    assert store.job_retry(kid) is False  # its parent is still FAILED
    assert status(store, kid) is JobStatus.FAILED
    assert store.job_retry(parent) is True
    assert status(store, parent) is JobStatus.PENDING
    assert status(store, kid) is JobStatus.WAITING
    assert status(store, grandkid) is JobStatus.WAITING
    run_one(store, "p")
    assert status(store, kid) is JobStatus.PENDING
    run_one(store, "c")
    assert status(store, grandkid) is JobStatus.PENDING


# -- keeping parents ------------------------------------------------------------------------


def test_delete_on_keeps_a_parent_whose_children_wait(store: JobStore) -> None:
    parent = add(store, "p")
    other = add(store, "q")
    kid = child(store, "c", parent, other)
    (job,) = claim(store, slots("p", limit=1))
    assert store.job_complete_many("w1", refs([job]), delete_types=["p"]) == {parent}
    kept = store.job_get(parent)
    assert kept is not None
    assert kept.status is JobStatus.SUCCEEDED
    assert status(store, kid) is JobStatus.WAITING


def test_prune_keeps_a_parent_whose_children_wait(store: JobStore) -> None:
    parent = add(store, "p")
    lone = add(store, "p")
    other = add(store, "q")
    child(store, "c", parent, other)
    run_one(store, "p")
    run_one(store, "p")
    pruned = store.job_prune([JobStatus.SUCCEEDED], before=store.now() + timedelta(days=2),
                             age=None)
    assert pruned == 1
    assert store.job_get(lone) is None
    assert status(store, parent) is JobStatus.SUCCEEDED


# -- dedupe ---------------------------------------------------------------------------------


def test_a_waiting_job_holds_its_dedupe_key(store: JobStore) -> None:
    parent = add(store, "p")
    kid = child(store, "c", parent, dedupe_key="k")
    assert store.job_enqueue(params("c", dedupe_key="k")).id is None
    assert store.job_enqueue(params("c", depends_on=(parent,), dedupe_key="k")).id is None
    replaced = store.job_enqueue(params("c", {"v": 2}, dedupe_key="k", on_duplicate="replace"))
    assert replaced.id == kid
    assert replaced.replaced
    assert status(store, kid) is JobStatus.WAITING
    assert store.job_payload(kid) is not None
    assert b'"v"' in (store.job_payload(kid) or b"")


# -- workflows ------------------------------------------------------------------------------


def diamond() -> WorkflowParams:
    return WorkflowParams(name="diamond", jobs=[
        WorkflowJobParams(params("a")),
        WorkflowJobParams(params("b"), after=(0,)),
        WorkflowJobParams(params("b"), after=(0,)),
        WorkflowJobParams(params("d"), after=(1, 2)),
    ])


def test_a_workflow_runs_in_dependency_order_and_reports_its_state(store: JobStore) -> None:
    created = store.workflow_create(diamond())
    a, b, c, d = created.job_ids
    summary = store.workflow_get(created.id)
    assert summary is not None
    assert summary.name == "diamond"
    assert summary.status == "running"
    assert summary.finished_at is None
    assert [j.id for j in summary.jobs] == [a, b, c, d]
    assert summary.edges == sorted([(a, b), (a, c), (b, d), (c, d)],
                                   key=lambda e: (int(e[0]), int(e[1])))
    assert store.job_links(d).workflow_id == created.id
    assert ids(claim(store, "a", "b", "d")) == [a]
    store.job_complete_many("w1", [ResultRef(a, 1, b'{"r": "a"}')])
    assert sorted(ids(claim(store, "b", "d"))) == sorted([b, c])
    store.job_complete_many("w1", [ResultRef(b, 1, b'{"r": "b"}'), ResultRef(c, 1, None)])
    links = store.job_links(d)
    assert {p.id: p.result for p in links.parents} == {b: {"r": "b"}, c: None}
    assert store.job_links(a).children == (b, c)
    run_one(store, "d")
    done = store.workflow_get(created.id)
    assert done is not None
    assert done.status == "succeeded"
    assert done.finished_at is not None


def test_a_workflow_with_a_failed_job_is_failed_once_nothing_runs(store: JobStore) -> None:
    created = store.workflow_create(WorkflowParams(name="f", jobs=[
        WorkflowJobParams(dataclass_replace(params("a"), max_attempts=1)),
        WorkflowJobParams(params("b"), after=(0,)),
    ]))
    fail_one(store, "a")
    summary = store.workflow_get(created.id)
    assert summary is not None
    assert summary.status == "failed"


def test_a_duplicate_node_fails_the_whole_workflow_writing_nothing(store: JobStore) -> None:
    add(store, "b", dedupe_key="held")
    before = count_rows(store)
    with pytest.raises(ValueError, match="duplicate"):
        store.workflow_create(WorkflowParams(name="dup", jobs=[
            WorkflowJobParams(params("a")),
            WorkflowJobParams(params("b", dedupe_key="held"), after=(0,)),
        ]))
    assert count_rows(store) == before


def test_cancel_workflow_cancels_every_live_job(store: JobStore) -> None:
    created = store.workflow_create(diamond())
    run_one(store, "a")
    gone = store.workflow_cancel(created.id)
    assert sorted(g.id for g in gone) == sorted(created.job_ids[1:])
    assert claim(store, "a", "b", "d") == []
    assert store.job_stats()["waiting"] == 0
    summary = store.workflow_get(created.id)
    assert summary is not None
    assert summary.status == "cancelled"
    assert [j.id for j in summary.jobs] == [created.job_ids[0]]
    assert len(summary.edges) == 4  # the record outlives its jobs
    assert store.workflow_cancel(created.id) == []


def chain(depth: int, policy: str = "fail") -> WorkflowParams:
    """A root (one attempt) and ``depth - 1`` jobs, each after the one before."""
    return WorkflowParams(name=f"chain {depth}", jobs=[
        WorkflowJobParams(dataclass_replace(params("root"), max_attempts=1)),
        *(WorkflowJobParams(params("step", policy=policy), after=(n,))
          for n in range(depth - 1)),
    ])


def test_a_chain_thousands_deep_is_dead_lettered_when_its_root_fails(store: JobStore) -> None:
    created = store.workflow_create(chain(3_000))
    fail_one(store, "root")
    assert store.job_stats()["failed"] == 3_000
    tail = store.job_get(created.job_ids[-1])
    assert tail is not None
    assert tail.last_error == PARENT_FAILED_ERROR.format(parent=created.job_ids[-2])


def test_a_chain_thousands_deep_is_cancelled_with_its_root(store: JobStore) -> None:
    created = store.workflow_create(chain(3_000, policy="cancel"))
    gone = store.job_cancel(CancelFilter(job_ids=[created.job_ids[0]]), "test")
    assert [g.id for g in gone] == [created.job_ids[0]]
    assert store.job_stats()["waiting"] == 0
    assert all(store.job_get(i) is None for i in created.job_ids[::500])


def test_parents_failing_together_judge_a_shared_child_once(store: JobStore) -> None:
    a, b = add(store, "p", max_attempts=1), add(store, "p", max_attempts=1)
    failing = child(store, "c", a, b)
    running = child(store, "c", a, b, policy="run")
    jobs = claim(store, slots("p", limit=2))
    written = store.job_fail_many("w1", [FailItem(j.id, j.lease_token, "boom")
                                          for j in reversed(jobs)])
    assert written == {a, b}
    job = store.job_get(failing)
    assert job is not None
    assert job.status is JobStatus.FAILED
    # The smaller parent id is the one named, whatever the batch's order.
    assert job.last_error == PARENT_FAILED_ERROR.format(parent=min(a, b, key=int))
    assert status(store, running) is JobStatus.PENDING  # both parents counted off


def test_unknown_workflow_and_links(store: JobStore) -> None:
    assert store.workflow_get("987654321") is None
    assert store.workflow_cancel("987654321") == []
    links = store.job_links("987654321")
    assert (links.workflow_id, links.parents, links.children) == (None, (), ())


def dataclass_replace(p: EnqueueParams, **changes: Any) -> EnqueueParams:
    return dataclasses.replace(p, **changes)


# -- more of the contract: every finishing path, the policies' edges, workflows' edges ------


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


def test_complete_and_claim_claims_the_child_its_completion_released(
    store: JobStore,
) -> None:
    parent = add(store, "p")
    kid = child(store, "c", parent)
    result = store.job_complete_and_claim(CompleteAndClaimParams(
        owner="w1", items=refs(claim(store, "p")), claim=slots("c"),
    ))
    assert result.written == {parent}
    assert ids(result.claimed) == [kid]


def test_the_reapers_dead_letter_applies_the_childrens_policy(store: JobStore) -> None:
    parent = add(store, "p", max_attempts=1)
    kid = child(store, "c", parent)
    assert ids(claim(store, slots("p", lease=SHORT_LEASE))) == [parent]
    time.sleep(SHORT_LEASE + 0.3)
    reclaimed = store.lease_recover_expired()
    assert [(r.id, r.outcome) for r in reclaimed] == [(parent, "failed-terminal")]
    found = store.job_get(kid)
    assert found is not None
    assert found.status is JobStatus.FAILED
    assert found.last_error == f"parent {parent} failed"


def test_a_superseded_keyed_retry_is_a_cancelled_parent(store: JobStore) -> None:
    parent = add(store, "p", dedupe_key="k")
    kid = child(store, "c", parent)
    running = claim(store, "p")
    newer = put(store, "p", dedupe_key="k", on_duplicate="replace")
    assert newer.inserted  # the running holder is not replaced: a new job takes the key
    item = RetryItem(id=parent, token=running[0].lease_token, delay=0.0, error="again")
    assert store.job_retry_many("w1", [item]) == {parent}
    assert status(store, parent) is None  # superseded by the newer job: deleted
    found = store.job_get(kid)
    assert found is not None
    assert found.last_error == f"parent {parent} was cancelled"


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


def test_cancelling_a_parent_applies_each_childs_own_policy(store: JobStore) -> None:
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


def test_a_dependent_is_not_retried_while_a_parent_is_failed(store: JobStore) -> None:
    parent = add(store, "p")
    kid = child(store, "c", parent, policy="run")
    fail(store, "p")
    assert status(store, kid) is JobStatus.PENDING  # "run": due anyway
    fail(store, "c")  # and dead-lettered by its own handler
    assert store.job_retry(kid) is False  # its parent is still FAILED
    assert status(store, kid) is JobStatus.FAILED
    assert store.job_retry(parent) is True
    assert status(store, kid) is JobStatus.FAILED  # it did not fail because of the parent
    assert store.job_retry(kid) is True
    assert status(store, kid) is JobStatus.WAITING  # for its parent again


def test_delete_on_deletes_only_the_finished_jobs_no_child_waits_for(store: JobStore) -> None:
    parent = add(store, "p")
    lonely = add(store, "p")
    kid = child(store, "c", parent)
    claimed = claim(store, "p")
    assert store.job_complete_many("w1", refs(claimed), delete_types=["p"]) == {parent, lonely}
    assert status(store, lonely) is None  # deleted as asked
    assert status(store, parent) is JobStatus.SUCCEEDED  # kept: its child reads it
    assert status(store, kid) is JobStatus.PENDING
    assert [p.id for p in store.job_links(kid).parents] == [parent]


def test_prune_takes_a_parent_once_its_children_finished(store: JobStore) -> None:
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


def test_waiting_jobs_are_counted_in_stats_and_gauges_never_as_due(store: JobStore) -> None:
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


def test_a_workflow_job_after_one_cancelled_at_its_add_gets_its_policy(
    store: JobStore,
) -> None:
    dead = add(store, "dead")
    fail(store, "dead")
    created = store.workflow_create(workflow(
        (job("a", parents=[dead], policy="cancel"), ()), (job("b"), (0,)),
    ))
    a, b = created.job_ids
    assert status(store, a) is None  # cancelled at once: its parent is FAILED
    found = store.job_get(b)
    assert found is not None
    assert found.status is JobStatus.FAILED
    assert found.last_error == f"parent {a} was cancelled"


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


def test_the_parents_of_many_jobs_are_read_at_once(store: JobStore) -> None:
    first = add(store, "p")
    second = add(store, "p")
    kid = child(store, "c", first, second)
    only = child(store, "c", second)
    plain = add(store, "plain")
    created = store.workflow_create(workflow((job("root"), ())))
    (root,) = created.job_ids
    found = store.job_parents_many([kid, only, plain, root, "987654321", "not an id"])
    assert sorted(found) == sorted([kid, only, root])  # no parents, no workflow: absent
    assert [p.id for p in found[kid].parents] == [first, second]
    assert [p.id for p in found[only].parents] == [second]
    assert {p.status for p in found[kid].parents} == {JobStatus.PENDING}
    assert (found[kid].workflow_id, found[root].workflow_id) == (None, created.id)
    assert found[root].parents == ()
    assert all(links.children == () for links in found.values())
    assert store.job_parents_many([]) == {}


def test_a_workflow_is_pruned_with_its_last_job(store: JobStore) -> None:
    created = store.workflow_create(workflow((job("a"), ()), (job("b"), (0,))))
    succeed(store, "a")
    succeed(store, "b")
    later = store.now() + timedelta(hours=1)
    assert store.job_prune([JobStatus.SUCCEEDED], before=later, age=None) == 2
    assert store.workflow_get(created.id) is None


def test_workflow_jobs_keep_every_option_of_their_add(store: JobStore) -> None:
    traced = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    root = dataclasses.replace(
        job("opt.root", payload={"k": "v"}), scope=Scope("tenant", "7"), priority=5,
        tags=("red", "blue"), max_attempts=None, trace_context=traced)
    later = dataclasses.replace(job("opt.later"), delay=3600.0, max_attempts=2)
    kid = dataclasses.replace(job("opt.kid", policy="run"), priority=-2)
    before = store.now()
    created = store.workflow_create(workflow((root, ()), (later, ()), (kid, (0, 1))))
    r, lt, k = created.job_ids
    assert int(r) < int(lt) < int(k)
    found = {i: store.job_get(i) for i in created.job_ids}
    assert found[r] is not None
    assert found[lt] is not None
    assert found[k] is not None
    assert (found[r].status, found[r].scope, found[r].priority, found[r].tags,
            found[r].max_attempts) == (JobStatus.PENDING, Scope("tenant", "7"), 5,
                                       ("red", "blue"), None)
    assert found[lt].status is JobStatus.PENDING
    assert (found[lt].max_attempts, found[lt].tags) == (2, ())
    assert found[lt].run_at >= before + timedelta(seconds=3500)  # its delay kept
    assert (found[k].status, found[k].priority) == (JobStatus.WAITING, -2)
    assert orjson.loads(store.job_payload(r) or b"null") == {"k": "v"}
    (claimed,) = claim(store, "opt.root", "opt.later")
    assert claimed.id == r
    assert claimed.trace_context == traced
    links = store.job_links(k)
    assert sorted(p.id for p in links.parents) == sorted([r, lt])
    assert links.workflow_id == created.id
