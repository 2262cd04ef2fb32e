"""The Queue producer/admin API against both stores (add, get, find, counts, retry_failed,
bad arguments), and PostgreSQL-only transaction and bulk cases. Cancel, dedupe, schedule,
prune and grouped cases live with their behaviour (test_cancel.py, test_dedupe_reject.py,
test_replace.py, test_schedules.py, test_retention.py, test_grouped.py)."""

from __future__ import annotations

import re
import tempfile
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import pq, sql

from golemq_pg import (
    JobStatus,
    PostgresStore,
    Queue,
    QueuePayloadError,
    Scope,
)
from golemq_pg.store.port import (
    EnqueueManyParams,
    FailItem,
)
from tests.support.observers import Recorder
from tests.support.store_port import claim, count_rows, slots

CANARY = "canary-secret-q81"


def test_add_get_and_summary_fields(store: Any) -> None:
    rec = Recorder()
    queue = Queue(store, observers=[rec])
    job_id = queue.add("article.extract", {"article_id": "a1"}, scope=("Article", "a1"),
                       priority=5, max_attempts=4)
    assert isinstance(job_id, str)
    job = queue.get(job_id)
    assert job is not None
    assert job.type == "article.extract"
    assert job.scope == Scope("Article", "a1")
    assert job.status is JobStatus.PENDING
    assert (job.attempts, job.max_attempts, job.priority) == (0, 4, 5)
    assert job.run_at.tzinfo is not None
    assert job.started_at is None
    assert job.finished_at is None
    assert [e.outcome for e in rec.transitions] == ["enqueued"]
    assert queue.get("999999999") is None


def test_delay_and_run_at_make_jobs_scheduled(store: Any) -> None:
    queue = Queue(store)
    queue.add("t", {}, delay=3600)
    queue.add("t", {}, run_at=datetime.now(UTC) + timedelta(hours=2))
    queue.add("t", {}, delay=timedelta(0))
    stats = queue.stats()
    assert stats == {"pending": 1, "scheduled": 2, "running": 0, "succeeded": 0, "failed": 0,
                     "waiting": 0}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"delay": -1}, "delay"),
        ({"delay": float("nan")}, "delay"),
        ({"delay": 1, "run_at": datetime.now(UTC)}, "not both"),
        ({"run_at": datetime(2026, 1, 1)}, "timezone-aware"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": 1.5}, "max_attempts"),
        ({"scope": ("Article",)}, "scope"),
        ({"scope": ("", "x")}, "scope"),
        ({"dedupe_key": ""}, "dedupe_key"),
        ({"dedupe_key": "k" * 256}, "dedupe_key"),
        ({"on_duplicate": "merge"}, "on_duplicate"),
        ({"priority": 2**40}, "priority"),
    ],
)
def test_bad_arguments_write_nothing(store: Any, kwargs: dict[str, Any], match: str) -> None:
    queue = Queue(store)
    with pytest.raises(ValueError, match=match):
        queue.add("t", {"secret": CANARY}, **kwargs)
    assert count_rows(store) == 0


def test_bad_payloads_write_nothing_and_hide_the_payload(store: Any) -> None:
    queue = Queue(store)
    for bad in ({"k": {1, 2}, "s": CANARY}, {"s": CANARY, "b": b"x"}, {"n": float("inf")}):
        with pytest.raises(QueuePayloadError) as info:
            queue.add("email.send", bad)
        assert CANARY not in str(info.value)
        assert "email.send" in str(info.value)
    with pytest.raises(QueuePayloadError):
        queue.add_many("email.send", [{"ok": 1}, {"bad": {1}}])
    assert count_rows(store) == 0


def test_bad_type_names_write_nothing(store: Any) -> None:
    queue = Queue(store)
    for bad in ("", "x" * 256, None, 7):
        with pytest.raises(ValueError, match="job type"):
            queue.add(bad, {})  # type: ignore[call-overload]
    assert count_rows(store) == 0


def test_add_many_and_counts(store: Any) -> None:
    queue = Queue(store)
    assert queue.add_many("email.send", [{"i": i} for i in range(250)]) == 250
    assert queue.add_many("email.send", []) == 0
    assert queue.add_many("email.send", [{"i": 1}], delay=60) == 1
    counts = queue.count_by_status()
    assert counts == {JobStatus.PENDING: 251, JobStatus.RUNNING: 0, JobStatus.SUCCEEDED: 0,
                      JobStatus.FAILED: 0, JobStatus.WAITING: 0}
    assert queue.stats()["pending"] == 250
    assert queue.stats()["scheduled"] == 1


def test_find_filters_and_paging(store: Any) -> None:
    queue = Queue(store)
    ids = [queue.add("a", {"i": i}, scope=("S", str(i % 2))) for i in range(6)]
    queue.add("b", {})
    found = queue.find(types=["a"], limit=3)
    assert [j.id for j in found] == list(reversed(ids))[:3]
    assert [j.id for j in queue.find(types=["a"], limit=3, skip=3)] == list(reversed(ids))[3:]
    assert {j.id for j in queue.find(scope_type="S", scope_id="1")} == set(ids[1::2])
    assert len(queue.find_for_scope(("S", "0"))) == 3
    assert queue.find(statuses=[JobStatus.FAILED]) == []
    with pytest.raises(ValueError, match="status"):
        queue.find(statuses=["bogus"])
    with pytest.raises(ValueError, match="limit"):
        queue.find(limit=0)


