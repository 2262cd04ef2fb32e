"""Middleware around each attempt (``Worker(middleware=[...])``) through real workers on
PostgreSQL: the order of the chain around sync and async handlers, a middleware's error as
the attempt's error, grouped batches, transactional handlers (inside the claim's
transaction), short-circuits, and the refusal of a handler kind a middleware cannot wrap
(at start and on a late registration)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from golemq_pg import (
    BatchEvent,
    JobEvent,
    JobStatus,
    Middleware,
    PostgresStore,
    Queue,
    QueueConfigError,
    Worker,
)
from tests.support.in_process import add_job, fast_worker
from tests.support.ledgers import effects, insert_effect
from tests.support.waiting import wait_until

Attempt = JobEvent[Any] | BatchEvent[Any]


class Tracing:
    """Records ``name:before`` / ``name:after`` around both kinds of handler, in the log of
    the attempt's job type."""

    def __init__(self, name: str, logs: dict[str, list[str]]) -> None:
        self.name = name
        self.logs = logs

    def around(self, job: Attempt, call_next: Callable[[Attempt], object]) -> object:
        log = self.logs[job.type]
        log.append(f"{self.name}:before")
        result = call_next(job)
        log.append(f"{self.name}:after")
        return result

    async def around_async(
        self, job: Attempt, call_next: Callable[[Attempt], Awaitable[object]]
    ) -> object:
        log = self.logs[job.type]
        log.append(f"{self.name}:before")
        await asyncio.sleep(0)
        result = await call_next(job)
        log.append(f"{self.name}:after")
        return result


class SyncOnly:
    """A middleware for plain handlers only."""

    def around(self, job: Attempt, call_next: Callable[[Attempt], object]) -> object:
        return call_next(job)


def _summary(queue: Queue, job_id: str) -> Any:
    summary = queue.get(job_id)
    assert summary is not None
    return summary


def test_two_middlewares_wrap_sync_and_async_handlers_outermost_first(
    pg_store: PostgresStore,
) -> None:
    queue = Queue(pg_store)
    logs: dict[str, list[str]] = {"sync.t": [], "async.t": []}
    middleware: list[Middleware] = [Tracing("outer", logs), Tracing("inner", logs)]
    worker = fast_worker(pg_store, middleware=middleware)

    @worker.handler("sync.t")
    def sync_handler(job: JobEvent[Any]) -> dict[str, int]:
        logs["sync.t"].append("handler")
        return {"n": job.payload["n"]}

    @worker.handler("async.t")
    async def async_handler(job: JobEvent[Any]) -> dict[str, int]:
        await asyncio.sleep(0)
        logs["async.t"].append("handler")
        return {"n": job.payload["n"]}

    sync_id = add_job(queue, "sync.t", {"n": 1})
    async_id = add_job(queue, "async.t", {"n": 2})
    worker.run_until_empty(timeout=30)
    expected = ["outer:before", "inner:before", "handler", "inner:after", "outer:after"]
    assert logs == {"sync.t": expected, "async.t": expected}
    for job_id, n in ((sync_id, 1), (async_id, 2)):
        summary = _summary(queue, job_id)
        assert (summary.status, summary.attempts, summary.result) == (
            JobStatus.SUCCEEDED, 1, {"n": n}
        )


def test_a_middleware_that_raises_fails_the_attempt_and_the_job_is_retried(
    pg_store: PostgresStore,
) -> None:
    queue = Queue(pg_store)
    handled: list[int] = []

    class Flaky:
        """Raises on every first attempt, before the handler runs."""

        def around(self, job: Attempt, call_next: Callable[[Attempt], object]) -> object:
            if job.attempt == 1:
                raise ConnectionError("middleware could not reach the cache")
            return call_next(job)

    worker = fast_worker(pg_store, middleware=[Flaky()])

    @worker.handler("t")
    def handler(job: JobEvent[Any]) -> str:
        handled.append(job.attempt)
        return "done"

    job_id = add_job(queue, "t", {}, max_attempts=3)
    worker.run_until_empty(timeout=30)
    summary = _summary(queue, job_id)
    assert (summary.status, summary.attempts, summary.result) == (JobStatus.SUCCEEDED, 2, "done")
    assert handled == [2]
    assert summary.last_error == "ConnectionError: middleware could not reach the cache"


