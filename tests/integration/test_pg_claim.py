"""Claims, fencing and the reaper on real PostgreSQL (planner variance, races)."""

from __future__ import annotations

import itertools
import re
import threading
from collections.abc import Iterator
from typing import Any

import orjson
import psycopg
import pytest
from psycopg import sql
from psycopg_pool import ConnectionPool

from golemq_pg._types import JobStatus
from golemq_pg.store.port import (
    ClaimedJob,
    ClaimRequest,
    EnqueueManyParams,
    EnqueueParams,
    FailItem,
    LeaseRef,
    RetryItem,
    TypeSlots,
)
from golemq_pg.store.postgres import PostgresStore
from golemq_pg.store.postgres._sql import query_texts
from tests.support.waiting import wait_until


def _add(store: PostgresStore, n: int, job_type: str = "a", **kwargs: Any) -> None:
    store.job_enqueue_many(
        EnqueueManyParams(type=job_type, payloads=[orjson.dumps({"i": i}) for i in range(n)],
                          **kwargs)
    )


def _claim(store: PostgresStore, owner: str = "w", limit: int = 10, lease: float = 30.0,
           job_type: str = "a") -> list[ClaimedJob]:
    return store.job_claim(ClaimRequest(owner, [TypeSlots(job_type, limit, lease)]))


def _refs(jobs: list[ClaimedJob]) -> list[LeaseRef]:
    return [LeaseRef(j.id, j.lease_token) for j in jobs]


def _wait_expired(store: PostgresStore, jobs: list[ClaimedJob]) -> None:
    latest = max(j.lease_expires_at for j in jobs)
    wait_until(lambda: store.now() > latest, timeout=10, what="the leases expired")


@pytest.fixture
def planner_variant_store(pg_dsn: str, schema: str, pg_store: PostgresStore) -> Iterator[
    PostgresStore
]:
    """A store on the same schema whose connections may not use plain index scans."""
    pool: ConnectionPool[Any] = ConnectionPool(
        pg_dsn, min_size=4, max_size=4, open=True,
        kwargs={"autocommit": True, "options": "-c enable_indexscan=off"},
    )
    try:
        yield PostgresStore(pool, schema=schema)
    finally:
        pool.close()


def test_claim_leases_exactly_what_it_returns_under_planner_variance(
    planner_variant_store: PostgresStore, pg_dsn: str, schema: str
) -> None:
    store = planner_variant_store
    with store.pool.connection() as conn:
        assert conn.execute("SHOW enable_indexscan").fetchone() == ("off",)
    errors: list[BaseException] = []
    mismatches: list[tuple[str, int, int]] = []
    for round_no in range(5):
        _add(store, 40)
        barrier = threading.Barrier(4)

        def claimer(i: int, round_no: int = round_no, barrier: threading.Barrier = barrier) -> None:
            try:
                barrier.wait(timeout=10)
                for step in range(20):
                    owner = f"w{i}-{round_no}-{step}"
                    jobs = _claim(store, owner=owner, limit=3)
                    leased = _count(pg_dsn, schema, "status = 'running' AND lease_owner = %s",
                                    owner)
                    if leased != len(jobs) or len(jobs) > 3:
                        mismatches.append((owner, leased, len(jobs)))
                    if not jobs:
                        return
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=claimer, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert not errors
        assert mismatches == []
    assert _count(pg_dsn, schema, "status = 'pending'") == 0
    assert _count(pg_dsn, schema, "status = 'running'") == 200


def _count(pg_dsn: str, schema: str, where: str, *params: Any) -> int:
    with psycopg.connect(pg_dsn) as conn:
        query = sql.SQL("SELECT count(*) FROM {}.jobs_all WHERE " + where).format(  # type: ignore[operator]
            sql.Identifier(schema)
        )
        row = conn.execute(query, params or None).fetchone()
        assert row is not None
        return int(row[0])


