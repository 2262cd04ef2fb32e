"""Contract: cancellation, inspection (get, find, counts, stats), retry_failed and prune."""

from __future__ import annotations

from datetime import timedelta

import pytest

from golemq_pg._types import JobStatus, Scope
from golemq_pg._validation import encode_payload
from golemq_pg.store.port import (
    CancelFilter,
    ClaimedJob,
    EnqueueManyParams,
    EnqueueParams,
    FailItem,
    FindParams,
    JobStore,
)
from tests.support.store_port import add, claim, ids, refs, slots
from tests.support.waiting import wait_until

# The contract of the producer verbs holds on the async path too (AsyncPostgresStore).
pytestmark = pytest.mark.async_store_too
# -- cancel -----------------------------------------------------------------------------------


def test_cancel_by_id_deletes_pending_and_running_jobs(store: JobStore) -> None:
    pending = add(store, "a", scope=("S", "1"))
    running_id = add(store, "b")
    (running,) = claim(store, "b", owner="w9")
    cancelled = store.job_cancel(CancelFilter(job_ids=[pending, running_id, "999999"]), "why")
    by_id = {c.id: c for c in cancelled}
    assert set(by_id) == {pending, running_id}
    assert (
        by_id[pending].type,
        by_id[pending].scope,
        by_id[pending].was_running,
        by_id[pending].lease_owner,
    ) == ("a", Scope("S", "1"), False, None)
    assert (
        by_id[running_id].was_running,
        by_id[running_id].lease_owner,
        by_id[running_id].attempts,
    ) == (True, "w9", 1)
    assert store.job_get(pending) is None
    assert store.job_get(running_id) is None
    # The aborted worker's writes now touch nothing.
    assert store.job_complete_many("w9", refs([running])) == set()
    assert store.job_cancel(CancelFilter(job_ids=[pending]), None) == []


def test_cancel_for_scope_aborts_running_and_drops_queued(store: JobStore) -> None:
    mine = [add(store, "a", scope=("Article", "1")), add(store, "b", scope=("Article", "1"))]
    add(store, "a", scope=("Article", "2"))
    add(store, "a")
    (running,) = claim(store, slots("a", limit=1))
    assert running.id == mine[0]
    cancelled = store.job_cancel(CancelFilter(scope=Scope("Article", "1")), "deleted")
    assert sorted(c.id for c in cancelled) == sorted(mine)
    assert store.job_count_by_status()[JobStatus.PENDING] == 2


def test_cancel_pending_for_scope_leaves_running_work_alone(store: JobStore) -> None:
    first = add(store, "a", scope=("Article", "1"))
    queued = add(store, "a", scope=("Article", "1"), delay=3600)
    claim(store, "a")
    cancelled = store.job_cancel(
        CancelFilter(scope=Scope("Article", "1"), pending_only=True), "superseded"
    )
    assert [c.id for c in cancelled] == [queued]
    row = store.job_get(first)
    assert row is not None
    assert row.status is JobStatus.RUNNING


def test_cancel_by_dedupe_keys_is_per_type(store: JobStore) -> None:
    k1 = add(store, "audio", dedupe_key="k1")
    k2 = add(store, "audio", dedupe_key="k2")
    add(store, "audio", dedupe_key="k3")
    other_type = add(store, "video", dedupe_key="k1")
    claim(store, slots("audio", limit=1))  # k1 runs
    cancelled = store.job_cancel(
        CancelFilter(type="audio", dedupe_keys=["k1", "k2", "nope"]), "voice changed"
    )
    assert sorted(c.id for c in cancelled) == sorted([k1, k2])
    assert {c.id: c.was_running for c in cancelled} == {k1: True, k2: False}
    assert store.job_get(other_type) is not None


def test_cancel_leaves_finished_jobs(store: JobStore) -> None:
    job_id = add(store, "a", scope=("S", "1"))
    (job,) = claim(store, "a")
    store.job_complete_many("w1", refs([job]))
    assert store.job_cancel(CancelFilter(job_ids=[job_id]), None) == []
    assert store.job_cancel(CancelFilter(scope=Scope("S", "1")), None) == []
    assert store.job_get(job_id) is not None


def test_an_empty_filter_cancels_nothing(store: JobStore) -> None:
    add(store, "a")
    assert store.job_cancel(CancelFilter(), None) == []
    assert store.job_count_by_status()[JobStatus.PENDING] == 1


# -- inspection -------------------------------------------------------------------------------


def test_get_unknown_is_none(store: JobStore) -> None:
    assert store.job_get("987654") is None


