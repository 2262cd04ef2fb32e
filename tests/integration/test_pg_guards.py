"""Guards on real PostgreSQL with concurrent connections: advisory locks, ledgers, windows.

The contract suite (tests/contract) checks guard semantics on both stores; these tests
check what only a real database can show: in-flight claims excluded by advisory locks, and
limits that hold while several threads claim and complete at once (checked by a ledger of
concurrent runs kept by the test, which only ever under-counts what the database holds).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import psycopg
import pytest

from golemq_pg._types import JobStatus, Resource, Scope
from golemq_pg.store.port import (
    ClaimBlock,
    ClaimedJob,
    ClaimRequest,
    EnqueueManyParams,
    EnqueueParams,
    FindParams,
    LeaseRef,
    TypeSlots,
    claim_blocked,
)
from golemq_pg.store.postgres import PostgresStore


def _add(store: PostgresStore, job_type: str, n: int = 1, scope: Scope | None = None,
         **kwargs: Any) -> None:
    if n == 1 and kwargs:
        store.job_enqueue(EnqueueParams(type=job_type, payload=b"{}", scope=scope, **kwargs))
        return
    store.job_enqueue_many(EnqueueManyParams(
        type=job_type, payloads=[orjson.dumps({"i": i}) for i in range(n)], scope=scope))


def _done(store: PostgresStore, owner: str, jobs: list[ClaimedJob]) -> None:
    assert store.job_complete_many(owner, [LeaseRef(j.id, j.lease_token) for j in jobs]) == {
        j.id for j in jobs
    }


class Ledger:
    """Concurrent runs as the test sees them: entered after a claim, left before completing."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active: Counter[Any] = Counter()
        self.peak: Counter[Any] = Counter()
        self.total_peak = 0

    def enter(self, key: Any, weight: int = 1) -> None:
        with self.lock:
            self.active[key] += weight
            self.peak[key] = max(self.peak[key], self.active[key])
            self.total_peak = max(self.total_peak, sum(self.active.values()))

    def leave(self, key: Any, weight: int = 1) -> None:
        with self.lock:
            self.active[key] -= weight


