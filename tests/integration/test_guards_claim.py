"""The guarded claim on real PostgreSQL: the scope walk behind a bunched backlog, its
rotation, priority within a scope, and what a guarded claim leaves on its connection.

The contract suite checks guard semantics on both stores; these check the PostgreSQL claim's
own machinery (a claim-order window, then a loose index scan over the scopes), which only
shows with backlogs larger than the window.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from datetime import timedelta
from typing import Any

import orjson
import psycopg
from psycopg import sql

from golemq_pg._types import JobStatus, Resource, Scope
from golemq_pg.store.port import (
    CancelFilter,
    ClaimBlock,
    ClaimedJob,
    ClaimRequest,
    EnqueueManyParams,
    EnqueueParams,
    LeaseRef,
    RetryItem,
    TypeSlots,
    claim_blocked,
)
from golemq_pg.store.postgres import PostgresStore
from golemq_pg.store.postgres._claim import _WINDOW_MIN
from tests.support.waiting import wait_until


def _bunch(store: PostgresStore, job_type: str, scopes: int, per_scope: int,
           priority: int = 0) -> None:
    """``per_scope`` consecutive jobs for each scope in turn (a backlog bunched by scope)."""
    for s in range(scopes):
        store.job_enqueue_many(EnqueueManyParams(
            type=job_type, payloads=[orjson.dumps({"i": i}) for i in range(per_scope)],
            scope=Scope("S", f"{s:03d}"), priority=priority))


def _claim(store: PostgresStore, slot: TypeSlots, owner: str = "w",
           resources: dict[str, Resource] | None = None) -> list[ClaimedJob]:
    return store.job_claim(ClaimRequest(owner, [slot], resources or {}))


def _done(store: PostgresStore, jobs: list[ClaimedJob], owner: str = "w") -> None:
    assert store.job_complete_many(owner, [LeaseRef(j.id, j.lease_token) for j in jobs]) == {
        j.id for j in jobs}


def _sbs(limit: int, lease: float = 30.0) -> TypeSlots:
    return TypeSlots("s", limit, lease, serialize_by_scope=True)


def test_one_claim_reaches_every_free_scope_of_a_bunched_backlog(
    pg_store: PostgresStore,
) -> None:
    # 40 scopes x 30 jobs: the claim-order window (50 rows) spans two scopes only.
    _bunch(pg_store, "s", 40, 30)
    got = _claim(pg_store, _sbs(25))
    assert len(got) == 25
    assert len({j.scope for j in got}) == 25
    # Each scope's job is its oldest (one priority: arrival order).
    oldest = _oldest_pending_per_scope(pg_store, "s", {j.scope for j in got})
    assert {j.id for j in got} == oldest


def _oldest_pending_per_scope(store: PostgresStore, job_type: str,
                              scopes: set[Scope | None]) -> set[str]:
    # Every claimed job is running now; the oldest job of a scope is the one with min id.
    with store.pool.connection() as conn:
        rows = conn.execute(sql.SQL(
            "SELECT scope_type, scope_id, min(id) FROM {}.jobs_all WHERE type = %s "
            "GROUP BY scope_type, scope_id").format(sql.Identifier(store.schema)),
            (job_type,)).fetchall()
    return {str(r[2]) for r in rows if Scope(r[0], r[1]) in scopes}


def test_the_walk_skips_scopes_held_by_other_workers_and_claims_the_rest(
    pg_store: PostgresStore,
) -> None:
    _bunch(pg_store, "s", 30, 20)
    first = _claim(pg_store, _sbs(10), owner="other")
    assert len({j.scope for j in first}) == 10
    second = _claim(pg_store, _sbs(100))
    assert len(second) == 20  # the 20 scopes nobody holds, one job each
    assert not {j.scope for j in first} & {j.scope for j in second}
    assert _claim(pg_store, _sbs(100), owner="third") == []


def test_successive_claims_rotate_through_the_scopes(pg_store: PostgresStore) -> None:
    """A scope with a huge backlog ahead of everyone must not hide the others, and the
    walk's cursor moves on, so every scope gets its turn."""
    _bunch(pg_store, "s", 1, 400)  # scope 000 holds the whole head of the backlog
    for s in range(1, 13):
        pg_store.job_enqueue(EnqueueParams(type="s", payload=b"{}", scope=Scope("T", str(s))))
    served: Counter[Scope | None] = Counter()
    for _ in range(6):
        got = _claim(pg_store, _sbs(3))
        assert len(got) == 3
        assert len({j.scope for j in got}) == 3
        served.update(j.scope for j in got)
        _done(pg_store, got)
    # 6 claims x 3 = 18 jobs: the busy scope once per claim, the 12 single-job scopes once.
    assert served[Scope("S", "000")] == 6
    assert sorted(s.id for s in served if s and s.type == "T") == sorted(
        str(s) for s in range(1, 13))


