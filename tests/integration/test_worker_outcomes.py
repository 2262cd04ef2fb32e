"""Handler outcomes end to end, on both stores: success, False, terminal, retryable,
exhaustion, BaseException, observers, progress, run_until_empty, the context manager.
Retry strategies and backoff are in test_retry.py, grouped batches in test_grouped.py."""

from __future__ import annotations

import threading
import time
from typing import Any

import structlog

from golemq_pg import (
    JobEvent,
    JobStatus,
    Queue,
    RetryableJobError,
    Scope,
    TerminalJobError,
    Transition,
)
from tests.support.in_process import drain_one, fast_worker
from tests.support.observers import Recorder
from tests.support.waiting import wait_until

CANARY = "canary-secret-w42"


def test_return_none_and_true_succeed_and_fields_are_delivered(store: Any) -> None:
    queue = Queue(store)
    rec = Recorder()
    worker = fast_worker(store, observers=[rec])
    seen: dict[str, JobEvent[Any]] = {}

    @worker.handler("a")
    def a(job: JobEvent[Any]) -> None:
        seen[job.id] = job

    @worker.handler("b")
    def b(job: JobEvent[Any]) -> bool:
        seen[job.id] = job
        return True

    first = queue.add("a", {"n": 1}, scope=("Article", "x"), priority=3, max_attempts=7)
    second = queue.add("b", {"n": 2})
    assert first
    assert second
    worker.run_until_empty(timeout=20)
    for job_id in (first, second):
        summary = queue.get(job_id)
        assert summary is not None
        assert summary.status is JobStatus.SUCCEEDED
        assert summary.attempts == 1
        assert summary.last_error is None
    event = seen[first]
    assert (event.type, event.payload, event.attempt, event.max_attempts) == ("a", {"n": 1}, 1, 7)
    assert event.scope == Scope("Article", "x")
    assert event.priority == 3
    assert event.enqueued_at is not None
    assert event.connection is None
    assert not event.signal.cancelled
    assert rec.outcomes(first) == ["started", "succeeded"]
    done = rec.of("succeeded")[0]
    assert done.worker_id == worker.worker_id
    assert done.duration is not None
    assert done.duration >= 0
    assert done.attempts == 1


def test_false_is_retried_then_dead_lettered(store: Any) -> None:
    queue = Queue(store)
    rec = Recorder()
    worker = fast_worker(store, observers=[rec])
    calls: list[int] = []

    @worker.handler("flaky")
    def flaky(job: JobEvent[Any]) -> bool:
        calls.append(job.attempt)
        return False

    summary = drain_one(queue, worker, "flaky", {}, max_attempts=3)
    assert summary.status is JobStatus.FAILED
    assert summary.attempts == 3
    assert calls == [1, 2, 3]
    assert summary.last_error == "HandlerReturnedFalse: handler returned False"
    assert rec.outcomes(summary.id) == ["started", "retry-scheduled"] * 2 + [
        "started", "failed-terminal"]


def test_exception_retries_with_error_text_and_never_the_payload(store: Any) -> None:
    queue = Queue(store)
    rec = Recorder()
    worker = fast_worker(store, observers=[rec])

    @worker.handler("boom")
    def boom(job: JobEvent[Any]) -> None:
        if job.attempt < 3:
            raise ValueError(f"attempt {job.attempt} failed")

    job_id = queue.add("boom", {"token": CANARY}, max_attempts=5)
    assert job_id
    with structlog.testing.capture_logs() as logs:
        worker.run_until_empty(timeout=20)
    summary = queue.get(job_id)
    assert summary is not None
    assert summary.status is JobStatus.SUCCEEDED
    assert summary.attempts == 3
    assert summary.last_error == "ValueError: attempt 2 failed"
    errors = [t.error for t in rec.of("retry-scheduled")]
    assert errors == ["ValueError: attempt 1 failed", "ValueError: attempt 2 failed"]
    assert CANARY not in repr(logs)
    assert CANARY not in repr(rec.transitions)


def test_terminal_error_fails_at_once(store: Any) -> None:
    queue = Queue(store)
    rec = Recorder()
    worker = fast_worker(store, observers=[rec])

    @worker.handler("doomed")
    def doomed(job: JobEvent[Any]) -> None:
        raise TerminalJobError("article deleted")

    summary = drain_one(queue, worker, "doomed", {}, max_attempts=5)
    assert summary.status is JobStatus.FAILED
    assert summary.attempts == 1
    assert summary.last_error == "TerminalJobError: article deleted"
    assert rec.of("failed-terminal")[0].error == "TerminalJobError: article deleted"


