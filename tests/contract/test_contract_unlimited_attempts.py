"""Contract: unlimited attempt budgets (``max_attempts=UNLIMITED``, None in the port) are
stored and read back as None, never run out, and a schedule without a budget of its own
gives its jobs the enqueuer's default; on both stores."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from golemq_pg._types import JobStatus
from golemq_pg._validation import encode_payload
from golemq_pg.store.port import (
    NO_BUDGET,
    DueSchedule,
    EnqueueManyParams,
    FailItem,
    FindParams,
    JobStore,
    RetryItem,
    ScheduleParams,
)
from tests.support.store_port import SHORT_LEASE, add, claim, refs, slots
from tests.support.waiting import wait_until

pytestmark = pytest.mark.async_store_too



def _every(key: str, max_attempts: int | None) -> ScheduleParams:
    return ScheduleParams(
        key=key, type="report", payload=encode_payload("report", {}), cron=None,
        every_seconds=3600, timezone="UTC", repeat_from="run_at", first_run_at=None,
        max_attempts=max_attempts,
    )


def _plus_hour(due: DueSchedule, now: datetime) -> datetime:
    return now + timedelta(hours=1)


def test_an_unlimited_job_reads_back_none_claimed_finished_and_in_bulk(store: JobStore) -> None:
    job_id = add(store, "a", max_attempts=None)
    bounded = add(store, "a", max_attempts=4)
    assert store.job_enqueue_many(EnqueueManyParams(
        type="bulk", payloads=[encode_payload("bulk", {"n": 1})], max_attempts=None)) == 1
    job = store.job_get(job_id)
    assert job is not None
    assert job.max_attempts is None
    assert [j.max_attempts for j in store.job_find(FindParams(types=["bulk"]))] == [None]
    claimed = {j.id: j for j in claim(store, "a", owner="w")}
    assert (claimed[job_id].max_attempts, claimed[bounded].max_attempts) == (None, 4)
    store.job_fail_many("w", [FailItem(job_id, claimed[job_id].lease_token, "E: x")])
    store.job_complete_many("w", refs([claimed[bounded]]))
    failed = store.job_get(job_id)  # a finished row (PostgreSQL: from the history)
    assert failed is not None
    assert (failed.status, failed.max_attempts) == (JobStatus.FAILED, None)


def test_an_unlimited_job_is_retried_past_any_budget(store: JobStore) -> None:
    job_id = add(store, "a", max_attempts=None)
    for attempt in range(1, 8):
        (job,) = claim(store, "a", owner="w")
        assert (job.id, job.attempt, job.max_attempts) == (job_id, attempt, None)
        assert store.job_retry_many("w", [RetryItem(job.id, job.lease_token, 0.0, "E: x")])
    row = store.job_get(job_id)
    assert row is not None
    assert (row.status, row.attempts, row.max_attempts) == (JobStatus.PENDING, 7, None)


def test_the_reaper_never_exhausts_an_unlimited_job(store: JobStore) -> None:
    job_id = add(store, "a", max_attempts=None)
    for _ in range(2):
        claim(store, slots("a", lease=SHORT_LEASE), owner="lost")
        (reclaimed,) = wait_until(store.lease_recover_expired)
        assert (reclaimed.id, reclaimed.outcome) == (job_id, "reclaimed")
    row = store.job_get(job_id)
    assert row is not None
    assert (row.status, row.attempts, row.max_attempts) == (JobStatus.PENDING, 2, None)


@pytest.mark.parametrize(("own", "default", "expected"), [
    (NO_BUDGET, 7, 7),  # none of its own: the enqueuer's default
    (NO_BUDGET, None, None),  # ... which may be unlimited
    (None, 7, None),  # an unlimited schedule
    (2, None, 2),  # its own budget wins
])
def test_a_schedule_tick_takes_its_own_budget_else_the_default(
    store: JobStore, own: int | None, default: int | None, expected: int | None
) -> None:
    store.schedule_upsert(_every("s", own))
    (fired,) = store.schedule_fire_due(_plus_hour, default_max_attempts=default)
    ran_now = store.schedule_run_now("s", default)
    for job_id in (fired, ran_now):
        job = store.job_get(str(job_id))
        assert job is not None
        assert job.max_attempts == expected
