"""Contract: taking stale leases back (``lease_requeue_stale``, ``queue.requeue_stale``) and
what the reaper reports with what it takes back (how long the lease went unwritten, the
previous handler error a dead letter keeps)."""

from __future__ import annotations

import time

import pytest

from golemq_pg._types import JobStatus
from golemq_pg.store.port import (
    LEASE_EXHAUSTED_ERROR,
    LEASE_STALE_ERROR,
    LEASE_STALE_EXHAUSTED_ERROR,
    FailItem,
    JobStore,
    RetryItem,
)
from tests.support.store_port import SHORT_LEASE, add, claim, ids, refs, slots
from tests.support.waiting import wait_until

# The verb is a producer verb: it holds on the async path too (AsyncPostgresStore).
pytestmark = pytest.mark.async_store_too

#: Long enough that no lease of these tests expires on its own.
LONG_LEASE = 120.0


def test_a_stale_lease_goes_back_to_pending_and_its_holder_is_fenced_out(
    store: JobStore,
) -> None:
    job_id = add(store, "a", max_attempts=3)
    (held,) = claim(store, slots("a", lease=LONG_LEASE), owner="w1")
    (taken,) = store.lease_requeue_stale(0, None)
    assert (taken.id, taken.outcome, taken.attempts, taken.lease_owner) == (
        job_id, "reclaimed", 1, "w1")
    assert taken.error == LEASE_STALE_ERROR
    row = store.job_get(job_id)
    assert row is not None
    assert (row.status, row.attempts, row.last_error) == (JobStatus.PENDING, 1, LEASE_STALE_ERROR)
    assert row.errors[-1].error == LEASE_STALE_ERROR  # the attempt is counted, as a reclaim
    # the old holder's late writes are all refused
    assert store.job_complete_many("w1", refs([held])) == set()
    assert store.lease_renew("w1", refs([held]), 30) == set()
    assert store.job_retry_many("w1", [RetryItem(held.id, held.lease_token, 0, "x")]) == set()
    assert store.job_fail_many("w1", [FailItem(held.id, held.lease_token, "x")]) == set()
    assert store.job_progress("w1", refs([held])[0], 0.5) is False
    # claimed again, even by a worker of the same name: the old lease still writes nothing
    (again,) = claim(store, slots("a", lease=LONG_LEASE), owner="w1")
    assert (again.id, again.attempt) == (job_id, 2)
    assert again.lease_token != held.lease_token
    assert store.job_complete_many("w1", refs([held])) == set()
    assert store.job_complete_many("w1", refs([again])) == {job_id}
    done = store.job_get(job_id)
    assert done is not None
    assert done.status is JobStatus.SUCCEEDED


def test_only_leases_unwritten_for_longer_than_older_than_are_taken(store: JobStore) -> None:
    add(store, "a")
    add(store, "a")
    old, fresh = claim(store, slots("a", lease=LONG_LEASE))
    time.sleep(1.2)
    assert store.lease_renew("w1", refs([fresh]), LONG_LEASE) == {fresh.id}
    taken = store.lease_requeue_stale(1.0, None)
    assert [r.id for r in taken] == [old.id]
    assert 1.0 <= taken[0].stuck_for < 30  # type: ignore[operator]
    row = store.job_get(fresh.id)
    assert row is not None
    assert row.status is JobStatus.RUNNING
    assert store.lease_held("w1", refs([fresh])) == {fresh.id}


def test_a_progress_report_is_not_a_lease_write(store: JobStore) -> None:
    job_id = add(store, "a")
    (held,) = claim(store, slots("a", lease=LONG_LEASE))
    time.sleep(1.2)
    assert store.job_progress("w1", refs([held])[0], 0.5)
    (taken,) = store.lease_requeue_stale(1.0, None)
    assert taken.id == job_id
    assert taken.stuck_for is not None
    assert taken.stuck_for >= 1.0


def test_requeue_stale_takes_only_the_types_named(store: JobStore) -> None:
    add(store, "a")
    add(store, "b")
    add(store, "c")
    held = claim(store, slots("a", lease=LONG_LEASE), slots("b", lease=LONG_LEASE),
                 slots("c", lease=LONG_LEASE))
    by_type = {job.type: job.id for job in held}
    taken = store.lease_requeue_stale(0, ["a", "c"])
    assert sorted(r.id for r in taken) == sorted([by_type["a"], by_type["c"]])
    assert store.lease_requeue_stale(0, ["nothing"]) == []
    row = store.job_get(by_type["b"])
    assert row is not None
    assert row.status is JobStatus.RUNNING


