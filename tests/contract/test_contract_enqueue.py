"""Contract: enqueue, bulk enqueue and the dedupe rule, on both stores."""

from __future__ import annotations

from datetime import timedelta

import pytest

from golemq_pg._types import JobStatus, Scope
from golemq_pg._validation import encode_payload
from golemq_pg.store.port import (
    CancelFilter,
    EnqueueManyParams,
    EnqueueParams,
    FailItem,
    FindParams,
    JobStore,
    LeaseRef,
    RetryItem,
)
from tests.support.store_port import add, claim, concurrently, put, refs, slots

# The contract of the producer verbs holds on the async path too (AsyncPostgresStore).
pytestmark = pytest.mark.async_store_too


def test_enqueue_returns_increasing_string_ids_and_a_pending_row(store: JobStore) -> None:
    before = store.now()
    first = add(store, "a", {"n": 1}, scope=("Article", "a1"), max_attempts=5, priority=7)
    second = add(store, "a", {"n": 2})
    assert isinstance(first, str)
    assert isinstance(second, str)
    assert int(second) > int(first)
    job = store.job_get(first)
    assert job is not None
    assert (job.id, job.type, job.status, job.attempts) == (first, "a", JobStatus.PENDING, 0)
    assert job.scope == Scope("Article", "a1")
    assert (job.max_attempts, job.priority, job.last_error, job.progress) == (5, 7, None, None)
    assert job.started_at is None
    assert job.finished_at is None
    assert before <= job.created_at <= store.now()
    assert job.created_at.utcoffset() == timedelta(0)
    assert job.run_at <= store.now()


def test_delay_and_run_at_decide_when_a_job_is_due(store: JobStore) -> None:
    now = store.now()
    later = add(store, "a", delay=3600)
    past = add(store, "a", run_at=now - timedelta(seconds=30))
    fixed = add(store, "a", run_at=now + timedelta(days=1))
    later_job, past_job, fixed_job = (store.job_get(i) for i in (later, past, fixed))
    assert later_job
    assert past_job
    assert fixed_job
    assert timedelta(seconds=3590) < later_job.run_at - now < timedelta(seconds=3660)
    assert past_job.run_at == now - timedelta(seconds=30)
    assert fixed_job.run_at == now + timedelta(days=1)
    assert [j.id for j in claim(store, "a")] == [past]
    stats = store.job_stats()
    assert (stats["scheduled"], stats["running"], stats["pending"]) == (2, 1, 0)


def test_reject_returns_none_while_a_job_with_the_key_is_pending(store: JobStore) -> None:
    first = put(store, "a", {"v": 1}, dedupe_key="k")
    assert first.inserted
    assert first.id is not None
    assert not first.replaced
    again = put(store, "a", {"v": 2}, dedupe_key="k")
    assert (again.id, again.inserted, again.replaced) == (None, False, False)
    assert store.job_count_by_status()[JobStatus.PENDING] == 1
    assert claim(store, "a")[0].payload == {"v": 1}


def test_reject_returns_none_while_a_job_with_the_key_is_running(store: JobStore) -> None:
    add(store, "a", dedupe_key="k")
    assert len(claim(store, "a")) == 1
    again = put(store, "a", dedupe_key="k")
    assert (again.id, again.inserted) == (None, False)
    assert store.job_count_by_status()[JobStatus.PENDING] == 0


def test_dedupe_keys_are_scoped_by_job_type(store: JobStore) -> None:
    assert put(store, "a", dedupe_key="k").inserted
    assert put(store, "b", dedupe_key="k").inserted
    assert not put(store, "a", dedupe_key="k").inserted
    assert put(store, "a", dedupe_key="other").inserted


@pytest.mark.parametrize("finish", ["complete", "fail", "cancel", "cancel_running"])
def test_the_key_is_free_again_once_the_job_is_gone_or_finished(
    store: JobStore, finish: str
) -> None:
    job_id = add(store, "a", dedupe_key="k")
    if finish == "cancel":
        assert len(store.job_cancel(CancelFilter(job_ids=[job_id]), None)) == 1
    else:
        (job,) = claim(store, "a")
        if finish == "complete":
            assert store.job_complete_many("w1", refs([job])) == {job_id}
        elif finish == "fail":
            assert store.job_fail_many("w1", [FailItem(job.id, job.lease_token, "E")]) == {job_id}
        else:
            assert len(store.job_cancel(CancelFilter(job_ids=[job_id]), None)) == 1
    again = put(store, "a", dedupe_key="k")
    assert again.inserted
    assert again.id not in (None, job_id)


