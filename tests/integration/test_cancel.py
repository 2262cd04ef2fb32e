"""Cancellation in the worker's own process and through the Queue API: by id, by scope,
pending-only, by dedupe key, return values, buffered jobs, transactional handlers, and
late completions of cancelled jobs that write nothing.

Cancels made elsewhere (another process, another store: NOTIFY, reconcile, latency) are in
test_cancel_remote.py; a handler's own timeout and abandonment are in test_aborts.py.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

from golemq_pg import JobEvent, JobStatus, JobSummary, PostgresStore, Queue, Worker
from golemq_pg.store.port import LeaseRef
from tests.support.in_process import add_job, fast_worker
from tests.support.ledgers import effects, insert_effect
from tests.support.observers import Recorder
from tests.support.store_port import claim, slots
from tests.support.waiting import wait_until


def _in_status(queue: Queue, job_id: str, status: JobStatus) -> JobSummary | None:
    """The job's row once it has ``status`` (None before)."""
    summary = queue.get(job_id)
    return summary if summary is not None and summary.status is status else None


def _status(queue: Queue, job_id: str | None) -> JobStatus | None:
    """The job's status, or None when it does not exist."""
    assert job_id is not None
    summary = queue.get(job_id)
    return None if summary is None else summary.status


def test_cancel_pending_for_scope_leaves_running_work_alone(store: Any) -> None:
    rec = Recorder()
    producer_rec = Recorder()
    queue = Queue(store, observers=[producer_rec])
    worker = Worker(store, poll_interval=0.05, observers=[rec])
    gate = threading.Event()
    started = threading.Event()
    signals: list[Any] = []

    @worker.handler("render", serialize_by_scope=True, concurrency=2)
    def render(job: JobEvent[Any]) -> None:
        if job.payload["n"] == 0:
            signals.append(job.signal)
            started.set()
            assert gate.wait(30)

    first = queue.add("render", {"n": 0}, scope=("Doc", "d1"))
    assert first
    worker.start()
    try:
        assert started.wait(10)
        # Queued behind the running job by serialize_by_scope (and one scheduled later).
        queued = [queue.add("render", {"n": n}, scope=("Doc", "d1")) for n in (1, 2)]
        queued.append(queue.add("render", {"n": 3}, scope=("Doc", "d1"), delay=60))
        elsewhere = queue.add("render", {"n": 4}, scope=("Doc", "d2"))
        assert queue.cancel_pending_for_scope(("Doc", "d1"), reason="superseded") == 3
        assert not signals[0].cancelled  # the running job was not touched
        # Shown running once its handler's start is written (within ~50 ms of it).
        summary = wait_until(lambda: _in_status(queue, first, JobStatus.RUNNING), timeout=5)
        assert summary.status is JobStatus.RUNNING
        assert all(queue.get(job_id) is None for job_id in queued)  # type: ignore[arg-type]
        assert queue.cancel_pending_for_scope(("Doc", "d1")) == 0
        gate.set()
        wait_until(lambda: _status(queue, first) is JobStatus.SUCCEEDED, timeout=10)
        wait_until(lambda: _status(queue, elsewhere) is JobStatus.SUCCEEDED, timeout=10)
    finally:
        gate.set()
        worker.stop()
    assert [j.id for j in queue.find_for_scope(("Doc", "d1"))] == [first]
    assert sorted(t.job_id for t in producer_rec.of("cancelled")) == sorted(queued)  # type: ignore[type-var]
    assert {t.error for t in producer_rec.of("cancelled")} == {"superseded"}
    assert rec.of("cancelled") == []  # the worker aborted nothing


