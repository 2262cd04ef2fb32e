"""When schedules fire: one job per tick across worker processes (and faster than the poll
interval), cron across daylight-saving changes on a fake clock, and one firing after
downtime. Declaring, redeclaring, repeat_from, start_at and validation are in
test_schedules.py."""

from __future__ import annotations

import itertools
import subprocess
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
from psycopg import sql

from golemq_pg import (
    InMemoryStore,
    JobEvent,
    JobStatus,
    PostgresStore,
    Queue,
    Worker,
)
from golemq_pg._schedule import next_tick
from golemq_pg.testing import FakeClock, memory_store
from tests.support.workers import kill_leftovers, spawn, stop_gracefully, worker_config

BERLIN = ZoneInfo("Europe/Berlin")


def _spawn(dsn: str, schema: str, worker_id: str) -> subprocess.Popen[str]:
    """A worker process that declares the shared schedule itself (as every process of an
    application would at start-up), then runs until SIGTERM, recording each run in ticks."""
    return spawn(worker_config(
        dsn, schema, worker_id, store={"max_size": 6},
        schedules=[["tick", "tick", {"every": "second"}, {"every": 1, "repeat_from": "run_at"}]],
        worker={"poll_interval": 0.5, "shutdown_grace": 5},
        handlers=[{"type": "tick", "options": {"concurrency": 2}, "ledger": "ticks"}],
    ))


def _query(dsn: str, schema: str, text: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(sql.SQL(text).format(schema=sql.Identifier(schema))).fetchall()


def test_three_worker_processes_make_one_job_per_one_second_tick(
    pg_store: PostgresStore, pg_dsn: str
) -> None:
    schema = pg_store.schema
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL(
            "CREATE TABLE {}.ticks (job_id text NOT NULL, worker text NOT NULL, pid int NOT NULL,"
            " at timestamptz NOT NULL DEFAULT clock_timestamp())"
        ).format(sql.Identifier(schema)))
    queue = Queue(pg_store)
    procs = [_spawn(pg_dsn, schema, f"sched-{i}") for i in range(3)]
    try:
        window_start = pg_store.now()  # all three workers run from here on
        time.sleep(20)  # the test is about 20 seconds of wall time
        window_end = pg_store.now()
        assert queue.unschedule("tick") is True  # no tick after this
        # Let the last jobs finish before stopping the workers.
        deadline = time.monotonic() + 20
        while True:
            live = _query(pg_dsn, schema, "SELECT count(*) FROM {schema}.jobs_all "
                                          "WHERE status IN ('pending', 'running')")[0][0]
            if live == 0:
                break
            assert time.monotonic() < deadline, f"{live} tick jobs never finished"
            time.sleep(0.05)
        stop_gracefully(procs)
    finally:
        kill_leftovers(procs)
    jobs = _query(pg_dsn, schema, "SELECT id::text, status, run_at, created_at, schedule_key "
                                  "FROM {schema}.jobs_all ORDER BY run_at, id")
    assert {row[4] for row in jobs} == {"tick"}
    assert Counter(row[1] for row in jobs) == {"succeeded": len(jobs)}
    run_ats = [row[2] for row in jobs]
    # One job per tick for the whole window: consecutive ticks exactly one second apart (no
    # two jobs of one tick, no tick skipped), covering every second of the 20 s window.
    steps = [later - earlier for earlier, later in itertools.pairwise(run_ats)]
    assert set(steps) == {timedelta(seconds=1)}, steps
    # (A tick due just before the unschedule may not have been fired yet: one tick of slack
    # at the end, as a firing is at most a tick late, checked below.)
    assert run_ats[0] <= window_start + timedelta(seconds=1)
    assert run_ats[-1] >= window_end - timedelta(seconds=2)
    assert len(run_ats) >= 19
    # Every tick was fired on time (the job row was written within a tick of its due time),
    # so nothing was skipped to catch up.
    lateness = [(row[3] - row[2]).total_seconds() for row in jobs]
    assert max(lateness) < 1.0, lateness
    # Each job ran exactly once.
    ledger = _query(pg_dsn, schema, "SELECT job_id FROM {schema}.ticks")
    assert Counter(r[0] for r in ledger) == dict.fromkeys((row[0] for row in jobs), 1)
    print(f"{len(jobs)} ticks, max lateness {max(lateness) * 1000:.0f} ms")


