"""Contract: the claim (order, limits, lease fields, concurrency) and fenced lease writes."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

from golemq_pg._types import JobStatus, Scope
from golemq_pg.store.port import (
    ClaimedJob,
    FailItem,
    JobStore,
    LeaseRef,
    RetryItem,
)
from tests.support.store_port import (
    BRIEF_LEASE,
    SHORT_LEASE,
    add,
    claim,
    concurrently,
    ids,
    refs,
    slots,
)
from tests.support.waiting import wait_until


def test_claim_order_is_priority_then_run_at_then_id(store: JobStore) -> None:
    now = store.now()
    old = add(store, "a", run_at=now - timedelta(seconds=20))
    newer = add(store, "a", run_at=now - timedelta(seconds=10))
    urgent = add(store, "a", run_at=now - timedelta(seconds=1), priority=5)
    same_time_1 = add(store, "a", run_at=now - timedelta(seconds=15))
    same_time_2 = add(store, "a", run_at=now - timedelta(seconds=15))
    negative = add(store, "a", run_at=now - timedelta(seconds=100), priority=-1)
    got = [ids(claim(store, slots("a", limit=1)))[0] for _ in range(6)]
    assert got == [urgent, old, same_time_1, same_time_2, newer, negative]


def test_claim_returns_every_lease_field(store: JobStore) -> None:
    job_id = add(store, "a", {"x": [1, "two"]}, scope=("Doc", "d1"), max_attempts=4, priority=2)
    created = store.job_get(job_id)
    before = store.now()
    (job,) = claim(store, slots("a", lease=60))
    after = store.now()
    assert created is not None
    assert (job.id, job.type, job.payload, job.scope) == (
        job_id,
        "a",
        {"x": [1, "two"]},
        Scope("Doc", "d1"),
    )
    assert (job.attempt, job.max_attempts, job.priority) == (1, 4, 2)
    assert job.enqueued_at == created.created_at
    assert before + timedelta(seconds=60) <= job.lease_expires_at <= after + timedelta(seconds=60)
    row = store.job_get(job_id)
    assert row is not None
    assert row.status is JobStatus.RUNNING
    assert row.attempts == 1
    assert row.started_at is not None
    assert before <= row.started_at <= after


def test_each_claim_bumps_the_fencing_token(store: JobStore) -> None:
    add(store, "a")
    (first,) = claim(store, "a")
    assert store.job_release_many("w1", refs([first])) == {first.id}
    (second,) = claim(store, "a", owner="w2")
    assert second.id == first.id
    assert second.lease_token > first.lease_token
    assert second.attempt == 1  # release refunded the attempt


def test_per_type_limits_and_unrequested_types(store: JobStore) -> None:
    for _ in range(5):
        add(store, "a")
        add(store, "b")
        add(store, "c")
    got = claim(store, slots("a", limit=2), slots("b", limit=3), slots("c", limit=0))
    assert Counter(j.type for j in got) == {"a": 2, "b": 3}
    counts = store.job_count_by_status()
    assert (counts[JobStatus.RUNNING], counts[JobStatus.PENDING]) == (5, 10)
    assert claim(store, slots("zzz")) == []


def test_future_jobs_are_not_claimed(store: JobStore) -> None:
    add(store, "a", delay=3600)
    add(store, "a", run_at=store.now() + timedelta(seconds=120))
    assert claim(store, "a") == []


def test_concurrent_claimers_never_share_a_job(store: JobStore) -> None:
    payloads = 200
    for i in range(payloads):
        add(store, "a", {"i": i})

    def drain(i: int) -> list[ClaimedJob]:
        mine: list[ClaimedJob] = []
        while True:
            got = claim(store, slots("a", limit=7), owner=f"w{i}")
            if not got:
                return mine
            mine.extend(got)

    per_worker = concurrently(6, drain)
    everything = [job.id for mine in per_worker for job in mine]
    assert len(everything) == len(set(everything)) == payloads
    assert sorted(job.payload["i"] for mine in per_worker for job in mine) == list(range(payloads))
    # Rows leased == rows returned: each worker holds exactly what it was given, and
    # nothing else is running.
    assert store.job_count_by_status()[JobStatus.RUNNING] == payloads
    for i, mine in enumerate(per_worker):
        assert store.lease_held(f"w{i}", refs(mine)) == set(ids(mine))
        assert all(job.attempt == 1 for job in mine)


def test_complete_is_fenced_on_owner_token_and_status(store: JobStore) -> None:
    job_id = add(store, "a")
    (job,) = claim(store, "a")
    assert store.job_complete_many("other", refs([job])) == set()
    assert store.job_complete_many("w1", [LeaseRef(job.id, job.lease_token + 1)]) == set()
    assert store.job_complete_many("w1", [LeaseRef("999999", 1)]) == set()
    assert store.job_complete_many("w1", refs([job])) == {job_id}
    assert store.job_complete_many("w1", refs([job])) == set()  # no longer running
    row = store.job_get(job_id)
    assert row is not None
    assert row.status is JobStatus.SUCCEEDED
    assert row.finished_at is not None
    assert row.finished_at >= (row.started_at or row.finished_at)


def test_a_batch_write_returns_only_the_ids_it_wrote(store: JobStore) -> None:
    for _ in range(4):
        add(store, "a")
    jobs = claim(store, "a")
    stale = LeaseRef(jobs[3].id, jobs[3].lease_token + 5)
    written = store.job_complete_many("w1", [*refs(jobs[:3]), stale])
    assert written == set(ids(jobs[:3]))
    assert store.job_complete_many("w1", []) == set()


def test_retry_parks_the_job_with_its_error(store: JobStore) -> None:
    job_id = add(store, "a")
    (job,) = claim(store, "a")
    before = store.now()
    assert store.job_retry_many("w1", [RetryItem(job.id, job.lease_token, 3600, "Boom: x")]) == {
        job_id
    }
    row = store.job_get(job_id)
    assert row is not None
    assert (row.status, row.attempts, row.last_error) == (JobStatus.PENDING, 1, "Boom: x")
    assert row.run_at >= before + timedelta(seconds=3600)
    assert claim(store, "a") == []
    assert store.job_stats()["scheduled"] == 1
    # The old token is dead.
    assert store.job_complete_many("w1", refs([job])) == set()


def test_retry_without_consuming_an_attempt_refunds_it(store: JobStore) -> None:
    job_id = add(store, "a")
    (job,) = claim(store, "a")
    item = RetryItem(job.id, job.lease_token, 0.0, None, consume_attempt=False)
    assert store.job_retry_many("w1", [item]) == {job_id}
    (again,) = claim(store, "a")
    assert again.id == job_id
    assert again.attempt == 1
    assert again.lease_token > job.lease_token


def test_retry_is_fenced(store: JobStore) -> None:
    add(store, "a")
    (job,) = claim(store, "a")
    assert store.job_retry_many("x", [RetryItem(job.id, job.lease_token, 0, "E")]) == set()
    assert store.job_retry_many("w1", [RetryItem(job.id, 0, 0, "E")]) == set()
    row = store.job_get(job.id)
    assert row is not None
    assert row.status is JobStatus.RUNNING


def test_fail_dead_letters_the_job(store: JobStore) -> None:
    job_id = add(store, "a")
    (job,) = claim(store, "a")
    assert store.job_fail_many("x", [FailItem(job.id, job.lease_token, "E")]) == set()
    assert store.job_fail_many("w1", [FailItem(job.id, job.lease_token, "Terminal: no")]) == {
        job_id
    }
    row = store.job_get(job_id)
    assert row is not None
    assert (row.status, row.last_error, row.attempts) == (JobStatus.FAILED, "Terminal: no", 1)
    assert row.finished_at is not None
    assert claim(store, "a") == []


def test_release_returns_the_job_due_now_with_the_attempt_refunded(store: JobStore) -> None:
    job_id = add(store, "a", delay=0)
    (job,) = claim(store, "a")
    assert store.job_release_many("other", refs([job])) == set()
    assert store.job_release_many("w1", refs([job])) == {job_id}
    row = store.job_get(job_id)
    assert row is not None
    assert (row.status, row.attempts) == (JobStatus.PENDING, 0)
    assert row.run_at <= store.now()
    assert ids(claim(store, "a")) == [job_id]


def test_renew_extends_only_held_live_leases(store: JobStore) -> None:
    add(store, "a")
    (job,) = claim(store, slots("a", lease=BRIEF_LEASE))
    assert store.lease_renew("other", refs([job]), 60) == set()
    assert store.lease_renew("w1", [LeaseRef(job.id, job.lease_token + 1)], 60) == set()
    assert store.lease_renew("w1", refs([job]), 600) == {job.id}
    # Past the first expiry the renewed lease is still live: not reaped, still renewable.
    wait_until(lambda: store.now() > job.lease_expires_at + timedelta(seconds=0.1))
    assert store.lease_recover_expired() == []
    assert store.lease_held("w1", refs([job])) == {job.id}
    assert store.lease_renew("w1", refs([job]), 600) == {job.id}


def test_an_expired_lease_is_not_renewed(store: JobStore) -> None:
    add(store, "a")
    (job,) = claim(store, slots("a", lease=SHORT_LEASE))
    wait_until(lambda: store.now() > job.lease_expires_at)
    assert store.lease_renew("w1", refs([job]), 60) == set()


def test_lease_held_reports_what_the_owner_still_holds(store: JobStore) -> None:
    for _ in range(3):
        add(store, "a")
    jobs = claim(store, "a")
    assert store.lease_held("w1", refs(jobs)) == set(ids(jobs))
    assert store.lease_held("w2", refs(jobs)) == set()
    store.job_complete_many("w1", refs(jobs[:1]))
    assert store.lease_held("w1", refs(jobs)) == set(ids(jobs[1:]))


def test_progress_is_stored_for_a_held_lease_only(store: JobStore) -> None:
    job_id = add(store, "a")
    (job,) = claim(store, "a")
    ref = LeaseRef(job.id, job.lease_token)
    assert store.job_progress("w1", ref, 0.5) is True
    row = store.job_get(job_id)
    assert row is not None
    assert row.progress == 0.5
    assert store.job_progress("w1", ref, {"done": 3, "of": 10}) is True
    row = store.job_get(job_id)
    assert row is not None
    assert row.progress == {"done": 3, "of": 10}
    assert store.job_progress("other", ref, 0.9) is False
    assert store.job_progress("w1", LeaseRef(job.id, job.lease_token + 1), 0.9) is False
    store.job_complete_many("w1", [ref])
    assert store.job_progress("w1", ref, 1.0) is False
    row = store.job_get(job_id)
    assert row is not None
    assert row.progress == {"done": 3, "of": 10}


def test_a_worker_that_lost_its_lease_can_write_nothing(store: JobStore) -> None:
    job_id = add(store, "a")
    (old,) = claim(store, slots("a", lease=SHORT_LEASE), owner="slow")
    wait_until(store.lease_recover_expired)
    (new,) = claim(store, "a", owner="fast")
    assert new.id == job_id
    assert new.lease_token > old.lease_token
    assert new.attempt == 2
    stale = refs([old])
    assert store.job_complete_many("slow", stale) == set()
    assert store.job_fail_many("slow", [FailItem(job_id, old.lease_token, "E")]) == set()
    assert store.job_retry_many("slow", [RetryItem(job_id, old.lease_token, 0, "E")]) == set()
    assert store.job_release_many("slow", stale) == set()
    assert store.lease_renew("slow", stale, 60) == set()
    assert store.lease_held("slow", stale) == set()
    assert store.job_progress("slow", stale[0], 0.1) is False
    assert store.job_complete_many("fast", refs([new])) == {job_id}


def test_a_lease_listed_twice_is_written_once(store: JobStore) -> None:
    job_id = add(store, "a")
    (job,) = claim(store, "a")
    twice = refs([job, job])
    assert store.job_release_many("w1", twice) == {job_id}
    row = store.job_get(job_id)
    assert row is not None
    assert row.attempts == 0


def test_both_stores_satisfy_the_port_protocol(store: JobStore) -> None:
    assert isinstance(store, JobStore)
