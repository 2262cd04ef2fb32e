"""Transactional handlers (issue 6): exactly-once effects with real processes, rollback and
retry on failure, enforced timeouts, and cancellation of a handler that holds its claim open.

Every handler writes an effects-ledger row through ``job.connection`` (the claim's
transaction), so an effect exists if and only if the job's completion committed with it.
"""

from __future__ import annotations

import os
import queue as queue_mod
import signal
import subprocess
import threading
import time
from collections import Counter
from typing import Any

import psycopg
import pytest
import structlog

from golemq_pg import JobEvent, JobStatus, PostgresStore, Queue, Resource, Worker
from tests.support.ledgers import effects, effects_table, insert_effect, job_rows
from tests.support.observers import Recorder
from tests.support.waiting import wait_until
from tests.support.workers import Canceller, start_process, worker_config


@pytest.fixture
def effects_schema(pg_store: PostgresStore, pg_dsn: str) -> str:
    """The test's schema, with the effects ledger the handlers write to."""
    effects_table(pg_dsn, pg_store.schema)
    return pg_store.schema


def _add(queue: Queue, job_type: str, payload: dict[str, Any], **options: Any) -> str:
    job_id = queue.add(job_type, payload, **options)
    assert job_id is not None
    return job_id


def tx_worker(dsn: str, schema: str, worker_id: str, *, block_from: int) -> dict[str, Any]:
    """A worker process with a transactional handler: it writes its effect, then, for jobs
    with n >= block_from, prints "wrote <id>" and blocks (the test SIGKILLs it there)."""
    return worker_config(
        dsn, schema, worker_id, logs="stderr",
        # Four handlers each hold a connection for their whole transaction; the claim loop,
        # completer and maintenance share the rest.
        store={"max_size": 8}, worker={"poll_interval": 0.05},
        handlers=[{"type": "charge", "options": {"transactional": True, "concurrency": 4},
                   "ledger": "effects_in_transaction",
                   "block_when": {"field": "n", "at_least": block_from, "print": "wrote",
                                  "seconds": 120}}],
    )


def _lines(proc: subprocess.Popen[str]) -> queue_mod.Queue[str]:
    """Read the process's stdout on a thread, so the test can wait with a deadline."""
    out: queue_mod.Queue[str] = queue_mod.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.put(line.strip())

    threading.Thread(target=pump, daemon=True).start()
    return out