def _explained_claim(
    conn: psycopg.Connection[Any], store: PostgresStore, slot: TypeSlots
) -> tuple[list[ClaimedJob], str]:
    """Claim for ``slot`` on ``conn`` as the store does, with auto_explain reporting the
    plans of the statements run (those inside claim_jobs() too); returns the claimed jobs
    and those plans' text."""
    plans: list[str] = []
    conn.add_notice_handler(lambda diag: plans.append(diag.message_primary or ""))
    for setting in ("LOAD 'auto_explain'", "SET auto_explain.log_min_duration = 0",
                    "SET auto_explain.log_nested_statements = on",
                    "SET client_min_messages = log"):
        conn.execute(setting)
    jobs = list(store._shared.claimer.run(conn, ClaimRequest("w", [slot]), managed=True))
    conn.execute("RESET client_min_messages")
    return jobs, "\n".join(plans)


def test_the_fast_claim_returns_the_columns_of_the_guarded_claims(
    pg_store: PostgresStore, pg_dsn: str
) -> None:
    # claim_jobs() (migration 0006) spells out the columns fragment_claimed_output gives the
    # guarded claims; _rows.claimed() reads both by position.
    _add(pg_store, 1)
    output = query_texts()["fragment_claimed_output"]
    expected = re.findall(r"\bu\.(\w+)", "\n".join(
        line for line in output.splitlines() if not line.lstrip().startswith("--")))
    params = pg_store._shared.claimer.fast_params("w", [TypeSlots("a", 1, 30)])
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        cursor = conn.execute(pg_store._q["job_claim"], params)
        assert len(cursor.fetchall()) == 1
        assert cursor.description is not None
        assert [column.name for column in cursor.description] == expected


def test_claim_plan_uses_the_claim_index(pg_store: PostgresStore, pg_dsn: str) -> None:
    _add(pg_store, 20_000)
    _add(pg_store, 20_000, "other")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("ANALYZE {}.jobs").format(sql.Identifier(pg_store.schema)))
        jobs, plan = _explained_claim(conn, pg_store, TypeSlots("a", 100, 30))
    assert len(jobs) == 100
    assert "Index Scan using jobs_claim_idx" in plan, plan
    assert "Seq Scan on jobs" not in plan, plan


def test_a_claim_planned_on_an_empty_table_walks_the_claim_index_once_the_backlog_grew(
    pg_store: PostgresStore, pg_dsn: str
) -> None:
    # claim_jobs() keeps one generic plan per session until the table's statistics change;
    # with no ANALYZE in between (autovacuum off for this table), the plan made while the
    # table was empty is the one that claims from 40,000 rows.
    jobs = sql.Identifier(pg_store.schema, "jobs")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER TABLE {} SET (autovacuum_enabled = false)").format(jobs))
        assert _explained_claim(conn, pg_store, TypeSlots("a", 100, 30))[0] == []
        _add(pg_store, 20_000)
        _add(pg_store, 20_000, "other")
        jobs, plan = _explained_claim(conn, pg_store, TypeSlots("a", 100, 30))
    assert [int(j.id) for j in jobs] == list(range(1, 101))  # claim order: oldest first
    assert "Index Scan using jobs_claim_idx" in plan, plan
    assert "Seq Scan on jobs" not in plan, plan
    assert "Bitmap Heap Scan on jobs" not in plan, plan
    assert "Sort Key: j.priority DESC" not in plan, plan  # no sort of the type's backlog