def test_replace_while_pending_rewrites_payload_scope_priority_in_place(store: JobStore) -> None:
    past = store.now() - timedelta(seconds=60)
    keyed = put(store, "a", {"v": 1}, dedupe_key="k", run_at=past, scope=("S", "1"))
    assert keyed.id is not None
    other = add(store, "a", {"v": "other"}, run_at=past + timedelta(seconds=1))
    before = store.job_get(keyed.id)
    replaced = put(
        store,
        "a",
        {"v": 2},
        dedupe_key="k",
        on_duplicate="replace",
        scope=("S", "2"),
        priority=0,
    )
    assert (replaced.id, replaced.inserted, replaced.replaced) == (keyed.id, False, True)
    after = store.job_get(keyed.id)
    assert before is not None
    assert after is not None
    assert (after.run_at, after.created_at) == (before.run_at, before.created_at)
    assert after.scope == Scope("S", "2")
    assert store.job_count_by_status()[JobStatus.PENDING] == 2
    # Still first in line, and now carrying the new payload.
    first = claim(store, slots("a", limit=1))
    assert [(j.id, j.payload, j.scope) for j in first] == [(keyed.id, {"v": 2}, Scope("S", "2"))]
    assert [j.id for j in claim(store, "a")] == [other]


def test_replace_changes_priority(store: JobStore) -> None:
    low = put(store, "a", {"v": 1}, dedupe_key="k")
    high = add(store, "a", {"v": "h"}, priority=5)
    put(store, "a", {"v": 2}, dedupe_key="k", on_duplicate="replace", priority=9)
    got = claim(store, slots("a", limit=2))
    assert [j.id for j in got] == [low.id, high]
    assert got[0].priority == 9


def test_replace_while_only_running_enqueues_a_new_pending_job(store: JobStore) -> None:
    first = add(store, "a", {"v": 1}, dedupe_key="k")
    (running,) = claim(store, "a")
    second = put(store, "a", {"v": 2}, dedupe_key="k", on_duplicate="replace")
    assert second.inserted
    assert not second.replaced
    assert second.id not in (None, first)
    # A second replace now finds the pending one and rewrites it.
    third = put(store, "a", {"v": 3}, dedupe_key="k", on_duplicate="replace")
    assert (third.id, third.replaced) == (second.id, True)
    # Reject sees the pending one too.
    assert put(store, "a", {"v": 4}, dedupe_key="k").id is None
    # One key never runs twice at once: the pending one waits for the running one.
    assert claim(store, "a") == []
    assert store.job_complete_many("w1", refs([running])) == {first}
    (nxt,) = claim(store, "a")
    assert (nxt.id, nxt.payload) == (second.id, {"v": 3})


def test_concurrent_rejects_insert_exactly_one_job(store: JobStore) -> None:
    results = concurrently(8, lambda i: put(store, "a", {"i": i}, dedupe_key="same"))
    inserted = [r for r in results if r.inserted]
    assert len(inserted) == 1
    assert all(r.id is None for r in results if not r.inserted)
    assert store.job_count_by_status()[JobStatus.PENDING] == 1


def test_concurrent_replaces_keep_exactly_one_pending_job(store: JobStore) -> None:
    results = concurrently(
        8, lambda i: put(store, "a", {"i": i}, dedupe_key="same", on_duplicate="replace")
    )
    assert len({r.id for r in results}) == 1
    assert sum(r.inserted for r in results) == 1
    assert sum(r.replaced for r in results) == 7
    assert store.job_count_by_status()[JobStatus.PENDING] == 1


def test_enqueue_many_inserts_every_payload(store: JobStore) -> None:
    payloads = [encode_payload("bulk", {"i": i}) for i in range(250)]
    count = store.job_enqueue_many(
        EnqueueManyParams(
            type="bulk", payloads=payloads, scope=Scope("S", "1"), priority=3, max_attempts=4
        )
    )
    assert count == 250
    jobs = claim(store, slots("bulk", limit=500))
    assert sorted(j.payload["i"] for j in jobs) == list(range(250))
    assert {(j.scope, j.priority, j.max_attempts) for j in jobs} == {(Scope("S", "1"), 3, 4)}
    assert store.job_enqueue_many(EnqueueManyParams(type="bulk", payloads=[])) == 0


