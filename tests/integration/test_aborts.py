"""A handler's own aborts: timeouts fire the signal and retry (or dead-letter when
exhausted), abandon_grace frees the slot and drops the late result, and JobAborted.
Cancellation is in test_cancel.py and test_cancel_remote.py."""

from __future__ import annotations

import threading
import time
from typing import Any

import structlog

from golemq_pg import JobEvent, JobStatus, Queue
from golemq_pg.errors import JobAborted
from tests.support.in_process import fast_worker
from tests.support.observers import Recorder
from tests.support.waiting import wait_until


def test_timeout_fires_the_signal_and_retries(store: Any) -> None:
    queue = Queue(store)
    rec = Recorder()
    worker = fast_worker(store, observers=[rec])
    reasons: list[str | None] = []

    @worker.handler("slow", timeout=0.2)
    def slow(job: JobEvent[Any]) -> None:
        if job.attempt == 1:
            fired = job.signal.wait(10)
            reasons.append(job.signal.reason if fired else "not fired")
            return  # returning normally after a timeout still fails the attempt
        reasons.append("second")

    job_id = queue.add("slow", {}, max_attempts=2)
    assert job_id
    started = time.monotonic()
    worker.run_until_empty(timeout=20)
    assert time.monotonic() - started < 5
    assert reasons == ["timeout", "second"]
    summary = queue.get(job_id)
    assert summary is not None
    assert summary.status is JobStatus.SUCCEEDED
    assert summary.attempts == 2
    assert summary.last_error is not None
    assert summary.last_error.startswith("JobTimeout: attempt exceeded the handler timeout")
    assert rec.outcomes(job_id) == ["started", "retry-scheduled", "started", "succeeded"]


def test_raise_if_cancelled_after_timeout_dead_letters_when_exhausted(store: Any) -> None:
    queue = Queue(store)
    worker = fast_worker(store)

    @worker.handler("stubborn", timeout=0.1)
    def stubborn(job: JobEvent[Any]) -> None:
        while True:
            job.signal.wait(0.01)
            job.signal.raise_if_cancelled()

    job_id = queue.add("stubborn", {}, max_attempts=1)
    assert job_id
    worker.run_until_empty(timeout=20)
    summary = queue.get(job_id)
    assert summary is not None
    assert summary.status is JobStatus.FAILED
    assert summary.last_error is not None
    assert "JobTimeout" in summary.last_error


def test_abandon_grace_frees_the_slot_and_drops_the_late_result(store: Any) -> None:
    queue = Queue(store)
    rec = Recorder()
    worker = fast_worker(store, observers=[rec], abandon_grace=0.2)
    release = threading.Event()
    ran: list[tuple[int, int]] = []
    late_returned = threading.Event()

    @worker.handler("hang", concurrency=1, timeout=0.2)
    def hang(job: JobEvent[Any]) -> None:
        ran.append((job.payload["n"], job.attempt))
        if job.payload["n"] == 0 and job.attempt == 1:
            release.wait(30)  # ignores its signal
            late_returned.set()

    stuck = queue.add("hang", {"n": 0}, max_attempts=3)
    other = queue.add("hang", {"n": 1})
    assert stuck
    assert other
    with structlog.testing.capture_logs() as logs:
        worker.start()
        try:
            # The single slot is stuck; after timeout + abandon_grace a replacement thread
            # runs the other job and the retry of the stuck one.
            wait_until(lambda: (queue.get(other).status is JobStatus.SUCCEEDED  # type: ignore[union-attr]
                                and queue.get(stuck).status is JobStatus.SUCCEEDED),  # type: ignore[union-attr]
                       timeout=10)
            release.set()
            assert late_returned.wait(5)
            time.sleep(0.1)  # the late result must change nothing
        finally:
            release.set()
            worker.stop()
    summary = queue.get(stuck)
    assert summary is not None
    assert summary.status is JobStatus.SUCCEEDED
    assert summary.attempts == 2
    assert (0, 2) in ran
    assert any(e["event"] == "handler_abandoned" for e in logs)
    assert rec.outcomes(stuck).count("succeeded") == 1


def test_job_aborted_is_importable_and_carries_reason() -> None:
    err = JobAborted("timeout")
    assert str(err) == "timeout"
