"""The in-memory store on a FakeClock: exact time boundaries without sleeping.

These complement the two-store contract cases (which use short real leases) with checks
that only a hand-moved clock can make exact.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from golemq_pg._types import JobStatus
from golemq_pg.store.port import DueSchedule, FailItem, RetryItem, ScheduleParams
from golemq_pg.testing import DEFAULT_START, FakeClock, InMemoryStore, memory_store
from tests.support.store_port import add, claim, refs, slots


def test_fake_clock_moves_only_when_told() -> None:
    clock = FakeClock()
    assert clock() == clock.now() == DEFAULT_START
    assert clock.advance(1.5) == DEFAULT_START + timedelta(seconds=1.5)
    clock.advance(timedelta(minutes=1))
    assert clock.now() == DEFAULT_START + timedelta(seconds=61.5)
    clock.set(DEFAULT_START + timedelta(hours=1))
    assert clock.now() == DEFAULT_START + timedelta(hours=1)
    with pytest.raises(ValueError, match="forward"):
        clock.advance(-1)
    with pytest.raises(ValueError, match="forward"):
        clock.set(DEFAULT_START)
    with pytest.raises(ValueError, match="aware"):
        FakeClock(datetime(2024, 1, 1))


def test_the_store_reads_the_injected_clock() -> None:
    store, clock = memory_store(datetime(2030, 5, 1, tzinfo=UTC))
    assert store.now() == datetime(2030, 5, 1, tzinfo=UTC)
    job_id = add(store, "a")
    job = store.job_get(job_id)
    assert job is not None
    assert job.created_at == job.run_at == clock.now()


def test_the_default_store_uses_real_utc_time() -> None:
    store = InMemoryStore()
    now = store.now()
    assert now.tzinfo is not None
    assert now.utcoffset() == timedelta(0)
    assert abs(now - datetime.now(UTC)) < timedelta(seconds=5)


def test_a_naive_clock_is_refused() -> None:
    store = InMemoryStore(clock=lambda: datetime(2024, 1, 1))
    with pytest.raises(ValueError, match="aware"):
        store.now()


def test_a_delayed_job_becomes_due_exactly_on_time() -> None:
    store, clock = memory_store()
    add(store, "a", delay=10)
    clock.advance(9.999)
    assert claim(store, "a") == []
    assert store.job_stats()["scheduled"] == 1
    clock.advance(0.001)
    assert store.job_stats()["pending"] == 1
    assert len(claim(store, "a")) == 1


def test_retry_backoff_is_measured_on_the_store_clock() -> None:
    store, clock = memory_store()
    add(store, "a")
    (job,) = claim(store, "a")
    store.job_retry_many("w1", [RetryItem(job.id, job.lease_token, 30, "E")])
    clock.advance(29)
    assert claim(store, "a") == []
    clock.advance(1)
    (again,) = claim(store, "a")
    assert again.attempt == 2


def test_lease_renewal_and_expiry_on_the_fake_clock() -> None:
    store, clock = memory_store()
    add(store, "a")
    (job,) = claim(store, slots("a", lease=10))
    assert job.lease_expires_at == clock.now() + timedelta(seconds=10)
    clock.advance(9)
    assert store.lease_renew("w1", refs([job]), 10) == {job.id}
    clock.advance(9)
    assert store.lease_recover_expired() == []
    clock.advance(1)
    assert store.lease_renew("w1", refs([job]), 10) == set()
    assert [r.id for r in store.lease_recover_expired()] == [job.id]


def test_waits_for_unblocks_when_parked_work_is_not_yet_due() -> None:
    store, clock = memory_store()
    add(store, "extract", delay=5)
    add(store, "index")
    index = slots("index", waits_for=("extract",))
    assert len(claim(store, index)) == 1
    add(store, "index")
    clock.advance(5)  # the parked extract is now due: it blocks again
    assert claim(store, index) == []


def test_prune_by_age_boundary() -> None:
    store, clock = memory_store()
    add(store, "a")
    (job,) = claim(store, "a")
    store.job_fail_many("w1", [FailItem(job.id, job.lease_token, "E")])
    clock.advance(100)
    assert store.job_prune([JobStatus.FAILED], before=None, age=100) == 0  # not older
    clock.advance(0.001)
    assert store.job_prune([JobStatus.FAILED], before=None, age=100) == 1


def test_a_schedule_repeating_from_finish_on_the_fake_clock() -> None:
    store, clock = memory_store()
    store.schedule_upsert(
        ScheduleParams(
            key="sync",
            type="sync",
            payload=b"{}",
            cron=None,
            every_seconds=60,
            timezone="UTC",
            repeat_from="finished",
            first_run_at=None,
        )
    )

    def wait_for_finish(due: DueSchedule, now: datetime) -> None:
        return None

    (first,) = store.schedule_fire_due(wait_for_finish)
    (job,) = claim(store, "sync")
    clock.advance(25)
    store.job_complete_many("w1", refs([job]))
    clock.advance(59)
    assert store.schedule_fire_due(wait_for_finish) == []
    clock.advance(1)
    (second,) = store.schedule_fire_due(wait_for_finish)
    assert int(second) > int(first)
    (sched,) = store.schedule_list()
    assert sched.last_run_at == clock.now()


def test_store_rejects_a_non_positive_rate_window() -> None:
    with pytest.raises(ValueError, match="rate_window"):
        InMemoryStore(rate_window=0)