@pytest.mark.parametrize(
    "slot",
    [TypeSlots("a", 10, 30), TypeSlots("a", 10, 30, serialize_by_scope=True),
     TypeSlots("a", 10, 30, not_while_running=("b",)),
     TypeSlots("a", 10, 30, grouped=True, max_batch=5)],
    ids=["fast", "serialize_by_scope", "not_while_running", "grouped"],
)
def test_a_keyed_claim_probes_the_running_key_of_each_row_not_every_running_job(
    pg_store: PostgresStore, pg_dsn: str, slot: TypeSlots
) -> None:
    # 3,000 running keyed jobs, and a pending job for each of their keys (add() would refuse
    # them: written as rows that were pending before their keys' holders started would be),
    # each in a scope of its own, then one free key first in claim order (a guarded claim
    # reads a bounded window of the backlog).
    jobs = sql.Identifier(pg_store.schema, "jobs")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL(
            "INSERT INTO {} (type, payload, dedupe_key, scope_type, scope_id, status,"
            " attempts, lease_owner, lease_expires_at)"
            " SELECT 'a', '{{}}', 'k' || g, 's', 'r' || g, 'running', 1, 'x',"
            "        now() + interval '1 hour'"
            "   FROM generate_series(1, 3000) AS g").format(jobs))
        conn.execute(sql.SQL(
            "INSERT INTO {} (type, payload, dedupe_key, scope_type, scope_id, priority)"
            " SELECT 'a', '{{}}'::jsonb, 'k' || g, 's', 'p' || g, 0"
            "   FROM generate_series(1, 3000) AS g"
            " UNION ALL SELECT 'a', '{{}}'::jsonb, 'free', 's', 'free', 1").format(jobs))
        conn.execute(sql.SQL("ANALYZE {}").format(jobs))
        claimed, plan = _explained_claim(conn, pg_store, slot)
    assert [int(j.id) for j in claimed] == [6001]  # only the key no running job holds
    probes = _key_probes(plan)
    assert probes, plan
    for number, scan in probes.items():
        assert "jobs_dedupe_running_idx" in scan, plan
        assert f"hashed SubPlan {number})" not in plan, plan


def _key_probes(plan: str) -> dict[str, str]:
    """The subplans of an EXPLAIN text that read the dedupe check's ``jobs k``: number ->
    the scan line under its "SubPlan <number>" header."""
    lines = plan.splitlines()
    probes: dict[str, str] = {}
    for header, scan in itertools.pairwise(lines):
        found = re.fullmatch(r"\s*SubPlan (\d+)", header)
        if found and re.search(r" on jobs k(_\d+)?( |$)", scan):
            probes[found.group(1)] = scan
    return probes


def test_claim_order_priority_then_due_time_then_id(pg_store: PostgresStore) -> None:
    for priority in (0, 5, 0, 5):
        pg_store.job_enqueue(EnqueueParams(type="a", payload=b"{}", priority=priority))
    jobs = _claim(pg_store, limit=10)
    assert [j.priority for j in jobs] == [5, 5, 0, 0]
    assert [int(j.id) for j in jobs] == [2, 4, 1, 3]
    assert all(j.attempt == 1 and j.lease_token == 1 for j in jobs)


def test_per_type_limits_and_many_types_in_one_claim(pg_store: PostgresStore) -> None:
    _add(pg_store, 5, "a")
    _add(pg_store, 5, "b")
    _add(pg_store, 5, "c")
    jobs = pg_store.job_claim(ClaimRequest("w", [TypeSlots("a", 2, 30), TypeSlots("b", 0, 30),
                                                 TypeSlots("c", 4, 5), TypeSlots("a", 3, 30)]))
    by_type = {t: sum(1 for j in jobs if j.type == t) for t in "abc"}
    assert by_type == {"a": 2, "b": 0, "c": 4}