def test_priority_holds_within_a_scope_reached_by_the_walk(pg_store: PostgresStore) -> None:
    _bunch(pg_store, "s", 1, 200, priority=5)  # fills the window
    low = pg_store.job_enqueue(EnqueueParams(
        type="s", payload=b"{}", scope=Scope("Q", "1"), priority=1)).id
    high = pg_store.job_enqueue(EnqueueParams(
        type="s", payload=b"{}", scope=Scope("Q", "1"), priority=3)).id
    got = _claim(pg_store, _sbs(2))
    assert [j.id for j in got if j.scope == Scope("Q", "1")] == [high]
    _done(pg_store, [j for j in got if j.scope == Scope("Q", "1")])
    got = _claim(pg_store, _sbs(2))
    assert [j.id for j in got if j.scope == Scope("Q", "1")] == [low]


def test_the_walk_ignores_expired_leases_and_future_jobs(pg_store: PostgresStore) -> None:
    _bunch(pg_store, "s", 1, 100)  # fills the window
    held = pg_store.job_enqueue(EnqueueParams(type="s", payload=b"{}", scope=Scope("E", "1")))
    waiting = pg_store.job_enqueue(EnqueueParams(type="s", payload=b"{}", scope=Scope("E", "1")))
    pg_store.job_enqueue(EnqueueParams(type="s", payload=b"{}", scope=Scope("F", "1"),
                                       delay=3600))
    with pg_store.pool.connection() as conn:  # an expired lease on scope E
        conn.execute(sql.SQL(
            "UPDATE {}.jobs SET status = 'running', lease_owner = 'dead', attempts = 1, "
            "lease_expires_at = now() - interval '1 second' WHERE id = %s").format(
                sql.Identifier(pg_store.schema)), (int(held.id or 0),))
    got = _claim(pg_store, _sbs(10))
    assert {j.scope for j in got} == {Scope("S", "000"), Scope("E", "1")}
    assert waiting.id in {j.id for j in got}


def test_grouped_claims_reach_groups_behind_a_bunched_backlog(pg_store: PostgresStore) -> None:
    _bunch(pg_store, "g", 30, 20)
    slot = TypeSlots("g", 12, 30, grouped=True, max_batch=3)
    got = _claim(pg_store, slot)
    per_group = Counter(j.scope for j in got)
    assert len(per_group) == 12
    assert set(per_group.values()) == {3}
    # the next claim skips the 12 running groups and takes the other 18
    more = _claim(pg_store, TypeSlots("g", 100, 30, grouped=True, max_batch=2), owner="w2")
    assert len(Counter(j.scope for j in more)) == 18
    assert not set(per_group) & {j.scope for j in more}


def test_concurrent_claimers_on_a_bunched_backlog_never_share_a_scope(
    pg_store: PostgresStore,
) -> None:
    _bunch(pg_store, "s", 60, 15)
    results: list[list[ClaimedJob]] = []
    lock = threading.Lock()
    barrier = threading.Barrier(6)

    def claimer(i: int) -> None:
        barrier.wait(10)
        got = _claim(pg_store, _sbs(15), owner=f"w{i}")
        with lock:
            results.append(got)

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    jobs = [j for batch in results for j in batch]
    assert len(results) == 6
    assert len(jobs) == 60  # every scope once, no scope twice
    assert len({j.scope for j in jobs}) == 60


def test_a_guarded_claim_leaves_its_connection_as_it_found_it(pg_dsn: str, schema: str) -> None:
    """The generic-plan setting is transaction-local; no advisory lock survives."""
    store = PostgresStore.connect(pg_dsn, schema=schema, min_size=1, max_size=1)
    try:
        store.migrate()
        _bunch(store, "s", 3, 3)
        pool = {"p": Resource(concurrency=5, types=["s"])}
        assert len(_claim(store, _sbs(5), resources=pool)) == 3
        with store.pool.connection() as conn:  # the one connection the claim used
            assert conn.execute("SHOW plan_cache_mode").fetchone() == ("auto",)
            assert conn.execute("SHOW enable_sort").fetchone() == ("on",)
            locks = conn.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                "AND pid = pg_backend_pid()").fetchone()
            assert locks == (0,)
    finally:
        store.close()


