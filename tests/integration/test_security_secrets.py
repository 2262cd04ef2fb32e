"""docs/RELIABILITY.md, security: a secret in a payload never leaves the payload.

A canary string rides in every payload; the worker runs every outcome (success with
progress, failure, retry exhaustion, terminal error, ``False``, timeout, cancellation,
grouped batch failure, a retryable refund, reaping of an expired lease, a database error on
the claim) while structlog and stdlib logging are captured at DEBUG. The canary must appear
in no log line, no exception text, no ``last_error``, no observer transition and no stored
traceback (formatted without locals). Handlers raise exceptions whose messages do not quote
the payload (what a handler's own message says is the application's business; a traceback,
which holds the whole message, is stored for the operator like the payload, never logged).
"""

from __future__ import annotations

import io
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
import structlog
from psycopg import sql

from golemq_pg import (
    BatchEvent,
    JobEvent,
    JobStatus,
    PostgresStore,
    Queue,
    QueuePayloadError,
    RetryableJobError,
    TerminalJobError,
    Transition,
    Worker,
)
from golemq_pg.store.port import ClaimRequest, TypeSlots

CANARY = "CANARY-" + uuid.uuid4().hex


def secret_payload(**extra: Any) -> dict[str, Any]:
    return {"secret": CANARY, "nested": {"token": CANARY, "list": [CANARY]}, **extra}


@contextmanager
def captured_logs() -> Iterator[io.StringIO]:
    """Every structlog event and stdlib record at DEBUG and up, rendered with tracebacks."""
    buffer = io.StringIO()
    previous = structlog.get_config()
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(default=repr),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        logger_factory=structlog.WriteLoggerFactory(file=buffer),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield buffer
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        structlog.configure(**previous)


class Recorder:
    def __init__(self) -> None:
        self.transitions: list[Transition] = []
        self.lock = threading.Lock()

    def on_transition(self, t: Transition) -> None:
        with self.lock:
            self.transitions.append(t)


class Broken:
    """An observer that always raises (contained by the worker, logged without payload)."""

    def on_transition(self, t: Transition) -> None:
        raise RuntimeError(f"observer broke on {t.outcome}")


def _all_finished(queue: Queue, expected: int) -> bool:
    counts = queue.count_by_status()
    return sum(counts.values()) == expected and not (
        counts[JobStatus.PENDING] or counts[JobStatus.RUNNING])


