"""Guards across real worker processes on real PostgreSQL.

Each test starts worker processes (tests/support/worker_process.py, guard ledger) that
build a PostgresStore and a golemq_pg.Worker with guarded handlers; every handler run writes
a row to a ledger table in the test's schema: (job, type, scope, worker, pid, the claim's
started_at, and clock_timestamp() at handler start and end). The assertions are SQL over
that ledger. A ledger interval lies inside its job's lease, so two overlapping ledger
intervals are two overlapping leases: any overlap found is a real guard violation.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from golemq_pg import PostgresStore, Queue
from tests.support.waiting import wait_until
from tests.support.workers import start_process, worker_config

#: Worker options every test process uses: quick polls, quick shutdown.
FAST = {"poll_interval": 0.05, "shutdown_grace": 5, "abandon_grace": 1}


def guarded_handler(spec: dict[str, Any]) -> dict[str, Any]:
    """A handler of the guard ledger from ``{type, sleep: [lo, hi], hang, ...options}``: its
    run sleeps 1-3 ms unless told otherwise; ``hang`` records its start, then sleeps until
    the process dies."""
    options = {k: v for k, v in spec.items() if k not in ("type", "sleep", "hang")}
    return {"type": spec["type"], "options": options, "ledger": "guard",
            "sleep": spec.get("sleep", [0.001, 0.003]),
            "sleep_mode": "hang" if spec.get("hang") else "ignore"}


class Procs:
    """The worker processes of one test; stopped (SIGTERM, then SIGKILL) at teardown."""

    def __init__(self, dsn: str, schema: str, logs: Path) -> None:
        self.dsn = dsn
        self.schema = schema
        self.logs = logs
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def spawn(self, worker_id: str, handlers: list[dict[str, Any]], *,
              resources: dict[str, Any] | None = None, worker: dict[str, Any] | None = None,
              rate_window: float | None = None) -> subprocess.Popen[bytes]:
        store: dict[str, Any] = {"max_size": 3, "application_name": "guard-test-worker"}
        if rate_window is not None:
            store["rate_window"] = rate_window
        config = worker_config(
            self.dsn, self.schema, worker_id, mode="run", ready="when_running", store=store,
            worker={**FAST, **(worker or {}), "resources": resources or {}},
            handlers=[guarded_handler(spec) for spec in handlers],
        )
        log = self.logs / f"{worker_id}.log"
        with log.open("wb") as out:
            proc = start_process(config, stdout=out, stderr=subprocess.STDOUT, text=False)
        self.procs[worker_id] = proc
        return proc

    def wait_ready(self, timeout: float = 30) -> None:
        wait_until(lambda: all(self.ready(w) for w in self.procs), timeout, interval=0.05,
                   what=lambda: "workers ready: " + self.tails())

    def ready(self, worker_id: str) -> bool:
        proc = self.procs[worker_id]
        if proc.poll() is not None:
            raise AssertionError(f"{worker_id} exited {proc.returncode}: {self.tails()}")
        return b"ready\n" in (self.logs / f"{worker_id}.log").read_bytes()

    def tails(self) -> str:
        return "\n".join(
            f"--- {w}\n" + (self.logs / f"{w}.log").read_text(errors="replace")[-3000:]
            for w in self.procs)

    def stop(self) -> None:
        """Graceful stop of every live process; each must exit 0."""
        live = {w: p for w, p in self.procs.items() if p.poll() is None}
        for proc in live.values():
            proc.send_signal(signal.SIGTERM)
        for worker_id, proc in live.items():
            try:
                assert proc.wait(30) == 0, f"{worker_id} exited {proc.returncode}"
            except subprocess.TimeoutExpired:
                proc.kill()
                raise AssertionError(f"{worker_id} did not stop: {self.tails()}") from None

    def kill_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


@pytest.fixture
def procs(pg_store: PostgresStore, pg_dsn: str, tmp_path: Path) -> Iterator[Procs]:
    """A ledger table in the test's schema and the test's worker processes."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL(
            "CREATE TABLE {} (n bigserial PRIMARY KEY, job_id bigint NOT NULL, "
            "type text NOT NULL, scope text, worker text NOT NULL, pid int NOT NULL, "
            "claimed_at timestamptz, started_at timestamptz NOT NULL, finished_at timestamptz)"
        ).format(sql.Identifier(pg_store.schema, "ledger")))
    group = Procs(pg_dsn, pg_store.schema, tmp_path)
    try:
        yield group
    finally:
        group.kill_all()


