"""The history layout (migration 0008) on PostgreSQL: finished jobs leave the live table for
``jobs_history`` (partitioned by status and UTC day) in the statement that finishes them,
exact counts are kept beside it, retention drops whole day partitions, and a schema an older
release filled upgrades with its finished jobs readable throughout and moved in batches.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from golemq_pg import JobEvent, JobStatus, PostgresStore, Queue, TerminalJobError, Worker
from golemq_pg.store.port import FailItem, LeaseRef
from golemq_pg.store.postgres._migrations import migrate
from tests.support.store_port import claim, slots


def _q(dsn: str, schema: str, text: str, *args: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(sql.SQL(text).format(s=sql.Identifier(schema)),  # type: ignore[arg-type]
                           args or None)
        return cur.fetchall() if cur.description else []


def _true_counts(dsn: str, schema: str) -> dict[str, int]:
    """Every job's status counted row by row (what the maintained counts must equal)."""
    return dict(_q(dsn, schema, "SELECT status, count(*) FROM {s}.jobs_all GROUP BY status"))


def _partitions(dsn: str, schema: str) -> set[str]:
    return {name for (name,) in _q(
        dsn, schema,
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "JOIN pg_class p ON p.oid = i.inhparent "
        "WHERE p.relnamespace = %s::regnamespace "
        "AND p.relname IN ('jobs_history_succeeded', 'jobs_history_failed')", schema)}


def _day(offset: int) -> str:
    return (datetime.now(UTC).date() + timedelta(days=offset)).strftime("%Y%m%d")


def _finish(store: PostgresStore, queue: Queue, job_type: str, n: int, *, fail: bool) -> list[str]:
    """``n`` jobs of ``job_type`` added, claimed and completed (or dead-lettered)."""
    queue.add_many(job_type, [{"n": i} for i in range(n)])
    claimed = claim(store, slots(job_type, limit=n, lease=3600), owner="setup")
    refs = [LeaseRef(job.id, job.lease_token) for job in claimed]
    if fail:
        store.job_fail_many("setup", [FailItem(r.id, r.token, "E: x") for r in refs])
    else:
        store.job_complete_many("setup", refs)
    return [r.id for r in refs]


def _finish_at(dsn: str, schema: str, ids: list[str], days_ago: int, hour: int) -> datetime:
    """Set history rows' finish to ``hour``:00 UTC ``days_ago`` days ago (an UPDATE that
    moves them between day partitions; the count triggers follow it); returns that time."""
    rows = _q(dsn, schema,
              "UPDATE {s}.jobs_history SET finished_at = (date_trunc('day', now() AT TIME ZONE "
              "'UTC') - make_interval(days => %s, hours => -%s)) AT TIME ZONE 'UTC' "
              "WHERE id = ANY(%s::bigint[]) RETURNING finished_at", days_ago, hour,
              [int(i) for i in ids])
    return rows[0][0]  # type: ignore[no-any-return]


def _backdate(dsn: str, schema: str, ids: list[str], days: int) -> None:
    """Move history rows ``days`` days into the past (an UPDATE that moves them between day
    partitions; the count triggers follow it)."""
    _q(dsn, schema, "UPDATE {s}.jobs_history SET finished_at = finished_at - make_interval("
                    "days => %s) WHERE id = ANY(%s::bigint[])", days, [int(i) for i in ids])


def test_finished_jobs_leave_the_live_table_for_their_status_and_day(
    pg_store: PostgresStore, pg_dsn: str
) -> None:
    queue = Queue(pg_store)
    ok = queue.add("h.ok", {"n": 1})
    bad = queue.add("h.bad", {"n": 2}, max_attempts=1)
    live = queue.add("h.later", {"n": 3}, delay=3600)
    worker = Worker(pg_store, poll_interval=0.05)

    @worker.handler("h.ok")
    def fine(job: JobEvent[Any]) -> dict[str, int]:
        return {"doubled": 2 * job.payload["n"]}

    @worker.handler("h.bad")
    def broken(job: JobEvent[Any]) -> None:
        raise TerminalJobError("no")

    worker.run_until_empty(timeout=30)
    schema = pg_store.schema
    assert _q(pg_dsn, schema, "SELECT id::text, status FROM {s}.jobs") == [(live, "pending")]
    rows = dict(_q(pg_dsn, schema, "SELECT h.id::text, h.tableoid::regclass::text "
                                   "FROM {s}.jobs_history h"))
    assert rows[ok].endswith(f"jobs_history_succeeded_{_day(0)}")
    assert rows[bad].endswith(f"jobs_history_failed_{_day(0)}")
    # Every reader still finds them, with what they carried.
    assert ok is not None
    assert bad is not None
    done = queue.get(ok)
    assert done is not None
    assert done.status is JobStatus.SUCCEEDED
    assert done.result == {"doubled": 2}
    dead = queue.get(bad)
    assert dead is not None
    assert dead.status is JobStatus.FAILED
    assert [e.error for e in dead.errors] == ["TerminalJobError: no"]
    assert queue.wait(ok, timeout=0).result == {"doubled": 2}
    assert {j.id for j in queue.find(statuses=[JobStatus.SUCCEEDED, JobStatus.FAILED])} == {ok, bad}


