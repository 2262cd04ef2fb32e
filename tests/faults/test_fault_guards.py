"""Scenario 13 of docs/RELIABILITY.md: guards under contention.

Two worker processes serve guarded types (serialize_by_scope, a resource pool, a mutual
not_while_running pair, waits_for) while eight threads of the test process enqueue with dedupe
keys (reject and replace), claim and complete directly, cancel, and reap. The effects ledger
records every run's interval (database clock); overlaps a guard forbids are counted in SQL.

docs/RELIABILITY.md asks for 5 minutes; the suite runs ``$GOLEMQ_FAULTS_GUARD_SECONDS`` (default
15 s) to stay inside its time budget: set it to 300 for the full soak.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

import pytest
from psycopg import sql

from golemq_pg import Resource
from golemq_pg.store.port import ClaimRequest, LeaseRef, TypeSlots
from tests.support.fault_env import FaultEnv
from tests.support.fault_report import env_seconds, report
from tests.support.waiting import wait_until
from tests.support.workers import type_spec

pytestmark = pytest.mark.faults

SCOPES = [("Acct", str(n)) for n in range(4)]
KEYS = [f"k{n}" for n in range(6)]
POOL_LIMIT = 2

TYPES = [
    type_spec("ser", concurrency=3, serialize_by_scope=True, not_while_running=["excl"]),
    type_spec("excl", concurrency=2, not_while_running=["ser"]),
    type_spec("pool-a", concurrency=2),
    type_spec("pool-b", concurrency=2),
    type_spec("pre", concurrency=3),
    type_spec("after", concurrency=2, waits_for=["pre"]),
    type_spec("keyed", concurrency=3),
]
RESOURCES = {"api": {"concurrency": POOL_LIMIT, "types": ["pool-a", "pool-b"]}}


def test_s13_guards_hold_under_contention(fault_env: FaultEnv) -> None:
    env = fault_env
    seconds = env_seconds("GOLEMQ_FAULTS_GUARD_SECONDS", 15.0)
    options = {"poll_interval": 0.05, "lease_grace": 30, "resources": RESOURCES}
    procs = [env.spawn(f"w{i}", TYPES, worker=options, pool={"max_size": 6})
             for i in range(2)]
    stop = threading.Event()
    errors: list[BaseException] = []
    ops: Counter[str] = Counter()
    lock = threading.Lock()
    owner = env.prefix + "-admin"
    insert_run = sql.SQL(
        "INSERT INTO {s}.effects (job_id, attempt, token, worker, pid, type, scope, tag) "
        "VALUES (%s, %s, %s, %s, 0, %s, %s, %s) RETURNING run_id"
    ).format(s=sql.Identifier(env.schema))
    finish_run = sql.SQL(
        "UPDATE {s}.effects SET finished_at = clock_timestamp(), outcome = 'ok' "
        "WHERE run_id = %s").format(s=sql.Identifier(env.schema))

    def loop(name: str, step: object) -> None:
        rng = random.Random(name)
        while not stop.is_set():
            try:
                step(rng)  # type: ignore[operator]
                with lock:
                    ops[name] += 1
            except BaseException as exc:
                errors.append(exc)
                return

    def enqueue(rng: random.Random) -> None:
        kind = rng.choice(["ser", "excl", "pool-a", "pool-b", "pre", "after", "keyed"])
        # "pre" runs long enough that an "after" claimed beside it would overlap it widely.
        seconds = rng.uniform(0.15, 0.25) if kind == "pre" else rng.uniform(0.005, 0.04)
        payload = {"sleep": seconds}
        if kind == "keyed":
            key = rng.choice(KEYS)
            env.queue.add("keyed", {**payload, "tag": key}, dedupe_key=key,
                          on_duplicate=rng.choice(["reject", "replace"]))
        elif kind == "ser":
            env.queue.add("ser", payload, scope=rng.choice(SCOPES))
        else:
            env.queue.add(kind, payload)
        time.sleep(rng.uniform(0.005, 0.05))  # about what the guarded types drain

    def cancel(rng: random.Random) -> None:
        choice = rng.random()
        if choice < 0.4:
            env.queue.cancel_pending_for_scope(rng.choice(SCOPES))
        elif choice < 0.7:
            env.queue.cancel_for_scope(rng.choice(SCOPES), reason="contention test")
        else:
            env.queue.cancel_by_dedupe_keys("keyed", rng.sample(KEYS, 2))
        time.sleep(rng.uniform(0.05, 0.2))

    def reap(rng: random.Random) -> None:
        env.store.lease_recover_expired(100)
        time.sleep(rng.uniform(0.02, 0.1))

    def claim(rng: random.Random) -> None:
        # A third claimer with every guard, recording its "runs" in the ledger like a worker.
        slots = [TypeSlots("ser", 1, 30.0, serialize_by_scope=True, not_while_running=("excl",)),
                 TypeSlots("pool-a", 1, 30.0), TypeSlots("keyed", 1, 30.0)]
        jobs = env.store.job_claim(ClaimRequest(owner, [rng.choice(slots)],
                                                resources=_resources()))
        with env.connect() as conn:
            for job in jobs:
                scope = None if job.scope is None else ":".join(job.scope)
                run_id = conn.execute(insert_run, (int(job.id), job.attempt, job.lease_token,
                                                   owner, job.type, scope,
                                                   job.payload.get("tag"))).fetchone()[0]
                time.sleep(0.01)
                conn.execute(finish_run, (run_id,))
        env.store.job_complete_many(owner, [LeaseRef(j.id, j.lease_token) for j in jobs])
        time.sleep(rng.uniform(0.01, 0.05))

    plan = ([("enqueue", enqueue)] * 3 + [("cancel", cancel)] * 2 + [("reap", reap)]
            + [("claim", claim)] * 2)
    threads = [threading.Thread(target=loop, args=(f"{name}-{i}", step), daemon=True)
               for i, (name, step) in enumerate(plan)]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(30)
    assert not errors, [f"{type(e).__name__}: {e}" for e in errors[:5]]
    drain_started = time.monotonic()
    wait_until(lambda: not {"pending", "running"} & set(env.status_counts()), timeout=60,
               interval=0.1, what="the backlog drained")
    drained = time.monotonic() - drain_started
    for proc in procs:
        assert proc.terminate() == 0
    check_started = time.monotonic()
    counts = env.check_invariants()
    overlaps = {
        "serialize_by_scope": env.lease_overlaps(
            "a.type = 'ser' AND b.type = 'ser' AND a.scope = b.scope"),
        "not_while_running": env.lease_overlaps(
            "((a.type = 'ser' AND b.type = 'excl') OR (a.type = 'excl' AND b.type = 'ser'))"),
        "waits_for": _waits_for_violations(env),
        "dedupe_key": env.lease_overlaps(
            "a.type = 'keyed' AND b.type = 'keyed' AND a.dedupe_key = b.dedupe_key"),
    }
    pool_peak = _pool_peak(env)
    checked = time.monotonic() - check_started
    assert overlaps == dict.fromkeys(overlaps, 0), overlaps
    assert pool_peak <= POOL_LIMIT
    lock_errors = [
        e for proc in procs for e in proc.logs()
        if e.get("error_type") in ("DeadlockDetected", "SerializationFailure",
                                   "LockNotAvailable", "QueryCanceled")
        or e.get("error") in ("DeadlockDetected", "SerializationFailure")
    ]
    assert not lock_errors, lock_errors[:5]
    ran = dict(env.q("SELECT type, count(*) FROM {s}.effects GROUP BY type"))
    assert all(ran.get(t["name"], 0) > 0 for t in TYPES), ran
    report("13 guards under contention (2 processes + 8 threads)", seconds=seconds,
           drain_seconds=round(drained, 2), check_seconds=round(checked, 2),
           operations=dict(ops), runs_by_type=ran, guard_overlaps=overlaps,
           pool_peak=pool_peak, pool_limit=POOL_LIMIT, deadlock_or_serialization_errors=0,
           **counts)


def _waits_for_violations(env: FaultEnv) -> int:
    """"after" claims that saw a "pre" job running (waits_for is one-way).

    waits_for takes no lock on the awaited type, so only what the claim's snapshot saw
    counts: a "pre" job claimed just after that snapshot may legitimately run beside it.
    Counted are "after" claims whose statement began (statement_timestamp, before its
    snapshot) after a "pre" handler had started (so that claim had committed) and at least
    50 ms before that "pre" lease ended (so its end was not yet committed).
    """
    return int(env.one(
        "WITH pre AS (SELECT e.job_id, e.token, e.started_at, (SELECT min(x.at) FROM "
        "{s}.audit x WHERE x.job_id = e.job_id AND x.old_token = e.token AND "
        "x.old_status = 'running' AND (x.op = 'delete' OR x.new_status <> 'running')) AS t1 "
        "FROM {s}.effects e WHERE e.type = 'pre' AND e.token IS NOT NULL), "
        "claims AS (SELECT job_id, stmt_at FROM {s}.audit WHERE type = 'after' "
        "AND old_status = 'pending' AND new_status = 'running') "
        "SELECT count(*) FROM claims c JOIN pre p ON p.started_at < c.stmt_at "
        "AND c.stmt_at < coalesce(p.t1, 'infinity') - interval '50 ms'"))


def _pool_peak(env: FaultEnv) -> int:
    """Most pool-member leases live at once (at any claim instant), from the audit."""
    return int(env.one(
        "WITH claims AS (SELECT job_id, new_token AS token, at AS t0, type FROM {s}.audit "
        "WHERE old_status = 'pending' AND new_status = 'running' "
        "AND type IN ('pool-a', 'pool-b')), ends AS (SELECT job_id, old_token AS token, "
        "min(at) AS t1 FROM {s}.audit WHERE old_status = 'running' AND (op = 'delete' "
        "OR new_status <> 'running') GROUP BY job_id, old_token), leases AS (SELECT c.*, "
        "coalesce(e.t1, 'infinity') AS t1 FROM claims c LEFT JOIN ends e USING (job_id, "
        "token)) SELECT coalesce(max(n), 0) FROM (SELECT (SELECT count(*) FROM leases o "
        "WHERE o.t0 <= l.t0 AND l.t0 < o.t1) AS n FROM leases l) x"))


def _resources() -> dict[str, Resource]:
    return {"api": Resource(concurrency=POOL_LIMIT, types=["pool-a", "pool-b"])}
