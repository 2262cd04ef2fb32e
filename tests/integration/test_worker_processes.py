"""Several worker processes on one queue, LISTEN wake-up latency, guards end to end."""

from __future__ import annotations

import statistics
import threading
import time
from collections import Counter
from typing import Any

from golemq_pg import JobEvent, JobStatus, PostgresStore, Queue, Resource, Worker
from tests.support.ledgers import effects, effects_table, job_rows
from tests.support.waiting import wait_until
from tests.support.workers import spawn_worker


def test_two_processes_drain_5000_jobs_exactly_once(pg_store: PostgresStore, pg_dsn: str) -> None:
    schema = pg_store.schema
    effects_table(pg_dsn, schema)
    queue = Queue(pg_store)
    assert queue.add_many("work", [{"n": n} for n in range(5000)]) == 5000
    procs = [spawn_worker(pg_dsn, schema, f"proc-{i}", concurrency=4, mode="drain")
             for i in range(2)]
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=180)
            assert proc.returncode == 0, out
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    ledger = effects(pg_dsn, schema)
    per_job = Counter(row[0] for row in ledger)
    assert len(per_job) == 5000
    assert set(per_job.values()) == {1}
    assert {row[2] for row in ledger} == {"proc-0", "proc-1"}  # both took part
    rows = job_rows(pg_dsn, schema)
    assert Counter(r[1] for r in rows) == {"succeeded": 5000}
    assert all(r[2] == 1 for r in rows)  # I4 and no retries


def test_listen_wakes_an_idle_worker_within_milliseconds(pg_store: PostgresStore) -> None:
    queue = Queue(pg_store)
    worker = Worker(pg_store, poll_interval=10)  # polling cannot explain a fast start
    started_at: dict[str, float] = {}
    arrived = threading.Event()

    @worker.handler("ping")
    def ping(job: JobEvent[Any]) -> None:
        started_at[job.id] = time.perf_counter()
        arrived.set()

    worker.start()
    latencies = []
    try:
        time.sleep(0.3)  # idle: the first poll is long done
        for n in range(20):
            arrived.clear()
            t0 = time.perf_counter()
            job_id = queue.add("ping", {"n": n})
            assert job_id
            assert arrived.wait(5)
            latencies.append(started_at[job_id] - t0)
            time.sleep(0.02)
    finally:
        worker.stop()
    p50 = statistics.median(latencies)
    print(f"wake-up latency p50={p50 * 1000:.2f} ms max={max(latencies) * 1000:.2f} ms")
    assert p50 < 0.05


def test_poll_only_mode_is_honest_about_its_interval(pg_store: PostgresStore) -> None:
    queue = Queue(pg_store)
    worker = Worker(pg_store, poll_interval=0.3, notify=False)
    arrived = threading.Event()

    @worker.handler("poll")
    def poll(job: JobEvent[Any]) -> None:
        arrived.set()

    worker.start()
    try:
        time.sleep(0.4)
        t0 = time.perf_counter()
        queue.add("poll", {})
        assert arrived.wait(5)
        waited = time.perf_counter() - t0
    finally:
        worker.stop()
    assert waited < 0.3 + 0.5  # at most one poll interval (plus scheduling slack)


def test_serialize_by_scope_holds_across_workers(pg_store: PostgresStore) -> None:
    queue = Queue(pg_store)
    lock = threading.Lock()
    live: Counter[str] = Counter()
    overlaps: list[str] = []
    done: list[str] = []

    def handler(job: JobEvent[Any]) -> None:
        scope = job.scope.id if job.scope else "?"
        with lock:
            live[scope] += 1
            if live[scope] > 1:
                overlaps.append(scope)
        time.sleep(0.005)
        with lock:
            live[scope] -= 1
            done.append(job.id)

    workers = []
    for i in range(2):
        worker = Worker(pg_store, worker_id=f"s{i}", poll_interval=0.05)
        worker.handler("per-scope", concurrency=4, serialize_by_scope=True)(handler)
        workers.append(worker)
    for n in range(120):
        queue.add("per-scope", {"n": n}, scope=("Thing", str(n % 6)))
    for worker in workers:
        worker.start()
    try:
        wait_until(lambda: len(done) == 120, timeout=60)
    finally:
        for worker in workers:
            worker.stop()
    assert overlaps == []
    assert queue.count_by_status()[JobStatus.SUCCEEDED] == 120


def test_resource_pool_concurrency_is_never_exceeded(pg_store: PostgresStore) -> None:
    queue = Queue(pg_store)
    lock = threading.Lock()
    live = [0]
    peak = [0]
    pools = {"api": Resource(concurrency=3, types=["fetch", "push"], costs={"push": 2})}

    def handler(job: JobEvent[Any]) -> None:
        cost = 2 if job.type == "push" else 1
        with lock:
            live[0] += cost
            peak[0] = max(peak[0], live[0])
        time.sleep(0.01)
        with lock:
            live[0] -= cost

    workers = []
    for i in range(2):
        worker = Worker(pg_store, worker_id=f"r{i}", poll_interval=0.05, resources=pools)
        worker.handler("fetch", concurrency=4)(handler)
        worker.handler("push", concurrency=4)(handler)
        workers.append(worker)
    for n in range(40):
        queue.add("fetch" if n % 2 else "push", {"n": n})
    for worker in workers:
        worker.start()
    try:
        wait_until(lambda: queue.count_by_status()[JobStatus.SUCCEEDED] == 40, timeout=60)
    finally:
        for worker in workers:
            worker.stop()
    assert 1 <= peak[0] <= 3
