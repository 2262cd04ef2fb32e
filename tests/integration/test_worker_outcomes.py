"""Handler outcomes end to end, on both stores: success, False, terminal, retryable,
exhaustion, BaseException, observers, retry strategy, grouped batches, progress."""

from __future__ import annotations

import threading
import time
from typing import Any

import structlog

from golemq_pg import (
    BatchEvent,
    JobEvent,
    JobStatus,
    JobSummary,
    JobType,
    Queue,
    RetryableJobError,
    RetryContext,
    Scope,
    TerminalJobError,
    Transition,
    Worker,
)
from tests.support.observers import Recorder
from tests.support.waiting import wait_until

CANARY = "canary-secret-w42"


def fast_worker(store: Any, **options: Any) -> Worker:
    defaults: dict[str, Any] = {"poll_interval": 0.05, "base_backoff": 0, "max_backoff": 0}
    defaults.update(options)
    return Worker(store, **defaults)


def drain_one(queue: Queue, worker: Worker, job_type: str, payload: dict[str, Any],
              **options: Any) -> JobSummary:
    """Add one job, run ``worker`` until the queue is empty, and return the job's row."""
    job_id = queue.add(job_type, payload, **options)
    assert job_id
    worker.run_until_empty(timeout=20)
    summary = queue.get(job_id)
    assert summary is not None
    return summary


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


def test_retry_after_is_a_floor_above_max_backoff(store: Any) -> None:
    queue = Queue(store)
    rec = Recorder()
    worker = fast_worker(store, observers=[rec], max_backoff=1, base_backoff=1)

    @worker.handler("later")
    def later(job: JobEvent[Any]) -> None:
        raise RetryableJobError("come back in an hour", retry_after=3600)

    job_id = queue.add("later", {})
    assert job_id
    before = store.now()
    worker.run_until_empty(timeout=20)
    summary = queue.get(job_id)
    assert summary is not None
    assert summary.status is JobStatus.PENDING
    assert summary.attempts == 1
    assert (summary.run_at - before).total_seconds() >= 3590
    assert summary.last_error == "RetryableJobError: come back in an hour"


def test_default_backoff_parks_the_retry_in_the_future(store: Any) -> None:
    queue = Queue(store)
    worker = fast_worker(store, base_backoff=60, max_backoff=600)

    @worker.handler("slow-retry")
    def slow_retry(job: JobEvent[Any]) -> None:
        raise RuntimeError("try later")

    job_id = queue.add("slow-retry", {})
    assert job_id
    before = store.now()
    worker.run_until_empty(timeout=20)
    summary = queue.get(job_id)
    assert summary is not None
    assert summary.status is JobStatus.PENDING
    delay = (summary.run_at - before).total_seconds()
    assert 59 <= delay <= 60 * 1.25 + 5


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


def test_custom_retry_strategy(store: Any) -> None:
    queue = Queue(store)
    contexts: list[RetryContext] = []

    def strategy(ctx: RetryContext) -> float | None:
        contexts.append(ctx)
        return 0.0 if ctx.attempt == 1 else None

    worker = fast_worker(store, retry_strategy=strategy)

    @worker.handler("custom")
    def custom(job: JobEvent[Any]) -> None:
        raise LookupError("missing")

    summary = drain_one(queue, worker, "custom", {}, max_attempts=10)
    assert summary.status is JobStatus.FAILED
    assert summary.attempts == 2
    assert [c.attempt for c in contexts] == [1, 2]
    assert isinstance(contexts[0].error, LookupError)
    assert contexts[0].job_id == summary.id
    assert contexts[0].max_attempts == 10


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


def test_grouped_batches_deliver_each_scope_once(store: Any) -> None:
    queue = Queue(store)
    digest = JobType("digest", grouped=True)
    worker = fast_worker(store)
    batches: list[tuple[Scope | None, list[int], int]] = []

    @worker.handler(digest, concurrency=2)
    def send(batch: BatchEvent[Any]) -> None:
        batches.append((batch.scope, [j.payload["n"] for j in batch.jobs], batch.attempt))
        assert all(j.signal is batch.signal for j in batch.jobs)

    for n in range(5):
        queue.add(digest, {"n": n}, scope=("User", "u1"))
    for n in range(3):
        queue.add(digest, {"n": 10 + n}, scope=("User", "u2"))
    worker.run_until_empty(timeout=20)
    by_scope = {scope: ns for scope, ns, _ in batches}
    assert by_scope == {Scope("User", "u1"): [0, 1, 2, 3, 4], Scope("User", "u2"): [10, 11, 12]}
    assert all(attempt == 1 for _, _, attempt in batches)
    assert queue.count_by_status()[JobStatus.SUCCEEDED] == 8


def test_grouped_failure_retries_the_whole_batch_and_max_batch_splits(store: Any) -> None:
    queue = Queue(store)
    worker = fast_worker(store)
    sizes: list[tuple[int, int]] = []

    @worker.handler("bundle", grouped=True, max_batch=2)
    def bundle(batch: BatchEvent[Any]) -> None:
        sizes.append((len(batch.jobs), batch.attempt))
        if batch.attempt == 1:
            raise RuntimeError("downstream down")

    for n in range(4):
        queue.add("bundle", {"n": n}, scope=("Feed", "f"), max_attempts=3)
    worker.run_until_empty(timeout=20)
    assert all(size <= 2 for size, _ in sizes)
    assert sum(size for size, attempt in sizes if attempt == 1) == 4
    counts = queue.count_by_status()
    assert counts[JobStatus.SUCCEEDED] == 4
    for summary in queue.find(types=["bundle"]):
        assert summary.attempts == 2
        assert summary.last_error == "RuntimeError: downstream down"


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