def test_counts_and_stats_cover_every_status(store: JobStore) -> None:
    assert store.job_count_by_status() == dict.fromkeys(JobStatus, 0)
    assert store.job_stats() == {
        "pending": 0,
        "scheduled": 0,
        "running": 0,
        "succeeded": 0,
        "failed": 0,
        "waiting": 0,
    }
    for _ in range(4):
        add(store, "a")
    add(store, "a", delay=3600)
    done, failed, _running = claim(store, slots("a", limit=3))
    store.job_complete_many("w1", refs([done]))
    store.job_fail_many("w1", [FailItem(failed.id, failed.lease_token, "E")])
    assert store.job_count_by_status() == {
        JobStatus.PENDING: 2,
        JobStatus.RUNNING: 1,
        JobStatus.SUCCEEDED: 1,
        JobStatus.FAILED: 1,
        JobStatus.WAITING: 0,
    }
    assert store.job_stats() == {
        "pending": 1,
        "scheduled": 1,
        "running": 1,
        "succeeded": 1,
        "failed": 1,
        "waiting": 0,
    }


def test_find_filters_newest_first_with_paging(store: JobStore) -> None:
    a1 = add(store, "a", scope=("Doc", "1"))
    b1 = add(store, "b", scope=("Doc", "1"))
    a2 = add(store, "a", scope=("Doc", "2"))
    a3 = add(store, "a", scope=("User", "1"))
    b2 = add(store, "b")
    (running,) = claim(store, slots("b", limit=1))
    assert running.id == b1

    def find(**kw: object) -> list[str]:
        return [j.id for j in store.job_find(FindParams(**kw))]  # type: ignore[arg-type]

    assert find() == [b2, a3, a2, b1, a1]
    assert find(types=["a"]) == [a3, a2, a1]
    assert find(statuses=[JobStatus.RUNNING]) == [b1]
    assert find(statuses=[JobStatus.PENDING], types=["b"]) == [b2]
    assert find(scope_type="Doc") == [a2, b1, a1]
    assert find(scope_type="Doc", scope_id="1") == [b1, a1]
    assert find(scope_id="1") == [a3, b1, a1]
    assert find(limit=2) == [b2, a3]
    assert find(limit=2, skip=2) == [a2, b1]
    assert find(limit=None, skip=4) == [a1]
    assert find(types=[]) == []
    job = store.job_find(FindParams(types=["b"], statuses=[JobStatus.RUNNING]))[0]
    assert (job.type, job.status, job.attempts, job.scope) == (
        "b",
        JobStatus.RUNNING,
        1,
        Scope("Doc", "1"),
    )


def test_find_without_limit_returns_everything(store: JobStore) -> None:
    _bulk(store, "a", 130)
    assert len(store.job_find(FindParams())) == 100  # the default page
    assert len(store.job_find(FindParams(limit=None))) == 130


# -- retry_failed -----------------------------------------------------------------------------


def _bulk(store: JobStore, job_type: str, n: int, scope: Scope | None = None) -> None:
    payloads = [encode_payload(job_type, {"i": i}) for i in range(n)]
    store.job_enqueue_many(
        EnqueueManyParams(type=job_type, payloads=payloads, scope=scope, max_attempts=2)
    )


def _fail_all(store: JobStore, job_type: str) -> list[ClaimedJob]:
    jobs = claim(store, slots(job_type, limit=1000))
    store.job_fail_many("w1", [FailItem(j.id, j.lease_token, "Boom: bad") for j in jobs])
    return jobs


def test_retry_failed_without_a_limit_revives_every_match(store: JobStore) -> None:
    _bulk(store, "a", 150)
    _bulk(store, "b", 5)
    _fail_all(store, "a")
    _fail_all(store, "b")
    assert store.job_retry_failed(FindParams(types=["a"], limit=None)) == 150
    counts = store.job_count_by_status()
    assert (counts[JobStatus.PENDING], counts[JobStatus.FAILED]) == (150, 5)
    revived = store.job_find(FindParams(types=["a"], limit=None))
    assert all(
        (j.status, j.attempts, j.last_error, j.finished_at) == (JobStatus.PENDING, 0, None, None)
        for j in revived
    )
    assert all(j.run_at <= store.now() for j in revived)
    again = claim(store, slots("a", limit=1000))
    assert len(again) == 150
    assert {j.attempt for j in again} == {1}