def test_fenced_writes_with_a_stale_token_or_owner_change_nothing(
    pg_store: PostgresStore,
) -> None:
    _add(pg_store, 1)
    (job,) = _claim(pg_store, lease=0.2)
    stale = LeaseRef(job.id, job.lease_token)
    _wait_expired(pg_store, [job])
    assert [r.id for r in pg_store.lease_recover_expired()] == [job.id]
    (again,) = _claim(pg_store, owner="w2")
    assert again.lease_token == job.lease_token + 1
    wrong_owner = LeaseRef(again.id, again.lease_token)
    for owner, ref in (("w", stale), ("w", wrong_owner), ("w2", stale)):
        assert pg_store.job_complete_many(owner, [ref]) == set()
        assert pg_store.job_fail_many(owner, [FailItem(ref.id, ref.token, "E")]) == set()
        assert pg_store.job_retry_many(owner, [RetryItem(ref.id, ref.token, 0, "E")]) == set()
        assert pg_store.job_release_many(owner, [ref]) == set()
        assert pg_store.lease_renew(owner, [ref], 60) == set()
        assert pg_store.lease_held(owner, [ref]) == set()
        assert pg_store.job_progress(owner, ref, 0.5) is False
    summary = pg_store.job_get(job.id)
    assert summary is not None
    assert (summary.status, summary.attempts, summary.progress) == (JobStatus.RUNNING, 2, None)
    # The current holder still holds it.
    assert pg_store.job_progress("w2", wrong_owner, {"p": 1}) is True
    assert pg_store.job_complete_many("w2", [wrong_owner]) == {again.id}
    assert pg_store.job_get(job.id).progress == {"p": 1}  # type: ignore[union-attr]


def test_an_expired_lease_is_not_renewed(pg_store: PostgresStore) -> None:
    _add(pg_store, 2)
    jobs = _claim(pg_store, lease=0.2)
    assert pg_store.lease_renew("w", _refs(jobs[:1]), 30) == {jobs[0].id}
    _wait_expired(pg_store, jobs[1:])
    assert pg_store.lease_renew("w", _refs(jobs), 30) == {jobs[0].id}


def test_reaper_dead_letters_past_the_budget(pg_store: PostgresStore) -> None:
    _add(pg_store, 1, max_attempts=1)
    (job,) = _claim(pg_store, lease=0.1)
    _wait_expired(pg_store, [job])
    (reclaimed,) = pg_store.lease_recover_expired()
    assert (reclaimed.outcome, reclaimed.lease_owner, reclaimed.attempts) == (
        "failed-terminal", "w", 1)
    summary = pg_store.job_get(job.id)
    assert summary is not None
    assert summary.status is JobStatus.FAILED
    assert summary.last_error == "LeaseExpired: attempts exhausted after lease expiry"


def test_reaper_skips_a_row_whose_completion_is_in_flight(
    pg_store: PostgresStore, pg_dsn: str
) -> None:
    _add(pg_store, 1)
    (job,) = _claim(pg_store, lease=0.1)
    _wait_expired(pg_store, [job])
    with psycopg.connect(pg_dsn) as conn:
        done = pg_store.with_connection(conn).job_complete_many("w", _refs([job]))
        assert done == {job.id}
        # The completion holds the row lock, uncommitted: the reaper skips the row.
        assert pg_store.lease_recover_expired() == []
        conn.commit()
    assert pg_store.lease_recover_expired() == []
    assert pg_store.job_get(job.id).status is JobStatus.SUCCEEDED  # type: ignore[union-attr]


def test_completion_after_the_reaper_changes_nothing(pg_store: PostgresStore, pg_dsn: str) -> None:
    _add(pg_store, 1)
    (job,) = _claim(pg_store, lease=0.1)
    _wait_expired(pg_store, [job])
    result: list[set[str]] = []
    with psycopg.connect(pg_dsn) as conn:
        reaped = pg_store.with_connection(conn).lease_recover_expired()
        assert [r.id for r in reaped] == [job.id]
        # The completer blocks on the reaper's row lock, then finds the fence broken.
        worker = threading.Thread(
            target=lambda: result.append(pg_store.job_complete_many("w", _refs([job])))
        )
        worker.start()
        worker.join(0.3)
        assert worker.is_alive()  # waiting for the reaper's transaction
        conn.commit()
    worker.join(10)
    assert result == [set()]
    summary = pg_store.job_get(job.id)
    assert summary is not None
    assert summary.status is JobStatus.PENDING


