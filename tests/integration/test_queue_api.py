"""The Queue producer/admin API against both stores, and PostgreSQL-only transaction cases."""

from __future__ import annotations

import re
import tempfile
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import pq, sql

from golemq_pg import (
    JobStatus,
    JobType,
    PostgresStore,
    Queue,
    QueuePayloadError,
    Scope,
    Transition,
)
from golemq_pg.store.port import (
    ClaimRequest,
    EnqueueManyParams,
    FailItem,
    LeaseRef,
    TypeSlots,
)

CANARY = "canary-secret-q81"


class Recorder:
    def __init__(self) -> None:
        self.events: list[Transition] = []

    def on_transition(self, t: Transition) -> None:
        self.events.append(t)


def _claim(store: Any, job_type: str, n: int = 10, owner: str = "w1") -> list[Any]:
    return list(
        store.job_claim(
            ClaimRequest(owner=owner, types=[TypeSlots(type=job_type, limit=n, lease_seconds=30)])
        )
    )


def _count_rows(store: Any) -> int:
    return sum(store.job_count_by_status().values())


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
    assert [e.outcome for e in rec.events] == ["enqueued"]
    assert queue.get("999999999") is None


def test_delay_and_run_at_make_jobs_scheduled(store: Any) -> None:
    queue = Queue(store)
    queue.add("t", {}, delay=3600)
    queue.add("t", {}, run_at=datetime.now(UTC) + timedelta(hours=2))
    queue.add("t", {}, delay=timedelta(0))
    stats = queue.stats()
    assert stats == {"pending": 1, "scheduled": 2, "running": 0, "succeeded": 0, "failed": 0}


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
    assert _count_rows(store) == 0


def test_bad_payloads_write_nothing_and_hide_the_payload(store: Any) -> None:
    queue = Queue(store)
    for bad in ({"k": {1, 2}, "s": CANARY}, {"s": CANARY, "b": b"x"}, {"n": float("inf")}):
        with pytest.raises(QueuePayloadError) as info:
            queue.add("email.send", bad)
        assert CANARY not in str(info.value)
        assert "email.send" in str(info.value)
    with pytest.raises(QueuePayloadError):
        queue.add_many("email.send", [{"ok": 1}, {"bad": {1}}])
    assert _count_rows(store) == 0


def test_bad_type_names_write_nothing(store: Any) -> None:
    queue = Queue(store)
    for bad in ("", "x" * 256, None, 7):
        with pytest.raises(ValueError, match="job type"):
            queue.add(bad, {})  # type: ignore[call-overload]
    assert _count_rows(store) == 0


def test_dedupe_reject(store: Any) -> None:
    queue = Queue(store)
    first = queue.add("t", {"v": 1}, dedupe_key="k1")
    assert first is not None
    assert queue.add("t", {"v": 2}, dedupe_key="k1") is None
    # Keys are scoped by type.
    assert queue.add("other", {"v": 3}, dedupe_key="k1") is not None
    # Still rejected while running.
    claimed = _claim(store, "t")
    assert [j.id for j in claimed] == [first]
    assert queue.add("t", {"v": 4}, dedupe_key="k1") is None
    # Free again once finished.
    store.job_fail_many("w1", [FailItem(first, claimed[0].lease_token, "boom")])
    assert queue.add("t", {"v": 5}, dedupe_key="k1") is not None


def test_dedupe_replace_while_pending_keeps_place(store: Any) -> None:
    queue = Queue(store)
    a = queue.add("t", {"v": 1}, dedupe_key="k", priority=0)
    b = queue.add("t", {"v": "other"})
    again = queue.add("t", {"v": 2}, dedupe_key="k", on_duplicate="replace", priority=0)
    assert again == a
    claimed = _claim(store, "t")
    assert [j.id for j in claimed] == [a, b]
    assert claimed[0].payload == {"v": 2}


def test_dedupe_replace_while_running_enqueues_a_new_job(store: Any) -> None:
    queue = Queue(store)
    a = queue.add("t", {"v": 1}, dedupe_key="k")
    first_claim = _claim(store, "t")
    assert [j.id for j in first_claim] == [a]
    b = queue.add("t", {"v": 2}, dedupe_key="k", on_duplicate="replace")
    assert b is not None
    assert b != a
    c = queue.add("t", {"v": 3}, dedupe_key="k", on_duplicate="replace")
    assert c == b
    # The new job does not run while the old one holds the key.
    assert _claim(store, "t", owner="w2") == []
    store.job_complete_many("w1", [LeaseRef(a, first_claim[0].lease_token)])
    claimed = _claim(store, "t", owner="w2")
    assert [(j.id, j.payload) for j in claimed] == [(b, {"v": 3})]


def test_grouped_job_type_needs_scope(store: Any) -> None:
    queue = Queue(store)
    digest: JobType[dict[str, Any]] = JobType("digest.send", grouped=True)
    with pytest.raises(ValueError, match="scope"):
        queue.add(digest, {"x": 1})
    assert queue.add(digest, {"x": 1}, scope=("User", "u1")) is not None


