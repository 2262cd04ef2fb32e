"""Retries: a custom retry_strategy (seconds, or None to fail now; a broken one falls back to
the default), the default exponential backoff, retry_after as a floor, all measured against
the store's clock; and jobs dead-lettered by the reaper after a SIGKILLed worker carry a
recognisable error for observers. How each handler outcome maps to a status is in
test_worker_outcomes.py."""

from __future__ import annotations

import signal
import subprocess
import threading
from datetime import timedelta
from typing import Any

import pytest

from golemq_pg import (
    JobEvent,
    JobStatus,
    PostgresStore,
    Queue,
    RetryableJobError,
    RetryContext,
    TerminalJobError,
    Worker,
)
from golemq_pg.testing import memory_store
from tests.support.in_process import drain_one, fast_worker
from tests.support.observers import Recorder
from tests.support.waiting import wait_until
from tests.support.workers import start_process, worker_config

EXHAUSTED = "LeaseExpired: attempts exhausted after lease expiry"
LOST = "LeaseExpired: lease expired before the job finished (worker lost)"


class BoomError(Exception):
    """The handler's failure in these tests."""


def _fail_once_then_stop(
    store: Any, recorder: Recorder, outcome: str, *, attempts_seen: int = 1, **options: Any
) -> list[tuple[int, int]]:
    """Run a worker whose handler always raises until ``outcome`` was observed
    ``attempts_seen`` times; returns (attempt, max_attempts) of every handler call."""
    calls: list[tuple[int, int]] = []
    worker = Worker(store, poll_interval=0.05, observers=[recorder], **options)

    @worker.handler("flaky")
    def flaky(job: JobEvent[Any]) -> None:
        calls.append((job.attempt, job.max_attempts))
        raise BoomError("upstream said no")

    worker.start()
    try:
        recorder.wait_for(outcome, attempts_seen, timeout=20)
    finally:
        worker.stop()
    return calls


def test_a_strategy_returning_none_fails_the_job_now(store: Any) -> None:
    queue = Queue(store)
    job_id = queue.add("flaky", {"n": 1}, max_attempts=5)
    assert job_id is not None
    contexts: list[RetryContext] = []

    def never(ctx: RetryContext) -> float | None:
        contexts.append(ctx)
        return None

    recorder = Recorder()
    calls = _fail_once_then_stop(store, recorder, "failed-terminal", retry_strategy=never)
    assert calls == [(1, 5)]
    (ctx,) = contexts
    assert (ctx.job_id, ctx.type, ctx.attempt, ctx.max_attempts) == (job_id, "flaky", 1, 5)
    assert isinstance(ctx.error, BoomError)
    job = queue.get(job_id)
    assert job is not None
    assert (job.status, job.attempts, job.last_error) == (
        JobStatus.FAILED, 1, "BoomError: upstream said no")
    (terminal,) = recorder.of("failed-terminal")
    assert (terminal.job_id, terminal.error) == (job_id, "BoomError: upstream said no")
    assert recorder.of("retry-scheduled") == []


def test_a_strategy_delay_is_applied_with_the_database_clock(pg_store: PostgresStore) -> None:
    queue = Queue(pg_store)
    job_id = queue.add("flaky", {}, max_attempts=3)
    assert job_id is not None
    recorder = Recorder()
    before = pg_store.now()
    _fail_once_then_stop(pg_store, recorder, "retry-scheduled",
                         retry_strategy=lambda ctx: 120.0)
    after = pg_store.now()
    job = queue.get(job_id)
    assert job is not None
    assert (job.status, job.attempts) == (JobStatus.PENDING, 1)
    assert before + timedelta(seconds=120) <= job.run_at <= after + timedelta(seconds=120)
    assert job.last_error == "BoomError: upstream said no"


def test_a_strategy_sees_each_attempt_and_its_delays_follow_the_store_clock() -> None:
    # The fake clock sits years away from the real one: a delay computed from the worker's
    # clock would land nowhere near these instants.
    store, clock = memory_store()
    queue = Queue(store)
    job_id = queue.add("flaky", {}, max_attempts=10)
    assert job_id is not None
    contexts: list[RetryContext] = []

    def linear_then_give_up(ctx: RetryContext) -> float | None:
        contexts.append(ctx)
        return 7.0 * ctx.attempt if ctx.attempt < 3 else None

    for attempt, delay in ((1, 7), (2, 14)):
        recorder = Recorder()
        failed_at = clock.now()
        _fail_once_then_stop(store, recorder, "retry-scheduled",
                             retry_strategy=linear_then_give_up)
        job = queue.get(job_id)
        assert job is not None
        assert (job.status, job.attempts) == (JobStatus.PENDING, attempt)
        assert job.run_at == failed_at + timedelta(seconds=delay)
        clock.set(job.run_at)
    recorder = Recorder()
    _fail_once_then_stop(store, recorder, "failed-terminal", retry_strategy=linear_then_give_up)
    job = queue.get(job_id)
    assert job is not None
    assert (job.status, job.attempts) == (JobStatus.FAILED, 3)
    assert [(c.attempt, c.max_attempts, c.type) for c in contexts] == [
        (1, 10, "flaky"), (2, 10, "flaky"), (3, 10, "flaky")]


