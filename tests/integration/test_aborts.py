"""Timeouts, abandoned handlers, and cancellation (same process, other process, reconcile)."""

from __future__ import annotations

import threading
import time
from typing import Any

import structlog

from golemq_pg import JobEvent, JobStatus, PostgresStore, Queue, Worker
from golemq_pg.errors import JobAborted
from golemq_pg.store.port import CancelFilter
from tests.support.observers import Recorder
from tests.support.waiting import wait_until


def fast_worker(store: Any, **options: Any) -> Worker:
    defaults: dict[str, Any] = {"poll_interval": 0.05, "base_backoff": 0, "max_backoff": 0}
    defaults.update(options)
    return Worker(store, **defaults)


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


def test_cancel_in_the_same_process_aborts_synchronously(store: Any) -> None:
    queue = Queue(store)
    rec = Recorder()
    worker = fast_worker(store, observers=[rec])
    started = threading.Event()
    outcome: list[str | None] = []
    signals: list[Any] = []

    @worker.handler("cancellable")
    def cancellable(job: JobEvent[Any]) -> None:
        signals.append(job.signal)
        started.set()
        job.signal.wait(30)
        outcome.append(job.signal.reason)
        job.signal.raise_if_cancelled()

    job_id = queue.add("cancellable", {}, scope=("Doc", "d1"))
    assert job_id
    worker.start()
    try:
        assert started.wait(10)
        assert queue.cancel_for_scope(("Doc", "d1"), reason="doc deleted") == 1
        # Synchronous: the signal fired before cancel returned (by the in-process registry,
        # or by the NOTIFY path when that won the race).
        assert signals[0].cancelled
        assert signals[0].reason == "cancelled"
        transitions = rec.wait_for("cancelled")
        assert [t.job_id for t in transitions] == [job_id]
        assert transitions[0].error in ("doc deleted", None)
        wait_until(lambda: outcome, timeout=5)
        assert outcome == ["cancelled"]
    finally:
        worker.stop()
    assert queue.get(job_id) is None
    assert "succeeded" not in rec.outcomes(job_id)
    assert "lease-lost" not in rec.outcomes(job_id)


def test_cancel_from_another_process_arrives_by_notify(pg_store: PostgresStore,
                                                       pg_dsn: str) -> None:
    # A second store object stands for another process: different identity is not needed,
    # so use a fresh connection pool to the same schema and keep the worker's store apart.
    other = PostgresStore.connect(pg_dsn, schema=pg_store.schema, max_size=2)
    try:
        queue = Queue(other)
        worker = Worker(pg_store, poll_interval=30)  # polling and reconcile far away
        started = threading.Event()
        reasons: list[str | None] = []

        @worker.handler("remote")
        def remote(job: JobEvent[Any]) -> None:
            started.set()
            job.signal.wait(30)
            reasons.append(job.signal.reason)

        job_id = Queue(pg_store).add("remote", {})
        assert job_id
        worker.start()
        try:
            assert started.wait(10)
            t0 = time.monotonic()
            # Bypass the in-process registry: cancel through the other store only.
            cancelled = other.job_cancel(CancelFilter(job_ids=[job_id]), "elsewhere")
            assert [c.id for c in cancelled] == [job_id]
            wait_until(lambda: reasons, timeout=5)
            assert time.monotonic() - t0 < 2  # far below the 30 s poll: the NOTIFY did it
            assert reasons == ["cancelled"]
        finally:
            worker.stop(timeout=1)
        assert queue.get(job_id) is None
    finally:
        other.close()


def test_reconcile_catches_cancels_without_notify(pg_store: PostgresStore, pg_dsn: str) -> None:
    other = PostgresStore.connect(pg_dsn, schema=pg_store.schema, max_size=2)
    try:
        worker = Worker(pg_store, poll_interval=0.2, notify=False)
        started = threading.Event()
        reasons: list[str | None] = []

        @worker.handler("quiet")
        def quiet(job: JobEvent[Any]) -> None:
            started.set()
            job.signal.wait(30)
            reasons.append(job.signal.reason)

        job_id = Queue(pg_store).add("quiet", {})
        assert job_id
        worker.start()
        try:
            assert started.wait(10)
            other.job_cancel(CancelFilter(job_ids=[job_id]), None)
            wait_until(lambda: reasons, timeout=5)
            assert reasons == ["cancelled"]
        finally:
            worker.stop(timeout=1)
    finally:
        other.close()


def test_cancel_of_a_buffered_job_never_runs_it(store: Any) -> None:
    queue = Queue(store)
    worker = fast_worker(store, batch_size=10)
    gate = threading.Event()
    ran: list[int] = []
    first_started = threading.Event()

    @worker.handler("serial", concurrency=1)
    def serial(job: JobEvent[Any]) -> None:
        ran.append(job.payload["n"])
        first_started.set()
        gate.wait(10)

    ids = [queue.add("serial", {"n": n}) for n in range(3)]
    worker.start()
    try:
        assert first_started.wait(10)
        # Jobs 1 and 2 are claimed into the buffer behind the running one.
        wait_until(lambda: all(queue.get(i).status is JobStatus.RUNNING for i in ids),  # type: ignore[arg-type,union-attr]
                   timeout=5)
        assert queue.cancel(ids[1]) is True  # type: ignore[arg-type]
        gate.set()
        wait_until(lambda: queue.get(ids[2]).status is JobStatus.SUCCEEDED, timeout=10)  # type: ignore[arg-type,union-attr]
    finally:
        gate.set()
        worker.stop()
    assert ran == [0, 2]


def test_job_aborted_is_importable_and_carries_reason() -> None:
    err = JobAborted("timeout")
    assert str(err) == "timeout"