def test_add_many_and_counts(store: Any) -> None:
    queue = Queue(store)
    assert queue.add_many("email.send", [{"i": i} for i in range(250)]) == 250
    assert queue.add_many("email.send", []) == 0
    assert queue.add_many("email.send", [{"i": 1}], delay=60) == 1
    counts = queue.count_by_status()
    assert counts == {JobStatus.PENDING: 251, JobStatus.RUNNING: 0, JobStatus.SUCCEEDED: 0,
                      JobStatus.FAILED: 0}
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
    claimed = _claim(store, "t", n=200) + _claim(store, "u")
    store.job_fail_many("w1", [FailItem(j.id, j.lease_token, "Boom: x") for j in claimed])
    assert queue.count_by_status()[JobStatus.FAILED] == 121
    assert queue.retry_failed(types=["t"], limit=20) == 20
    assert queue.retry_failed(types=["t"]) == 100
    pending = queue.find(types=["t"], statuses=[JobStatus.PENDING], limit=500)
    assert len(pending) == 120
    assert all(j.attempts == 0 and j.last_error is None for j in pending)
    assert queue.count_by_status()[JobStatus.FAILED] == 1


def test_prune_by_age_and_cutoff(store: Any) -> None:
    queue = Queue(store)
    queue.add_many("t", [{} for _ in range(5)])
    claimed = _claim(store, "t")
    store.job_complete_many("w1", [LeaseRef(j.id, j.lease_token) for j in claimed[:3]])
    assert queue.prune(older_than=3600) == 0
    assert queue.prune(older_than=datetime.now(UTC) + timedelta(minutes=1)) == 3
    assert queue.count_by_status()[JobStatus.RUNNING] == 2
    with pytest.raises(ValueError, match="finished"):
        queue.prune(older_than=0, statuses=[JobStatus.PENDING])
    with pytest.raises(ValueError, match="older_than"):
        queue.prune(older_than=-5)


def test_cancel_variants(store: Any) -> None:
    rec = Recorder()
    queue = Queue(store, observers=[rec])
    a = queue.add("t", {}, scope=("A", "1"))
    queue.add("t", {}, scope=("A", "1"))
    queue.add("t", {}, scope=("A", "2"))
    running = _claim(store, "t", n=1)
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
    assert sum(1 for e in rec.events if e.outcome == "cancelled") == 4
    with pytest.raises(ValueError, match="scope"):
        queue.cancel_for_scope(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="job_id"):
        queue.cancel("1; DROP TABLE jobs")


def test_schedule_declaration_validation(store: Any) -> None:
    queue = Queue(store)
    for kwargs, match in [
        ({}, "exactly one"),
        ({"cron": "0 6 * * *", "every": 60}, "exactly one"),
        ({"cron": "not a cron"}, "cron"),
        ({"cron": "0 0 30 2 *"}, "never fires"),
        ({"every": 0}, "every"),
        ({"every": -1}, "every"),
        ({"every": float("inf")}, "every"),
        ({"cron": "0 6 * * *", "timezone": "Nowhere/Never"}, "timezone"),
        ({"every": 60, "repeat_from": "start"}, "repeat_from"),
    ]:
        with pytest.raises(ValueError, match=match):
            queue.schedule("key", "report.send", {}, **kwargs)
    assert queue.schedules() == []
    queue.schedule("daily", "report.send", {"to": "ops"}, cron="0 6 * * *")
    queue.schedule("sync", "upstream.sync", {}, every=timedelta(hours=20), repeat_from="run_at")
    queue.schedule("sync", "upstream.sync", {}, every=timedelta(hours=10), repeat_from="run_at")
    by_key = {s.key: s for s in queue.schedules()}
    assert set(by_key) == {"daily", "sync"}
    assert by_key["daily"].cron == "0 6 * * *"
    assert by_key["sync"].every == timedelta(hours=10)
    assert queue.unschedule("sync") is True
    assert queue.unschedule("sync") is False


# -- PostgreSQL-only: transactions, races, bulk ---------------------------------------------


def test_enqueue_inside_caller_transaction(pg_store: PostgresStore, pg_dsn: str) -> None:
    queue = Queue(pg_store)
    with psycopg.connect(pg_dsn) as conn:
        queue.add("t", {"v": "rolled back"}, connection=conn)
        queue.add_many("t", [{"v": i} for i in range(3)], connection=conn)
        conn.rollback()
        assert _count_rows(pg_store) == 0
        kept = queue.add("t", {"v": "kept"}, connection=conn)
        assert kept is not None
        assert queue.get(kept) is None  # not visible before commit
        conn.commit()
    assert queue.get(kept) is not None


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
    assert _count_rows(pg_store) == 1


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
    assert _count_rows(pg_store) == 0
    assert Queue(pg_store).add_many("t", [{}, {}]) == 2
    assert _count_rows(pg_store) == 2


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