def test_counts_stay_exact_through_finishes_retries_prunes_and_folds(
    pg_store: PostgresStore, pg_dsn: str
) -> None:
    queue = Queue(pg_store)
    schema = pg_store.schema
    _finish(pg_store, queue, "c.ok", 7, fail=False)
    dead = _finish(pg_store, queue, "c.bad", 5, fail=True)
    queue.add_many("c.wait", [{"n": n} for n in range(3)])
    queue.add("c.wait", {"n": 9}, delay=3600)

    def check() -> None:
        truth = _true_counts(pg_dsn, schema)
        counts = queue.count_by_status()
        assert {str(k): v for k, v in counts.items() if v} == truth
        stats = queue.stats()
        assert stats["succeeded"] == truth.get("succeeded", 0)
        assert stats["failed"] == truth.get("failed", 0)
        assert stats["pending"] + stats["scheduled"] == truth.get("pending", 0)
        by_type = pg_store.job_stats_by_type()
        assert sum(t["succeeded"] + t["failed"] for t in by_type.values()) == (
            truth.get("succeeded", 0) + truth.get("failed", 0))

    check()
    assert pg_store.history_upkeep().folded > 0
    check()
    assert queue.retry(dead[0]) is True  # out of the history, back into jobs
    check()
    assert queue.retry_failed(types=["c.bad"]) == 4
    check()
    _backdate(pg_dsn, schema, _finish(pg_store, queue, "c.old", 4, fail=False), days=3)
    check()
    assert queue.prune(older_than=timedelta(days=2)) == 4
    check()
    pg_store.history_upkeep()
    check()
    assert queue.stats()["failed"] == 0


def test_retention_drops_whole_day_partitions_and_sweeps_only_the_boundary(
    pg_store: PostgresStore, pg_dsn: str
) -> None:
    queue = Queue(pg_store)
    schema = pg_store.schema
    for days in (6, 5):  # partitions for those days first, as the upkeep would have made
        for status in ("succeeded", "failed"):
            _q(pg_dsn, schema, "SELECT {s}.history_ensure_partition(%s, "
                               "{s}.history_day(now()) - %s)", status, days)
    old_ok = _finish(pg_store, queue, "r.ok", 30, fail=False)
    old_bad = _finish(pg_store, queue, "r.bad", 6, fail=True)
    _finish_at(pg_dsn, schema, old_ok[:20] + old_bad, days_ago=6, hour=12)
    noon = _finish_at(pg_dsn, schema, old_ok[20:], days_ago=5, hour=12)
    recent = _finish(pg_store, queue, "r.new", 3, fail=False)
    assert {f"jobs_history_succeeded_{_day(-6)}", f"jobs_history_succeeded_{_day(-5)}",
            f"jobs_history_failed_{_day(-6)}"} <= _partitions(pg_dsn, schema)

    # Succeeded only, before day -5 began: day -6's succeeded partition goes whole; the dead
    # letters of day -6 and the succeeded rows of day -5 stay.
    midnight = noon - timedelta(hours=12)
    removed = pg_store.job_prune([JobStatus.SUCCEEDED], before=midnight, age=None)
    assert removed == 20
    parts = _partitions(pg_dsn, schema)
    assert f"jobs_history_succeeded_{_day(-6)}" not in parts
    assert f"jobs_history_failed_{_day(-6)}" in parts
    assert f"jobs_history_succeeded_{_day(-5)}" in parts
    assert [i for i in old_ok if queue.get(i) is not None] == old_ok[20:]
    assert all(queue.get(i) is not None for i in old_bad + recent)
    assert queue.stats()["succeeded"] == 13

    # A cut-off inside day -5: that day is swept by rows (batches of the limit), not dropped.
    cutoff = noon + timedelta(minutes=1)
    swept = [pg_store.job_prune([JobStatus.SUCCEEDED], before=cutoff, age=None, limit=4)
             for _ in range(4)]
    assert swept == [4, 4, 2, 0]
    assert f"jobs_history_succeeded_{_day(-5)}" in _partitions(pg_dsn, schema)
    assert _true_counts(pg_dsn, schema) == {"succeeded": 3, "failed": 6}
    assert queue.count_by_status()[JobStatus.SUCCEEDED] == 3