def test_a_transactional_claim_does_not_change_the_callers_plan_mode(
    pg_store: PostgresStore,
) -> None:
    _bunch(pg_store, "s", 2, 2)
    request = ClaimRequest("w", [_sbs(1)])
    with pg_store.job_claim_transactional(request) as claimed:
        assert claimed is not None
        _job, conn = claimed
        assert conn.execute("SHOW plan_cache_mode").fetchone() == ("auto",)
        assert conn.execute("SHOW enable_sort").fetchone() == ("on",)


def test_a_claim_in_the_callers_transaction_keeps_the_callers_enable_sort(
    pg_store: PostgresStore,
) -> None:
    """claim_plan_restore puts back what the caller had, not the server default."""
    _bunch(pg_store, "s", 2, 2)
    with psycopg.connect(pg_store.dsn or "") as conn:
        conn.execute("SET LOCAL enable_sort = off")
        assert len(pg_store.with_connection(conn).job_claim(ClaimRequest("w", [_sbs(2)]))) == 2
        assert conn.execute("SHOW enable_sort").fetchone() == ("off",)
        conn.execute("SET LOCAL enable_sort = on")
        assert len(pg_store.with_connection(conn).job_claim(ClaimRequest("w", [_sbs(2)]))) == 0
        assert conn.execute("SHOW enable_sort").fetchone() == ("on",)


def _sorts_in_walk(node: dict[str, Any], inside: bool = False) -> list[list[str]]:
    """Sort keys of every Sort node below the scope walk's Recursive Union."""
    found = [node.get("Sort Key", [])] if inside and node["Node Type"] == "Sort" else []
    inside = inside or node["Node Type"] == "Recursive Union"
    for child in node.get("Plans", []):
        found += _sorts_in_walk(child, inside)
    return found


def _unaliased(key: str) -> str:
    """A sort key without its relation alias: ``d_1.priority DESC`` -> ``priority DESC``."""
    return re.sub(r"^[a-z_][a-z0-9_]*\.", "", key)


def test_the_walk_reads_the_scope_index_in_order_even_on_stale_statistics(
    pg_store: PostgresStore,
) -> None:
    """Statistics taken while the table was empty make every path look like one row; the
    planner then sorted the type's whole backlog at every walk step (15 ms a step). The
    settings the claim's lock statement makes leave only the index order."""
    with pg_store.pool.connection() as conn:
        conn.execute(sql.SQL("ANALYZE {}.jobs").format(sql.Identifier(pg_store.schema)))
    # The benchmark's layout (this data reproduces the sorting plan on PostgreSQL 15
    # without the settings; so does a drain of it, at 164 jobs/s)
    for s in range(1000):
        pg_store.job_enqueue_many(EnqueueManyParams(
            type="s", payloads=[orjson.dumps({"i": i}) for i in range(40)],
            scope=Scope("bench", str(s))))
    claimer = pg_store._shared.claimer
    queries = pg_store._shared.queries
    lock_params, params = claimer.guarded_params("w", _sbs(500), {})
    explain = b"EXPLAIN (FORMAT JSON) " + queries["job_claim_guarded"]

    with pg_store.pool.connection() as conn, conn.transaction():
        conn.execute(queries["claim_lock_exclusive_generic"], lock_params)
        row = conn.execute(explain, params).fetchone()
    assert row is not None
    sorts = _sorts_in_walk(row[0][0]["Plan"])
    # the only sort left in the walk orders a scope's first few due jobs by priority (the
    # planner's alias for the jobs table differs between server versions: j_1, d_1, ...)
    assert all(keys and _unaliased(keys[0]).startswith("priority") for keys in sorts), sorts


def test_guarded_leases_start_when_the_claim_decides(pg_store: PostgresStore) -> None:
    """A claimer that waited for the advisory locks stamps its lease (and rate window) with
    the time it decided, not the time its transaction began."""
    pg_store.job_enqueue(EnqueueParams(type="s", payload=b"{}", scope=Scope("A", "1")))
    lock_key = _type_lock_key(pg_store, "s")
    holder = psycopg.connect(str(pg_store.dsn), autocommit=True)
    try:
        holder.execute("BEGIN")
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key,))
        got: list[ClaimedJob] = []
        thread = threading.Thread(target=lambda: got.extend(_claim(pg_store, _sbs(1))))
        thread.start()
        thread.join(0.8)
        assert thread.is_alive(), "the claim should wait for the type lock"
        released_at = holder.execute("SELECT clock_timestamp()").fetchone()
        holder.execute("COMMIT")
        thread.join(10)
    finally:
        holder.close()
    assert len(got) == 1
    started = _started_at(pg_store, got[0].id)
    assert released_at is not None
    assert started >= released_at[0]