def test_retry_failed_without_limit_touches_every_match(store: Any) -> None:
    queue = Queue(store)
    queue.add_many("t", [{"i": i} for i in range(120)], max_attempts=1)
    queue.add("u", {}, max_attempts=1)
    claimed = claim(store, slots("t", limit=200)) + claim(store, "u")
    store.job_fail_many("w1", [FailItem(j.id, j.lease_token, "Boom: x") for j in claimed])
    assert queue.count_by_status()[JobStatus.FAILED] == 121
    assert queue.retry_failed(types=["t"], limit=20) == 20
    assert queue.retry_failed(types=["t"]) == 100
    pending = queue.find(types=["t"], statuses=[JobStatus.PENDING], limit=500)
    assert len(pending) == 120
    assert all(j.attempts == 0 and j.last_error is None for j in pending)
    assert queue.count_by_status()[JobStatus.FAILED] == 1


# -- PostgreSQL-only: transactions, races, bulk ---------------------------------------------


def test_enqueue_inside_caller_transaction(pg_store: PostgresStore, pg_dsn: str) -> None:
    queue = Queue(pg_store)
    with psycopg.connect(pg_dsn) as conn:
        queue.add("t", {"v": "rolled back"}, connection=conn)
        queue.add_many("t", [{"v": i} for i in range(3)], connection=conn)
        conn.rollback()
        assert count_rows(pg_store) == 0
        kept = queue.add("t", {"v": "kept"}, connection=conn)
        assert kept is not None
        assert queue.get(kept) is None  # not visible before commit
        conn.commit()
    assert queue.get(kept) is not None


def test_add_many_100k(pg_store: PostgresStore) -> None:
    queue = Queue(pg_store)
    assert queue.add_many("bulk", ({"i": i} for i in range(100_000))) == 100_000
    assert queue.stats()["pending"] == 100_000


def _sql_sent(message: str) -> str:
    """The statement of a traced Query message, without its SQL comment lines."""
    text = message.split('"', 1)[1]
    return "\n".join(line for line in text.splitlines() if not line.startswith("--")).strip()


def test_add_many_is_one_copy_without_begin_or_commit(pg_dsn: str, schema: str) -> None:
    # One pooled connection, traced by libpq: what one add_many sends to the server.
    if pq.version() < 140000:
        pytest.skip("libpq tracing needs libpq 14")
    with PostgresStore.connect(pg_dsn, schema=schema, min_size=1, max_size=1) as store:
        store.migrate()
        queue = Queue(store)
        with tempfile.TemporaryFile("w+") as trace:
            with store.pool.connection() as conn:
                conn.pgconn.trace(trace.fileno())
                conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
            try:
                assert queue.add_many("t", [{"i": i} for i in range(3)]) == 3
                assert queue.add_many("t", [{"i": 1}], delay=60) == 1
            finally:
                with store.pool.connection() as conn:
                    conn.pgconn.untrace()
            stats = queue.stats()
            assert stats["pending"] == 3
            assert stats["scheduled"] == 1
            trace.seek(0)
            # A message starts a line with F (frontend) or B, its length and its name; SQL
            # text with newlines continues on the following lines.
            messages = re.split(r"\n(?=[FB]\t\d+\t)", trace.read())
        queries = [_sql_sent(m) for m in messages if m.startswith("F") and "\tQuery\t" in m]
        parses = [m for m in messages if m.startswith("F") and "\tParse\t" in m]
    # The COPYs are the only simple queries (no BEGIN, no COMMIT); the delayed one also
    # reads the due time.
    assert len(queries) == 2
    assert all(q.startswith("COPY") for q in queries)
    assert len(parses) == 1
    assert "now()" in parses[0]


def test_bulk_copy_is_all_or_nothing_on_its_own(pg_store: PostgresStore) -> None:
    # No explicit transaction around the COPY: a row the server refuses (bytes that bypass
    # the Queue's validation here) must still leave no row behind, and the pool usable.
    with pytest.raises(psycopg.DataError):
        pg_store.job_enqueue_many(EnqueueManyParams(type="t", payloads=[b"{}", b"{}", b"{"]))
    assert count_rows(pg_store) == 0
    assert Queue(pg_store).add_many("t", [{}, {}]) == 2
    assert count_rows(pg_store) == 2


def test_two_schemas_are_two_queues(pg_dsn: str, schema: str) -> None:
    other = schema + "_b"
    with PostgresStore.connect(pg_dsn, schema=schema) as a, \
            PostgresStore.connect(pg_dsn, schema=other) as b:
        try:
            a.migrate()
            b.migrate()
            Queue(a).add("t", {})
            assert Queue(b).stats()["pending"] == 0
            assert Queue(a).stats()["pending"] == 1
        finally:
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                    sql.Identifier(other)))