def test_a_schedule_faster_than_the_poll_interval_fires_every_tick(
    pg_store: PostgresStore,
) -> None:
    """The maintenance loop wakes for the next tick of a schedule it just fired, instead of
    waiting for its own timer (at most 1 s, however long the poll interval): a 1 s cadence,
    the shortest ``every`` there is, loses no tick."""
    queue = Queue(pg_store)
    queue.schedule("fast", "fast", {}, every=1, repeat_from="run_at")
    worker = Worker(pg_store, poll_interval=5)
    worker.handler("fast", concurrency=2)(lambda job: None)
    worker.start()
    try:
        time.sleep(4.5)  # the test is about elapsed time: four ticks
        queue.unschedule("fast")
        # Let the last job finish: one released at shutdown would be due again "now".
        deadline = time.monotonic() + 10
        while queue.stats()["succeeded"] < len(queue.find(types=["fast"], limit=1000)):
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        queue.unschedule("fast")
        worker.stop()
    run_ats = sorted(j.run_at for j in queue.find(types=["fast"], limit=1000))
    assert len(run_ats) >= 4, run_ats
    steps = {b - a for a, b in itertools.pairwise(run_ats)}
    assert steps == {timedelta(seconds=1)}, steps


def _step_through(
    store: InMemoryStore, clock: FakeClock, until: datetime, step: timedelta
) -> list[datetime]:
    """Move the fake clock to ``until`` in ``step``s, firing schedules at every step the way
    the maintenance loop does; returns the run_at of every job fired, in order."""
    fired: list[datetime] = []
    while clock.now() < until:
        clock.advance(step)
        for job_id in store.schedule_fire_due(next_tick):
            job = store.job_get(job_id)
            assert job is not None
            fired.append(job.run_at)
    return fired


def _local(ticks: list[datetime]) -> list[str]:
    return [t.astimezone(BERLIN).strftime("%m-%d %H:%M%z") for t in ticks]


def test_cron_across_spring_forward_on_a_fake_clock() -> None:
    # Europe/Berlin, 2026-03-29: 02:00 CET jumps to 03:00 CEST.
    store, clock = memory_store(datetime(2026, 3, 27, 12, 0, tzinfo=UTC))
    queue = Queue(store)
    queue.schedule("daily", "report", {}, cron="30 2 * * *", timezone="Europe/Berlin")
    queue.schedule("hourly", "sync", {}, cron="0 * * * *", timezone="Europe/Berlin")
    fired = _step_through(store, clock, datetime(2026, 3, 30, 12, 0, tzinfo=UTC),
                          timedelta(minutes=5))
    daily = [j.run_at for j in queue.find(types=["report"], limit=1000)][::-1]
    hourly = [j.run_at for j in queue.find(types=["sync"], limit=1000)][::-1]
    assert sorted(fired) == sorted(daily + hourly)
    # The daily 02:30 does not exist on the 29th: it fires once, at the end of the gap.
    assert _local(daily) == ["03-28 02:30+0100", "03-29 03:00+0200", "03-30 02:30+0200"]
    assert daily[1] == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    # The hourly job fires every real hour; the local hour 02 simply does not happen.
    assert all(b - a == timedelta(hours=1) for a, b in itertools.pairwise(hourly))
    on_the_day = [t for t in _local(hourly) if t.startswith("03-29 0")]
    assert on_the_day[:4] == ["03-29 00:00+0100", "03-29 01:00+0100", "03-29 03:00+0200",
                              "03-29 04:00+0200"]
    assert len(hourly) == 72  # 27th 13:00Z .. 30th 12:00Z, one per real hour


def test_cron_across_fall_back_on_a_fake_clock() -> None:
    # Europe/Berlin, 2026-10-25: 03:00 CEST goes back to 02:00 CET; 02:xx happens twice.
    store, clock = memory_store(datetime(2026, 10, 23, 12, 0, tzinfo=UTC))
    queue = Queue(store)
    queue.schedule("daily", "report", {}, cron="30 2 * * *", timezone="Europe/Berlin")
    queue.schedule("hourly", "sync", {}, cron="0 * * * *", timezone="Europe/Berlin")
    _step_through(store, clock, datetime(2026, 10, 26, 12, 0, tzinfo=UTC),
                  timedelta(minutes=5))
    daily = [j.run_at for j in queue.find(types=["report"], limit=1000)][::-1]
    hourly = [j.run_at for j in queue.find(types=["sync"], limit=1000)][::-1]
    # The daily job runs once on the long day, at the first 02:30.
    assert _local(daily) == ["10-24 02:30+0200", "10-25 02:30+0200", "10-26 02:30+0100"]
    # The hourly job fires every real hour: 02:00 twice, once per offset.
    assert all(b - a == timedelta(hours=1) for a, b in itertools.pairwise(hourly))
    on_the_day = [t for t in _local(hourly) if t.startswith("10-25 0")]
    assert on_the_day[:5] == ["10-25 00:00+0200", "10-25 01:00+0200", "10-25 02:00+0200",
                              "10-25 02:00+0100", "10-25 03:00+0100"]
    assert len(hourly) == 72