def test_a_middlewares_error_on_the_last_attempt_dead_letters_the_job(
    pg_store: PostgresStore,
) -> None:
    queue = Queue(pg_store)

    class Broken:
        async def around_async(
            self, job: Attempt, call_next: Callable[[Attempt], Awaitable[object]]
        ) -> object:
            await call_next(job)
            raise RuntimeError("after the handler")

    worker = fast_worker(pg_store, middleware=[Broken()])

    @worker.handler("a.t")
    async def handler(job: JobEvent[Any]) -> None:
        await asyncio.sleep(0)

    job_id = add_job(queue, "a.t", {}, max_attempts=2)
    worker.run_until_empty(timeout=30)
    summary = _summary(queue, job_id)
    assert (summary.status, summary.attempts) == (JobStatus.FAILED, 2)
    assert summary.last_error == "RuntimeError: after the handler"


def test_a_grouped_handlers_middleware_sees_the_batch(pg_store: PostgresStore) -> None:
    queue = Queue(pg_store)
    seen: list[tuple[str, list[str]]] = []

    class Batches:
        def around(self, job: Attempt, call_next: Callable[[Attempt], object]) -> object:
            assert isinstance(job, BatchEvent)
            seen.append((type(job).__name__, [event.id for event in job.jobs]))
            return call_next(job)

    worker = fast_worker(pg_store, middleware=[Batches()])
    handled: list[list[str]] = []

    @worker.handler("digest", grouped=True)
    def digest(batch: BatchEvent[Any]) -> None:
        handled.append([event.id for event in batch.jobs])

    ids = [add_job(queue, "digest", {"n": n}, scope=("Team", "a")) for n in range(3)]
    worker.run_until_empty(timeout=30)
    assert seen == [("BatchEvent", ids)]
    assert handled == [ids]
    assert {_summary(queue, job_id).status for job_id in ids} == {JobStatus.SUCCEEDED}


def test_a_transactional_handlers_middleware_runs_inside_the_claim_transaction(
    pg_store: PostgresStore,
) -> None:
    queue = Queue(pg_store)
    txids: dict[str, int] = {}

    def txid(job: JobEvent[Any]) -> int:
        assert job.connection is not None
        row = job.connection.execute("SELECT txid_current()").fetchone()
        assert row is not None
        return int(row[0])

    class InTransaction:
        def around(self, job: Attempt, call_next: Callable[[Attempt], object]) -> object:
            assert isinstance(job, JobEvent)
            txids["before"] = txid(job)
            result = call_next(job)
            txids["after"] = txid(job)
            return result

    worker = fast_worker(pg_store, middleware=[InTransaction()])

    @worker.handler("tx", transactional=True)
    def handler(job: JobEvent[Any]) -> str:
        txids["handler"] = txid(job)
        return "ok"

    job_id = add_job(queue, "tx", {})
    worker.run_until_empty(timeout=30)
    summary = _summary(queue, job_id)
    assert (summary.status, summary.result) == (JobStatus.SUCCEEDED, "ok")
    assert set(txids) == {"before", "handler", "after"}
    assert len(set(txids.values())) == 1  # one transaction: the claim's


def test_a_transactional_handlers_middleware_error_rolls_back_the_handlers_writes(
    pg_dsn: str, effects_schema: str, pg_store: PostgresStore,
) -> None:
    queue = Queue(pg_store)

    class FailsAfter:
        def around(self, job: Attempt, call_next: Callable[[Attempt], object]) -> object:
            call_next(job)
            if job.attempt == 1:
                raise RuntimeError("rejected after the write")
            return "kept"

    worker = fast_worker(pg_store, middleware=[FailsAfter()])

    @worker.handler("tx", transactional=True)
    def handler(job: JobEvent[Any]) -> None:
        insert_effect(job, effects_schema, "w")

    job_id = add_job(queue, "tx", {}, max_attempts=3)
    worker.run_until_empty(timeout=30)
    summary = _summary(queue, job_id)
    assert (summary.status, summary.attempts, summary.result) == (JobStatus.SUCCEEDED, 2, "kept")
    # The first attempt's write rolled back with the claim's transaction.
    assert [(row[0], row[1]) for row in effects(pg_dsn, effects_schema)] == [(job_id, 2)]


