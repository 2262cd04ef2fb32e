"""Graceful shutdown: within and past shutdown_grace, released jobs keep their attempts,
SIGTERM on a real worker process."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

from golemq_pg import JobEvent, JobStatus, PostgresStore, Queue, Worker
from tests.support.ledgers import effects, effects_table, job_rows
from tests.support.waiting import wait_until
from tests.support.workers import spawn_worker


def test_running_work_finishes_within_grace_and_buffered_work_is_released(store: Any) -> None:
    queue = Queue(store)
    worker = Worker(store, poll_interval=0.05, shutdown_grace=5, batch_size=10)
    started = threading.Event()
    reasons: list[str | None] = []

    @worker.handler("job", concurrency=1)
    def job(event: JobEvent[Any]) -> None:
        started.set()
        time.sleep(0.3)
        reasons.append(event.signal.reason)

    ids = [queue.add("job", {"n": n}) for n in range(5)]
    worker.start()
    assert started.wait(10)
    # All five leased (attempt counted): one running, four in the buffer (shown PENDING).
    wait_until(lambda: sum(queue.get(i).attempts == 1 for i in ids) == 5,  # type: ignore[arg-type,union-attr]
               timeout=5)
    t0 = time.monotonic()
    worker.stop()
    assert time.monotonic() - t0 < 3
    assert reasons == [None]
    summaries = [queue.get(i) for i in ids]  # type: ignore[arg-type]
    statuses = sorted(s.status.value for s in summaries if s)
    assert statuses == ["pending"] * 4 + ["succeeded"]
    for summary in summaries:
        assert summary is not None
        if summary.status is JobStatus.PENDING:
            assert summary.attempts == 0  # released: the claim's attempt was refunded
            assert summary.run_at <= store.now()


def test_past_grace_cooperative_handlers_are_signalled_and_released(store: Any) -> None:
    queue = Queue(store)
    worker = Worker(store, poll_interval=0.05, shutdown_grace=0.2, abandon_grace=5)
    started = threading.Event()
    reasons: list[str | None] = []

    @worker.handler("long")
    def long(event: JobEvent[Any]) -> None:
        started.set()
        event.signal.wait(30)
        reasons.append(event.signal.reason)
        event.signal.raise_if_cancelled()

    job_id = queue.add("long", {})
    assert job_id
    worker.start()
    assert started.wait(10)
    t0 = time.monotonic()
    worker.stop()
    assert time.monotonic() - t0 < 2
    assert reasons == ["shutdown"]
    summary = queue.get(job_id)
    assert summary is not None
    assert summary.status is JobStatus.PENDING
    assert summary.attempts == 0


def test_a_handler_that_finishes_after_the_signal_still_succeeds(store: Any) -> None:
    queue = Queue(store)
    worker = Worker(store, poll_interval=0.05, shutdown_grace=0.1, abandon_grace=5)
    started = threading.Event()

    @worker.handler("wrapup")
    def wrapup(event: JobEvent[Any]) -> None:
        started.set()
        event.signal.wait(30)  # then finishes its work anyway

    job_id = queue.add("wrapup", {})
    assert job_id
    worker.start()
    assert started.wait(10)
    worker.stop()
    summary = queue.get(job_id)
    assert summary is not None
    assert summary.status is JobStatus.SUCCEEDED


def test_past_abandon_grace_an_ignoring_handler_is_released(store: Any) -> None:
    queue = Queue(store)
    worker = Worker(store, poll_interval=0.05, shutdown_grace=0.1, abandon_grace=0.2)
    started = threading.Event()
    release = threading.Event()

    @worker.handler("deaf")
    def deaf(event: JobEvent[Any]) -> None:
        started.set()
        release.wait(30)

    job_id = queue.add("deaf", {})
    assert job_id
    worker.start()
    assert started.wait(10)
    t0 = time.monotonic()
    try:
        worker.stop()
        assert time.monotonic() - t0 < 3
    finally:
        release.set()
    summary = queue.get(job_id)
    assert summary is not None
    assert summary.status is JobStatus.PENDING
    assert summary.attempts == 0


def test_stop_timeout_overrides_shutdown_grace(store: Any) -> None:
    queue = Queue(store)
    worker = Worker(store, poll_interval=0.05, shutdown_grace=60, abandon_grace=5)
    started = threading.Event()

    @worker.handler("waits")
    def waits(event: JobEvent[Any]) -> None:
        started.set()
        event.signal.wait(30)
        event.signal.raise_if_cancelled()

    queue.add("waits", {})
    worker.start()
    assert started.wait(10)
    t0 = time.monotonic()
    worker.stop(timeout=0.1)
    assert time.monotonic() - t0 < 2


def test_concurrent_stops_are_idempotent(store: Any) -> None:
    worker = Worker(store, poll_interval=0.05)

    @worker.handler("x")
    def x(event: JobEvent[Any]) -> None:
        return None

    worker.start()
    threads = [threading.Thread(target=worker.stop) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not worker.running
    worker.stop()


def test_sigterm_on_a_worker_process_with_jobs_in_flight(pg_store: PostgresStore,
                                                         pg_dsn: str) -> None:
    schema = pg_store.schema
    effects_table(pg_dsn, schema)
    queue = Queue(pg_store)
    for n in range(10):
        queue.add("work", {"n": n})
    proc = spawn_worker(pg_dsn, schema, "term", sleep=30, concurrency=2,
                        shutdown_grace=0.3, abandon_grace=2)
    try:
        wait_until(lambda: len(effects(pg_dsn, schema)) >= 2, timeout=15)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert "exited" in out
    rows = job_rows(pg_dsn, schema)
    assert not [r for r in rows if r[1] == "running"]
    assert all(r[1] == "pending" and r[2] == 0 for r in rows)


class _SignalledWhileStarting(PostgresStore):
    """The real store; opening the worker's listener (part of starting it) sends this
    process SIGTERM, as a supervisor forwarding a stop to a child still starting up does."""

    def open_listener(self, dsn: str | None = None) -> Any:
        os.kill(os.getpid(), signal.SIGTERM)
        return super().open_listener(dsn)


def test_a_sigterm_that_arrives_while_the_worker_starts_still_stops_run(
    pg_store: PostgresStore, pg_dsn: str
) -> None:
    store = _SignalledWhileStarting.connect(pg_dsn, schema=pg_store.schema, max_size=4)
    worker = Worker(store, poll_interval=0.05, shutdown_grace=1)

    @worker.handler("job", concurrency=1)
    def job(_event: JobEvent[Any]) -> None:
        pass

    # A watchdog for the old behaviour (the request was forgotten and run() went on
    # forever): it stops the worker after 20 s, which this test then reports.
    watchdog = threading.Timer(20, worker.stop)
    watchdog.start()
    started = time.monotonic()
    try:
        worker.run()  # pytest runs tests on the main thread: run() installs its handlers
    finally:
        watchdog.cancel()
        store.close()
    assert time.monotonic() - started < 15, "the SIGTERM sent while starting was forgotten"
