"""A resource pool's freed room claimed in the completing transaction, through real Workers
on PostgreSQL: the cap holds (a ledger of concurrently running handlers, kept by the test),
every job completes, and the completer's claims are what ran most of them."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

from golemq_pg import Queue, Resource, Worker
from golemq_pg._types import JobStatus
from golemq_pg.store.port import CompleteAndClaimParams, CompleteAndClaimResult
from golemq_pg.store.postgres import PostgresStore


class Ledger:
    """Handlers running at once, per pool member and in total."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.peak = 0
        self.ran: Counter[str] = Counter()

    def run(self, job_id: str, seconds: float) -> None:
        with self.lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
            self.ran[job_id] += 1
        time.sleep(seconds)
        with self.lock:
            self.running -= 1


class CountingStore(PostgresStore):
    """A PostgresStore counting what its claims on completion returned."""

    def __init__(self, inner: PostgresStore) -> None:
        super().__init__(inner.pool, schema=inner.schema)
        self.calls = 0
        self.claimed = 0

    def job_complete_and_claim(self, params: CompleteAndClaimParams) -> CompleteAndClaimResult:
        result = super().job_complete_and_claim(params)
        self.calls += 1
        self.claimed += len(result.claimed)
        return result


def _worker(store: PostgresStore, ledger: Ledger, cap: int, concurrency: int) -> Worker:
    pool = {"api": Resource(concurrency=cap, types=["call", "lookup"])}
    worker = Worker(store, poll_interval=0.5, resources=pool)

    @worker.handler("call", concurrency=concurrency)
    def call(job: Any) -> None:
        ledger.run(job.id, 0.002)

    @worker.handler("lookup", concurrency=2)
    def lookup(job: Any) -> None:
        ledger.run(job.id, 0.001)

    return worker


def test_a_binding_pool_is_refilled_by_the_completions_and_never_exceeded(
    pg_store: PostgresStore,
) -> None:
    queue = Queue(pg_store)
    total = queue.add_many("call", [{"n": i} for i in range(300)])
    total += queue.add_many("lookup", [{"n": i} for i in range(50)])
    store = CountingStore(pg_store)
    ledger = Ledger()
    # more handler threads than the pool admits: only the claim's guard keeps the cap
    worker = _worker(store, ledger, cap=4, concurrency=6)
    worker.run_until_empty(timeout=120)
    assert ledger.peak <= 4
    assert len(ledger.ran) == total
    assert set(ledger.ran.values()) == {1}
    assert pg_store.job_count_by_status()[JobStatus.SUCCEEDED] == total
    # The completions claimed the room they freed: most jobs never waited for the claim loop.
    assert store.calls > 0
    assert store.claimed > total // 2


def test_the_cap_holds_across_workers_claiming_on_completion(pg_store: PostgresStore) -> None:
    queue = Queue(pg_store)
    total = queue.add_many("call", [{"n": i} for i in range(200)])
    ledger = Ledger()
    stores = [CountingStore(pg_store) for _ in range(2)]
    workers = [_worker(store, ledger, cap=3, concurrency=3) for store in stores]
    threads = [threading.Thread(target=w.run_until_empty, kwargs={"timeout": 120})
               for w in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(150)
    assert ledger.peak <= 3
    assert len(ledger.ran) == total
    assert pg_store.job_count_by_status()[JobStatus.SUCCEEDED] == total
    assert sum(store.calls for store in stores) > 0
