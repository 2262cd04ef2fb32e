"""Unlimited attempt budgets (``max_attempts=UNLIMITED``) with a real worker: retried until
they succeed, their backoff capped by ``max_backoff``; every way a budget is given (``add``,
``add_many``, ``schedule``, a JobType, ``Queue``/``AsyncQueue(default_max_attempts=)``);
``Worker(default_max_attempts=)`` giving the budget of the schedule ticks it fires; and bad
budgets refused before anything is written. On both stores."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

import pytest

from golemq_pg import (
    UNLIMITED,
    AsyncQueue,
    JobEvent,
    JobStatus,
    JobType,
    Queue,
    RetryContext,
    Worker,
)
from tests.support.waiting import wait_until


class FlakyError(Exception):
    """The handler's failure in these tests."""


def _status(queue: Queue, job_id: str) -> JobStatus:
    job = queue.get(job_id)
    assert job is not None
    return job.status


def test_an_unlimited_job_fails_twenty_times_then_succeeds(store: Any) -> None:
    queue = Queue(store)
    job_id = queue.add("flaky", {"n": 1}, max_attempts=UNLIMITED)
    assert job_id is not None
    seen: list[tuple[int, int | None]] = []
    # A tiny backoff, capped: the 20th retry would wait 2**19 ms uncapped.
    worker = Worker(store, poll_interval=0.05, base_backoff=0.001, max_backoff=0.01)

    @worker.handler("flaky")
    def flaky(job: JobEvent[Any]) -> None:
        seen.append((job.attempt, job.max_attempts))
        if job.attempt <= 20:
            raise FlakyError(f"attempt {job.attempt} failed")

    worker.start()
    try:
        wait_until(lambda: _status(queue, job_id) is JobStatus.SUCCEEDED, timeout=60)
    finally:
        worker.stop()
    assert seen == [(n, None) for n in range(1, 22)]
    job = queue.get(job_id)
    assert job is not None
    assert (job.attempts, job.max_attempts) == (21, None)
    assert [e.attempt for e in job.errors] == list(range(1, 21))  # every failure kept


def test_a_retry_strategy_is_told_the_budget_is_unlimited(store: Any) -> None:
    queue = Queue(store)
    job_id = queue.add("flaky", {}, max_attempts=UNLIMITED)
    assert job_id is not None
    contexts: list[RetryContext] = []

    def strategy(ctx: RetryContext) -> float | None:
        contexts.append(ctx)
        return 0.0 if ctx.attempt < 5 else None  # the strategy may still give up

    worker = Worker(store, poll_interval=0.05, retry_strategy=strategy)

    @worker.handler("flaky")
    def flaky(job: JobEvent[Any]) -> None:
        raise FlakyError("no")

    worker.start()
    try:
        wait_until(lambda: _status(queue, job_id) is JobStatus.FAILED, timeout=30)
    finally:
        worker.stop()
    assert [(c.attempt, c.max_attempts) for c in contexts] == [(n, None) for n in range(1, 6)]


def test_every_way_of_giving_a_budget_reads_back(store: Any) -> None:
    unlimited_type: JobType[Any] = JobType("forever", max_attempts=UNLIMITED)
    five: JobType[Any] = JobType("five", max_attempts=5)
    queue = Queue(store)  # default 3

    def budget(job_id: str | None) -> int | None:
        assert job_id is not None
        job = queue.get(job_id)
        assert job is not None
        return job.max_attempts

    assert budget(queue.add("t", {})) == 3
    assert budget(queue.add("t", {}, max_attempts=UNLIMITED)) is None
    assert budget(queue.add(unlimited_type, {})) is None  # the JobType's
    assert budget(queue.add(unlimited_type, {}, max_attempts=2)) == 2  # the call's wins
    assert budget(queue.add(five, {})) == 5
    assert budget(queue.add(five, {}, max_attempts=UNLIMITED)) is None
    unlimited_queue = Queue(store, default_max_attempts=UNLIMITED)
    assert budget(unlimited_queue.add("t", {})) is None
    assert budget(unlimited_queue.add(five, {})) == 5
    assert unlimited_queue.add_many("bulk", [{"n": 1}, {"n": 2}]) == 2
    assert queue.add_many("bulk", [{"n": 3}], max_attempts=UNLIMITED) == 1
    assert queue.add_many(unlimited_type, [{"n": 4}]) == 1
    assert queue.add_many("bulk", [{"n": 5}]) == 1
    found: dict[str, set[int | None]] = defaultdict(set)
    for job in queue.find(limit=100):
        found[job.type].add(job.max_attempts)
    assert found["bulk"] == {None, 3}
    assert found["forever"] == {None, 2}

    async def async_add() -> str | None:
        return await AsyncQueue(store, default_max_attempts=UNLIMITED).add("t", {})

    assert budget(asyncio.run(async_add())) is None


@pytest.mark.parametrize("default", [7, UNLIMITED])
def test_the_worker_default_is_the_budget_of_its_schedule_ticks(store: Any, default: Any) -> None:
    queue = Queue(store, default_max_attempts=4)  # the queue's default is not the ticks'
    queue.schedule("plain", "report", {"which": "plain"}, every=3600)
    queue.schedule("own", "report", {"which": "own"}, every=3600, max_attempts=2)
    queue.schedule("typed", JobType("report", max_attempts=5), {"which": "typed"}, every=3600)
    seen: dict[str, int | None] = {}
    worker = Worker(store, poll_interval=0.05, default_max_attempts=default)

    @worker.handler("report")
    def report(job: JobEvent[Any]) -> None:
        seen[job.payload["which"]] = job.max_attempts

    worker.start()
    try:
        wait_until(lambda: len(seen) == 3, timeout=30)
    finally:
        worker.stop()
    assert seen == {"plain": None if default is UNLIMITED else 7, "own": 2, "typed": 5}
    # run_schedule_now is the queue's enqueue: the queue's default
    assert queue.run_schedule_now("plain")
    (pending,) = queue.find(statuses=[JobStatus.PENDING])
    assert pending.max_attempts == 4


@pytest.mark.parametrize("bad", [0, -1, True, 2**31, "3", 2.0])
def test_a_bad_budget_is_refused_naming_its_field_before_anything_is_written(
    store: Any, bad: Any
) -> None:
    queue = Queue(store)
    with pytest.raises(ValueError, match="max_attempts"):
        queue.add("t", {}, max_attempts=bad)
    with pytest.raises(ValueError, match="max_attempts"):
        queue.add_many("t", [{}], max_attempts=bad)
    with pytest.raises(ValueError, match="max_attempts"):
        queue.schedule("k", "t", {}, every=60, max_attempts=bad)
    with pytest.raises(ValueError, match="max_attempts"):
        JobType("t", max_attempts=bad)
    with pytest.raises(ValueError, match="default_max_attempts"):
        Queue(store, default_max_attempts=bad)
    with pytest.raises(ValueError, match="default_max_attempts"):
        AsyncQueue(store, default_max_attempts=bad)
    with pytest.raises(ValueError, match="default_max_attempts"):
        Worker(store, default_max_attempts=bad)
    assert queue.find() == []
    assert queue.schedules() == []