def test_a_day_partition_made_late_takes_its_rows_from_the_default_partition(
    pg_store: PostgresStore, pg_dsn: str
) -> None:
    queue = Queue(pg_store)
    schema = pg_store.schema
    ids = _finish(pg_store, queue, "late", 3, fail=False)
    _backdate(pg_dsn, schema, ids, days=-20)  # 20 days ahead: no partition yet
    where = dict(_q(pg_dsn, schema, "SELECT h.id::text, h.tableoid::regclass::text "
                                    "FROM {s}.jobs_history h"))
    assert all(where[i].endswith("jobs_history_succeeded_default") for i in ids)
    made = _q(pg_dsn, schema, "SELECT {s}.history_ensure_partition('succeeded', "
                              "{s}.history_day(now()) + 20)")
    assert made == [(True,)]
    where = dict(_q(pg_dsn, schema, "SELECT h.id::text, h.tableoid::regclass::text "
                                    "FROM {s}.jobs_history h"))
    assert all(where[i].endswith(f"jobs_history_succeeded_{_day(20)}") for i in ids)
    assert queue.count_by_status()[JobStatus.SUCCEEDED] == 3
    # a cut-off past that day: its partition is dropped whole
    assert queue.prune(older_than=datetime.now(UTC) + timedelta(days=30)) == 3
    assert f"jobs_history_succeeded_{_day(20)}" not in _partitions(pg_dsn, schema)


def test_upkeep_makes_the_partitions_ahead_once_from_any_number_of_callers(
    pg_store: PostgresStore, pg_dsn: str
) -> None:
    schema = pg_store.schema
    first = pg_store.history_upkeep(days_ahead=6)
    assert first.created == 2 * 3  # days 4 to 6 ahead: 0008 made yesterday to 3 ahead
    expected = {f"jobs_history_{s}_{_day(d)}" for s in ("succeeded", "failed")
                for d in range(-1, 7)}
    assert expected <= _partitions(pg_dsn, schema)
    assert pg_store.history_upkeep(days_ahead=6).created == 0


@pytest.fixture
def legacy_schema(pg_dsn: str, schema: str) -> str:
    """``schema`` at migration 0007 holding finished jobs in ``jobs`` (as a release before
    the history left them), then migrated to the newest migration."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        migrate(conn, schema, up_to=7)
        conn.execute(sql.SQL(
            "INSERT INTO {s}.jobs (type, payload, status, attempts, max_attempts, last_error, "
            "dedupe_key, finished_at, result) "
            "SELECT 'old.ok', jsonb_build_object('n', g), 'succeeded', 1, 3, NULL, NULL, "
            "now() - make_interval(hours => g), jsonb_build_object('r', g) "
            "FROM generate_series(1, 25) g "
            "UNION ALL SELECT 'old.bad', '{{}}', 'failed', 3, 3, 'E: gone', 'k1', "
            "now() - interval '10 days', NULL "
            "UNION ALL SELECT 'old.live', '{{}}', 'pending', 0, 3, NULL, NULL, NULL, NULL"
        ).format(s=sql.Identifier(schema)))
    return schema


def test_an_upgraded_schema_reads_its_old_finished_jobs_and_moves_them_in_batches(
    pg_dsn: str, legacy_schema: str
) -> None:
    schema = legacy_schema
    with PostgresStore.connect(pg_dsn, schema=schema) as store:
        store.migrate()
        queue = Queue(store)
        # Before any move: readable where they are, and counted.
        assert _q(pg_dsn, schema, "SELECT count(*) FROM {s}.jobs") == [(27,)]
        counts = queue.count_by_status()
        assert (counts[JobStatus.SUCCEEDED], counts[JobStatus.FAILED],
                counts[JobStatus.PENDING]) == (25, 1, 1)
        newest_ok = queue.find(types=["old.ok"], limit=1)[0]
        assert newest_ok.result == {"r": 25}
        # Moved 10 a call, newest results intact, counts exact at every step.
        moved = [store.history_upkeep(legacy_limit=10).moved for _ in range(4)]
        assert moved == [10, 10, 6, 0]
        assert _q(pg_dsn, schema, "SELECT id::text, status FROM {s}.jobs") == [
            (i, "pending") for i in [j.id for j in queue.find(types=["old.live"])]]
        assert queue.get(newest_ok.id) == newest_ok
        # Each moved into its own day's partition, made for it (not the DEFAULT one).
        where = dict(_q(
            pg_dsn, schema, "SELECT h.status, h.tableoid::regclass::text FROM {s}.jobs_history h"
                            " WHERE h.type = 'old.bad'"))
        assert where["failed"].endswith(f"jobs_history_failed_{_day(-10)}")
        assert _true_counts(pg_dsn, schema) == {"succeeded": 25, "failed": 1, "pending": 1}
        counts = queue.count_by_status()
        assert (counts[JobStatus.SUCCEEDED], counts[JobStatus.FAILED]) == (25, 1)
        # The old dead letter is retried from the history like any other.
        dead = queue.find(types=["old.bad"])[0]
        assert dead.status is JobStatus.FAILED
        assert queue.retry(dead.id) is True
        revived = queue.get(dead.id)
        assert revived is not None
        assert revived.status is JobStatus.PENDING
        assert [e.error for e in revived.errors] == []
        assert queue.count_by_status()[JobStatus.FAILED] == 0