def _next(lines: queue_mod.Queue[str], prefix: str, timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        line = lines.get(timeout=max(deadline - time.monotonic(), 0.01))
        if line.startswith(prefix):
            return line


def test_sigkill_mid_handler_leaves_no_effect_and_each_job_has_one(
    pg_store: PostgresStore, pg_dsn: str, effects_schema: str
) -> None:
    schema = effects_schema
    queue = Queue(pg_store)
    ids = [_add(queue, "charge", {"n": n}) for n in range(20)]
    proc = start_process(tx_worker(pg_dsn, schema, "first", block_from=6),
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        lines = _lines(proc)
        _next(lines, "ready")
        # Four handlers (the type's concurrency) wrote their effect and now block.
        blocked = {_next(lines, "wrote").split()[1] for _ in range(4)}
        committed = effects(pg_dsn, schema)
        # Jobs 0-5 ran before them and committed; the blocked effects are invisible.
        assert sorted(row[0] for row in committed) == sorted(ids[:6])
        assert not blocked & {row[0] for row in committed}
        rows = {row[0]: row for row in job_rows(pg_dsn, schema)}
        for job_id in blocked:
            # The claim is part of the open transaction: others still see the row pending.
            assert rows[job_id][1:3] == ("pending", 0)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == -signal.SIGKILL
    # The killed transactions rolled back: still no effect from the blocked handlers.
    assert not blocked & {row[0] for row in effects(pg_dsn, schema)}

    second = Worker(pg_store, worker_id="second", poll_interval=0.05)

    @second.handler("charge", transactional=True, concurrency=4)
    def charge(event: JobEvent[Any]) -> None:
        insert_effect(event, schema, "second")

    second.start()
    try:
        wait_until(
            lambda: queue.count_by_status()[JobStatus.SUCCEEDED] == 20, timeout=60, interval=0.05
        )
    finally:
        second.stop()
    ledger = effects(pg_dsn, schema)
    assert Counter(row[0] for row in ledger) == Counter(ids)  # exactly one effect per job
    by_job = {row[0]: row for row in ledger}
    for job_id in blocked:
        assert by_job[job_id][2] == "second"  # the job ran again, in the new worker
        # The SIGKILLed attempt was rolled back together with its claim: not counted.
        assert by_job[job_id][1] == 1
    for job_id in ids:
        summary = queue.get(job_id)
        assert summary is not None
        assert summary.status is JobStatus.SUCCEEDED
        assert summary.attempts == 1


def test_a_raising_handler_leaves_no_effect_and_is_retried(
    pg_store: PostgresStore, pg_dsn: str, effects_schema: str
) -> None:
    schema = effects_schema
    rec = Recorder()
    queue = Queue(pg_store)
    worker = Worker(pg_store, poll_interval=0.05, base_backoff=0, max_backoff=0,
                    observers=[rec])

    @worker.handler("flaky", transactional=True, concurrency=2)
    def flaky(event: JobEvent[Any]) -> None:
        insert_effect(event, schema, "w")
        insert_effect(event, schema, "w")  # two writes, both must roll back
        if event.attempt == 1:
            raise ValueError("boom after writing")

    ids = [_add(queue, "flaky", {"n": n}) for n in range(5)]
    worker.run_until_empty(timeout=60)
    retried = rec.of("retry-scheduled")
    assert sorted(t.job_id for t in retried) == sorted(ids)
    assert {(t.attempts, t.error) for t in retried} == {(1, "ValueError: boom after writing")}
    ledger = effects(pg_dsn, schema)
    assert sorted((row[0], row[1]) for row in ledger) == sorted(
        (job_id, 2) for job_id in ids for _ in range(2)
    )
    for job_id in ids:
        summary = queue.get(job_id)
        assert summary is not None
        assert (summary.status, summary.attempts) == (JobStatus.SUCCEEDED, 2)


def test_timeouts_are_enforced_on_long_statements_and_in_python(
    pg_store: PostgresStore, pg_dsn: str, effects_schema: str
) -> None:
    schema = effects_schema
    rec = Recorder()
    queue = Queue(pg_store)
    worker = Worker(pg_store, poll_interval=0.05, base_backoff=0, max_backoff=0,
                    observers=[rec])
    interrupted: list[tuple[str, float]] = []

    @worker.handler("slow-sql", transactional=True, timeout=0.5)
    def slow_sql(event: JobEvent[Any]) -> None:
        insert_effect(event, schema, "w")
        if event.attempt == 1:
            started = time.monotonic()
            try:
                # Far past the timeout and the store's statement_timeout (30 s): only the
                # worker's interrupt can end it this early.
                event.connection.execute("SELECT pg_sleep(25)")
            except psycopg.Error as exc:
                interrupted.append((type(exc).__name__, time.monotonic() - started))
                raise

    @worker.handler("slow-python", transactional=True, timeout=0.3)
    def slow_python(event: JobEvent[Any]) -> None:
        insert_effect(event, schema, "w")
        if event.attempt == 1:
            time.sleep(0.8)  # ignores its signal: the late success must not commit

    sql_job = _add(queue, "slow-sql", {})
    python_job = _add(queue, "slow-python", {})
    began = time.monotonic()
    worker.run_until_empty(timeout=60)
    assert time.monotonic() - began < 15
    assert len(interrupted) == 1
    name, seconds = interrupted[0]
    assert name == "QueryCanceled"
    assert 0.4 < seconds < 3.0
    for job_id in (sql_job, python_job):
        summary = queue.get(job_id)
        assert summary is not None
        assert (summary.status, summary.attempts) == (JobStatus.SUCCEEDED, 2)
        assert summary.last_error is not None
        assert summary.last_error.startswith("JobTimeout")
    # Only the second attempts' effects exist: the timed-out ones rolled back.
    assert sorted((row[0], row[1]) for row in effects(pg_dsn, schema)) == sorted(
        [(sql_job, 2), (python_job, 2)]
    )
    assert [t.attempts for t in rec.of("retry-scheduled")] == [1, 1]


@pytest.mark.parametrize("blocked_in", ["statement", "signal"])
def test_cancel_from_another_process_aborts_a_transactional_handler(
    pg_store: PostgresStore, pg_dsn: str, effects_schema: str, blocked_in: str
) -> None:
    schema = effects_schema
    rec = Recorder()
    queue = Queue(pg_store)
    worker = Worker(pg_store, poll_interval=30, observers=[rec])  # only the NOTIFY is fast
    started = threading.Event()
    endings: list[str] = []

    @worker.handler("tx-long", transactional=True)
    def long_one(event: JobEvent[Any]) -> None:
        insert_effect(event, schema, "w")
        started.set()
        try:
            if blocked_in == "statement":
                event.connection.execute("SELECT pg_sleep(25)")
            else:
                event.signal.wait(25)
        except psycopg.Error as exc:
            endings.append(type(exc).__name__)
            raise
        endings.append(f"returned ({event.signal.reason})")

    job_id = queue.add("tx-long", {}, scope=("Doc", "tx"))
    assert job_id
    canceller = Canceller(pg_dsn, schema)
    worker.start()
    try:
        assert started.wait(10)
        count, before, after = canceller.run("id " + job_id)
        assert count == 1
        # Without the early announcement the DELETE would wait on the row lock until the
        # handler ends (or lock_timeout, 10 s).
        assert after - before < 3.0
        rec.wait_for("cancelled")
        wait_until(lambda: endings, timeout=10)
    finally:
        worker.stop(timeout=2)
        canceller.close()
    expected = "QueryCanceled" if blocked_in == "statement" else "returned (cancelled)"
    assert endings == [expected]
    assert queue.get(job_id) is None
    assert effects(pg_dsn, schema) == []
    assert rec.outcomes(job_id) == ["started", "cancelled"]


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

    running = _add(queue, "tx-held", {}, scope=("Doc", "p"))
    worker.start()
    try:
        assert started.wait(10)
        queued = _add(queue, "tx-held", {}, scope=("Doc", "p"), delay=60)
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

    job_id = _add(queue, "tx-quiet", {}, scope=("Doc", "q"))
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


def test_startup_warns_when_transactional_claims_will_hold_guard_locks(
    pg_store: PostgresStore,
) -> None:
    worker = Worker(pg_store, poll_interval=0.05,
                    resources={"api": Resource(concurrency=2, types=["tx-pooled"])})
    worker.handler("tx-serial", transactional=True, serialize_by_scope=True)(lambda e: None)
    worker.handler("tx-pooled", transactional=True)(lambda e: None)
    worker.handler("tx-plain", transactional=True)(lambda e: None)
    worker.handler("report", not_while_running=["tx-plain", "other"])(lambda e: None)
    with structlog.testing.capture_logs() as logs:
        worker.start()
        worker.stop()
    details = [e["detail"] for e in logs if e["event"] == "transactional_claim_holds_locks"]
    assert len(details) == 3
    assert "'tx-serial' is guarded" in details[0]
    assert "'tx-pooled' is guarded (resource pools ['api'])" in details[1]
    assert "'report' has not_while_running=['tx-plain']" in details[2]
