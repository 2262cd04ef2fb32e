"""Scenarios 17 and 18 of docs/RELIABILITY.md: NOTIFY coalescing under bulk and many-producer
enqueue, and claims while a long transaction holds back xmin.

Scale knobs (the defaults keep the suite inside its time budget on a 2-core machine):
``$GOLEMQ_FAULTS_NOTIFY_BULK`` (jobs in the one-transaction COPY, default 50000, as in
docs/RELIABILITY.md), ``$GOLEMQ_FAULTS_NOTIFY_SINGLE`` (single-job transactions from 8 producers,
default 16000: docs/RELIABILITY.md's 50000 scaled down, same 8 producers) and
``$GOLEMQ_FAULTS_XMIN_SECONDS`` (how long the snapshot is held, default 15 s; "minutes" in
docs/RELIABILITY.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.support.fault_env import FaultEnv
from tests.support.fault_report import env_seconds, report
from tests.support.waiting import wait_until
from tests.support.workers import type_spec

pytestmark = pytest.mark.faults


class NotifyCounter:
    """LISTENs on one channel on its own connection and counts what arrives."""

    def __init__(self, env: FaultEnv, channel: str) -> None:
        self.conn = env.connect(application_name=env.prefix + "-listen")
        self.conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        self.count = 0
        self.payloads: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for note in self.conn.notifies(timeout=0.2):
                self.count += 1
                self.payloads.add(note.payload)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.conn.close()


class UsageSampler:
    """Samples pg_notification_queue_usage() every 50 ms."""

    def __init__(self, env: FaultEnv) -> None:
        self.samples: list[float] = []
        self._env = env
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with self._env.connect() as conn:
            while not self._stop.wait(0.05):
                row = conn.execute("SELECT pg_notification_queue_usage()").fetchone()
                self.samples.append(float(row[0]) if row else 0.0)

    def close(self) -> float:
        self._stop.set()
        self._thread.join(5)
        return max(self.samples, default=0.0)


def test_s17_one_notify_per_statement_and_an_empty_notification_queue(
    fault_env: FaultEnv,
) -> None:
    env = fault_env
    bulk = int(env_seconds("GOLEMQ_FAULTS_NOTIFY_BULK", 50_000))
    single = int(env_seconds("GOLEMQ_FAULTS_NOTIFY_SINGLE", 16_000))
    producers = 8
    jobs_channel = env.store.channels()[0]
    # Real workers LISTEN on the same channel (for another type): they must keep up with
    # the flood too, or the server-side notification queue would grow.
    procs = [env.spawn(f"w{i}", [type_spec("other", concurrency=2)],
                       worker={"poll_interval": 5.0}) for i in range(2)]
    counter = NotifyCounter(env, jobs_channel)
    sampler = UsageSampler(env)
    try:
        started = time.monotonic()
        assert env.queue.add_many("bulk", [{"n": n} for n in range(bulk)]) == bulk
        bulk_seconds = time.monotonic() - started
        wait_until(lambda: counter.count >= 1, timeout=10)
        time.sleep(0.3)
        assert counter.count == 1  # one COPY statement: one notification
        assert counter.payloads == {'["bulk"]'}  # type names only, never payloads

        errors: list[BaseException] = []
        per_producer = single // producers

        def produce(n: int) -> None:
            try:
                for i in range(per_producer):
                    env.queue.add("single", {"p": n, "i": i})
            except BaseException as exc:
                errors.append(exc)

        started = time.monotonic()
        threads = [threading.Thread(target=produce, args=(n,)) for n in range(producers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(600)
        single_seconds = time.monotonic() - started
        assert not errors, errors[:3]
        statements = per_producer * producers
        wait_until(lambda: counter.count >= 1 + statements, timeout=30,
                   what="every single-job notification")
        time.sleep(0.3)
        received = counter.count - 1
        assert received == statements  # one per statement (each its own transaction)
        assert counter.payloads == {'["bulk"]', '["single"]'}
    finally:
        peak_usage = sampler.close()
        counter.close()
    assert peak_usage < 0.001, peak_usage
    # The flooded workers are alive and their LISTEN still works: a hint wakes them.
    for proc in procs:
        assert proc.alive()
    added = time.monotonic()
    env.queue.add("other", {})
    wait_until(lambda: env.one("SELECT count(*) FROM {s}.effects") == 1, timeout=5,
               interval=0.005)
    hint_latency = time.monotonic() - added
    assert hint_latency < 2.5  # far below the 5 s poll interval
    for proc in procs:
        assert proc.terminate() == 0
    env.check_connections()
    report("17 NOTIFY coalescing: bulk COPY and single-job transactions",
           bulk_jobs=bulk, bulk_notifications=1, bulk_seconds=round(bulk_seconds, 2),
           single_transactions=statements, single_notifications=received,
           producers=producers, single_seconds=round(single_seconds, 2),
           peak_notification_queue_usage=peak_usage,
           listening_workers_hint_latency=round(hint_latency, 3),
           scaled_from=50_000 if single < 50_000 else None)


def test_s18_claims_keep_working_while_a_long_transaction_holds_xmin(
    fault_env: FaultEnv,
) -> None:
    env = fault_env
    hold = env_seconds("GOLEMQ_FAULTS_XMIN_SECONDS", 15.0)
    # A backlog nobody serves: its age is what `golemq-pg stats` must show.
    env.queue.add_many("unserved", [{"n": n} for n in range(5)])
    unserved_at = time.monotonic()
    proc = env.spawn("w", [type_spec("flow", concurrency=4)],
                     worker={"poll_interval": 0.2})
    holder = psycopg.connect(env.dsn, application_name=env.prefix + "-holder")
    holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    holder.execute(sql.SQL("SELECT count(*) FROM {}.jobs_all").format(sql.Identifier(env.schema)))
    xmin = env.one("SELECT backend_xmin::text FROM pg_stat_activity WHERE application_name = %s",
                   (env.prefix + "-holder",))
    assert xmin is not None
    stop = threading.Event()
    produced = [0]

    def produce() -> None:
        while not stop.wait(0.1):
            produced[0] += env.queue.add_many("flow", [{"n": n} for n in range(30)])

    producer = threading.Thread(target=produce, daemon=True)
    per_second: list[int] = []
    stats: dict[str, Any] = {}
    try:
        producer.start()
        started = time.monotonic()
        last = 0
        while time.monotonic() - started < hold:
            time.sleep(1.0)
            done = env.one("SELECT count(*) FROM {s}.jobs_all WHERE status = 'succeeded'")
            per_second.append(int(done) - last)
            last = int(done)
        out = subprocess.run(
            [sys.executable, "-m", "golemq_pg.cli", "stats", "--json", "--dsn", env.dsn,
             "--schema", env.schema],
            capture_output=True, text=True, timeout=60, check=True,
        )
        stats = json.loads(out.stdout)
        stats_age = time.monotonic() - unserved_at
    finally:
        stop.set()
        producer.join(10)
        holder.rollback()
        holder.close()
    # Claims kept working for the whole hold: every second, jobs were completed.
    assert all(n > 0 for n in per_second), per_second
    assert stats["oldest_due_age_seconds"] >= hold * 0.9
    assert stats["oldest_due_age_seconds"] <= stats_age + 5
    assert stats["due_backlog"] >= 5
    wait_until(lambda: env.one("SELECT count(*) FROM {s}.jobs_all WHERE type = 'flow' AND "
                               "status <> 'succeeded'") == 0, timeout=60)
    dead = env.one("SELECT n_dead_tup FROM pg_stat_user_tables WHERE schemaname = %s "
                   "AND relname = 'jobs'", (env.schema,))
    counts = env.check_invariants(expected=produced[0] + 5, terminal=False)
    assert proc.terminate() == 0
    report("18 a long REPEATABLE READ transaction holds xmin under load",
           hold_seconds=hold, produced=produced[0], completed_per_second_min=min(per_second),
           completed_per_second_max=max(per_second),
           stats_oldest_due_age_seconds=round(stats["oldest_due_age_seconds"], 1),
           stats_due_backlog=stats["due_backlog"], dead_tuples_after=dead, **counts)