def _workers(n: int, body: Callable[[int], None], timeout: float = 60) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(n)

    def run(i: int) -> None:
        try:
            barrier.wait(10)
            body(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors


def _drain(store: PostgresStore, owner: str, request: Callable[[], ClaimRequest],
           on_claim: Callable[[list[ClaimedJob]], None],
           on_done: Callable[[list[ClaimedJob]], None], deadline: float) -> None:
    while time.monotonic() < deadline:
        jobs = store.job_claim(request())
        if not jobs:
            if store.job_stats()["pending"] == 0:
                return
            time.sleep(0.001)
            continue
        on_claim(jobs)
        time.sleep(0.002)  # "work"
        on_done(jobs)
        _done(store, owner, jobs)
    raise AssertionError("did not drain in time")


def test_serialize_by_scope_holds_across_concurrent_workers(pg_store: PostgresStore) -> None:
    for scope_no in range(6):
        _add(pg_store, "s", 15, scope=Scope("Doc", str(scope_no)))
    _add(pg_store, "s", 20)  # unscoped: unaffected
    ledger = Ledger()
    deadline = time.monotonic() + 60

    def worker(i: int) -> None:
        _drain(
            pg_store, f"w{i}",
            lambda: ClaimRequest(f"w{i}", [TypeSlots("s", 4, 30, serialize_by_scope=True)]),
            lambda jobs: [ledger.enter(j.scope) for j in jobs],
            lambda jobs: [ledger.leave(j.scope) for j in jobs],
            deadline,
        )

    _workers(4, worker)
    scoped_peaks = {k: v for k, v in ledger.peak.items() if k is not None}
    assert len(scoped_peaks) == 6
    assert max(scoped_peaks.values()) == 1
    assert pg_store.job_stats()["succeeded"] == 110


def test_a_guarded_claim_waits_for_an_in_flight_claim_of_a_not_while_running_type(
    pg_store: PostgresStore, pg_dsn: str
) -> None:
    _add(pg_store, "a", 1, priority=0)
    _add(pg_store, "b", 1, priority=0)
    result: list[list[ClaimedJob]] = []
    with psycopg.connect(pg_dsn) as conn:
        # A fast-path claim of "a", still uncommitted: its lease is invisible to others, but
        # it holds a's shared advisory lock.
        held = pg_store.with_connection(conn).job_claim(ClaimRequest("w1", [TypeSlots("a", 1,
                                                                                      30)]))
        assert len(held) == 1
        guarded = threading.Thread(target=lambda: result.append(pg_store.job_claim(
            ClaimRequest("w2", [TypeSlots("b", 1, 30, not_while_running=("a",))]))))
        guarded.start()
        guarded.join(0.5)
        assert guarded.is_alive()  # waits for the in-flight claim instead of missing it
        conn.commit()
    guarded.join(10)
    (got,) = result
    assert list(got) == []
    assert claim_blocked(got) == {"b": ClaimBlock("type", "a")}


def test_a_fast_path_claim_waits_while_a_guarded_claim_checks(
    pg_store: PostgresStore, pg_dsn: str
) -> None:
    _add(pg_store, "a", 1, priority=0)
    _add(pg_store, "b", 1, priority=0)
    result: list[list[ClaimedJob]] = []
    with psycopg.connect(pg_dsn) as conn:
        bound = pg_store.with_connection(conn)
        got = bound.job_claim(ClaimRequest("w2", [TypeSlots("b", 1, 30,
                                                            not_while_running=("a",))]))
        assert len(got) == 1  # b passed its check; its locks are held until commit
        fast = threading.Thread(target=lambda: result.append(
            pg_store.job_claim(ClaimRequest("w1", [TypeSlots("a", 1, 30)]))))
        fast.start()
        fast.join(0.5)
        assert fast.is_alive()
        conn.commit()
    fast.join(10)
    assert [j.type for j in result[0]] == ["a"]  # one-sided: a may start once b is claimed


def test_waits_for_and_not_while_running_under_concurrent_workers(
    pg_store: PostgresStore,
) -> None:
    # "late" waits for "early"; "solo" must not start while "early" holds a live lease. Three
    # workers claim all three types at once (fast path and guarded path interleaving).
    _add(pg_store, "early", 40)
    _add(pg_store, "late", 40)
    _add(pg_store, "solo", 40)
    violations: list[str] = []
    deadline = time.monotonic() + 60

    def request(owner: str) -> ClaimRequest:
        return ClaimRequest(owner, [
            TypeSlots("early", 3, 30),
            TypeSlots("late", 3, 30, waits_for=("early",)),
            TypeSlots("solo", 3, 30, not_while_running=("early",)),
        ])

    def worker(i: int) -> None:
        owner = f"w{i}"
        while time.monotonic() < deadline:
            jobs = pg_store.job_claim(request(owner))
            if not jobs and pg_store.job_stats()["pending"] == 0:
                return
            # Nothing re-creates "early" work, so once a "late" job was claimed (no early
            # work due or live at that instant) none may exist afterwards either.
            if any(j.type == "late" for j in jobs) and pg_store.job_find(_find("early")):
                violations.append("late claimed while early work remained")
            _done(pg_store, owner, jobs)
        raise AssertionError("did not drain")

    _workers(3, worker)
    assert violations == []
    assert pg_store.job_stats()["succeeded"] == 120


def _find(job_type: str) -> FindParams:
    return FindParams(types=[job_type], statuses=[JobStatus.PENDING, JobStatus.RUNNING], limit=1)


def test_grouped_batches_never_split_or_overlap_across_workers(pg_store: PostgresStore) -> None:
    for user in range(8):
        _add(pg_store, "digest", 12, scope=Scope("User", str(user)))
    ledger = Ledger()
    batches: list[tuple[Scope | None, int]] = []
    deadline = time.monotonic() + 60

    def on_claim(jobs: list[ClaimedJob]) -> None:
        by_scope = Counter(j.scope for j in jobs)
        for scope, count in by_scope.items():
            ledger.enter(scope)
            batches.append((scope, count))

    def worker(i: int) -> None:
        _drain(
            pg_store, f"w{i}",
            lambda: ClaimRequest(f"w{i}", [TypeSlots("digest", 2, 30, grouped=True,
                                                     max_batch=5)]),
            on_claim,
            lambda jobs: [ledger.leave(s) for s in {j.scope for j in jobs}],
            deadline,
        )

    _workers(3, worker)
    assert max(ledger.peak.values()) == 1
    assert all(count <= 5 for _, count in batches)
    assert sum(count for _, count in batches) == 96


def test_pool_concurrency_holds_across_workers_and_types(pg_store: PostgresStore) -> None:
    _add(pg_store, "light", 60)
    _add(pg_store, "heavy", 30)
    pool = {"api": Resource(concurrency=4, types=["light", "heavy"], costs={"heavy": 2})}
    ledger = Ledger()
    weights = {"light": 1, "heavy": 2}
    deadline = time.monotonic() + 60

    def worker(i: int) -> None:
        # Worker 0 only handles "light": "heavy" leases still count against its pool.
        types = [TypeSlots("light", 3, 30)]
        if i:
            types.append(TypeSlots("heavy", 3, 30))
        _drain(
            pg_store, f"w{i}",
            lambda: ClaimRequest(f"w{i}", types, pool),
            lambda jobs: [ledger.enter("api", weights[j.type]) for j in jobs],
            lambda jobs: [ledger.leave("api", weights[j.type]) for j in jobs],
            deadline,
        )

    _workers(4, worker)
    assert ledger.peak["api"] <= 4
    assert ledger.peak["api"] >= 2  # the limit was actually approached
    assert pg_store.job_stats()["succeeded"] == 90


@pytest.fixture
def fast_window_store(pg_store: PostgresStore) -> Iterator[PostgresStore]:
    """The same queue with a half-second rate window."""
    return PostgresStore(pg_store.pool, schema=pg_store.schema, rate_window=0.5)


def test_rate_budget_per_window_under_concurrent_claimers(
    fast_window_store: PostgresStore,
) -> None:
    store = fast_window_store
    _add(store, "call", 40)
    _add(store, "bulk", 10)
    pool = {"api": Resource(rate_per_minute=6, types=["call", "bulk"],
                            rate_costs={"bulk": 3})}
    claimed: list[list[ClaimedJob]] = [[] for _ in range(4)]

    def burst(i: int) -> None:
        claimed[i] = store.job_claim(ClaimRequest(
            f"w{i}", [TypeSlots("call", 10, 30), TypeSlots("bulk", 10, 30)], pool))

    _workers(4, burst)
    spent = sum(1 if j.type == "call" else 3 for batch in claimed for j in batch)
    assert 0 < spent <= 6
    # The budget survives the rows: completing or deleting jobs refunds nothing.
    for i, batch in enumerate(claimed):
        if batch:
            _done(store, f"w{i}", batch)
    blocked = store.job_claim(ClaimRequest("w9", [TypeSlots("call", 10, 30)], pool))
    if spent == 6:
        assert list(blocked) == []
        assert claim_blocked(blocked) == {"call": ClaimBlock("pool rate", "api")}
    # A new window opens after 0.5 s of database time.
    deadline = time.monotonic() + 10
    again: list[ClaimedJob] = []
    while not again:
        assert time.monotonic() < deadline
        time.sleep(0.05)
        again = store.job_claim(ClaimRequest("w9", [TypeSlots("call", 10, 30)], pool))
    assert len(again) == 6


def test_rate_window_must_be_positive(pg_store: PostgresStore) -> None:
    with pytest.raises(ValueError, match="rate_window"):
        PostgresStore(pg_store.pool, schema=pg_store.schema, rate_window=0)


def test_guard_locks_leave_no_advisory_lock_behind(
    pg_store: PostgresStore, pg_dsn: str, schema: str
) -> None:
    app = "golemq-test-" + schema
    with PostgresStore.connect(pg_dsn, schema=schema, application_name=app) as store:
        _add(store, "g", 5, scope=Scope("S", "1"))
        _add(store, "f", 5)
        pool = {"p": Resource(concurrency=2, types=["g"])}
        got = store.job_claim(ClaimRequest("w", [
            TypeSlots("f", 5, 30), TypeSlots("g", 5, 30, serialize_by_scope=True),
            TypeSlots("h", 5, 30, grouped=True)], pool))
        assert len(got) == 6
        with psycopg.connect(pg_dsn) as conn:
            mine = "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
            assert conn.execute(mine, (app,)).fetchall()  # the pool's connections exist
            locks = conn.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid IN ("
                + mine + ")", (app,)).fetchone()
            assert locks == (0,)
            idle_in_tx = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
                " AND state <> 'idle'", (app,)).fetchone()
            assert idle_in_tx == (0,)