def test_requeue_stale_honours_its_limit_and_leaves_other_states_alone(
    store: JobStore,
) -> None:
    for _ in range(5):
        add(store, "a")
    add(store, "a", delay=3600)  # pending, not due
    held = claim(store, slots("a", lease=LONG_LEASE))
    assert len(held) == 5
    first = store.lease_requeue_stale(0, None, limit=2)
    rest = store.lease_requeue_stale(0, None, limit=10)
    assert (len(first), len(rest)) == (2, 3)
    assert {r.id for r in first} | {r.id for r in rest} == set(ids(held))
    assert store.lease_requeue_stale(0, None) == []
    counts = store.job_count_by_status()
    assert (counts[JobStatus.PENDING], counts[JobStatus.RUNNING]) == (6, 0)


def test_a_stale_lease_past_its_budget_is_dead_lettered(store: JobStore) -> None:
    job_id = add(store, "a", max_attempts=1)
    claim(store, slots("a", lease=LONG_LEASE))
    (taken,) = store.lease_requeue_stale(0, None)
    assert (taken.id, taken.outcome, taken.attempts) == (job_id, "failed-terminal", 1)
    row = store.job_get(job_id)
    assert row is not None
    assert (row.status, row.last_error) == (JobStatus.FAILED, LEASE_STALE_EXHAUSTED_ERROR)


def test_the_reaper_says_how_long_the_lease_went_unwritten(store: JobStore) -> None:
    job_id = add(store, "a")
    (held,) = claim(store, slots("a", lease=1.0))
    time.sleep(0.6)
    # renewed: the time counts from the renewal, not from the claim
    assert store.lease_renew("w1", refs([held]), 0.5) == {held.id}
    renewed_at = time.monotonic()
    (reclaimed,) = wait_until(store.lease_recover_expired, timeout=10)
    elapsed = time.monotonic() - renewed_at
    assert (reclaimed.id, reclaimed.outcome) == (job_id, "reclaimed")
    assert reclaimed.stuck_for is not None
    assert 0.5 <= reclaimed.stuck_for <= elapsed + 0.05


def test_a_lease_exhausted_dead_letter_keeps_the_previous_handler_error(
    store: JobStore,
) -> None:
    job_id = add(store, "a", max_attempts=3)
    (first,) = claim(store, "a")
    boom = "ValueError: boom " + "x" * 400  # longer than the kept part
    assert store.job_retry_many("w1", [RetryItem(first.id, first.lease_token, 0, boom)]) == {
        job_id}
    # the second attempt's lease expires (reclaimed: no handler error), the third's too
    claim(store, slots("a", lease=SHORT_LEASE))
    (reclaimed,) = wait_until(store.lease_recover_expired)
    assert reclaimed.outcome == "reclaimed"
    claim(store, slots("a", lease=SHORT_LEASE))
    (dead,) = wait_until(store.lease_recover_expired)
    expected = f"{LEASE_EXHAUSTED_ERROR}; previous error: {boom[:300]}"
    assert (dead.outcome, dead.error) == ("failed-terminal", expected)
    row = store.job_get(job_id)
    assert row is not None
    assert (row.status, row.last_error) == (JobStatus.FAILED, expected)
    # the attempt's own history entry names the lease expiry alone
    assert [e.error for e in row.errors][-1] == LEASE_EXHAUSTED_ERROR
    assert row.errors[0].error == boom


def test_a_lease_exhausted_dead_letter_without_a_handler_error_says_only_that(
    store: JobStore,
) -> None:
    job_id = add(store, "a", max_attempts=1)
    claim(store, slots("a", lease=SHORT_LEASE))
    (dead,) = wait_until(store.lease_recover_expired)
    assert (dead.outcome, dead.error) == ("failed-terminal", LEASE_EXHAUSTED_ERROR)
    row = store.job_get(job_id)
    assert row is not None
    assert row.last_error == LEASE_EXHAUSTED_ERROR
