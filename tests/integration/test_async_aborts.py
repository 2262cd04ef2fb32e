"""Taking work away from ``async def`` handlers: a cancel made in another process or in the
worker's own, a timeout and a lost lease all cancel the task (``CancelledError`` at its next
``await``, with the signal's reason set); a task that ignores its cancellation is written
off after ``abandon_grace``, its slot reused and its late result dropped.

Shutdown cancelling async tasks is in test_async_handlers.py; the same aborts for sync
handlers are in test_cancel_remote.py, test_aborts.py and test_worker_leases.py.
"""

from __future__ import annotations

import asyncio
import queue as queue_mod
import threading
import time
from typing import Any

import psycopg
import structlog
from psycopg import sql

from golemq_pg import JobEvent, JobStatus, PostgresStore, Queue, Worker
from tests.support.in_process import add_job, fast_worker
from tests.support.observers import Recorder
from tests.support.waiting import wait_until
from tests.support.workers import Canceller

LOOP_THREAD = "golemq-event-loop"


def test_a_cancel_from_another_process_cancels_the_running_task(
    pg_store: PostgresStore, pg_dsn: str
) -> None:
    queue = Queue(pg_store)
    rec = Recorder()
    worker = Worker(pg_store, poll_interval=0.05, observers=[rec])
    started = threading.Event()
    seen: queue_mod.Queue[tuple[str | None, str]] = queue_mod.Queue()

    @worker.handler("victim", concurrency=4)
    async def victim(job: JobEvent[Any]) -> None:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.put((job.signal.reason, threading.current_thread().name))
            raise
        seen.put(("not cancelled", ""))

    job_id = add_job(queue, "victim", {})
    canceller = Canceller(pg_dsn, pg_store.schema)  # its own process, store and Queue
    try:
        worker.start()
        assert started.wait(10)
        count, _, _ = canceller.run(f"id {job_id}")
        assert count == 1
        assert seen.get(timeout=10) == ("cancelled", LOOP_THREAD)
        rec.wait_for("cancelled")
    finally:
        canceller.close()
        worker.stop()
    assert queue.get(job_id) is None
    assert "succeeded" not in rec.outcomes(job_id)


def test_a_cancel_in_the_workers_process_cancels_the_task(store: Any) -> None:
    queue = Queue(store)
    worker = fast_worker(store)
    started = threading.Event()
    seen: queue_mod.Queue[str | None] = queue_mod.Queue()

    @worker.handler("victim")
    async def victim(job: JobEvent[Any]) -> None:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.put(job.signal.reason)
            raise

    job_id = add_job(queue, "victim", {})
    worker.start()
    try:
        assert started.wait(10)
        assert queue.cancel(job_id)
        assert seen.get(timeout=5) == "cancelled"
    finally:
        worker.stop()
    assert queue.get(job_id) is None


def test_a_timeout_cancels_the_task_and_the_attempt_is_retried(store: Any) -> None:
    queue = Queue(store)
    rec = Recorder()
    # A long abandon_grace: only the cancellation, not a write-off, can end attempt 1 soon.
    worker = fast_worker(store, observers=[rec], abandon_grace=30)
    reasons: list[tuple[str | None, float]] = []

    @worker.handler("slow", timeout=0.3)
    async def slow(job: JobEvent[Any]) -> dict[str, int]:
        if job.attempt == 1:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                reasons.append((job.signal.reason, time.monotonic()))
                raise
        return {"attempt": job.attempt}

    job_id = add_job(queue, "slow", {}, max_attempts=3)
    started = time.monotonic()
    worker.run_until_empty(timeout=20)
    assert time.monotonic() - started < 10
    assert [reason for reason, _ in reasons] == ["timeout"]
    assert reasons[0][1] - started < 3
    summary = queue.get(job_id)
    assert summary is not None
    assert summary.status is JobStatus.SUCCEEDED
    assert summary.attempts == 2
    assert summary.result == {"attempt": 2}
    assert "JobTimeout" in summary.errors[0].error
    assert rec.outcomes(job_id) == ["started", "retry-scheduled", "started", "succeeded"]


def test_a_lost_lease_cancels_the_task_and_its_outcome_is_not_written(
    pg_store: PostgresStore, pg_dsn: str
) -> None:
    queue = Queue(pg_store)
    rec = Recorder()
    worker = Worker(pg_store, poll_interval=30, notify=False, lease_duration=0.6,
                    lease_renew_interval=0.15, observers=[rec])
    started = threading.Event()
    reasons: list[str | None] = []

    @worker.handler("held")
    async def held(job: JobEvent[Any]) -> None:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            reasons.append(job.signal.reason)
            raise

    job_id = add_job(queue, "held", {})
    worker.start()
    try:
        assert started.wait(10)
        # Another claim's fencing token: this worker's next renewal matches nothing.
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("UPDATE {}.jobs SET lease_token = lease_token + 1"
                                 " WHERE id = %s").format(sql.Identifier(pg_store.schema)),
                         (int(job_id),))
        rec.wait_for("lease-lost")
        wait_until(lambda: reasons, timeout=10)
    finally:
        worker.stop()
    assert reasons == ["lease-lost"]
    summary = queue.get(job_id)
    assert summary is not None
    # The row is the other claim's (or, once its lease expired, the reaper's): nothing of
    # this attempt was written.
    assert summary.status in (JobStatus.RUNNING, JobStatus.PENDING)
    assert summary.attempts == 1
    assert rec.outcomes(job_id)[:2] == ["started", "lease-lost"]
    assert "succeeded" not in rec.outcomes(job_id)


def test_a_task_ignoring_its_cancellation_is_written_off_and_its_slot_reused(
    pg_store: PostgresStore,
) -> None:
    queue = Queue(pg_store)
    rec = Recorder()
    worker = fast_worker(pg_store, observers=[rec], abandon_grace=0.3)
    release = threading.Event()
    late = threading.Event()
    ran: list[tuple[int, int]] = []
    shrugged = [0]

    @worker.handler("hang", concurrency=1, timeout=0.2)
    async def hang(job: JobEvent[Any]) -> dict[str, bool] | None:
        ran.append((job.payload["n"], job.attempt))
        if job.payload["n"] == 0 and job.attempt == 1:
            while not release.is_set():
                try:
                    await asyncio.sleep(0.02)
                except asyncio.CancelledError:
                    shrugged[0] += 1  # ignores it on purpose
            late.set()
            return {"late": True}
        return None

    stuck = add_job(queue, "hang", {"n": 0}, max_attempts=3)
    other = add_job(queue, "hang", {"n": 1})

    def succeeded(job_id: str) -> bool:
        summary = queue.get(job_id)
        return summary is not None and summary.status is JobStatus.SUCCEEDED

    with structlog.testing.capture_logs() as logs:
        worker.start()
        try:
            # The one slot is stuck; once written off, a new slot runs the other job and
            # the retry of the stuck one while the first task is still running.
            wait_until(lambda: succeeded(other) and succeeded(stuck), timeout=10)
            assert not late.is_set()
            release.set()
            assert late.wait(5)
            time.sleep(0.1)  # the late result must change nothing
        finally:
            release.set()
            worker.stop()
    assert shrugged[0] >= 1
    summary = queue.get(stuck)
    assert summary is not None
    assert summary.attempts == 2
    assert summary.result is None  # the written-off attempt's {"late": True} was dropped
    assert (0, 2) in ran
    assert (1, 1) in ran
    assert any(e["event"] == "handler_abandoned" for e in logs)
    assert rec.outcomes(stuck).count("succeeded") == 1
