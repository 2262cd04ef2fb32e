"""A worker's system errors reach observers' ``on_error`` (``WorkerError``), once per incident:
a database outage (through an OutageProxy) or a storm of terminated connections is one
report per failing service, not one per retry; a new incident after the recovery is
reported again; a transactional handler's transaction open past ``transaction_warning`` is
reported once per attempt; observers without ``on_error`` (or whose ``on_error`` raises)
keep working; no payload reaches the error text or the logs."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from golemq_pg import JobEvent, PostgresStore, Queue, Transition, Worker, WorkerError
from golemq_pg.worker.observers import RELAPSE_WINDOW
from tests.support.logs import captured_logs
from tests.support.observers import Recorder
from tests.support.outage_proxy import OutageProxy
from tests.support.waiting import wait_until

#: In every payload: it must never appear in an error text or a log line.
CANARY = "canary-" + uuid.uuid4().hex


class TransitionsOnly:
    """An observer without ``on_error``."""

    def __init__(self) -> None:
        self.outcomes: list[str] = []

    def on_transition(self, t: Transition) -> None:
        self.outcomes.append(t.outcome)


class RaisingOnError(TransitionsOnly):
    """An observer whose ``on_error`` raises (contained and logged by the worker)."""

    def on_error(self, e: WorkerError) -> None:
        raise RuntimeError(f"observer broke on {e.kind}")


@pytest.fixture
def proxy(pg_dsn: str) -> Iterator[OutageProxy]:
    proxy = OutageProxy(pg_dsn)
    try:
        yield proxy
    finally:
        proxy.down()


def _kinds(recorder: Recorder) -> dict[str, int]:
    counts: dict[str, int] = {}
    for error in recorder.errors:
        counts[error.kind] = counts.get(error.kind, 0) + 1
    return counts


def _outage(proxy: OutageProxy, queue: Queue, seconds: float) -> None:
    """Cut the worker off for ``seconds`` while a job runs into it (its completion and
    renewals fail) and jobs are added (its claims fail)."""
    slow = queue.add("work", {"sleep": 0.5, "secret": CANARY})
    wait_until(lambda: (s := queue.get(slow)) is not None and s.status == "running",
               timeout=10, what="the slow job started")
    proxy.down()
    # They run long enough to be renewed after the outage: the renewer recovers.
    queue.add_many("work", [{"n": n, "sleep": 0.3, "secret": CANARY} for n in range(5)])
    time.sleep(seconds)
    proxy.up()


def test_a_database_outage_is_one_error_per_service_and_a_new_one_is_reported_again(
    pg_store: PostgresStore, schema: str, proxy: OutageProxy
) -> None:
    queue = Queue(pg_store)  # the producer is not behind the proxy
    # A pool that stops waiting for a connection after half a second: the worker's claims,
    # completions and renewals fail over and over while the database is away (with the
    # default 30 s they would wait the short outage out).
    pool: ConnectionPool[Any] = ConnectionPool(
        proxy.dsn(), min_size=1, max_size=4, timeout=0.5, open=True,
        kwargs={"autocommit": True},
    )
    store = PostgresStore(pool, schema=schema)
    recorder, plain, raising = Recorder(), TransitionsOnly(), RaisingOnError()
    worker = Worker(store, poll_interval=0.05, lease_duration=3, lease_renew_interval=0.1,
                    observers=[recorder, plain, raising])

    @worker.handler("work", concurrency=2)
    def work(job: JobEvent[Any]) -> None:
        time.sleep(job.payload.get("sleep", 0))

    try:
        with captured_logs() as logs:
            worker.start()
            queue.add("work", {"secret": CANARY})
            wait_until(lambda: queue.count_by_status().get("succeeded") == 1, timeout=20)
            assert recorder.errors == []  # healthy: nothing reported

            _outage(proxy, queue, 2.0)
            wait_until(lambda: queue.count_by_status().get("succeeded") == 7, timeout=30,
                       what="every job after the first outage")
            first = _kinds(recorder)
            # Dozens of failed claims, completion and renewal retries: one report each.
            assert first["claim"] == 1, recorder.errors
            assert first["complete"] == 1, recorder.errors
            assert first["renew"] == 1, recorder.errors
            assert first["listen"] == 1, recorder.errors
            assert first.get("maintenance", 0) <= 1, recorder.errors
            assert first.get("schedule", 0) <= 1, recorder.errors

            time.sleep(RELAPSE_WINDOW + 0.5)  # healthy again for a while
            assert _kinds(recorder) == first
            _outage(proxy, queue, 2.0)
            wait_until(lambda: queue.count_by_status().get("succeeded") == 13, timeout=30,
                       what="every job after the second outage")
            second = _kinds(recorder)
            assert second["claim"] == 2, recorder.errors
            assert second["complete"] == 2, recorder.errors
            assert second["renew"] == 2, recorder.errors
            assert second["listen"] == 2, recorder.errors
            assert second.get("maintenance", 0) <= 2, recorder.errors
        worker.stop(timeout=5)
    finally:
        worker.stop(timeout=1)
        pool.close()
    worker_id = worker.worker_id
    for error in recorder.errors:
        assert error.worker_id == worker_id
        assert error.at.tzinfo is not None
        assert abs((datetime.now(UTC) - error.at).total_seconds()) < 120
        assert CANARY not in error.error
        assert 0 < len(error.error) <= 300
    # The type of the exception, then its first line.
    claim = recorder.errors_of("claim")[0].error
    assert claim.split(":", 1)[0].endswith(("Error", "Timeout")), claim
    # Observers without on_error, or whose on_error raises, keep getting transitions.
    assert plain.outcomes.count("succeeded") == 13
    assert raising.outcomes.count("succeeded") == 13
    text = logs.getvalue()
    assert CANARY not in text
    assert '"observer": "RaisingOnError"' in text


def _terminate(dsn: str, application_name: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = %s AND pid <> pg_backend_pid()", (application_name,)
        ).fetchone()
    return int(row[0]) if row else 0


def _kill_storm(dsn: str, app: str, seconds: float) -> int:
    """Terminate the worker's connections every 50 ms for ``seconds``; how many."""
    killed = 0
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        killed += _terminate(dsn, app)
        time.sleep(0.05)
    return killed