def test_cron_dst_ticks_through_the_worker_on_a_fake_clock() -> None:
    """The same rule, end to end: a Worker's maintenance pass fires, its handler runs."""
    store, clock = memory_store(datetime(2026, 3, 28, 12, 0, tzinfo=UTC))
    queue = Queue(store)
    queue.schedule("daily", "report", {"to": "ops"}, cron="30 2 * * *",
                   timezone="Europe/Berlin")
    seen: list[tuple[str, datetime]] = []

    def run_worker() -> None:
        worker = Worker(store, poll_interval=0.05)

        @worker.handler("report")
        def report(job: JobEvent[Any]) -> None:
            seen.append((job.id, clock.now()))

        worker.run_until_empty(timeout=20)

    # Just before the (missing) 02:30 of the 29th: nothing is due.
    clock.set(datetime(2026, 3, 29, 0, 59, tzinfo=UTC))
    run_worker()
    assert seen == []
    clock.set(datetime(2026, 3, 29, 1, 0, tzinfo=UTC))  # 03:00 CEST, the end of the gap
    run_worker()
    assert len(seen) == 1
    (sched,) = queue.schedules()
    assert sched.next_run_at == datetime(2026, 3, 30, 0, 30, tzinfo=UTC)  # 02:30 CEST
    job = queue.get(seen[0][0])
    assert job is not None
    assert job.status is JobStatus.SUCCEEDED
    assert job.run_at == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)


def test_after_downtime_an_interval_schedule_fires_once_and_keeps_its_phase() -> None:
    start = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
    store, clock = memory_store(start)
    queue = Queue(store)
    queue.schedule("beat", "beat", {}, every=60, repeat_from="run_at")
    assert len(store.schedule_fire_due(next_tick)) == 1  # due at once
    clock.advance(timedelta(hours=2, seconds=10))  # nobody ran for two hours
    (job_id,) = store.schedule_fire_due(next_tick)  # one job, not 120
    assert store.schedule_fire_due(next_tick) == []
    job = queue.get(job_id)
    assert job is not None
    assert job.run_at == start + timedelta(seconds=60)  # the overdue tick it stands for
    (sched,) = queue.schedules()
    # Back on the original cadence: the first start + k*60 s after now.
    assert sched.next_run_at == start + timedelta(hours=2, seconds=60)


def test_after_downtime_a_cron_schedule_fires_once() -> None:
    store, clock = memory_store(datetime(2026, 1, 5, 5, 0, tzinfo=UTC))
    queue = Queue(store)
    queue.schedule("report", "report", {}, cron="0 6 * * *", timezone="UTC")
    clock.set(datetime(2026, 1, 9, 7, 0, tzinfo=UTC))  # four 06:00 ticks missed
    fired = _step_through(store, clock, datetime(2026, 1, 9, 8, 0, tzinfo=UTC),
                          timedelta(minutes=10))
    assert fired == [datetime(2026, 1, 5, 6, 0, tzinfo=UTC)]
    (sched,) = queue.schedules()
    assert sched.next_run_at == datetime(2026, 1, 10, 6, 0, tzinfo=UTC)


def test_after_downtime_on_postgres_a_schedule_fires_once(pg_store: PostgresStore) -> None:
    queue = Queue(pg_store)
    now = pg_store.now()
    # Declared with a start ten minutes ago at one tick per second: 600 ticks were "missed".
    queue.schedule("beat", "beat", {}, every=1, repeat_from="run_at",
                   start_at=now - timedelta(minutes=10))
    fired = pg_store.schedule_fire_due(next_tick)
    assert len(fired) == 1
    job = queue.get(fired[0])
    assert job is not None
    assert job.run_at == now - timedelta(minutes=10)
    (sched,) = queue.schedules()
    assert sched.next_run_at is not None
    assert pg_store.now() < sched.next_run_at <= pg_store.now() + timedelta(seconds=1)