def test_retryable_error_without_consuming_attempts(store: Any) -> None:
    queue = Queue(store)
    worker = fast_worker(store)
    calls: list[int] = []

    @worker.handler("limited")
    def limited(job: JobEvent[Any]) -> None:
        calls.append(job.attempt)
        if len(calls) < 4:
            raise RetryableJobError("rate limited", retry_after=0, consumes_attempt=False)

    summary = drain_one(queue, worker, "limited", {}, max_attempts=1)
    assert summary.status is JobStatus.SUCCEEDED
    assert calls == [1, 1, 1, 1]  # never burned its single attempt
    assert summary.attempts == 1


def test_base_exceptions_fail_the_attempt_but_not_the_pool(store: Any) -> None:
    queue = Queue(store)
    worker = fast_worker(store)
    done: list[str] = []
    lock = threading.Lock()
    raisers = [KeyboardInterrupt, SystemExit, GeneratorExit, BaseException]

    @worker.handler("evil", concurrency=2)
    def evil(job: JobEvent[Any]) -> None:
        n = job.payload["n"]
        if job.attempt == 1 and n < 8:
            raise raisers[n % 4]("handler raised")
        with lock:
            done.append(job.id)

    ids = [queue.add("evil", {"n": n}) for n in range(12)]
    worker.run_until_empty(timeout=30)
    assert sorted(done) == sorted(ids)
    for job_id in ids:
        summary = queue.get(job_id)  # type: ignore[arg-type]
        assert summary is not None
        assert summary.status is JobStatus.SUCCEEDED
    failed_first = [queue.get(i) for i in ids[:8]]  # type: ignore[arg-type]
    assert all(s is not None and s.attempts == 2 for s in failed_first)
    assert {s.last_error for s in failed_first if s} >= {"KeyboardInterrupt: handler raised",
                                                         "SystemExit: handler raised"}


def test_observer_exceptions_are_contained(store: Any) -> None:
    class Broken:
        def on_transition(self, t: Transition) -> None:
            raise RuntimeError(f"observer exploded {CANARY}")

    class Exiting:
        def on_transition(self, t: Transition) -> None:
            raise SystemExit(3)

    queue = Queue(store)
    rec = Recorder()
    worker = fast_worker(store, observers=[Broken(), Exiting(), rec])

    @worker.handler("obs")
    def obs(job: JobEvent[Any]) -> None:
        return None

    ids = [queue.add("obs", {"n": n}) for n in range(5)]
    with structlog.testing.capture_logs() as logs:
        worker.run_until_empty(timeout=20)
    assert all(queue.get(i).status is JobStatus.SUCCEEDED for i in ids)  # type: ignore[arg-type,union-attr]
    assert len(rec.of("succeeded")) == 5
    failures = [e for e in logs if e["event"] == "observer_failed"]
    assert failures
    assert CANARY not in repr(logs)


def test_progress_is_persisted_and_the_last_value_wins(store: Any) -> None:
    queue = Queue(store)
    worker = fast_worker(store)

    @worker.handler("long")
    def long(job: JobEvent[Any]) -> None:
        for step in range(50):
            job.progress(step / 50)
        job.progress({"done": 50, "of": 50})

    summary = drain_one(queue, worker, "long", {})
    assert summary.status is JobStatus.SUCCEEDED
    assert summary.progress == {"done": 50, "of": 50}


def test_progress_is_visible_while_the_job_runs(store: Any) -> None:
    queue = Queue(store)
    worker = fast_worker(store)
    reported = threading.Event()
    release = threading.Event()

    @worker.handler("visible")
    def visible(job: JobEvent[Any]) -> None:
        job.progress(0.1)
        job.progress(0.25)  # coalesced: written by the deferred flush
        reported.set()
        release.wait(10)

    job_id = queue.add("visible", {})
    assert job_id
    worker.start()
    try:
        assert reported.wait(10)
        wait_until(lambda: (queue.get(job_id) or None) and queue.get(job_id).progress == 0.25,  # type: ignore[union-attr]
                   timeout=5)
    finally:
        release.set()
        worker.stop()


def test_run_until_empty_returns_promptly(store: Any) -> None:
    queue = Queue(store)
    worker = fast_worker(store, poll_interval=5)

    @worker.handler("quick")
    def quick(job: JobEvent[Any]) -> None:
        return None

    for n in range(20):
        queue.add("quick", {"n": n})
    started = time.monotonic()
    worker.run_until_empty(timeout=30)
    assert time.monotonic() - started < 3  # not a whole poll interval per step
    assert queue.count_by_status()[JobStatus.SUCCEEDED] == 20


def test_worker_as_context_manager(store: Any) -> None:
    queue = Queue(store)
    worker = fast_worker(store)
    done = threading.Event()

    @worker.handler("ctx")
    def ctx(job: JobEvent[Any]) -> None:
        done.set()

    with worker:
        queue.add("ctx", {})
        assert done.wait(10)
    assert not worker.running
