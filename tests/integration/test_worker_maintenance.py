"""Maintenance and resilience: blocked-type warnings, a lost LISTEN connection, killed pool
connections. Retention is in test_retention.py, schedules in test_schedules.py."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from typing import Any

import psycopg
import structlog

from golemq_pg import JobEvent, JobStatus, PostgresStore, Queue, Worker
from tests.support.ledgers import effects, effects_table, record_effect
from tests.support.waiting import wait_until


def test_a_type_blocked_for_many_polls_logs_what_blocks_it(store: Any) -> None:
    queue = Queue(store)
    queue.add("import", {})  # nobody here handles it: "report" waits for it forever
    queue.add("report", {})
    worker = Worker(store, poll_interval=0.01)
    worker.handler("report", waits_for=["import"])(lambda job: None)
    with structlog.testing.capture_logs() as logs:
        worker.start()
        try:
            wait_until(lambda: [e for e in logs if e["event"] == "type_blocked"], timeout=10)
            time.sleep(0.3)  # the streak goes on: still one warning
        finally:
            worker.stop()
    warnings = [e for e in logs if e["event"] == "type_blocked"]
    assert len(warnings) == 1
    assert warnings[0]["type"] == "report"
    assert warnings[0]["blocked_by"] == "type import"


def _terminate(dsn: str, application_name: str, *, listen_only: bool = False) -> int:
    """Kill this test's backends (by application name), or only its LISTEN connection."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = %s AND pid <> pg_backend_pid() "
            "AND (NOT %s OR query LIKE 'LISTEN%%')",
            (application_name, listen_only),
        ).fetchall()
    return len(rows)


def test_a_dropped_listen_connection_reconnects_and_repolls(pg_dsn: str, schema: str) -> None:
    app = "wtest-" + uuid.uuid4().hex[:10]
    store = PostgresStore.connect(pg_dsn, schema=schema, max_size=4, application_name=app)
    store.migrate()
    try:
        queue = Queue(store)
        worker = Worker(store, poll_interval=30)  # only hints (and re-polls) can be fast
        done: list[str] = []
        lock = threading.Lock()

        @worker.handler("hinted", concurrency=4)
        def hinted(job: JobEvent[Any]) -> None:
            with lock:
                done.append(job.id)

        worker.start()
        try:
            time.sleep(0.3)
            assert _terminate(pg_dsn, app, listen_only=True) >= 1
            queue.add_many("hinted", [{"n": n} for n in range(100)])
            wait_until(lambda: len(done) == 100, timeout=15)
            assert queue.add("hinted", {"after": True})
            wait_until(lambda: len(done) == 101, timeout=5)  # LISTEN works again
        finally:
            worker.stop(timeout=2)
    finally:
        store.close()


def test_killed_pool_connections_do_not_stop_the_drain(pg_dsn: str, schema: str) -> None:
    app = "wtest-" + uuid.uuid4().hex[:10]
    store = PostgresStore.connect(pg_dsn, schema=schema, max_size=6, application_name=app)
    store.migrate()
    effects_table(pg_dsn, schema)
    try:
        queue = Queue(store)
        queue.add_many("work", [{"n": n} for n in range(3000)])
        worker = Worker(store, poll_interval=0.05, batch_size=50)
        count = [0]
        lock = threading.Lock()
        # The ledger has its own connection (another application name): only the
        # worker's connections are killed.
        ledger = psycopg.connect(pg_dsn, autocommit=True)

        @worker.handler("work", concurrency=4)
        def work(job: JobEvent[Any]) -> None:
            with lock:
                record_effect(ledger, schema, job.id, job.attempt, "w")
                count[0] += 1

        worker.start()
        try:
            wait_until(lambda: count[0] >= 300, timeout=60)
            for _ in range(3):
                _terminate(pg_dsn, app)
                time.sleep(0.1)
            wait_until(lambda: queue.count_by_status()[JobStatus.SUCCEEDED] == 3000, timeout=120,
                       interval=0.1)
        finally:
            worker.stop(timeout=2)
            ledger.close()
        per_job = Counter(row[0] for row in effects(pg_dsn, schema))
        assert len(per_job) == 3000
        assert max(per_job.values()) == 1
    finally:
        store.close()
