"""Contract: the reaper (lease_recover_expired)."""

from __future__ import annotations

from golemq_pg._types import JobStatus, Scope
from golemq_pg.store.port import JobStore
from golemq_pg.testing import memory_store
from tests.support.store_port import SHORT_LEASE, add, claim, concurrently, ids, refs, slots
from tests.support.waiting import wait_until

RECLAIMED_ERROR = "LeaseExpired: lease expired before the job finished (worker lost)"
EXHAUSTED_ERROR = "LeaseExpired: attempts exhausted after lease expiry"


def test_an_expired_lease_goes_back_to_pending_due_now(store: JobStore) -> None:
    job_id = add(store, "a", scope=("S", "1"), max_attempts=3)
    (job,) = claim(store, slots("a", lease=SHORT_LEASE), owner="lost")
    (reclaimed,) = wait_until(store.lease_recover_expired)
    assert (reclaimed.id, reclaimed.type, reclaimed.scope) == (job_id, "a", Scope("S", "1"))
    assert (reclaimed.outcome, reclaimed.attempts, reclaimed.lease_owner) == (
        "reclaimed",
        1,
        "lost",
    )
    row = store.job_get(job_id)
    assert row is not None
    assert (row.status, row.attempts, row.last_error) == (JobStatus.PENDING, 1, RECLAIMED_ERROR)
    assert row.run_at <= store.now()
    (again,) = claim(store, "a", owner="other")
    assert again.id == job_id
    assert again.attempt == 2
    assert again.lease_token > job.lease_token


def test_an_expired_lease_past_its_budget_is_dead_lettered(store: JobStore) -> None:
    job_id = add(store, "a", max_attempts=1)
    claim(store, slots("a", lease=SHORT_LEASE))
    (reclaimed,) = wait_until(store.lease_recover_expired)
    assert (reclaimed.id, reclaimed.outcome, reclaimed.attempts) == (job_id, "failed-terminal", 1)
    row = store.job_get(job_id)
    assert row is not None
    assert (row.status, row.last_error) == (JobStatus.FAILED, EXHAUSTED_ERROR)
    assert row.finished_at is not None
    assert claim(store, "a") == []


def test_live_leases_and_other_states_are_left_alone(store: JobStore) -> None:
    add(store, "live")
    add(store, "done")
    add(store, "waiting")
    (live,) = claim(store, slots("live", lease=60))
    (done,) = claim(store, slots("done", lease=SHORT_LEASE))
    assert store.job_complete_many("w1", refs([done])) == {done.id}
    wait_until(lambda: store.now() > done.lease_expires_at)
    assert store.lease_recover_expired() == []
    counts = store.job_count_by_status()
    assert (counts[JobStatus.RUNNING], counts[JobStatus.SUCCEEDED], counts[JobStatus.PENDING]) == (
        1,
        1,
        1,
    )
    assert store.lease_held("w1", refs([live])) == {live.id}


def test_the_reaper_honours_its_limit(store: JobStore) -> None:
    for _ in range(5):
        add(store, "a")
    jobs = claim(store, slots("a", lease=SHORT_LEASE))
    wait_until(lambda: store.now() > max(j.lease_expires_at for j in jobs))
    first = store.lease_recover_expired(limit=2)
    rest = store.lease_recover_expired(limit=10)
    assert len(first) == 2
    assert len(rest) == 3
    assert {r.id for r in first} | {r.id for r in rest} == set(ids(jobs))
    assert store.lease_recover_expired() == []


def test_a_completed_job_is_never_revived(store: JobStore) -> None:
    job_id = add(store, "a")
    (job,) = claim(store, slots("a", lease=SHORT_LEASE))
    wait_until(lambda: store.now() > job.lease_expires_at)
    # The worker finishes just as its lease runs out: the write still lands (the fence is
    # owner + token + running) and the reaper then finds nothing to recover.
    assert store.job_complete_many("w1", refs([job])) == {job_id}
    assert store.lease_recover_expired() == []
    row = store.job_get(job_id)
    assert row is not None
    assert row.status is JobStatus.SUCCEEDED


def test_concurrent_reapers_recover_each_job_once(store: JobStore) -> None:
    for _ in range(30):
        add(store, "a")
    jobs = claim(store, slots("a", limit=30, lease=SHORT_LEASE))
    wait_until(lambda: store.now() > max(j.lease_expires_at for j in jobs))
    results = concurrently(4, lambda i: store.lease_recover_expired())
    recovered = [r.id for batch in results for r in batch]
    assert sorted(recovered) == sorted(ids(jobs))


def test_lease_expiry_boundary_with_a_fake_clock() -> None:
    # The fake clock drives the in-memory store only.
    mem, clock = memory_store()
    add(mem, "a")
    (job,) = claim(mem, slots("a", lease=30))
    clock.advance(29.999)
    assert mem.lease_recover_expired() == []
    clock.advance(0.001)  # lease_expires_at == now: expired (live means expires > now)
    assert [r.id for r in mem.lease_recover_expired()] == [job.id]
