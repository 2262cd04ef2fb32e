"""Declaring schedules: one schedule per key however many processes declare it,
redeclaration (payload in place, timing replanned), repeat_from, start_at, validation, and
racing schedulers on PostgreSQL firing each due tick once. When ticks fire (across
processes, daylight-saving changes, downtime) is in test_schedule_ticks.py."""

from __future__ import annotations

import itertools
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any, TypedDict

import pytest

from golemq_pg import (
    InMemoryStore,
    JobEvent,
    JobType,
    PostgresStore,
    Queue,
    Worker,
)
from golemq_pg._schedule import next_tick
from golemq_pg.store.port import (
    ClaimRequest,
    DueSchedule,
    LeaseRef,
    ScheduleParams,
    TypeSlots,
)
from golemq_pg.testing import memory_store
from tests.support.waiting import wait_until

# -- declaration, redeclaration, repeat_from, start_at -------------------------------------


def test_many_processes_declaring_one_key_make_one_schedule(store: Any) -> None:
    queue = Queue(store)
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def declare() -> None:
        try:
            barrier.wait()
            Queue(store).schedule("report", "report.send", {"to": "ops"}, cron="0 6 * * *")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=declare) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    (sched,) = queue.schedules()
    assert (sched.key, sched.type, sched.cron, sched.timezone) == (
        "report", "report.send", "0 6 * * *", "UTC")


def test_redeclaring_updates_payload_in_place_and_cron_by_replanning(store: Any) -> None:
    queue = Queue(store)
    queue.schedule("beat", "beat", {"v": 1}, every=3600, repeat_from="run_at")
    (first_id,) = store.schedule_fire_due(next_tick)
    (before,) = queue.schedules()
    # Same timing, new payload and type: the pending tick is kept, the next job uses them.
    queue.schedule("beat", "beat2", {"v": 2}, every=3600, repeat_from="run_at", priority=5)
    (kept,) = queue.schedules()
    assert (kept.type, kept.next_run_at, kept.last_run_at) == (
        "beat2", before.next_run_at, before.last_run_at)
    assert store.schedule_fire_due(next_tick) == []
    # A changed cadence re-plans: now cron, next tick at the next 06:00.
    queue.schedule("beat", "beat2", {"v": 3}, cron="0 6 * * *")
    (changed,) = queue.schedules()
    assert (changed.cron, changed.every) == ("0 6 * * *", None)
    now = store.now()
    assert changed.next_run_at is not None
    assert now < changed.next_run_at <= now + timedelta(days=1)
    assert changed.next_run_at.astimezone(UTC).strftime("%H:%M") == "06:00"
    # And the payload change shows on the next fired job (memory: move the clock there).
    queue.schedule("beat", "beat2", {"v": 4}, every=60, repeat_from="run_at")
    (second_id,) = store.schedule_fire_due(next_tick)
    assert second_id != first_id
    worker = Worker(store, poll_interval=0.05)
    got: list[dict[str, Any]] = []
    worker.handler("beat2")(lambda job: got.append(job.payload))
    worker.handler("beat")(lambda job: None)
    worker.run_until_empty(timeout=20)
    assert got == [{"v": 4}]


def _worker_on(store: InMemoryStore, job_type: str, fn: Any) -> None:
    worker = Worker(store, poll_interval=0.05)
    worker.handler(job_type)(fn)
    worker.run_until_empty(timeout=20)


def test_repeat_from_finished_adds_every_to_the_finish_time() -> None:
    start = datetime(2026, 2, 2, 8, 0, tzinfo=UTC)
    store, clock = memory_store(start)
    queue = Queue(store)
    queue.schedule("sync", "sync", {}, every=60, repeat_from="finished")

    def slow(job: JobEvent[Any]) -> None:
        clock.advance(25)  # the job takes 25 s of (fake) time

    _worker_on(store, "sync", slow)  # fires at 08:00:00, finishes at 08:00:25
    (sched,) = queue.schedules()
    store.schedule_fire_due(next_tick)  # the pass that settles the next tick
    (sched,) = queue.schedules()
    assert sched.next_run_at == start + timedelta(seconds=85)
    clock.set(start + timedelta(seconds=84))
    assert store.schedule_fire_due(next_tick) == []
    clock.set(start + timedelta(seconds=85))
    assert len(store.schedule_fire_due(next_tick)) == 1


def test_repeat_from_run_at_keeps_a_fixed_cadence() -> None:
    start = datetime(2026, 2, 2, 8, 0, tzinfo=UTC)
    store, clock = memory_store(start)
    queue = Queue(store)
    queue.schedule("sync", "sync", {}, every=60, repeat_from="run_at")

    def slow(job: JobEvent[Any]) -> None:
        clock.advance(25)

    _worker_on(store, "sync", slow)
    (sched,) = queue.schedules()
    assert sched.next_run_at == start + timedelta(seconds=60)  # not finish + 60


def test_start_at_delays_the_first_run() -> None:
    start = datetime(2026, 2, 2, 8, 0, tzinfo=UTC)
    store, clock = memory_store(start)
    queue = Queue(store)
    queue.schedule("later", "t", {}, every=60, start_at=start + timedelta(hours=1))
    # A cron schedule whose start_at falls on a tick: that tick is its first.
    queue.schedule("cron", "t", {}, cron="0 10 * * *",
                   start_at=datetime(2026, 2, 3, 10, 0, tzinfo=UTC))
    by_key = {s.key: s for s in queue.schedules()}
    assert by_key["later"].next_run_at == start + timedelta(hours=1)
    assert by_key["cron"].next_run_at == datetime(2026, 2, 3, 10, 0, tzinfo=UTC)
    assert store.schedule_fire_due(next_tick) == []
    clock.set(start + timedelta(hours=1))
    assert len(store.schedule_fire_due(next_tick)) == 1


