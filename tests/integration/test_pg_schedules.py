"""Schedules on real PostgreSQL: many schedulers, exactly one job per due tick."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

from golemq_pg.store.port import (
    ClaimRequest,
    DueSchedule,
    LeaseRef,
    ScheduleParams,
    TypeSlots,
)
from golemq_pg.store.postgres import PostgresStore


def _every(key: str, seconds: float, repeat_from: str = "run_at") -> ScheduleParams:
    return ScheduleParams(
        key=key, type="tick", payload=b'{"k": 1}', cron=None, every_seconds=seconds,
        timezone="UTC", repeat_from=repeat_from, first_run_at=None,  # type: ignore[arg-type]
    )


def _next(due: DueSchedule, now: datetime) -> datetime | None:
    if due.repeat_from == "finished":
        return None
    assert due.every_seconds is not None
    return now + timedelta(seconds=due.every_seconds)


def test_racing_schedulers_fire_each_due_tick_once(pg_store: PostgresStore) -> None:
    for n in range(20):
        pg_store.schedule_upsert(_every(f"s{n}", 3600))
    # Several processes declaring the same keys again change nothing.
    for n in range(20):
        pg_store.schedule_upsert(_every(f"s{n}", 3600))
    fired: list[list[str]] = [[] for _ in range(4)]
    barrier = threading.Barrier(4)

    def scheduler(i: int) -> None:
        barrier.wait(10)
        for _ in range(5):
            fired[i] += pg_store.schedule_fire_due(_next, limit=3)

    threads = [threading.Thread(target=scheduler, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    all_ids = [job_id for ids in fired for job_id in ids]
    assert len(all_ids) == len(set(all_ids)) == 20
    assert pg_store.job_stats()["pending"] == 20
    assert all(s.next_run_at is not None and s.last_run_at is not None
               for s in pg_store.schedule_list())
    assert pg_store.schedule_fire_due(_next) == []


def test_repeat_from_finished_waits_for_the_job_then_adds_the_interval(
    pg_store: PostgresStore,
) -> None:
    pg_store.schedule_upsert(_every("f", 600, "finished"))
    (job_id,) = pg_store.schedule_fire_due(_next)
    (schedule,) = pg_store.schedule_list()
    assert schedule.next_run_at is None
    assert pg_store.schedule_fire_due(_next) == []  # still running
    (job,) = pg_store.job_claim(ClaimRequest("w", [TypeSlots("tick", 1, 30)]))
    assert job.id == job_id
    assert job.payload == {"k": 1}
    pg_store.job_complete_many("w", [LeaseRef(job.id, job.lease_token)])
    assert pg_store.schedule_fire_due(_next) == []  # due 600 s after the finish
    (schedule,) = pg_store.schedule_list()
    finished = pg_store.job_get(job_id)
    assert finished is not None
    assert finished.finished_at is not None
    assert schedule.next_run_at == finished.finished_at + timedelta(seconds=600)


def test_redeclaring_recomputes_next_run_only_when_the_timing_changes(
    pg_store: PostgresStore,
) -> None:
    pg_store.schedule_upsert(_every("r", 60))
    pg_store.schedule_fire_due(_next)
    (before,) = pg_store.schedule_list()
    pg_store.schedule_upsert(
        ScheduleParams(key="r", type="tick", payload=b'{"k": 2}', cron=None, every_seconds=60,
                       timezone="UTC", repeat_from="run_at", first_run_at=None)
    )
    (same,) = pg_store.schedule_list()
    assert same.next_run_at == before.next_run_at
    pg_store.schedule_upsert(_every("r", 120))
    (changed,) = pg_store.schedule_list()
    assert changed.every == timedelta(seconds=120)
    assert changed.next_run_at != before.next_run_at
    assert pg_store.schedule_delete("r") is True
    assert pg_store.schedule_delete("r") is False
