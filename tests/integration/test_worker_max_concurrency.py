"""``Worker(max_concurrency=N)``: at most N jobs run at once across all the worker's types
(sampled in the handlers), the room is shared fairly between the types (each makes progress
from the start), transactional types count too, and a bad value is refused."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from golemq_pg import JobEvent, Queue, QueueConfigError, Worker
from tests.support.in_process import add_job, fast_worker
from tests.support.waiting import wait_until


class Sampler:
    """A shared counter of running handlers: the most seen, and the order of completions."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.peak = 0
        self.finished: list[str] = []

    def run(self, job_type: str, seconds: float) -> None:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        time.sleep(seconds)
        with self.lock:
            self.now -= 1
            self.finished.append(job_type)


def test_max_concurrency_caps_jobs_running_across_types_and_shares_fairly(
    pg_store: Any,
) -> None:
    queue = Queue(pg_store)
    worker = fast_worker(pg_store, max_concurrency=3)
    sampler = Sampler()
    types = ("alpha", "beta", "gamma")
    for name in types:
        worker.handler(name, concurrency=3)(
            lambda job, name=name: sampler.run(name, 0.05)
        )
    # Every alpha job first: a worker that filled its room greedily would run alpha alone.
    for name in types:
        for i in range(12):
            add_job(queue, name, {"i": i})
    worker.start()
    try:
        wait_until(lambda: len(sampler.finished) == 36, timeout=30, what="every job ran")
    finally:
        worker.stop()
    assert sampler.peak <= 3, f"{sampler.peak} jobs ran at once"
    assert sampler.peak == 3  # the cap is used, not just respected
    # Fair: within the first third of the completions every type has made progress.
    early = sampler.finished[:12]
    counts = {name: early.count(name) for name in types}
    assert min(counts.values()) >= 2, counts


def test_max_concurrency_counts_transactional_and_async_types(pg_store: Any) -> None:
    queue = Queue(pg_store)
    worker = fast_worker(pg_store, max_concurrency=2)
    sampler = Sampler()

    @worker.handler("tx", transactional=True, concurrency=3)
    def tx(job: JobEvent[Any]) -> None:
        sampler.run("tx", 0.05)

    @worker.handler("plain", concurrency=3)
    def plain(job: JobEvent[Any]) -> None:
        sampler.run("plain", 0.05)

    for i in range(8):
        add_job(queue, "tx", {"i": i})
        add_job(queue, "plain", {"i": i})
    worker.start()
    try:
        wait_until(lambda: len(sampler.finished) == 16, timeout=30, what="every job ran")
    finally:
        worker.stop()
    assert sampler.peak <= 2, f"{sampler.peak} jobs ran at once"
    assert set(sampler.finished[:8]) == {"tx", "plain"}


def test_max_concurrency_holds_for_a_handler_added_later(pg_store: Any) -> None:
    queue = Queue(pg_store)
    worker = fast_worker(pg_store, max_concurrency=2)
    sampler = Sampler()
    worker.handler("one", concurrency=4)(lambda job: sampler.run("one", 0.05))
    worker.start()
    try:
        worker.handler("two", concurrency=4)(lambda job: sampler.run("two", 0.05))
        for i in range(10):
            add_job(queue, "one", {"i": i})
            add_job(queue, "two", {"i": i})
        wait_until(lambda: len(sampler.finished) == 20, timeout=30, what="every job ran")
    finally:
        worker.stop()
    assert sampler.peak == 2


@pytest.mark.parametrize("value", [0, -1, True, 2.5, "3", 10**7])
def test_a_bad_max_concurrency_is_refused(pg_store: Any, value: Any) -> None:
    with pytest.raises(QueueConfigError, match="max_concurrency must be"):
        Worker(pg_store, max_concurrency=value)