def test_enqueue_many_with_a_delay_parks_every_job(store: JobStore) -> None:
    payloads = [encode_payload("bulk", {"i": i}) for i in range(5)]
    assert (
        store.job_enqueue_many(EnqueueManyParams(type="bulk", payloads=payloads, delay=3600)) == 5
    )
    assert claim(store, "bulk") == []
    assert store.job_stats()["scheduled"] == 5
    found = store.job_find(FindParams(types=["bulk"]))
    assert len(found) == 5
    assert all(j.run_at > store.now() for j in found)


def test_the_store_without_a_database_refuses_a_connection(mem_store: JobStore) -> None:
    # connection= is a PostgreSQL feature: the in-memory store refuses it clearly.
    store = mem_store
    params = EnqueueParams(type="a", payload=b"{}")
    with pytest.raises(TypeError, match="connection"):
        store.job_enqueue(params, connection=object())
    with pytest.raises(TypeError, match="connection"):
        store.job_enqueue_many(EnqueueManyParams(type="a", payloads=[b"{}"]), connection=object())
    assert store.job_count_by_status()[JobStatus.PENDING] == 0


def test_a_stale_lease_ref_does_not_touch_the_replacement(store: JobStore) -> None:
    """Fencing and dedupe together: the token of an old run never writes the new job."""
    first = add(store, "a", dedupe_key="k")
    (running,) = claim(store, "a")
    second = put(store, "a", dedupe_key="k", on_duplicate="replace").id
    assert second is not None
    assert store.job_complete_many("w1", [LeaseRef(second, running.lease_token)]) == set()
    assert store.job_complete_many("w1", refs([running])) == {first}
    job = store.job_get(second)
    assert job is not None
    assert job.status is JobStatus.PENDING


# -- the trace context (golemq_pg.tracing) stored with a job, returned by its claim ----------

#: Shaped like what golemq_pg.tracing stores: a W3C traceparent, and a tracestate.
TRACED = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
          "tracestate": "congo=t61rcWkgMzE"}


def test_a_trace_context_travels_from_the_add_to_every_claim_of_the_job(store: JobStore) -> None:
    payload = encode_payload("t", {"n": 1})
    traced = store.job_enqueue(EnqueueParams(type="t", payload=payload, trace_context=TRACED))
    untraced = add(store, "t", {"n": 2})
    assert store.job_enqueue_many(EnqueueManyParams(
        type="t", payloads=[payload] * 2, trace_context=TRACED)) == 2
    assert store.job_enqueue_many(EnqueueManyParams(
        type="t", payloads=[payload] * 2, trace_context=TRACED, tags=("x",),
        run_at=store.now() - timedelta(seconds=1))) == 2
    assert store.job_enqueue_many(EnqueueManyParams(type="t", payloads=[payload])) == 1
    assert traced.id is not None
    jobs = {job.id: job for job in claim(store, slots("t", limit=10))}
    assert len(jobs) == 7
    assert jobs[untraced].trace_context is None
    assert [job.trace_context for job in jobs.values()].count(TRACED) == 5
    # Not in the payload, and carried back by a later claim of the same job (a retry).
    assert jobs[traced.id].payload == {"n": 1}
    store.job_retry_many("w1", [RetryItem(traced.id, jobs[traced.id].lease_token, 0, "boom")])
    (again,) = claim(store, "t")
    assert (again.id, again.attempt, again.trace_context) == (traced.id, 2, TRACED)
    tagged = store.job_find(FindParams(types=["t"], tags=("x",)))
    assert len(tagged) == 2


def test_a_replacing_add_replaces_the_trace_context_with_the_payload(store: JobStore) -> None:
    first = put(store, "t", {"v": 1}, dedupe_key="k")
    other = {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}
    replaced = store.job_enqueue(EnqueueParams(
        type="t", payload=encode_payload("t", {"v": 2}), dedupe_key="k",
        on_duplicate="replace", trace_context=other))
    assert (replaced.id, replaced.replaced) == (first.id, True)
    (job,) = claim(store, "t")
    assert (job.payload, job.trace_context) == ({"v": 2}, other)
