"""docs/RELIABILITY.md, bad input: hostile names.

Names that are valid (quotes, ``;``, ``--``, ``%s``, ``$$``, unicode, 255 characters...) must
round-trip through SQL unchanged on both stores, including the NOTIFY hint a worker parses;
names that are not (empty, 256+ characters, NUL, not a string) and bad schema names get a
clear error before any SQL and change nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg_pool import ConnectionPool

from golemq_pg import JobEvent, JobStatus, PostgresStore, Queue, QueueConfigError, Worker
from golemq_pg._types import Resource

HOSTILE = [
    "x'; DROP TABLE jobs; --",
    'dq"uote"',
    "semi;colon",
    "pct %s %(x)s {} {0}",
    "$$dollar$$ $tag$",
    "back\\slash\\",
    "ünïcødé ✓ 日本語 🚀",
    "new\nline\ttab",
    "' OR '1'='1",
    "LISTEN x; NOTIFY y",
    "x" * 255,
]

TOO_LONG = "y" * 256
BAD_NAMES: list[Any] = ["", "   ", TOO_LONG, "nul\x00byte", None, 7, b"bytes"]


def _rows(store: Any) -> tuple[int, int]:
    return sum(store.job_count_by_status().values()), len(store.schedule_list())


@pytest.mark.parametrize("name", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_valid_names_round_trip_through_every_verb(store: Any, name: str) -> None:
    queue = Queue(store)
    scope = (name, name)
    job_id = queue.add(name, {"n": name}, scope=scope, dedupe_key=name)
    assert job_id is not None
    assert queue.add(name, {"n": 2}, scope=scope, dedupe_key=name) is None  # same key
    job = queue.get(job_id)
    assert job is not None
    assert (job.type, job.scope) == (name, scope)
    assert [j.id for j in queue.find(types=[name])] == [job_id]
    assert [j.id for j in queue.find(scope_type=name, scope_id=name)] == [job_id]
    assert [j.id for j in queue.find_for_scope(scope)] == [job_id]
    assert queue.cancel_by_dedupe_keys(name, [name]) == 1
    assert queue.add_many(name, [{"i": i} for i in range(3)], scope=scope) == 3
    assert queue.cancel_pending_for_scope(scope) == 3
    queue.schedule(name, name, {"k": name}, every=3600, scope=scope)
    assert [(s.key, s.type) for s in queue.schedules()] == [(name, name)]
    assert queue.unschedule(name) is True
    assert _rows(store) == (0, 0)


def test_hostile_type_names_reach_the_worker_through_the_notify_hint(
    pg_store: PostgresStore,
) -> None:
    queue = Queue(pg_store)
    worker = Worker(pg_store, poll_interval=30)  # only the hint can explain a fast start
    seen: list[str] = []
    arrived = threading.Event()
    names = HOSTILE[:6]

    def handle(job: JobEvent[Any]) -> None:
        seen.append(job.type)
        if len(seen) == len(names):
            arrived.set()

    for name in names:
        worker.handler(name)(handle)
    worker.start()
    try:
        time.sleep(0.3)  # idle: past the first poll
        for name in names:
            queue.add(name, {})
        assert arrived.wait(10)
    finally:
        worker.stop()
    assert sorted(seen) == sorted(names)
    assert queue.count_by_status()[JobStatus.SUCCEEDED] == len(names)


@pytest.mark.parametrize("bad", BAD_NAMES, ids=range(len(BAD_NAMES)))
def test_bad_names_are_refused_everywhere_and_write_nothing(store: Any, bad: Any) -> None:
    queue = Queue(store)
    calls = [
        lambda: queue.add(bad, {}),
        lambda: queue.add("t", {}, scope=(bad, "id")),
        lambda: queue.add("t", {}, scope=("Type", bad)),
        lambda: queue.add_many(bad, [{}]),
        lambda: queue.add_many("t", [{}], scope=("Type", bad)),
        lambda: queue.schedule(bad, "t", {}, every=60),
        lambda: queue.schedule("k", bad, {}, every=60),
        lambda: queue.cancel_by_dedupe_keys("t", [bad]),
        lambda: queue.cancel_for_scope(("Type", bad)),
        lambda: queue.find(types=[bad]),
        lambda: queue.retry_failed(types=[bad]),
        lambda: queue.unschedule(bad),
    ]
    if bad is not None:  # None means "no key" / "no filter" for these
        calls += [
            lambda: queue.add("t", {}, dedupe_key=bad),
            lambda: queue.find(scope_type=bad),
            lambda: queue.find(scope_id=bad),
        ]
    for call in calls:
        with pytest.raises(ValueError):
            call()
    with pytest.raises(ValueError, match="job type"):
        queue.add(bad, {})
    assert _rows(store) == (0, 0)


@pytest.mark.parametrize("bad", BAD_NAMES, ids=range(len(BAD_NAMES)))
def test_bad_names_in_worker_configuration(mem_store: Any, bad: Any) -> None:
    worker = Worker(mem_store)
    with pytest.raises(QueueConfigError):
        worker.handler(bad)(lambda job: None)
    with pytest.raises(QueueConfigError):
        worker.handler("t", not_while_running=[bad])(lambda job: None)
    with pytest.raises(QueueConfigError):
        worker.handler("t", waits_for=[bad])(lambda job: None)
    if bad is not None:
        with pytest.raises(QueueConfigError):
            Worker(mem_store, worker_id=bad)
    with pytest.raises(QueueConfigError):
        Worker(mem_store, resources={bad: Resource(concurrency=1, types=["t"])})
    with pytest.raises(QueueConfigError):
        Worker(mem_store, resources={"api": Resource(concurrency=1, types=[bad])})


BAD_SCHEMAS = ['x"; DROP SCHEMA public; --', "Upper", "1digit", "a-b", "ü", "x" * 64, "",
               "a b", "a;b", "pg_toast.x"]


@pytest.mark.parametrize("schema", BAD_SCHEMAS, ids=range(len(BAD_SCHEMAS)))
def test_bad_schema_names_are_refused_before_any_connection(pg_dsn: str, schema: str) -> None:
    with pytest.raises(ValueError, match="schema"):
        PostgresStore.connect(pg_dsn, schema=schema)
    pool: ConnectionPool[Any] = ConnectionPool(pg_dsn, min_size=1, max_size=1, open=False)
    with pytest.raises(ValueError, match="schema"):
        PostgresStore(pool, schema=schema)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        found = conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s",
                             (schema,)).fetchone()
    assert found == (0,)


def test_the_cli_refuses_a_bad_schema_name_with_a_usage_error(pg_dsn: str) -> None:
    env = {**os.environ, "GOLEMQ_DSN": pg_dsn}
    for args in (["migrate"], ["stats"], ["enqueue", "t", "{}"]):
        result = subprocess.run(
            [sys.executable, "-m", "golemq_pg.cli", *args, "--schema", 'x"; DROP TABLE t; --'],
            capture_output=True, text=True, env=env, timeout=60, check=False,
        )
        assert result.returncode == 2, result.stderr
        assert "schema" in result.stderr
        assert "Traceback" not in result.stderr


def test_a_long_schema_name_gets_distinct_short_channels(pg_dsn: str) -> None:
    # 63 characters: the NOTIFY channel (an identifier too) is shortened with a hash, and
    # two long schemas sharing a prefix stay two independent queues.
    names = ["s" * 50 + "_alpha_" + "x" * 5, "s" * 50 + "_beta__" + "x" * 5]
    stores = [PostgresStore.connect(pg_dsn, schema=n, max_size=2) for n in names]
    try:
        channels = []
        for store in stores:
            store.migrate()
            channels.append(store.channels())
            Queue(store).add("t", {})
        assert channels[0] != channels[1]
        assert all(len(c.encode()) <= 63 for pair in channels for c in pair)
        assert [sum(s.job_count_by_status().values()) for s in stores] == [1, 1]
    finally:
        for store in stores:
            store.close()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            for name in names:
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE")
                             .format(sql.Identifier(name)))