def test_cancel_by_dedupe_keys_touches_only_the_named_type(store: Any) -> None:
    rec = Recorder()
    queue = Queue(store)
    worker = Worker(store, poll_interval=0.05, observers=[rec])
    gate = threading.Event()
    running: dict[str, Any] = {}
    reasons: dict[str, str | None] = {}

    def blocking(job: JobEvent[Any]) -> None:
        running[job.type] = job.signal
        job.signal.wait(30) if job.type == "audio" else gate.wait(30)
        reasons[job.type] = job.signal.reason
        job.signal.raise_if_cancelled()

    worker.handler("audio")(blocking)
    worker.handler("video")(blocking)
    audio_v1 = queue.add("audio", {}, dedupe_key="v1")
    video_v1 = queue.add("video", {}, dedupe_key="v1")
    worker.start()
    try:
        wait_until(lambda: len(running) == 2, timeout=10)
        audio_v2 = queue.add("audio", {}, dedupe_key="v2", delay=60)
        audio_v3 = queue.add("audio", {}, dedupe_key="v3", delay=60)
        video_v2 = queue.add("video", {}, dedupe_key="v2", delay=60)
        assert queue.cancel_by_dedupe_keys("nothing", ["v1", "v2"]) == 0
        count = queue.cancel_by_dedupe_keys("audio", ["v1", "v2", "absent"], reason="voice")
        assert count == 2  # the running v1 and the queued v2
        assert running["audio"].reason == "cancelled"  # same process: before the call returned
        assert not running["video"].cancelled
        assert queue.get(audio_v1) is None  # type: ignore[arg-type]
        assert queue.get(audio_v2) is None  # type: ignore[arg-type]
        assert queue.get(audio_v3) is not None  # type: ignore[arg-type]
        assert queue.get(video_v2) is not None  # type: ignore[arg-type]
        gate.set()
        wait_until(lambda: _status(queue, video_v1) is JobStatus.SUCCEEDED, timeout=10)
    finally:
        gate.set()
        worker.stop()
    assert reasons == {"audio": "cancelled", "video": None}
    assert [t.job_id for t in rec.of("cancelled")] == [audio_v1]
    # The key is free again once its job was cancelled.
    assert queue.add("audio", {}, dedupe_key="v1") is not None


def test_cancel_return_values_count_what_was_cancelled(store: Any) -> None:
    rec = Recorder()
    queue = Queue(store, observers=[rec])
    worker = Worker(store, poll_interval=0.05)
    started = threading.Event()

    @worker.handler("work")
    def work(job: JobEvent[Any]) -> None:
        if job.payload["block"]:
            started.set()
            job.signal.wait(30)
            job.signal.raise_if_cancelled()

    done = queue.add("work", {"block": False}, scope=("A", "1"))
    assert done
    worker.run_until_empty(timeout=20)
    running = queue.add("work", {"block": True}, scope=("A", "1"))
    worker.start()
    try:
        assert started.wait(10)
        later = [queue.add("work", {"block": False}, scope=("A", "1"), delay=60)
                 for _ in range(2)]
        assert queue.cancel(done) is False  # finished work is history, not cancellable
        assert queue.cancel("987654321") is False
        assert queue.cancel_for_scope(("A", "empty")) == 0
        assert queue.cancel_for_scope(("A", "1")) == 3  # one running + two queued
    finally:
        worker.stop()
    assert sorted(t.job_id for t in rec.of("cancelled")) == sorted([running, *later])  # type: ignore[type-var]
    summary = queue.get(done)
    assert summary is not None
    assert summary.status is JobStatus.SUCCEEDED


def test_a_cancel_reason_made_of_unstorable_text_is_stored_escaped(store: Any) -> None:
    # A reason is often an exception's own text: a NUL or a lone surrogate in it must not
    # make the cancel fail.
    queue = Queue(store)
    rec = Recorder()
    queue_with_observer = Queue(store, observers=[rec])
    jobs = [queue.add("render", {"n": n}, scope=("Doc", "nul")) for n in range(2)]
    count = queue_with_observer.cancel_for_scope(("Doc", "nul"), reason="gone\x00 \udcff")
    assert count == 2
    assert all(queue.get(job_id) is None for job_id in jobs)  # type: ignore[arg-type]
    errors = {t.error for t in rec.wait_for("cancelled", count=2)}
    assert errors == {"gone\\x00 \\udcff"}


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
        # Jobs 1 and 2 are claimed into the buffer behind the running one: leased (attempt
        # counted) but shown PENDING, their handlers not started.
        wait_until(lambda: all(queue.get(i).attempts == 1 for i in ids),  # type: ignore[arg-type,union-attr]
                   timeout=5)
        assert queue.get(ids[1]).status is JobStatus.PENDING  # type: ignore[arg-type,union-attr]
        assert queue.cancel(ids[1]) is True  # type: ignore[arg-type]
        gate.set()
        wait_until(lambda: queue.get(ids[2]).status is JobStatus.SUCCEEDED, timeout=10)  # type: ignore[arg-type,union-attr]
    finally:
        gate.set()
        worker.stop()
    assert ran == [0, 2]