def test_a_middleware_can_short_circuit_the_handler(pg_store: PostgresStore) -> None:
    queue = Queue(pg_store)
    called: list[str] = []

    class Cached:
        """Answers from a cache without running the handler."""

        def around(self, job: Attempt, call_next: Callable[[Attempt], object]) -> object:
            assert isinstance(job, JobEvent)
            if job.payload.get("cached"):
                return {"from": "cache"}
            return call_next(job)

        async def around_async(
            self, job: Attempt, call_next: Callable[[Attempt], Awaitable[object]]
        ) -> object:
            assert isinstance(job, JobEvent)
            if job.payload.get("cached"):
                return {"from": "async cache"}
            return await call_next(job)

    worker = fast_worker(pg_store, middleware=[Cached()])

    @worker.handler("s")
    def sync_handler(job: JobEvent[Any]) -> dict[str, str]:
        called.append("s")
        return {"from": "handler"}

    @worker.handler("a")
    async def async_handler(job: JobEvent[Any]) -> dict[str, str]:
        called.append("a")
        return {"from": "handler"}

    cached_s = add_job(queue, "s", {"cached": True})
    cached_a = add_job(queue, "a", {"cached": True})
    plain_s = add_job(queue, "s", {})
    worker.run_until_empty(timeout=30)
    assert called == ["s"]
    results = {job_id: _summary(queue, job_id) for job_id in (cached_s, cached_a, plain_s)}
    outcomes = {job_id: (s.status, s.attempts) for job_id, s in results.items()}
    assert outcomes == dict.fromkeys(results, (JobStatus.SUCCEEDED, 1))
    assert results[cached_s].result == {"from": "cache"}
    assert results[cached_a].result == {"from": "async cache"}
    assert results[plain_s].result == {"from": "handler"}


def test_a_sync_only_middleware_refuses_an_async_handler_at_start(
    pg_store: PostgresStore,
) -> None:
    worker = fast_worker(pg_store, middleware=[SyncOnly()])

    @worker.handler("a.t")
    async def handler(job: JobEvent[Any]) -> None:
        await asyncio.sleep(0)

    with pytest.raises(QueueConfigError, match=r"SyncOnly.*around_async.*'a\.t'"):
        worker.start()
    assert not worker.running


def test_a_handler_registered_late_passes_the_middleware_check(
    pg_store: PostgresStore,
) -> None:
    queue = Queue(pg_store)
    worker = fast_worker(pg_store, middleware=[SyncOnly()])
    done = threading.Event()

    @worker.handler("s.t")
    def first(job: JobEvent[Any]) -> None:
        done.set()

    worker.start()
    try:
        with pytest.raises(QueueConfigError, match=r"around_async.*'late\.t'"):
            @worker.handler("late.t")
            async def late(job: JobEvent[Any]) -> None:
                await asyncio.sleep(0)
        assert worker.handler_types == ("s.t",)

        @worker.handler("late.s")
        def late_sync(job: JobEvent[Any]) -> str:
            return "late"

        job_id = add_job(queue, "late.s", {})
        wait_until(lambda: _summary(queue, job_id).status is JobStatus.SUCCEEDED, timeout=15)
        assert _summary(queue, job_id).result == "late"
    finally:
        worker.stop()


def test_middleware_without_around_or_around_async_is_refused(pg_store: PostgresStore) -> None:
    class Nothing:
        pass

    class AsyncAround:
        async def around(self, job: Attempt, call_next: Callable[[Attempt], object]) -> object:
            return call_next(job)

    class SyncAroundAsync:
        def around_async(self, job: Attempt, call_next: Callable[[Attempt], object]) -> object:
            return call_next(job)

    cases: list[tuple[object, str]] = [
        ("not a list", "middleware must be a list"),
        ([Nothing()], r"middleware\[0\] \(Nothing\) defines neither around"),
        ([SyncOnly(), AsyncAround()], r"middleware\[1\] \(AsyncAround\)\.around must be a plain"),
        ([SyncAroundAsync()], r"around_async must be an async def"),
    ]
    for value, message in cases:
        with pytest.raises(QueueConfigError, match=message):
            Worker(pg_store, middleware=value)  # type: ignore[arg-type]
