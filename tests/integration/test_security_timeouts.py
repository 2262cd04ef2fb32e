"""docs/RELIABILITY.md, security: worker connections set statement_timeout, lock_timeout and
idle_in_transaction_session_timeout, so a stuck statement cannot wedge the queue.

Checked on the connections a running Worker actually uses (its pool, its LISTEN connection)
with SHOW, and for effect: each timeout ends what it should.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest
from psycopg import sql

from golemq_pg import JobEvent, JobStatus, PostgresStore, Queue, Worker
from tests.support.waiting import wait_until

SETTINGS = ("statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout")


def _show(conn: psycopg.Connection[Any]) -> dict[str, str]:
    return {name: str(conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(name)))
                      .fetchone()[0]) for name in SETTINGS}  # type: ignore[index]


def test_defaults_on_the_pool_and_the_listen_connection_of_a_running_worker(
    pg_dsn: str, schema: str,
) -> None:
    store = PostgresStore.connect(pg_dsn, schema=schema, max_size=4)
    store.migrate()
    try:
        seen: list[dict[str, str]] = []
        worker = Worker(store, poll_interval=0.05)

        @worker.handler("probe")
        def probe(job: JobEvent[Any]) -> None:
            # A connection of the pool the worker claims, renews and completes with.
            with store.pool.connection() as conn:
                seen.append(_show(conn))

        Queue(store).add("probe", {})
        worker.run_until_empty(timeout=20)
        assert seen == [{"statement_timeout": "30s", "lock_timeout": "10s",
                         "idle_in_transaction_session_timeout": "1min"}]
        listener = store.open_listener()
        assert listener is not None
        try:
            conn = listener.connection  # type: ignore[attr-defined]
            assert _show(conn) == seen[0]
        finally:
            listener.close()
    finally:
        store.close()


def test_custom_values_and_zero_disables(pg_dsn: str, schema: str) -> None:
    store = PostgresStore.connect(pg_dsn, schema=schema, max_size=1, statement_timeout=2.5,
                                  lock_timeout=0.25, idle_in_transaction_session_timeout=0)
    try:
        with store.pool.connection() as conn:
            assert _show(conn) == {"statement_timeout": "2500ms", "lock_timeout": "250ms",
                                   "idle_in_transaction_session_timeout": "0"}
    finally:
        store.close()


def test_each_timeout_ends_what_it_should(pg_dsn: str, schema: str) -> None:
    store = PostgresStore.connect(pg_dsn, schema=schema, max_size=2, statement_timeout=0.3,
                                  lock_timeout=0.2, idle_in_transaction_session_timeout=0.3)
    store.migrate()
    try:
        with store.pool.connection() as conn, pytest.raises(psycopg.errors.QueryCanceled):
            conn.execute("SELECT pg_sleep(2)")
        job_id = Queue(store).add("t", {})
        with psycopg.connect(pg_dsn) as blocker, store.pool.connection() as conn:
            blocker.execute(sql.SQL("SELECT 1 FROM {}.jobs FOR UPDATE")
                            .format(sql.Identifier(schema)))
            started = time.monotonic()
            with pytest.raises(psycopg.errors.LockNotAvailable):
                conn.execute(sql.SQL("UPDATE {}.jobs SET priority = 1 WHERE id = %s")
                             .format(sql.Identifier(schema)), (int(job_id),))  # type: ignore[arg-type]
            assert time.monotonic() - started < 1.5
        with store.pool.connection() as conn:
            conn.execute("BEGIN")
            conn.execute("SELECT 1")
            time.sleep(1.0)  # idle in transaction past the timeout: the server ends it
            with pytest.raises(psycopg.errors.IdleInTransactionSessionTimeout):
                conn.execute("SELECT 1")
    finally:
        store.close()


def test_a_worker_survives_a_lock_held_past_lock_timeout(pg_dsn: str, schema: str) -> None:
    # The completion of a job whose row someone else keeps locked fails fast (lock_timeout)
    # and is retried; the worker neither hangs nor loses the outcome.
    store = PostgresStore.connect(pg_dsn, schema=schema, max_size=4, lock_timeout=0.1)
    store.migrate()
    try:
        queue = Queue(store)
        job_id = queue.add("locked", {})
        ran = threading.Event()
        release = threading.Event()
        worker = Worker(store, poll_interval=0.05, lease_grace=30)

        @worker.handler("locked")
        def locked(job: JobEvent[Any]) -> None:
            ran.set()
            release.wait(10)

        with psycopg.connect(pg_dsn) as blocker:
            worker.start()
            try:
                assert ran.wait(10)
                # shown running once the start marker wrote the handler's start (50 ms)
                wait_until(lambda: queue.get(job_id).status is JobStatus.RUNNING,  # type: ignore[arg-type,union-attr]
                           timeout=5, what="the job shown running")
                blocker.execute(sql.SQL("SELECT 1 FROM {}.jobs WHERE id = %s FOR UPDATE")
                                .format(sql.Identifier(schema)), (int(job_id),))  # type: ignore[arg-type]
                release.set()
                time.sleep(1.0)  # completion attempts time out on the lock meanwhile
                assert queue.get(job_id).status is JobStatus.RUNNING  # type: ignore[arg-type,union-attr]
                blocker.rollback()
                deadline = time.monotonic() + 10
                while (queue.get(job_id).status is not JobStatus.SUCCEEDED  # type: ignore[arg-type,union-attr]
                       and time.monotonic() < deadline):
                    time.sleep(0.05)
            finally:
                worker.stop(timeout=2)
        assert queue.get(job_id).status is JobStatus.SUCCEEDED  # type: ignore[arg-type,union-attr]
    finally:
        store.close()