def test_reaper_racing_completions_never_revives_a_completed_job(
    pg_store: PostgresStore, pg_dsn: str, schema: str
) -> None:
    _add(pg_store, 400)
    jobs: list[ClaimedJob] = []
    while len(jobs) < 400:
        jobs += _claim(pg_store, limit=100, lease=0.3)
    _wait_expired(pg_store, jobs)
    completed: set[str] = set()
    reclaimed: list[str] = []
    start = threading.Barrier(2)

    def complete() -> None:
        start.wait(10)
        for index in range(0, len(jobs), 10):
            completed.update(pg_store.job_complete_many("w", _refs(jobs[index : index + 10])))

    def reap() -> None:
        start.wait(10)
        while True:
            found = pg_store.lease_recover_expired(limit=7)
            reclaimed.extend(r.id for r in found)
            if not found and _count(pg_dsn, schema, "status = 'running'") == 0:
                return

    threads = [threading.Thread(target=complete), threading.Thread(target=reap)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert completed
    assert reclaimed
    assert completed.isdisjoint(reclaimed)
    assert completed | set(reclaimed) == {j.id for j in jobs}
    assert _count(pg_dsn, schema, "status = 'succeeded'") == len(completed)
    assert _count(pg_dsn, schema, "status = 'pending' AND attempts = 1") == len(reclaimed)


def _side_table(pg_dsn: str, schema: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE TABLE {}.effects (job_id text)").format(
            sql.Identifier(schema)))


def _effects(pg_dsn: str, schema: str) -> list[str]:
    with psycopg.connect(pg_dsn) as conn:
        return [r[0] for r in conn.execute(
            sql.SQL("SELECT job_id FROM {}.effects").format(sql.Identifier(schema))).fetchall()]


def test_transactional_claim_commits_effects_and_completion_together(
    pg_store: PostgresStore, pg_dsn: str, schema: str
) -> None:
    _side_table(pg_dsn, schema)
    _add(pg_store, 1)
    request = ClaimRequest("w", [TypeSlots("a", 4, 30)])
    with pg_store.job_claim_transactional(request) as claimed:
        assert claimed is not None
        job, conn = claimed
        conn.execute(sql.SQL("INSERT INTO {}.effects VALUES (%s)").format(
            sql.Identifier(schema)), (job.id,))
        assert _effects(pg_dsn, schema) == []  # not visible before the commit
        done = pg_store.with_connection(conn).job_complete_many("w", _refs([job]))
        assert done == {job.id}
    assert _effects(pg_dsn, schema) == [job.id]
    assert pg_store.job_get(job.id).status is JobStatus.SUCCEEDED  # type: ignore[union-attr]
    with pg_store.job_claim_transactional(request) as nothing:
        assert nothing is None


def test_transactional_claim_rolls_back_effects_but_keeps_the_attempt(
    pg_store: PostgresStore, pg_dsn: str, schema: str
) -> None:
    _side_table(pg_dsn, schema)
    _add(pg_store, 1)
    request = ClaimRequest("w", [TypeSlots("a", 1, 30)])
    seen: list[ClaimedJob] = []

    def failing_handler() -> None:
        with pg_store.job_claim_transactional(request) as claimed:
            assert claimed is not None
            job, conn = claimed
            seen.append(job)
            conn.execute(sql.SQL("INSERT INTO {}.effects VALUES (%s)").format(
                sql.Identifier(schema)), (job.id,))
            raise KeyError("handler failed")

    with pytest.raises(KeyError):
        failing_handler()
    (job,) = seen
    assert _effects(pg_dsn, schema) == []
    summary = pg_store.job_get(job.id)
    assert summary is not None
    assert (summary.status, summary.attempts) == (JobStatus.RUNNING, 1)
    # The caller records the outcome with the ordinary fenced verbs.
    assert pg_store.job_retry_many("w", [RetryItem(job.id, job.lease_token, 0, "KeyError")]) == {
        job.id}
    assert pg_store.job_get(job.id).status is JobStatus.PENDING  # type: ignore[union-attr]