def test_the_default_is_exponential_backoff_with_jitter() -> None:
    store, clock = memory_store()
    queue = Queue(store)
    job_id = queue.add("flaky", {}, max_attempts=3)
    assert job_id is not None
    for attempt, base in ((1, 10.0), (2, 20.0)):
        recorder = Recorder()
        failed_at = clock.now()
        _fail_once_then_stop(store, recorder, "retry-scheduled", base_backoff=10,
                             max_backoff=300)
        job = queue.get(job_id)
        assert job is not None
        assert job.attempts == attempt
        delay = (job.run_at - failed_at).total_seconds()
        assert base <= delay <= base * 1.25, (attempt, delay)
        clock.set(job.run_at)
    recorder = Recorder()
    _fail_once_then_stop(store, recorder, "failed-terminal", base_backoff=10, max_backoff=300)
    job = queue.get(job_id)
    assert job is not None
    assert (job.status, job.attempts) == (JobStatus.FAILED, 3)


def test_the_default_backoff_on_postgres_uses_the_database_clock(
    pg_store: PostgresStore,
) -> None:
    queue = Queue(pg_store)
    job_id = queue.add("flaky", {}, max_attempts=3)
    assert job_id is not None
    before = pg_store.now()
    _fail_once_then_stop(pg_store, Recorder(), "retry-scheduled", base_backoff=30,
                         max_backoff=300)
    after = pg_store.now()
    job = queue.get(job_id)
    assert job is not None
    assert before + timedelta(seconds=30) <= job.run_at <= after + timedelta(seconds=37.5)


def test_a_broken_strategy_falls_back_to_the_default(store: Any) -> None:
    queue = Queue(store)
    job_id = queue.add("flaky", {}, max_attempts=3)
    assert job_id is not None

    def broken(ctx: RetryContext) -> float | None:
        raise RuntimeError("bug in the strategy")

    before = store.now()
    _fail_once_then_stop(store, Recorder(), "retry-scheduled", retry_strategy=broken,
                         base_backoff=60, max_backoff=300)
    job = queue.get(job_id)
    assert job is not None
    assert job.status is JobStatus.PENDING
    assert job.run_at >= before + timedelta(seconds=60)


def test_a_terminal_error_skips_the_strategy(store: Any) -> None:
    queue = Queue(store)
    job_id = queue.add("doomed", {}, max_attempts=5)
    assert job_id is not None
    asked: list[RetryContext] = []

    def strategy(ctx: RetryContext) -> float | None:
        asked.append(ctx)
        return 1.0

    recorder = Recorder()
    worker = Worker(store, poll_interval=0.05, observers=[recorder], retry_strategy=strategy)

    @worker.handler("doomed")
    def doomed(job: JobEvent[Any]) -> None:
        raise TerminalJobError("malformed input")

    worker.run_until_empty(timeout=20)
    assert asked == []
    job = queue.get(job_id)
    assert job is not None
    assert (job.status, job.attempts) == (JobStatus.FAILED, 1)


# -- the reaper after a SIGKILLed worker -----------------------------------------------------


def _run_until_killed(pg_dsn: str, schema: str) -> str:
    """Start the hanging worker, wait until it runs a job, SIGKILL it; returns the job id."""
    # Its handler blocks until killed; the lease is renewed every 0.2 s while it is alive.
    proc = start_process(worker_config(
        pg_dsn, schema, "doomed-worker", store={"max_size": 4},
        worker={"poll_interval": 0.05, "lease_duration": 1, "lease_renew_interval": 0.2},
        handlers=[{"type": "crash", "announce": "running", "sleep": 120,
                   "sleep_mode": "ignore"}],
    ), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert proc.stdout is not None
        line: list[str] = []
        while line[:1] != ["running"]:  # skip the worker's log lines
            text = proc.stdout.readline()
            assert text, "the worker exited before running the job"
            line = text.split()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        assert proc.returncode == -signal.SIGKILL
        return line[1]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("max_attempts", [1, 2])
def test_reaped_jobs_carry_a_recognisable_error_for_observers(
    pg_store: PostgresStore, pg_dsn: str, max_attempts: int
) -> None:
    queue = Queue(pg_store)
    job_id = queue.add("crash", {"secret": "never in an error"}, max_attempts=max_attempts)
    assert job_id is not None
    assert _run_until_killed(pg_dsn, pg_store.schema) == job_id
    running = queue.get(job_id)
    assert running is not None
    # The dead worker still holds the lease (attempt counted); killed within ~50 ms of its
    # handler's start, the start may not have been written: shown PENDING or RUNNING.
    assert running.attempts == 1
    assert running.status in (JobStatus.PENDING, JobStatus.RUNNING)

    recorder = Recorder()
    ran = threading.Event()
    worker = Worker(pg_store, poll_interval=0.1, observers=[recorder])

    @worker.handler("crash")
    def crash(job: JobEvent[Any]) -> None:
        ran.set()

    worker.start()
    try:
        if max_attempts == 1:
            (t,) = recorder.wait_for("failed-terminal", timeout=20)
            assert (t.job_id, t.type, t.attempts, t.error) == (job_id, "crash", 1, EXHAUSTED)
            job = wait_until(lambda: queue.get(job_id), timeout=5)
            assert (job.status, job.attempts, job.last_error) == (
                JobStatus.FAILED, 1, EXHAUSTED)
            assert not ran.wait(0.5)  # dead-lettered without running again
        else:
            (t,) = recorder.wait_for("reclaimed", timeout=20)
            assert (t.job_id, t.attempts, t.error) == (job_id, 1, LOST)
            assert ran.wait(20)  # the second attempt runs here
            recorder.wait_for("succeeded", timeout=20)
            job = queue.get(job_id)
            assert job is not None
            assert (job.status, job.attempts) == (JobStatus.SUCCEEDED, 2)
    finally:
        worker.stop()
    assert all("secret" not in (t.error or "") for t in recorder.transitions)


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