def test_killed_connections_are_one_claim_error_not_hundreds(pg_dsn: str, schema: str) -> None:
    app = "werr-" + uuid.uuid4().hex[:10]
    store = PostgresStore.connect(pg_dsn, schema=schema, max_size=4, application_name=app)
    store.migrate()
    recorder = Recorder()
    worker = Worker(store, poll_interval=0.01, notify=False, observers=[recorder])
    done = threading.Event()

    @worker.handler("work")
    def work(job: JobEvent[Any]) -> None:
        done.set()

    queue = Queue(store)
    try:
        worker.start()
        killed = _kill_storm(pg_dsn, app, 1.5)
        assert killed >= 10
        errors = recorder.wait_for_error("claim")
        time.sleep(RELAPSE_WINDOW + 0.5)
        assert len(recorder.errors_of("claim")) == 1, recorder.errors
        assert "terminat" in errors[0].error.lower() or "connection" in errors[0].error.lower()
        queue.add("work", {"secret": CANARY})
        assert done.wait(10)  # recovered: it claims again
        # A new incident, after a healthy stretch, is reported again.
        _kill_storm(pg_dsn, app, 0.5)
        recorder.wait_for_error("claim", 2)
        time.sleep(RELAPSE_WINDOW + 0.5)
        assert len(recorder.errors_of("claim")) == 2, recorder.errors
    finally:
        worker.stop(timeout=5)
        store.close()


def test_a_slow_transaction_is_reported_once_per_attempt(
    pg_store: PostgresStore, schema: str
) -> None:
    recorder = Recorder()
    worker = Worker(pg_store, poll_interval=0.05, observers=[recorder])

    @worker.handler("charge", transactional=True, transaction_warning=0.2)
    def charge(job: JobEvent[Any]) -> None:
        time.sleep(job.payload["sleep"])

    queue = Queue(pg_store)
    with captured_logs() as logs:
        slow = queue.add("charge", {"sleep": 0.8, "secret": CANARY})
        fast = queue.add("charge", {"sleep": 0.0, "secret": CANARY})
        worker.run_until_empty(timeout=30)
    errors = recorder.errors_of("transaction-slow")
    assert len(errors) == 1, recorder.errors  # the slow attempt, once; the fast one, never
    assert f"job {slow} ('charge'" in errors[0].error
    assert f"job {fast} " not in errors[0].error
    assert CANARY not in errors[0].error
    assert errors[0].worker_id == worker.worker_id
    text = logs.getvalue()
    assert text.count('"transaction_slow"') == 1
    assert CANARY not in text
    assert queue.count_by_status().get("succeeded") == 2


def test_a_slow_transaction_without_a_warning_or_observer_is_not_reported(
    pg_store: PostgresStore, schema: str
) -> None:
    recorder = Recorder()
    plain = TransitionsOnly()
    warned = Worker(pg_store, poll_interval=0.05, observers=[plain])

    @warned.handler("a", transactional=True, transaction_warning=0.1)
    def a(job: JobEvent[Any]) -> None:
        time.sleep(0.3)

    quiet = Worker(pg_store, poll_interval=0.05, observers=[recorder])

    @quiet.handler("b", transactional=True)
    def b(job: JobEvent[Any]) -> None:
        time.sleep(0.3)

    queue = Queue(pg_store)
    queue.add("a", {})
    queue.add("b", {})
    with captured_logs() as logs:
        warned.run_until_empty(timeout=30)
        quiet.run_until_empty(timeout=30)
    # Only logged for the worker whose handler has a warning; its observer has no on_error.
    assert logs.getvalue().count('"transaction_slow"') == 1
    assert plain.outcomes.count("succeeded") == 1
    assert recorder.errors == []