def test_pool_claims_report_concurrency_and_rate_blocks(pg_dsn: str, schema: str) -> None:
    store = PostgresStore.connect(pg_dsn, schema=schema, max_size=2, rate_window=30)
    try:
        store.migrate()
        _bunch(store, "s", 4, 1)
        slot = TypeSlots("s", 10, 30)
        conc = {"c": Resource(concurrency=2, types=["s", "other"])}
        assert len(_claim(store, slot, resources=conc)) == 2
        blocked = _claim(store, slot, resources=conc)
        assert claim_blocked(blocked) == {"s": ClaimBlock("pool concurrency", "c")}
        rate = {"r": Resource(rate_per_minute=1, types=["s"])}
        assert len(_claim(store, slot, resources=rate)) == 1
        blocked = _claim(store, slot, resources=rate)
        assert claim_blocked(blocked) == {"s": ClaimBlock("pool rate", "r")}
    finally:
        store.close()


def _type_lock_key(store: PostgresStore, job_type: str) -> int:
    with store.pool.connection() as conn:
        row = conn.execute("SELECT hashtextextended(%s, 0)",
                           (store.schema + ":type:" + job_type,)).fetchone()
    assert row is not None
    key: int = row[0]
    return key


def _started_at(store: PostgresStore, job_id: str) -> Any:
    with store.pool.connection() as conn:
        row = conn.execute(sql.SQL("SELECT started_at FROM {}.jobs_all WHERE id = %s").format(
            sql.Identifier(store.schema)), (int(job_id),)).fetchone()
    assert row is not None
    return row[0]


def test_the_rate_window_restarts_and_charges_every_attempt(pg_dsn: str, schema: str) -> None:
    """With an injected 1.5 s window: the budget blocks within a window, a retried attempt
    is charged again, cancelling or pruning refunds nothing, and an elapsed window admits
    a full budget again."""
    store = PostgresStore.connect(pg_dsn, schema=schema, max_size=2, rate_window=1.5)
    try:
        store.migrate()
        for _ in range(3):
            store.job_enqueue(EnqueueParams(type="r", payload=b"{}"))
        pool = {"q": Resource(rate_per_minute=2, types=["r"])}
        slot = TypeSlots("r", 10, 30)
        first = _claim(store, slot, resources=pool)
        assert len(first) == 2
        # one attempt goes back (its attempt refunded), the other completes
        assert store.job_retry_many("w", [RetryItem(first[0].id, first[0].lease_token, 0.0,
                                                    "again", consume_attempt=False)])
        _done(store, [first[1]])
        blocked = _claim(store, slot, resources=pool)
        assert list(blocked) == []
        assert claim_blocked(blocked) == {"r": ClaimBlock("pool rate", "q")}
        assert _budget(store) == 2
        store.job_cancel(CancelFilter(job_ids=[first[1].id]), None)
        store.job_prune([JobStatus.SUCCEEDED], before=None, age=0.0)
        assert _budget(store) == 2  # the spend outlives the jobs that spent it
        # the window elapses (database clock): a full budget again, the retry charged anew
        opened = _window_start(store)
        deadline = opened + timedelta(seconds=1.5)
        wait_until(lambda: store.now() >= deadline, 10, interval=0.05)
        again = _claim(store, slot, resources=pool)
        assert sorted(j.id for j in again) == sorted([first[0].id, _other(store, first)])
        assert _budget(store) == 2
        assert _window_start(store) > opened
    finally:
        store.close()


def _budget(store: PostgresStore) -> int:
    with store.pool.connection() as conn:
        row = conn.execute(sql.SQL("SELECT spent FROM {}.resource_budgets WHERE name = 'q'")
                           .format(sql.Identifier(store.schema))).fetchone()
    assert row is not None
    spent: int = row[0]
    return spent


def _window_start(store: PostgresStore) -> Any:
    with store.pool.connection() as conn:
        row = conn.execute(sql.SQL("SELECT window_start FROM {}.resource_budgets "
                                   "WHERE name = 'q'").format(
                                       sql.Identifier(store.schema))).fetchone()
    assert row is not None
    return row[0]