def test_a_payload_secret_never_reaches_logs_errors_or_observers(store: Any) -> None:
    rec = Recorder()
    queue = Queue(store, observers=[rec])
    exceptions: list[BaseException] = []
    with captured_logs() as logs:
        with pytest.raises(QueuePayloadError) as bad:
            queue.add("ok", {**secret_payload(), "bytes": b"x"})
        exceptions.append(bad.value)
        worker = Worker(store, poll_interval=0.05, base_backoff=0, max_backoff=0,
                        abandon_grace=0.5, observers=[rec, Broken()])
        started = threading.Event()

        @worker.handler("ok")
        def ok(job: JobEvent[Any]) -> None:
            job.progress({"step": 1})
            job.progress(0.5)

        @worker.handler("fails")
        def fails(job: JobEvent[Any]) -> None:
            raise ValueError("upstream said no")

        @worker.handler("terminal")
        def terminal(job: JobEvent[Any]) -> None:
            raise TerminalJobError("cannot process this")

        @worker.handler("false")
        def false(job: JobEvent[Any]) -> bool:
            return False

        @worker.handler("slow", timeout=0.2)
        def slow(job: JobEvent[Any]) -> None:
            job.signal.wait(10)
            try:
                job.signal.raise_if_cancelled()
            except BaseException as exc:
                exceptions.append(exc)
                raise

        @worker.handler("cancelled")
        def cancelled(job: JobEvent[Any]) -> None:
            started.set()
            job.signal.wait(10)
            try:
                job.signal.raise_if_cancelled()
            except BaseException as exc:
                exceptions.append(exc)
                raise

        refunded: set[str] = set()

        @worker.handler("refund")
        def refund(job: JobEvent[Any]) -> None:
            if job.id not in refunded:  # once: a refunded attempt comes back as attempt 1
                refunded.add(job.id)
                raise RetryableJobError("try later", consumes_attempt=False)

        @worker.handler("batch", grouped=True)
        def batch(event: BatchEvent[Any]) -> None:
            raise RuntimeError(f"batch of {len(event.jobs)} failed")

        @worker.handler("reaped")
        def reaped(job: JobEvent[Any]) -> None:
            pass

        ids = [
            queue.add("ok", secret_payload()),
            queue.add("fails", secret_payload(), max_attempts=2),
            queue.add("terminal", secret_payload()),
            queue.add("false", secret_payload(), max_attempts=1),
            queue.add("slow", secret_payload(), max_attempts=1),
            queue.add("refund", secret_payload()),
        ]
        queue.add_many("batch", [secret_payload(n=n) for n in range(3)], scope=("G", "1"),
                       max_attempts=1)
        # Two jobs whose lease runs out in another "worker": one is reclaimed and run,
        # one has no attempt left and is dead-lettered by the reaper.
        for attempts in (2, 1):
            queue.add("reaped", secret_payload(), max_attempts=attempts)
        ghost = store.job_claim(ClaimRequest("ghost", [TypeSlots("reaped", 2, 0.05)]))
        assert len(ghost) == 2
        cancel_id = queue.add("cancelled", secret_payload())
        time.sleep(0.1)
        worker.start()
        try:
            assert started.wait(10)
            assert queue.cancel(cancel_id, reason="no longer needed")  # type: ignore[arg-type]
            deadline = time.monotonic() + 30
            while not _all_finished(queue, 11) and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            worker.stop()
        assert _all_finished(queue, 11), queue.count_by_status()  # the cancelled one is gone
    text = logs.getvalue()
    assert "worker_started" in text  # the capture worked
    assert "jobs_reaped" in text
    assert "observer_failed" in text
    assert CANARY not in text
    found = queue.find(limit=100)
    errors = [j.last_error for j in found]
    assert any(errors)
    assert not [e for e in errors if e and CANARY in e]
    # Tracebacks are stored for the operator (job page, `show`), formatted without locals:
    # with messages that do not quote the payload, no frame variable brings it in.
    traces = [a.traceback for j in found for a in j.errors if a.traceback]
    assert traces
    assert not [t for t in traces if CANARY in t]
    outcomes = {t.outcome for t in rec.transitions}
    assert {"enqueued", "started", "succeeded", "retry-scheduled", "failed-terminal",
            "cancelled", "reclaimed"} <= outcomes
    assert not [t for t in rec.transitions if CANARY in repr(t)]
    assert exceptions
    assert not [e for e in exceptions if CANARY in str(e) or CANARY in repr(e)]
    assert all(i is not None for i in ids)


def test_a_database_error_quoting_the_row_never_reaches_the_logs(
    pg_store: PostgresStore, pg_dsn: str,
) -> None:
    # An operator's constraint makes the claim fail; PostgreSQL's error DETAIL quotes the
    # whole failing row, payload included ("Failing row contains (...)"). The worker logs the
    # failure (and retries) without that line.
    schema = sql.Identifier(pg_store.schema)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL(
            "ALTER TABLE {}.jobs ADD CONSTRAINT operator_rule "
            "CHECK (status <> 'running' OR NOT payload ? 'hold')").format(schema))
    queue = Queue(pg_store)
    # jsonb orders keys by length: "a" comes first, within the 64 bytes PostgreSQL quotes.
    job_id = queue.add("held", {"a": CANARY, "hold": True})
    done = threading.Event()
    worker = Worker(pg_store, poll_interval=0.05)
    worker.handler("held")(lambda job: done.set())
    with captured_logs() as logs:
        worker.start()
        try:
            deadline = time.monotonic() + 10
            while "claim_failed" not in logs.getvalue() and time.monotonic() < deadline:
                time.sleep(0.02)
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                conn.execute(sql.SQL("ALTER TABLE {}.jobs DROP CONSTRAINT operator_rule")
                             .format(schema))
            assert done.wait(15)  # the worker recovers once the rule is gone
        finally:
            worker.stop()
    text = logs.getvalue()
    assert "claim_failed" in text
    assert "CheckViolation" in text
    assert CANARY not in text
    assert queue.get(job_id).status == "succeeded"  # type: ignore[arg-type,union-attr]
