"""Transactional handlers: the handler's writes commit with the claim and the completion
(exactly-once effects, also with a SIGKILLed worker process), roll back on failure and are
retried, timeouts are enforced, mixed workers, and the memory store refuses them. Cancelling
a transactional handler is in test_cancel.py / test_cancel_remote.py.

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

from golemq_pg import (
    InMemoryStore,
    JobEvent,
    JobStatus,
    PostgresStore,
    Queue,
    QueueConfigError,
    Resource,
    Worker,
)
from tests.support.in_process import add_job
from tests.support.ledgers import effects, effects_table, insert_effect, job_rows
from tests.support.observers import Recorder
from tests.support.waiting import wait_until
from tests.support.workers import start_process, worker_config


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
    ids = [add_job(queue, "charge", {"n": n}) for n in range(20)]
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

    ids = [add_job(queue, "flaky", {"n": n}) for n in range(5)]
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

    sql_job = add_job(queue, "slow-sql", {})
    python_job = add_job(queue, "slow-python", {})
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


def test_writes_commit_with_the_completion(pg_store: PostgresStore, pg_dsn: str) -> None:
    schema = pg_store.schema
    effects_table(pg_dsn, schema)
    queue = Queue(pg_store)
    worker = Worker(pg_store, poll_interval=0.05)

    @worker.handler("tx", transactional=True, concurrency=2)
    def tx(event: JobEvent[Any]) -> None:
        assert event.connection is not None
        insert_effect(event, schema, "tx")
        event.progress({"written": 1})

    ids = [queue.add("tx", {"n": n}) for n in range(6)]
    worker.run_until_empty(timeout=30)
    for job_id in ids:
        summary = queue.get(job_id)  # type: ignore[arg-type]
        assert summary is not None
        assert summary.status is JobStatus.SUCCEEDED
        assert summary.progress == {"written": 1}
    assert sorted(row[0] for row in effects(pg_dsn, schema)) == sorted(ids)  # type: ignore[type-var]


def test_a_failed_attempt_rolls_its_writes_back(pg_store: PostgresStore, pg_dsn: str) -> None:
    schema = pg_store.schema
    effects_table(pg_dsn, schema)
    queue = Queue(pg_store)
    worker = Worker(pg_store, poll_interval=0.05, base_backoff=0, max_backoff=0)

    @worker.handler("tx-flaky", transactional=True)
    def flaky(event: JobEvent[Any]) -> None:
        insert_effect(event, schema, "tx")
        if event.attempt == 1:
            raise RuntimeError("after writing")

    job_id = queue.add("tx-flaky", {})
    assert job_id
    worker.run_until_empty(timeout=30)
    summary = queue.get(job_id)
    assert summary is not None
    assert summary.status is JobStatus.SUCCEEDED
    assert summary.attempts == 2
    assert summary.last_error == "RuntimeError: after writing"
    assert [(row[0], row[1]) for row in effects(pg_dsn, schema)] == [(job_id, 2)]


def test_terminal_failure_in_a_transactional_handler(pg_store: PostgresStore,
                                                     pg_dsn: str) -> None:
    effects_table(pg_dsn, pg_store.schema)
    queue = Queue(pg_store)
    worker = Worker(pg_store, poll_interval=0.05)

    @worker.handler("tx-dead", transactional=True)
    def dead(event: JobEvent[Any]) -> bool:
        insert_effect(event, pg_store.schema, "tx")
        return False

    job_id = queue.add("tx-dead", {}, max_attempts=1)
    assert job_id
    worker.run_until_empty(timeout=30)
    summary = queue.get(job_id)
    assert summary is not None
    assert summary.status is JobStatus.FAILED
    assert effects(pg_dsn, pg_store.schema) == []


def test_mixed_worker_with_ordinary_and_transactional_types(pg_store: PostgresStore) -> None:
    queue = Queue(pg_store)
    worker = Worker(pg_store, poll_interval=0.05)
    worker.handler("plain", concurrency=2)(lambda event: None)
    worker.handler("in-tx", transactional=True)(lambda event: None)
    for n in range(5):
        queue.add("plain", {"n": n})
        queue.add("in-tx", {"n": n})
    worker.run_until_empty(timeout=30)
    assert queue.count_by_status()[JobStatus.SUCCEEDED] == 10


def test_memory_store_refuses_transactional_handlers() -> None:
    with pytest.raises(QueueConfigError, match="transactional"):
        Worker(InMemoryStore()).handler("tx", transactional=True)(lambda event: None)