def query(dsn: str, schema: str, text: str, params: tuple[Any, ...] = ()) -> list[Any]:
    """Run ``text`` with {ledger} and {jobs} (every job, live or finished) bound to the
    test's tables."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        stmt = sql.SQL(text).format(
            ledger=sql.Identifier(schema, "ledger"), jobs=sql.Identifier(schema, "jobs_all"))
        return conn.execute(stmt, params).fetchall()


def count(dsn: str, schema: str, text: str, params: tuple[Any, ...] = ()) -> int:
    value: int = query(dsn, schema, text, params)[0][0]
    return value


def succeeded(dsn: str, schema: str, *types: str) -> int:
    return count(dsn, schema, "SELECT count(*) FROM {jobs} WHERE status = 'succeeded' "
                              "AND type = ANY(%s)", (list(types),))


def peak(intervals: list[tuple[datetime, datetime, int]]) -> int:
    """Most summed weight of intervals open at one instant (an end before a start at a tie)."""
    events = sorted([(s, 1, w) for s, _, w in intervals] + [(e, 0, -w) for _, e, w in intervals])
    best = level = 0
    for _, _, delta in events:
        level += delta
        best = max(best, level)
    return best


# -- serialize_by_scope ---------------------------------------------------------------------


def test_serialize_by_scope_across_four_processes(
    procs: Procs, pg_store: PostgresStore, pg_dsn: str
) -> None:
    schema = pg_store.schema
    queue = Queue(pg_store)
    # 5,000 jobs over 50 scopes, enqueued in rounds of 10 per scope (bunched and interleaved)
    for _ in range(10):
        for s in range(50):
            queue.add_many("acct.sync", [{"n": n} for n in range(10)], scope=("Account", str(s)))
    handler = {"type": "acct.sync", "concurrency": 4, "serialize_by_scope": True,
               "sleep": [0.001, 0.003]}
    for i in range(4):
        procs.spawn(f"sbs-{i}", [handler])
    procs.wait_ready()
    wait_until(lambda: succeeded(pg_dsn, schema, "acct.sync") == 5000, 150,
               interval=0.05, what=procs.tails)
    procs.stop()

    overlaps = query(pg_dsn, schema, """
        SELECT a.scope, a.job_id, b.job_id
          FROM {ledger} a JOIN {ledger} b
            ON a.scope = b.scope AND a.n < b.n
           AND a.started_at < b.finished_at AND b.started_at < a.finished_at
         LIMIT 5""")
    assert overlaps == [], "two runs of one scope overlapped"
    runs = query(pg_dsn, schema, "SELECT job_id, worker, started_at, finished_at FROM {ledger}")
    assert len(runs) == 5000
    assert len({r[0] for r in runs}) == 5000  # every job ran exactly once
    assert all(r[3] is not None for r in runs)
    assert {r[1] for r in runs} == {f"sbs-{i}" for i in range(4)}  # every process took part
    assert query(pg_dsn, schema, "SELECT status, attempts, count(*) FROM {jobs} "
                                 "GROUP BY 1, 2") == [("succeeded", 1, 5000)]
    # The guard serialised scopes, not the queue: runs of different scopes did overlap.
    assert peak([(r[2], r[3], 1) for r in runs]) >= 4


# -- resource pools -------------------------------------------------------------------------


def test_pool_concurrency_with_costs_across_processes(
    procs: Procs, pg_store: PostgresStore, pg_dsn: str
) -> None:
    schema = pg_store.schema
    queue = Queue(pg_store)
    costs = {"a": 1, "b": 2, "c": 1}
    pools = {"api": {"concurrency": 3, "types": ["a", "b", "c"], "costs": costs}}

    def handlers(*types: str) -> list[dict[str, Any]]:
        return [{"type": t, "concurrency": 3, "sleep": [0.002, 0.006]} for t in types]

    # One type per process: each claim must count what the other processes run (b's cost
    # of 2 counts in the processes that never handle b). A type shared by two processes
    # could run all in one of them: whoever completes a job claims the room it frees in the
    # same transaction, so a process can lose every race for it (seen: 3 runs in 15).
    procs.spawn("pool-0", handlers("a"), resources=pools)
    procs.spawn("pool-1", handlers("b"), resources=pools)
    procs.spawn("pool-2", handlers("c"), resources=pools)
    procs.wait_ready()
    # Enqueued once every process runs: a process still starting up could otherwise find
    # the jobs of its only type gone to the others (seen on a loaded machine).
    for job_type in costs:
        queue.add_many(job_type, [{"n": n} for n in range(80)])
    wait_until(lambda: succeeded(pg_dsn, schema, "a", "b", "c") == 240, 120,
               interval=0.05, what=procs.tails)
    procs.stop()

    runs = query(pg_dsn, schema, "SELECT type, started_at, finished_at, worker FROM {ledger}")
    assert Counter(r[0] for r in runs) == {"a": 80, "b": 80, "c": 80}
    used = peak([(r[1], r[2], costs[r[0]]) for r in runs])
    assert used <= 3, f"the pool admitted a summed cost of {used}"
    assert used >= 2  # the pool was actually shared, so an excess would have shown
    assert {(r[3], r[0]) for r in runs} == {("pool-0", "a"), ("pool-1", "b"), ("pool-2", "c")}


def test_rate_budget_across_two_processes(
    procs: Procs, pg_store: PostgresStore, pg_dsn: str
) -> None:
    """4 starts per (injected) 0.5 s window. Every claim is stamped and charged with the
    claim statement's database clock, taken after the pool's lock, so the windows can be
    replayed from the claim times: a window opens at the first claim after the previous
    one elapsed, and no window may hold more than the budget."""
    schema = pg_store.schema
    budget, window, jobs = 4, 0.5, 24
    Queue(pg_store).add_many("rated", [{"n": n} for n in range(jobs)])
    pools = {"quota": {"rate_per_minute": budget, "types": ["rated"]}}
    # 2 slots per process and 0.1 s runs: one process cannot take a window's whole budget
    # by itself, so both claim in every window.
    handler = [{"type": "rated", "concurrency": 2, "sleep": [0.1, 0.12]}]
    for i in range(2):
        procs.spawn(f"rate-{i}", handler, resources=pools, rate_window=window)
    procs.wait_ready()
    wait_until(lambda: succeeded(pg_dsn, schema, "rated") == jobs, 60,
               interval=0.05, what=procs.tails)
    procs.stop()

    runs = query(pg_dsn, schema, "SELECT claimed_at, worker FROM {ledger} ORDER BY claimed_at")
    assert len(runs) == jobs
    assert {r[1] for r in runs} == {"rate-0", "rate-1"}
    windows: list[int] = []
    opened: datetime | None = None
    for claimed_at, _ in runs:
        if opened is None or claimed_at >= opened + timedelta(seconds=window):
            opened = claimed_at
            windows.append(0)
        windows[-1] += 1
    assert max(windows) <= budget, windows
    assert len(windows) >= math.ceil(jobs / budget)
    span = (runs[-1][0] - runs[0][0]).total_seconds()
    assert span >= (math.ceil(jobs / budget) - 1) * window  # the budget really throttled


# -- not_while_running / waits_for ------------------------------------------------------------


def test_mutual_not_while_running_never_overlaps_across_processes(
    procs: Procs, pg_store: PostgresStore, pg_dsn: str
) -> None:
    schema = pg_store.schema
    queue = Queue(pg_store)
    queue.add_many("x", [{"n": n} for n in range(150)])
    queue.add_many("y", [{"n": n} for n in range(150)])
    handlers = [
        {"type": "x", "concurrency": 3, "not_while_running": ["y"], "sleep": [0.001, 0.003]},
        {"type": "y", "concurrency": 3, "not_while_running": ["x"], "sleep": [0.001, 0.003]},
    ]
    for i in range(2):
        procs.spawn(f"nwr-{i}", handlers)
    procs.wait_ready()
    wait_until(lambda: succeeded(pg_dsn, schema, "x", "y") == 300, 120,
               interval=0.05, what=procs.tails)
    procs.stop()

    overlaps = query(pg_dsn, schema, """
        SELECT a.job_id, b.job_id
          FROM {ledger} a JOIN {ledger} b
            ON a.type = 'x' AND b.type = 'y'
           AND a.started_at < b.finished_at AND b.started_at < a.finished_at
         LIMIT 5""")
    assert overlaps == [], "an x and a y ran at the same time"
    runs = query(pg_dsn, schema, "SELECT type, started_at, finished_at, worker FROM {ledger}")
    assert Counter(r[0] for r in runs) == {"x": 150, "y": 150}
    assert {r[3] for r in runs} == {"nwr-0", "nwr-1"}
    # Within a type the runs did overlap: the guard excludes the other type, not its own.
    assert peak([(r[1], r[2], 1) for r in runs if r[0] == "x"]) >= 2


def test_waits_for_holds_until_the_backlog_drains_and_ignores_future_jobs(
    procs: Procs, pg_store: PostgresStore, pg_dsn: str
) -> None:
    schema = pg_store.schema
    queue = Queue(pg_store)
    queue.add_many("rollup", [{"n": n} for n in range(20)])
    queue.add_many("ingest", [{"n": n} for n in range(200)])
    queue.add_many("ingest", [{"later": n} for n in range(5)], delay=3600)
    handlers = [
        {"type": "ingest", "concurrency": 4, "sleep": [0.001, 0.003]},
        {"type": "rollup", "concurrency": 2, "waits_for": ["ingest"], "sleep": [0.001, 0.002]},
    ]
    for i in range(2):
        procs.spawn(f"wf-{i}", handlers)
    procs.wait_ready()
    # The 5 future ingest jobs stay pending all along, and must not hold the rollups back.
    wait_until(lambda: succeeded(pg_dsn, schema, "rollup") == 20, 90,
               interval=0.05, what=procs.tails)
    procs.stop()

    assert succeeded(pg_dsn, schema, "ingest") == 200
    first_rollup, last_ingest = query(pg_dsn, schema, """
        SELECT (SELECT min(started_at) FROM {ledger} WHERE type = 'rollup'),
               (SELECT max(finished_at) FROM {ledger} WHERE type = 'ingest')""")[0]
    assert first_rollup > last_ingest, "a rollup started before the ingest backlog drained"
    assert count(pg_dsn, schema, "SELECT count(*) FROM {jobs} WHERE type = 'ingest' "
                                 "AND status = 'pending' AND run_at > now()") == 5


def test_a_crashed_holder_stops_blocking_once_its_lease_expires(
    procs: Procs, pg_store: PostgresStore, pg_dsn: str
) -> None:
    """A worker SIGKILLed while holding a lease on the blocking type blocks not_while_running
    and waits_for only until that lease expires, not until a reaper cleans the row up: the
    blocked worker polls every 30 s (so its reaper runs every 5 s) and is woken by a NOTIFY
    right after the expiry; its claims land while the dead row is still RUNNING."""
    schema = pg_store.schema
    queue = Queue(pg_store)
    queue.add("holder", {"n": 1}, max_attempts=1)
    holder = procs.spawn("holder", [{"type": "holder", "hang": True}],
                         worker={"lease_grace": 2.0})
    procs.wait_ready()
    wait_until(lambda: count(pg_dsn, schema, "SELECT count(*) FROM {ledger}") == 1, 30,
               interval=0.05,
               what=procs.tails)
    procs.spawn("blocked", [
        {"type": "nwr", "concurrency": 2, "not_while_running": ["holder"]},
        {"type": "wf", "concurrency": 2, "waits_for": ["holder"]},
    ], worker={"poll_interval": 30})
    procs.wait_ready()
    queue.add_many("nwr", [{"n": n} for n in range(3)])  # NOTIFY: the blocked worker claims
    queue.add_many("wf", [{"n": n} for n in range(3)])
    time.sleep(0.5)
    assert count(pg_dsn, schema, "SELECT count(*) FROM {ledger} WHERE type <> 'holder'") == 0
    assert holder.poll() is None

    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(10)
    # No renewal can follow the kill: this is when the holder's lease runs out.
    (expires,) = query(pg_dsn, schema, "SELECT lease_expires_at FROM {jobs} "
                                       "WHERE type = 'holder' AND status = 'running'")[0]
    wait_until(lambda: query(pg_dsn, schema, "SELECT now() > %s", (expires,))[0][0], 10,
               interval=0.05)
    queue.add("nwr", {"n": 3})  # the wake-up
    queue.add("wf", {"n": 3})
    wait_until(lambda: succeeded(pg_dsn, schema, "nwr", "wf") == 8, 30,
               interval=0.05, what=procs.tails)
    wait_until(lambda: count(pg_dsn, schema, "SELECT count(*) FROM {jobs} "
                                             "WHERE type = 'holder' AND status = 'failed'") == 1,
               15, interval=0.05, what=procs.tails)  # the blocked worker's reaper, within 5 s
    procs.stop()

    claims = query(pg_dsn, schema, "SELECT type, claimed_at FROM {ledger} "
                                   "WHERE type <> 'holder' ORDER BY claimed_at")
    assert sorted(t for t, _ in claims) == ["nwr"] * 4 + ["wf"] * 4
    assert all(claimed_at >= expires for _, claimed_at in claims)
    # The reaper dead-lettered the crashed attempt (its only one), after the first claims
    # of both blocked types: the expired lease, not the cleanup, is what stopped blocking.
    status, reaped = query(pg_dsn, schema, "SELECT status, finished_at FROM {jobs} "
                                           "WHERE type = 'holder'")[0]
    assert status == "failed"
    first = {t: min(c for u, c in claims if u == t) for t in ("nwr", "wf")}
    assert first["nwr"] < reaped, (first, reaped)
    assert first["wf"] < reaped, (first, reaped)