class DigestPayload(TypedDict):
    to: str


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({}, "exactly one"),
        ({"cron": "0 6 * * *", "every": 60}, "exactly one"),
        ({"cron": "not a cron"}, "invalid cron"),
        ({"cron": "0 0 30 2 *"}, "never fires"),
        ({"cron": "0 6 * * *", "timezone": "Mars/Olympus"}, "timezone"),
        ({"every": 0}, "every"),
        ({"every": -5}, "every"),
        ({"every": timedelta(0)}, "every"),
        ({"every": 60, "repeat_from": "whenever"}, "repeat_from"),
    ],
)
def test_invalid_schedules_raise_before_anything_is_written(
    store: Any, kwargs: dict[str, Any], match: str
) -> None:
    queue = Queue(store)
    with pytest.raises(ValueError, match=match):
        queue.schedule("bad", "t", {}, **kwargs)
    assert queue.schedules() == []


def test_a_grouped_job_type_needs_a_scope_to_be_scheduled(store: Any) -> None:
    queue = Queue(store)
    digest = JobType("digest.send", DigestPayload, grouped=True)
    with pytest.raises(ValueError, match="grouped"):
        queue.schedule("digest", digest, {"to": "ops"}, every=60)
    assert queue.schedules() == []
    queue.schedule("digest", digest, {"to": "ops"}, every=60, scope=("Team", "ops"))
    assert [s.key for s in queue.schedules()] == ["digest"]


def test_interval_schedules_fire_through_the_worker(store: Any) -> None:
    queue = Queue(store)
    queue.schedule("heartbeat", "beat", {"k": 1}, every=1)  # the shortest every there is
    runs: list[float] = []
    worker = Worker(store, poll_interval=0.05)

    @worker.handler("beat")
    def beat(job: JobEvent[Any]) -> None:
        assert job.payload == {"k": 1}
        runs.append(time.monotonic())

    worker.start()
    try:
        wait_until(lambda: len(runs) >= 3, timeout=15)
    finally:
        worker.stop()
    gaps = [b - a for a, b in itertools.pairwise(runs)]
    assert all(gap >= 0.9 for gap in gaps)  # repeat_from="finished": one at a time, spaced


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


def test_schedule_declaration_validation(store: Any) -> None:
    queue = Queue(store)
    for kwargs, match in [
        ({}, "exactly one"),
        ({"cron": "0 6 * * *", "every": 60}, "exactly one"),
        ({"cron": "not a cron"}, "cron"),
        ({"cron": "0 0 30 2 *"}, "never fires"),
        ({"every": 0}, "every"),
        ({"every": -1}, "every"),
        ({"every": float("inf")}, "every"),
        ({"cron": "0 6 * * *", "timezone": "Nowhere/Never"}, "timezone"),
        ({"every": 60, "repeat_from": "start"}, "repeat_from"),
    ]:
        with pytest.raises(ValueError, match=match):
            queue.schedule("key", "report.send", {}, **kwargs)
    assert queue.schedules() == []
    queue.schedule("daily", "report.send", {"to": "ops"}, cron="0 6 * * *")
    queue.schedule("sync", "upstream.sync", {}, every=timedelta(hours=20), repeat_from="run_at")
    queue.schedule("sync", "upstream.sync", {}, every=timedelta(hours=10), repeat_from="run_at")
    by_key = {s.key: s for s in queue.schedules()}
    assert set(by_key) == {"daily", "sync"}
    assert by_key["daily"].cron == "0 6 * * *"
    assert by_key["sync"].every == timedelta(hours=10)
    assert queue.unschedule("sync") is True
    assert queue.unschedule("sync") is False


# -- pause, resume, run now ------------------------------------------------------------------


def test_a_paused_schedule_runs_only_when_run_now_until_resumed(store: Any) -> None:
    queue = Queue(store)
    queue.schedule("beat", "beat", {"k": 1}, every=1, repeat_from="run_at")
    assert queue.pause_schedule("beat") is True
    runs: list[float] = []
    worker = Worker(store, poll_interval=0.05)
    worker.handler("beat")(lambda job: runs.append(time.monotonic()))
    worker.start()
    try:
        time.sleep(1.5)  # past the schedule's first tick: paused, it does not fire
        assert runs == []
        assert queue.run_schedule_now("beat") is True
        wait_until(lambda: len(runs) == 1, timeout=10, what="the run-now job ran")
        time.sleep(1.5)
        assert len(runs) == 1  # still paused: run-now ran it once, no tick followed
        (summary,) = queue.schedules()
        assert summary.paused is True
        assert queue.resume_schedule("beat") is True
        (summary,) = queue.schedules()
        assert summary.paused is False
        # The first tick passed during the pause: the next one is after now, no catch-up.
        assert summary.next_run_at is not None
        assert summary.next_run_at > store.now()
        wait_until(lambda: len(runs) >= 3, timeout=15, what="ticks after the resume")
    finally:
        worker.stop()


def test_schedule_control_of_unknown_keys_is_false_and_bad_keys_raise(store: Any) -> None:
    queue = Queue(store)
    for verb in (queue.run_schedule_now, queue.pause_schedule, queue.resume_schedule):
        assert verb("missing") is False
        for bad in ("", "k" * 256, None, 5, "a\x00b"):
            with pytest.raises(ValueError, match="schedule key"):
                verb(bad)
    assert queue.schedules() == []
    assert queue.stats()["pending"] == 0
