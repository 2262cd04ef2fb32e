"""Contract: recurring schedules (upsert, list, delete, fire_due)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from golemq_pg._types import JobStatus, Scope
from golemq_pg._validation import encode_payload
from golemq_pg.store.port import CancelFilter, DueSchedule, FailItem, JobStore, ScheduleParams
from tests.support.store_port import claim, concurrently, refs, slots

# The contract of the producer verbs holds on the async path too (AsyncPostgresStore).
pytestmark = pytest.mark.async_store_too

def _every(
    key: str,
    seconds: float = 3600,
    first: datetime | None = None,
    repeat_from: str = "run_at",
    **kw: object,
) -> ScheduleParams:
    return ScheduleParams(
        key=key,
        type="report",
        payload=encode_payload("report", {"to": "ops"}),
        cron=None,
        every_seconds=seconds,
        timezone="UTC",
        repeat_from=repeat_from,  # type: ignore[arg-type]
        first_run_at=first,
        **kw,  # type: ignore[arg-type]
    )


def _plus_hour(due: DueSchedule, now: datetime) -> datetime:
    return now + timedelta(hours=1)


def _wait_for_finish(due: DueSchedule, now: datetime) -> None:
    return None


def test_upsert_list_and_delete(store: JobStore) -> None:
    before = store.now()
    store.schedule_upsert(_every("b-sched", 60))
    store.schedule_upsert(
        ScheduleParams(
            key="a-sched",
            type="digest",
            payload=b"{}",
            cron="0 6 * * *",
            every_seconds=None,
            timezone="Europe/Paris",
            repeat_from="run_at",
            first_run_at=before + timedelta(hours=3),
        )
    )
    listed = store.schedule_list()
    assert [s.key for s in listed] == ["a-sched", "b-sched"]
    cron, every = listed
    assert (cron.type, cron.cron, cron.every, cron.timezone) == (
        "digest",
        "0 6 * * *",
        None,
        "Europe/Paris",
    )
    assert cron.next_run_at == before + timedelta(hours=3)
    assert cron.last_run_at is None
    assert (every.every, every.cron, every.repeat_from) == (timedelta(seconds=60), None, "run_at")
    assert every.next_run_at is not None
    assert before <= every.next_run_at <= store.now()
    assert store.schedule_delete("a-sched") is True
    assert store.schedule_delete("a-sched") is False
    assert [s.key for s in store.schedule_list()] == ["b-sched"]


def test_fire_due_enqueues_one_job_per_due_schedule_and_advances_it(store: JobStore) -> None:
    store.schedule_upsert(_every("due", scope=Scope("Team", "ops"), priority=4, max_attempts=7))
    store.schedule_upsert(_every("later", first=store.now() + timedelta(hours=2)))
    ticks: list[DueSchedule] = []

    def tick(due: DueSchedule, now: datetime) -> datetime:
        ticks.append(due)
        return now + timedelta(hours=1)

    fired = store.schedule_fire_due(tick)
    assert len(fired) == 1
    assert [t.key for t in ticks] == ["due"]
    assert (ticks[0].every_seconds, ticks[0].repeat_from) == (3600, "run_at")
    assert store.schedule_fire_due(tick) == []  # next tick is an hour away
    (job,) = claim(store, "report")
    assert job.id == fired[0]
    assert (job.payload, job.scope, job.priority, job.max_attempts) == (
        {"to": "ops"},
        Scope("Team", "ops"),
        4,
        7,
    )
    (sched,) = [s for s in store.schedule_list() if s.key == "due"]
    assert sched.last_run_at is not None
    assert sched.next_run_at is not None
    assert sched.next_run_at > store.now() + timedelta(minutes=59)


def test_fire_due_honours_its_limit(store: JobStore) -> None:
    for i in range(5):
        store.schedule_upsert(_every(f"s{i}"))
    assert len(store.schedule_fire_due(_plus_hour, limit=2)) == 2
    assert len(store.schedule_fire_due(_plus_hour, limit=10)) == 3
    assert store.schedule_fire_due(_plus_hour) == []


def test_concurrent_schedulers_fire_each_tick_once(store: JobStore) -> None:
    for i in range(3):
        store.schedule_upsert(_every(f"s{i}"))
    results = concurrently(6, lambda i: store.schedule_fire_due(_plus_hour))
    fired = [job_id for batch in results for job_id in batch]
    assert len(fired) == len(set(fired)) == 3
    assert store.job_count_by_status()[JobStatus.PENDING] == 3


def test_redeclaring_a_schedule_does_not_reset_its_tick(store: JobStore) -> None:
    store.schedule_upsert(_every("s"))
    assert len(store.schedule_fire_due(_plus_hour)) == 1
    (before,) = store.schedule_list()
    # Every process declares the same schedule at start-up: no second job, same next tick.
    store.schedule_upsert(_every("s"))
    assert store.schedule_fire_due(_plus_hour) == []
    (after,) = store.schedule_list()
    assert after.next_run_at == before.next_run_at
    # Changing the timing re-plans it from the new first run.
    store.schedule_upsert(_every("s", seconds=120))
    (changed,) = store.schedule_list()
    assert changed.every == timedelta(seconds=120)
    assert changed.next_run_at is not None
    assert changed.next_run_at <= store.now()


def test_repeat_from_finished_waits_for_the_job(store: JobStore) -> None:
    store.schedule_upsert(_every("s", seconds=3600, repeat_from="finished"))
    (fired,) = store.schedule_fire_due(_wait_for_finish)
    (sched,) = store.schedule_list()
    assert sched.next_run_at is None
    assert sched.last_run_at is not None
    assert store.schedule_fire_due(_wait_for_finish) == []
    (job,) = claim(store, "report")
    assert store.job_complete_many("w1", refs([job])) == {fired}
    row = store.job_get(fired)
    assert row is not None
    assert row.finished_at is not None
    store.schedule_fire_due(_wait_for_finish)  # a pass may settle the next tick lazily
    (sched,) = store.schedule_list()
    assert sched.next_run_at == row.finished_at + timedelta(seconds=3600)


def test_repeat_from_finished_counts_a_failure_as_finished(store: JobStore) -> None:
    store.schedule_upsert(_every("s", seconds=10, repeat_from="finished"))
    (fired,) = store.schedule_fire_due(_wait_for_finish)
    (job,) = claim(store, slots("report"))
    store.job_fail_many("w1", [FailItem(job.id, job.lease_token, "E")])
    row = store.job_get(fired)
    assert row is not None
    assert row.finished_at is not None
    store.schedule_fire_due(_wait_for_finish)
    (sched,) = store.schedule_list()
    assert sched.next_run_at == row.finished_at + timedelta(seconds=10)


def test_a_deleted_schedule_fires_nothing(store: JobStore) -> None:
    store.schedule_upsert(_every("s"))
    store.schedule_delete("s")
    assert store.schedule_fire_due(_plus_hour) == []


def test_a_cancelled_job_does_not_leave_its_schedule_waiting_forever(store: JobStore) -> None:
    store.schedule_upsert(_every("s", seconds=3600, repeat_from="finished"))
    (fired,) = store.schedule_fire_due(_wait_for_finish)
    store.job_cancel(CancelFilter(job_ids=[fired]), "not needed")
    # A job that is gone frees its schedule at once: the next pass fires it.
    (again,) = store.schedule_fire_due(_wait_for_finish)
    assert again != fired


def test_a_failing_next_tick_skips_only_its_schedule(store: JobStore) -> None:
    store.schedule_upsert(_every("bad"))
    store.schedule_upsert(_every("good"))

    def tick(due: DueSchedule, now: datetime) -> datetime:
        if due.key == "bad":
            raise RuntimeError("broken cron")
        return now + timedelta(hours=1)

    fired = store.schedule_fire_due(tick)
    assert len(fired) == 1
    (bad,) = [s for s in store.schedule_list() if s.key == "bad"]
    assert bad.last_run_at is None
    assert bad.next_run_at is not None
    assert bad.next_run_at <= store.now()


# -- pause, resume, run now --------------------------------------------------------------------


def test_a_paused_schedule_fires_no_tick_and_is_listed_paused(store: JobStore) -> None:
    store.schedule_upsert(_every("s"))
    store.schedule_upsert(_every("other"))
    assert store.schedule_pause("s") is True
    assert store.schedule_pause("s") is True  # pausing again changes nothing
    assert store.schedule_pause("nope") is False
    fired = store.schedule_fire_due(_plus_hour)
    assert len(fired) == 1  # "other" only
    listed = {s.key: s for s in store.schedule_list()}
    assert (listed["s"].paused, listed["other"].paused) == (True, False)
    assert listed["s"].last_run_at is None
    assert store.schedule_fire_due(_plus_hour) == []


def test_resume_skips_the_ticks_missed_while_paused(store: JobStore) -> None:
    store.schedule_upsert(_every("s", first=store.now() - timedelta(hours=5)))
    store.schedule_pause("s")
    assert store.schedule_fire_due(_plus_hour) == []
    asked: list[DueSchedule] = []

    def resumed(due: DueSchedule, now: datetime) -> datetime:
        asked.append(due)
        return now + timedelta(minutes=30)

    assert store.schedule_resume("s", resumed) is True
    assert [d.key for d in asked] == ["s"]
    (sched,) = store.schedule_list()
    assert sched.paused is False
    assert sched.next_run_at is not None
    assert sched.next_run_at > store.now() + timedelta(minutes=29)
    assert store.schedule_fire_due(_plus_hour) == []  # no catch-up run, no burst


def test_resume_keeps_a_future_tick_and_unknown_keys_are_refused(store: JobStore) -> None:
    later = store.now() + timedelta(hours=2)
    store.schedule_upsert(_every("s", first=later))
    store.schedule_pause("s")

    def never(due: DueSchedule, now: datetime) -> datetime:
        raise AssertionError("a future tick is kept")

    assert store.schedule_resume("s", never) is True
    (sched,) = store.schedule_list()
    assert (sched.paused, sched.next_run_at) == (False, later)
    assert store.schedule_resume("s", never) is True  # not paused: left as it is
    assert store.schedule_resume("nope", never) is False


def test_a_resumed_schedule_fires_again(store: JobStore) -> None:
    store.schedule_upsert(_every("s", first=store.now() + timedelta(hours=1)))
    store.schedule_pause("s")
    store.schedule_resume("s", _plus_hour)
    store.schedule_upsert(_every("s", seconds=60))  # re-timed: due now
    assert len(store.schedule_fire_due(_plus_hour)) == 1


def test_run_now_enqueues_one_due_job_as_a_tick_would_and_keeps_the_cadence(
    store: JobStore,
) -> None:
    later = store.now() + timedelta(hours=2)
    store.schedule_upsert(_every("s", first=later, scope=Scope("Team", "ops"), priority=3))
    job_id = store.schedule_run_now("s")
    assert job_id is not None
    assert store.schedule_run_now("nope") is None
    (job,) = claim(store, "report")
    assert job.id == job_id
    assert (job.payload, job.scope, job.priority) == ({"to": "ops"}, Scope("Team", "ops"), 3)
    (sched,) = store.schedule_list()
    assert sched.next_run_at == later  # the cadence is kept
    assert sched.last_run_at is not None
    assert store.schedule_fire_due(_plus_hour) == []  # and it does not fire twice


def test_run_now_of_a_paused_schedule_runs_once_and_leaves_it_paused(store: JobStore) -> None:
    store.schedule_upsert(_every("s"))
    store.schedule_pause("s")
    assert store.schedule_run_now("s") is not None
    assert len(claim(store, "report")) == 1
    assert store.schedule_fire_due(_plus_hour) == []
    (sched,) = store.schedule_list()
    assert sched.paused is True


def test_run_now_of_a_finished_cadence_counts_the_next_run_from_its_finish(
    store: JobStore,
) -> None:
    store.schedule_upsert(_every("s", seconds=3600, repeat_from="finished"))
    job_id = store.schedule_run_now("s")
    assert job_id is not None
    # The pending tick (due now) gave way to this run: nothing fires behind it.
    assert store.schedule_fire_due(_wait_for_finish) == []
    (job,) = claim(store, "report")
    store.job_complete_many("w1", refs([job]))
    row = store.job_get(job_id)
    assert row is not None
    assert row.finished_at is not None
    assert store.schedule_fire_due(_wait_for_finish) == []
    (sched,) = store.schedule_list()
    assert sched.next_run_at == row.finished_at + timedelta(seconds=3600)