def _other(store: PostgresStore, claimed: list[ClaimedJob]) -> str:
    with store.pool.connection() as conn:
        rows = conn.execute(sql.SQL("SELECT id FROM {}.jobs_all WHERE id <> ALL(%s)").format(
            sql.Identifier(store.schema)), ([int(j.id) for j in claimed],)).fetchall()
    assert len(rows) == 1
    return str(rows[0][0])


def test_a_running_scope_with_a_long_backlog_does_not_hide_the_scopes_behind_it(
    pg_store: PostgresStore,
) -> None:
    """The window reads a bounded stretch of the backlog: when every row of it belongs to a
    running scope, the claim still reaches the scopes behind it (through the walk)."""
    _bunch(pg_store, "s", 1, 1500)  # longer than the window's scan (1,000 rows)
    (busy,) = _claim(pg_store, _sbs(1), owner="other")
    behind = [str(pg_store.job_enqueue(EnqueueParams(
        type="s", payload=b"{}", scope=Scope("B", str(i)))).id) for i in range(5)]
    got = _claim(pg_store, _sbs(10))
    assert sorted(j.id for j in got) == sorted(behind)
    assert busy.scope not in {j.scope for j in got}
    blocked = _claim(pg_store, _sbs(10), owner="third")
    assert list(blocked) == []
    assert claim_blocked(blocked) == {"s": ClaimBlock("scope")}


def test_scopes_stay_exclusive_whether_or_not_the_live_leases_fit_the_hash(
    pg_store: PostgresStore,
) -> None:
    """The window and the walk test scopes against a hash of the type's live leases while
    they number at most the scan bound (1,000 for a claim of 1), and probe each scope past
    it: both ways, a running scope is never claimed again."""
    _bunch(pg_store, "s", 1001, 2)
    first = _claim(pg_store, _sbs(1001), owner="other")
    assert len({j.scope for j in first}) == 1001
    # 1,001 live leases: past the bound, so each scope is probed.
    head = str(pg_store.job_enqueue(EnqueueParams(
        type="s", payload=b"{}", scope=Scope("T", "x"), priority=5)).id)
    assert [j.id for j in _claim(pg_store, _sbs(1))] == [head]
    blocked = _claim(pg_store, _sbs(5), owner="third")
    assert list(blocked) == []
    assert claim_blocked(blocked) == {"s": ClaimBlock("scope")}
    # 992 live leases (with "T"): hashed. Only the ten scopes just freed are claimable.
    _done(pg_store, first[:10], owner="other")
    got = _claim(pg_store, _sbs(20), owner="third")
    assert len(got) == 10
    assert {j.scope for j in got} == {j.scope for j in first[:10]}


def test_a_window_bunched_by_scope_narrows_and_a_spread_one_widens_it(
    pg_store: PostgresStore,
) -> None:
    """A wide window over a backlog bunched by scope reads many rows for few scopes; the next
    claim of the type reads a narrow one and the walk finds the rest. Which window a claim
    reads changes its cost, never what it may claim."""
    claimer = pg_store._shared.claimer
    _bunch(pg_store, "s", 40, 30)  # 1,200 jobs, 30 in a row per scope
    assert claimer.guarded_params("w", _sbs(100), {})[1]["lookahead"] == 200
    first = _claim(pg_store, _sbs(100))
    assert len({j.scope for j in first}) == len(first) == 40
    assert claimer.guarded_params("w", _sbs(100), {})[1]["lookahead"] == _WINDOW_MIN
    _done(pg_store, first)
    second = _claim(pg_store, _sbs(100))  # narrow window + walk: still every scope
    assert len({j.scope for j in second}) == len(second) == 40
    _done(pg_store, second)

    spread = TypeSlots("u", 100, 30.0, serialize_by_scope=True)
    for _round in range(3):
        for s in range(80):
            pg_store.job_enqueue(EnqueueParams(type="u", payload=orjson.dumps({}),
                                               scope=Scope("S", f"{s:03d}")))
    assert len(_claim(pg_store, spread)) == 80
    assert claimer.guarded_params("w", spread, {})[1]["lookahead"] == 200

    # unscoped jobs of a scoped type are units of their own (the walk cannot reach them):
    # a window full of them pays, and stays wide
    unscoped = TypeSlots("v", 100, 30.0, serialize_by_scope=True)
    pg_store.job_enqueue_many(EnqueueManyParams(
        type="v", payloads=[orjson.dumps({"i": i}) for i in range(300)]))
    assert len(_claim(pg_store, unscoped)) == 100
    assert claimer.guarded_params("w", unscoped, {})[1]["lookahead"] == 200
    assert len(_claim(pg_store, unscoped)) == 100