def test_pending_only_cancel_skips_a_running_transactional_job(
    pg_store: PostgresStore, pg_dsn: str, effects_schema: str
) -> None:
    schema = effects_schema
    queue = Queue(pg_store)
    worker = Worker(pg_store, poll_interval=0.05)
    started = threading.Event()
    gate = threading.Event()

    @worker.handler("tx-held", transactional=True)
    def held(event: JobEvent[Any]) -> None:
        insert_effect(event, schema, "w")
        started.set()
        assert gate.wait(20)

    running = add_job(queue, "tx-held", {}, scope=("Doc", "p"))
    worker.start()
    try:
        assert started.wait(10)
        queued = add_job(queue, "tx-held", {}, scope=("Doc", "p"), delay=60)
        began = time.monotonic()
        assert queue.cancel_pending_for_scope(("Doc", "p")) == 1  # the queued one only
        assert time.monotonic() - began < 3.0
        assert queue.get(queued) is None
        gate.set()
        wait_until(lambda: queue.count_by_status()[JobStatus.SUCCEEDED] == 1, timeout=10)
    finally:
        gate.set()
        worker.stop()
    assert [row[0] for row in effects(pg_dsn, schema)] == [running]


def test_same_process_cancel_without_notify_interrupts_a_transactional_handler(
    pg_store: PostgresStore, pg_dsn: str, effects_schema: str
) -> None:
    schema = effects_schema
    rec = Recorder()
    queue = Queue(pg_store)
    worker = Worker(pg_store, poll_interval=0.05, notify=False, observers=[rec])
    started = threading.Event()
    endings: list[str] = []

    @worker.handler("tx-quiet", transactional=True)
    def quiet(event: JobEvent[Any]) -> None:
        insert_effect(event, schema, "w")
        started.set()
        try:
            event.connection.execute("SELECT pg_sleep(25)")
        except psycopg.Error as exc:
            endings.append(type(exc).__name__)
            raise

    job_id = add_job(queue, "tx-quiet", {}, scope=("Doc", "q"))
    worker.start()
    try:
        assert started.wait(10)
        began = time.monotonic()
        assert queue.cancel_for_scope(("Doc", "q"), reason="doc deleted") == 1
        assert time.monotonic() - began < 3.0
        wait_until(lambda: endings, timeout=10)
    finally:
        worker.stop(timeout=2)
    assert endings == ["QueryCanceled"]
    assert queue.get(job_id) is None
    assert effects(pg_dsn, schema) == []
    cancelled = rec.of("cancelled")
    assert [(t.job_id, t.error) for t in cancelled] == [(job_id, "doc deleted")]
    assert rec.outcomes(job_id) == ["started", "cancelled"]


def test_cancel_variants(store: Any) -> None:
    rec = Recorder()
    queue = Queue(store, observers=[rec])
    a = queue.add("t", {}, scope=("A", "1"))
    queue.add("t", {}, scope=("A", "1"))
    queue.add("t", {}, scope=("A", "2"))
    running = claim(store, slots("t", limit=1))
    assert [j.id for j in running] == [a]
    assert queue.cancel_pending_for_scope(("A", "1"), reason="superseded") == 1
    assert queue.get(a) is not None  # running work left alone
    assert queue.cancel_for_scope(("A", "1"), reason="deleted") == 1
    assert queue.get(a) is None
    # Late completion of a cancelled job writes nothing and never resurrects it.
    assert store.job_complete_many("w1", [LeaseRef(a, running[0].lease_token)]) == set()
    assert queue.get(a) is None
    k1 = queue.add("audio", {}, dedupe_key="v1")
    queue.add("audio", {}, dedupe_key="v2")
    queue.add("video", {}, dedupe_key="v1")
    assert queue.cancel_by_dedupe_keys("audio", ["v1", "nope"]) == 1
    assert queue.get(k1) is None
    assert len(queue.find(types=["video"])) == 1
    b = queue.add("t", {})
    assert queue.cancel(b) is True
    assert queue.cancel(b) is False
    assert sum(1 for e in rec.transitions if e.outcome == "cancelled") == 4
    with pytest.raises(ValueError, match="scope"):
        queue.cancel_for_scope(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="job_id"):
        queue.cancel("1; DROP TABLE jobs")
