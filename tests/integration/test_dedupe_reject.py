"""Dedupe by rejection (on_duplicate="reject"): while a job of a key is PENDING or RUNNING, no
second one is admitted, whatever the store and however adds, claims and completions
interleave (racing connections included). Replacing duplicates is in test_replace.py."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest
from psycopg import sql

from golemq_pg import PostgresStore, Queue, Worker
from golemq_pg.store.port import FailItem
from tests.support.store_port import claim, count_rows

KEYS = [f"k{i}" for i in range(4)]
STORM_SECONDS = 3.0


def test_reject_never_admits_a_second_live_job_of_a_key(pg_store: PostgresStore) -> None:
    """Three producers add four keys as fast as they can while a worker claims and completes
    them, and a sampler reads the live jobs of every key from committed snapshots. Before
    the claim race was closed, the sampler found a pending and a running job of one key
    thousands of times in 10 s; before the key lock, dozens of times (an add that waited for
    a racing add of its key found that job already claimed)."""
    queue = Queue(pg_store)
    schema = sql.Identifier(pg_store.schema)
    stop = threading.Event()
    doubles: list[tuple[Any, ...]] = []
    added: list[int] = [0, 0, 0]

    def produce(slot: int) -> None:
        while not stop.is_set():
            for key in KEYS:
                if queue.add("t", {}, dedupe_key=key) is not None:
                    added[slot] += 1

    def sample() -> None:
        query = sql.SQL(
            "SELECT dedupe_key, count(*) FROM {}.jobs_all WHERE status IN ('pending', 'running') "
            "GROUP BY 1 HAVING count(*) > 1").format(schema)
        with psycopg.connect(pg_store.dsn or "", autocommit=True) as conn:
            while not stop.is_set():
                doubles.extend(conn.execute(query).fetchall())

    worker = Worker(pg_store, poll_interval=0.05)
    worker.handler("t", concurrency=4)(lambda job: time.sleep(0.001))
    threads = [threading.Thread(target=produce, args=(i,)) for i in range(3)]
    threads.append(threading.Thread(target=sample))
    worker.start()
    try:
        for thread in threads:
            thread.start()
        time.sleep(STORM_SECONDS)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        worker.stop()
    assert sum(added) > 50  # the storm ran: keys were freed and added again many times
    assert doubles == []


def _waiting_on_advisory_lock(dsn: str, application_name: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
            "AND wait_event_type = 'Lock' AND wait_event = 'advisory'",
            (application_name,)).fetchone()
    return bool(row and row[0])


def test_an_add_in_an_open_transaction_holds_its_key_until_commit(
    pg_dsn: str, schema: str,
) -> None:
    """A keyed add inside the caller's transaction keeps the key's lock to its commit (as
    the unique index would hold a second pending add): a second add of the key waits, then
    sees the committed job and is rejected. Other keys do not wait."""
    store = PostgresStore.connect(pg_dsn, schema=schema, min_size=1, max_size=4)
    try:
        store.migrate()
        queue = Queue(store)
        result: list[str | None] = []
        with psycopg.connect(pg_dsn) as caller:
            first = queue.add("t", {"n": 1}, dedupe_key="k", connection=caller)
            assert first is not None
            assert queue.add("t", {"n": 1}, dedupe_key="other") is not None  # no wait

            def second() -> None:
                result.append(queue.add("t", {"n": 2}, dedupe_key="k"))

            thread = threading.Thread(target=second)
            thread.start()
            deadline = time.monotonic() + 10
            while not _waiting_on_advisory_lock(pg_dsn, _app_name(store)):
                assert thread.is_alive()
                assert time.monotonic() < deadline
                time.sleep(0.01)
            assert result == []
            caller.commit()
            thread.join(timeout=10)
        assert result == [None]
        assert [j.id for j in queue.find(types=["t"]) if j.id == first] == [first]
    finally:
        store.close()


def _app_name(store: PostgresStore) -> str:
    with store.pool.connection() as conn:
        row = conn.execute("SHOW application_name").fetchone()
    assert row is not None
    return str(row[0])


@pytest.mark.parametrize("mode", ["reject", "replace"])
def test_keyed_adds_leave_no_lock_behind(pg_store: PostgresStore, mode: str) -> None:
    queue = Queue(pg_store)
    assert queue.add("t", {}, dedupe_key="k", on_duplicate=mode) is not None  # type: ignore[arg-type]
    # The key's lock (job_enqueue_key_lock's key), looked up by its value: other sessions of
    # a shared server may hold advisory locks of their own meanwhile.
    key = f"{pg_store.schema}:dedupe:1:tk"
    with pg_store.pool.connection() as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
            " AND ((classid::bigint << 32) | objid::bigint) = hashtextextended(%s, 0)",
            [key],
        ).fetchone()
    assert row == (0,)


def test_dedupe_reject(store: Any) -> None:
    queue = Queue(store)
    first = queue.add("t", {"v": 1}, dedupe_key="k1")
    assert first is not None
    assert queue.add("t", {"v": 2}, dedupe_key="k1") is None
    # Keys are scoped by type.
    assert queue.add("other", {"v": 3}, dedupe_key="k1") is not None
    # Still rejected while running.
    claimed = claim(store, "t")
    assert [j.id for j in claimed] == [first]
    assert queue.add("t", {"v": 4}, dedupe_key="k1") is None
    # Free again once finished.
    store.job_fail_many("w1", [FailItem(first, claimed[0].lease_token, "boom")])
    assert queue.add("t", {"v": 5}, dedupe_key="k1") is not None


def test_two_connections_racing_one_dedupe_key(pg_store: PostgresStore, pg_dsn: str) -> None:
    queue = Queue(pg_store)
    barrier = threading.Barrier(8)
    results: list[str | None] = []
    lock = threading.Lock()

    def producer() -> None:
        with psycopg.connect(pg_dsn) as conn:
            barrier.wait()
            job_id = queue.add("t", {}, dedupe_key="same", connection=conn)
            conn.commit()
            with lock:
                results.append(job_id)

    threads = [threading.Thread(target=producer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [r for r in results if r is not None]
    assert len(winners) == 1
    assert count_rows(pg_store) == 1