def test_retry_failed_with_limit_skip_and_scope(store: JobStore) -> None:
    _bulk(store, "a", 6, scope=Scope("Doc", "1"))
    _bulk(store, "a", 4, scope=Scope("Doc", "2"))
    _fail_all(store, "a")
    assert store.job_retry_failed(FindParams(limit=2)) == 2
    assert store.job_retry_failed(FindParams(scope_type="Doc", scope_id="2", limit=None)) == 4
    assert store.job_retry_failed(FindParams(scope_type="Doc", scope_id="2", limit=None)) == 0
    assert store.job_retry_failed(FindParams(limit=None, skip=3)) == 1
    assert store.job_count_by_status()[JobStatus.FAILED] == 3
    assert store.job_retry_failed(FindParams(types=["nope"], limit=None)) == 0


def test_retry_failed_does_not_touch_other_states(store: JobStore) -> None:
    add(store, "a")
    add(store, "a")
    (job,) = claim(store, slots("a", limit=1))
    store.job_complete_many("w1", refs([job]))
    assert store.job_retry_failed(FindParams(limit=None)) == 0
    counts = store.job_count_by_status()
    assert (counts[JobStatus.SUCCEEDED], counts[JobStatus.PENDING]) == (1, 1)


# -- prune ------------------------------------------------------------------------------------


def _finish(store: JobStore, n_ok: int, n_failed: int) -> tuple[list[str], list[str]]:
    for _ in range(n_ok + n_failed):
        add(store, "a")
    jobs = claim(store, slots("a", limit=n_ok + n_failed))
    ok, bad = jobs[:n_ok], jobs[n_ok:]
    store.job_complete_many("w1", refs(ok))
    store.job_fail_many("w1", [FailItem(j.id, j.lease_token, "E") for j in bad])
    return ids(ok), ids(bad)


def test_prune_by_datetime(store: JobStore) -> None:
    ok, bad = _finish(store, 3, 2)
    keep_pending = add(store, "a", delay=3600)
    assert (
        store.job_prune(
            [JobStatus.SUCCEEDED, JobStatus.FAILED],
            before=store.now() - timedelta(hours=1),
            age=None,
        )
        == 0
    )
    cutoff = store.now() + timedelta(seconds=1)
    assert store.job_prune([JobStatus.SUCCEEDED], before=cutoff, age=None) == 3
    assert all(store.job_get(i) is None for i in ok)
    assert all(store.job_get(i) is not None for i in bad)
    assert (
        store.job_prune([JobStatus.SUCCEEDED, JobStatus.FAILED], before=cutoff, age=None, limit=1)
        == 1
    )
    assert store.job_prune([JobStatus.SUCCEEDED, JobStatus.FAILED], before=cutoff, age=None) == 1
    assert store.job_get(keep_pending) is not None


def test_prune_by_age(store: JobStore) -> None:
    ok, bad = _finish(store, 2, 2)
    finished = [store.job_get(i) for i in ok + bad]
    last = max(j.finished_at for j in finished if j and j.finished_at)
    assert store.job_prune([JobStatus.SUCCEEDED, JobStatus.FAILED], before=None, age=3600) == 0
    wait_until(lambda: store.now() > last + timedelta(seconds=0.3))
    assert store.job_prune([JobStatus.FAILED], before=None, age=0.2) == 2
    assert store.job_prune([JobStatus.SUCCEEDED, JobStatus.FAILED], before=None, age=0.2) == 2
    assert store.job_count_by_status() == dict.fromkeys(JobStatus, 0)


def test_prune_never_touches_live_jobs(store: JobStore) -> None:
    add(store, "a")
    add(store, "a")
    claim(store, slots("a", limit=1))
    cutoff = store.now() + timedelta(days=1)
    assert store.job_prune([JobStatus.PENDING, JobStatus.RUNNING], before=cutoff, age=None) == 0
    assert sum(store.job_count_by_status().values()) == 2


def test_malformed_ids_match_nothing(store: JobStore) -> None:
    add(store, "a")
    assert store.job_get("not-a-number") is None
    assert store.job_cancel(CancelFilter(job_ids=["not-a-number"]), None) == []
    assert store.job_get("") is None


def test_stats_by_type_and_oldest_due_age(store: JobStore) -> None:
    assert store.job_stats_by_type() == {}
    assert store.job_oldest_due_age() is None
    for job_type, delay in (("a", 0.0), ("a", 0.0), ("a", 3600.0), ("b", 0.0)):
        store.job_enqueue(EnqueueParams(type=job_type, payload=b"{}", delay=delay))
    by_type = store.job_stats_by_type()
    assert by_type["a"] == {"pending": 2, "scheduled": 1, "running": 0, "succeeded": 0,
                            "failed": 0, "waiting": 0}
    assert by_type["b"]["pending"] == 1
    age = store.job_oldest_due_age()
    assert age is not None
    assert 0.0 <= age < 60.0
