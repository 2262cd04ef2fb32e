"""Scenarios 10, 11 and 12 of docs/RELIABILITY.md: the reaper racing completions, cancellation
mid-run and during a reaper pass, and the claim under planner variance."""

from __future__ import annotations

import random
import signal
import threading
import time
from typing import Any

import psycopg
import pytest

from golemq_pg.store.port import ClaimRequest, LeaseRef, TypeSlots
from tests.support.fault_env import FaultEnv
from tests.support.fault_report import report
from tests.support.waiting import wait_until
from tests.support.workers import type_spec

pytestmark = pytest.mark.faults


def test_s10_reaper_races_completing_jobs_in_worker_processes(fault_env: FaultEnv) -> None:
    env = fault_env
    # The lease is timeout + lease_grace = 0.41 s, written once (no renewal). First attempts
    # run 0.33-0.45 s and ignore their signal: their completions (or timeout retries, the
    # slot abandoned at once) reach the database around the lease expiry, while both
    # workers reap every 0.1 s. Second attempts are instant.
    rng = random.Random(10)
    env.queue.add_many(
        "racy",
        [{"sleep": rng.uniform(0.33, 0.45), "ignore": True, "first_only": True}
         for _ in range(80)],
        max_attempts=1000,
    )
    options = {"lease_grace": 0.01, "abandon_grace": 0, "poll_interval": 0.05}
    procs = [env.spawn(f"w{i}", [type_spec("racy", concurrency=4, timeout=0.4)],
                       worker=options) for i in range(2)]
    wait_until(lambda: env.status_counts() == {"succeeded": 80}, timeout=120, interval=0.1,
               what="every racy job succeeded")
    counts = env.check_invariants(expected=80, reaper_interval=0.1, allow_double_runs=True)
    reclaims = env.one("SELECT count(*) FROM {s}.audit WHERE old_status = 'running' AND "
                       "new_status <> 'running' AND new_error LIKE 'LeaseExpired%%'")
    completed_in_race = env.one(
        "SELECT count(*) FROM {s}.audit WHERE old_status = 'running' AND old_expired "
        "AND new_status = 'succeeded'")
    for proc in procs:
        assert proc.terminate() == 0
    report("10 reaper races completing jobs (2 processes, 0.41 s leases, no renewal)",
           reclaimed=reclaims, completed_after_expiry_before_reaper=completed_in_race,
           revived=0, completed_twice=0, **counts)


def test_s10_reaper_and_completion_on_the_same_expired_rows(fault_env: FaultEnv) -> None:
    env = fault_env
    store = env.store
    owner = env.prefix + "-admin"  # the audit attributes writes by application_name
    completed_total = reaped_total = 0
    for round_no in range(25):
        env.queue.add_many("race", [{"r": round_no, "n": n} for n in range(40)],
                           max_attempts=1000)
        jobs = store.job_claim(ClaimRequest(owner, [TypeSlots("race", 40, 0.02)]))
        assert jobs
        refs = [LeaseRef(j.id, j.lease_token) for j in jobs]
        time.sleep(0.03)  # every lease has expired: the reaper may take any of them
        barrier = threading.Barrier(2)
        out: dict[str, set[str]] = {}

        # Which side starts first alternates by round (a head start of 2 ms, shorter than
        # either statement), so that both win rows over the run even on a loaded machine,
        # where one side could otherwise take every row of every round.
        lead = 0.002
        complete_after, reap_after = (0.0, lead) if round_no % 2 else (lead, 0.0)

        def complete(refs: list[LeaseRef] = refs, out: dict[str, set[str]] = out,
                     barrier: threading.Barrier = barrier, wait: float = complete_after) -> None:
            barrier.wait()
            time.sleep(wait)
            out["completed"] = store.job_complete_many(owner, refs)

        def reap(out: dict[str, set[str]] = out, barrier: threading.Barrier = barrier,
                 wait: float = reap_after) -> None:
            barrier.wait()
            time.sleep(wait)
            out["reaped"] = {r.id for r in store.lease_recover_expired(1000)}

        threads = [threading.Thread(target=complete), threading.Thread(target=reap)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        done, reaped = out["completed"], out["reaped"]
        ids = {j.id for j in jobs}
        assert not done & reaped  # a row is either completed or reclaimed, never both
        assert done | reaped <= ids
        statuses = dict(env.q("SELECT id::text, status FROM {s}.jobs_all WHERE id = ANY(%s)",
                              ([int(i) for i in ids],)))
        assert all(statuses[i] == "succeeded" for i in done)
        assert all(statuses[i] == "pending" for i in reaped)
        # A later reaper pass never revives what was completed.
        store.lease_recover_expired(1000)
        assert all(env.one("SELECT status FROM {s}.jobs_all WHERE id = %s", (int(i),))
                   == "succeeded" for i in list(done)[:5])
        completed_total += len(done)
        reaped_total += len(reaped)
    assert completed_total
    assert reaped_total
    env.check_invariants(terminal=False, reaper_interval=60, ledger=False)
    report("10 reaper vs completion on the same expired rows (25 rounds x 40)",
           completed=completed_total, reaped=reaped_total, both=0, revived=0)


def _cancel_latency(env: FaultEnv, worker: dict[str, Any], name: str) -> list[float]:
    job_type = "long-" + name
    proc = env.spawn(name, [type_spec(job_type, concurrency=4)], worker=worker)
    ids = [env.queue.add(job_type, {"sleep": 60}) for _ in range(2)]
    ids += [env.queue.add(job_type, {"sleep": 60}, scope=("Doc", f"{name}-{n}"))
            for n in range(2)]
    wait_until(lambda: env.one("SELECT count(*) FROM {s}.effects WHERE worker = %s",
                               (proc.worker_id,)) == 4, timeout=20)
    cancelled_at = env.db_now()
    assert env.queue.cancel(ids[0], reason="gone")
    assert env.queue.cancel(ids[1])
    assert env.queue.cancel_for_scope(("Doc", f"{name}-0")) == 1
    assert env.queue.cancel_for_scope(("Doc", f"{name}-1")) == 1
    rows = wait_until(lambda: (r := env.q(
        "SELECT extract(epoch FROM finished_at - %s)::float8, reason FROM {s}.effects "
        "WHERE worker = %s AND finished_at IS NOT NULL", (cancelled_at, proc.worker_id)))
        and len(r) == 4 and r, timeout=10, what="every cancelled handler signalled")
    assert {r[1] for r in rows} == {"cancelled"}
    # Never resurrected: the rows stay gone and nothing runs them again.
    time.sleep(3 * worker["poll_interval"])
    assert env.one("SELECT count(*) FROM {s}.jobs_all WHERE id = ANY(%s)",
                   ([int(i) for i in ids if i],)) == 0
    assert env.one("SELECT count(*) FROM {s}.effects WHERE worker = %s",
                   (proc.worker_id,)) == 4
    assert proc.terminate() == 0
    return [float(r[0]) for r in rows]


def test_s11_cancel_mid_run_signals_within_one_poll_interval(fault_env: FaultEnv) -> None:
    env = fault_env
    poll = 0.5
    notified = _cancel_latency(env, {"poll_interval": poll}, "notify")
    polled = _cancel_latency(env, {"poll_interval": poll, "notify": False}, "poll")
    assert max(notified) < poll
    # The reconcile pass: one poll interval, plus a query and scheduling on a busy machine.
    assert max(polled) < poll + 0.5
    env.check_invariants(expected=0)
    report("11 cancel mid-run (4 jobs by id and by scope)", poll_interval=poll,
           notify_latency_max=round(max(notified), 3),
           poll_only_latency_max=round(max(polled), 3), resurrected=0)


def test_s11_cancel_during_a_reaper_pass(fault_env: FaultEnv) -> None:
    env = fault_env
    options = {"poll_interval": 0.05, "lease_grace": 1.0}
    rescuer = env.spawn("rescuer", [type_spec("orphan", concurrency=4)], worker=options)
    rescuer.signal(signal.SIGSTOP)
    ids = [env.queue.add("orphan", {"n": n, "sleep": 60, "only_on": "victim"})
           for n in range(8)]
    # batch_size: 4 running and 4 buffered from the first claim.
    victim = env.spawn("victim", [type_spec("orphan", concurrency=4)],
                       worker={**options, "batch_size": 4})
    wait_until(lambda: env.status_counts() == {"running": 8}, timeout=20)
    victim.signal(signal.SIGKILL)
    victim.wait(10)
    time.sleep(1.2)  # every lease has expired
    rescuer.signal(signal.SIGCONT)
    cancels: list[tuple[str, bool, Any]] = []
    for job_id in ids[::2]:  # racing the rescuer's reaper and claims
        assert job_id
        at = env.db_now()
        cancels.append((job_id, env.queue.cancel(job_id), at))
    kept = [i for i in ids[1::2] if i]
    wait_until(lambda: env.one("SELECT count(*) FROM {s}.jobs_all WHERE id = ANY(%s) AND "
                               "status = 'succeeded'", ([int(i) for i in kept],)) == 4,
               timeout=20)
    time.sleep(0.3)
    for job_id, removed, at in cancels:
        row = env.q("SELECT status FROM {s}.jobs_all WHERE id = %s", (int(job_id),))
        if removed:
            assert row == []  # never resurrected
            # Nothing touched the row after its delete: no reclaim, no claim, no write (the
            # audit trigger records every one; the delete is the job's last entry).
            last = env.q("SELECT op, at FROM {s}.audit WHERE job_id = %s ORDER BY seq DESC "
                         "LIMIT 1", (int(job_id),))
            assert last[0][0] == "delete"
            assert at <= last[0][1]
        else:
            assert row == [("succeeded",)]  # finished before the cancel reached it
    removed_count = sum(1 for _, removed, _ in cancels if removed)
    counts = env.check_invariants(expected=8 - removed_count, reaper_interval=0.1)
    assert rescuer.terminate() == 0
    report("11 cancel during a reaper pass (expired leases of a killed worker)",
           cancelled=removed_count, finished_first=4 - removed_count, resurrected=0, **counts)


PLANNER_OFF = "-c enable_indexscan=off -c enable_bitmapscan=off"


def test_s12_claims_under_planner_variance_lease_exactly_what_they_return(
    fault_env: FaultEnv,
) -> None:
    env = fault_env
    env.queue.add_many("tiny", [{"n": n} for n in range(40)])
    for n in range(20):
        env.queue.add("tiny-scoped", {"n": n}, scope=("S", str(n % 4)))
    env.q("ANALYZE {s}.jobs")
    # In-process: each claim under a fresh owner, so "leased to it" is exactly one claim.
    leased_vs_returned = []
    variants = [PLANNER_OFF, "-c enable_seqscan=off", PLANNER_OFF + " -c enable_hashjoin=off",
                "-c enable_nestloop=off -c enable_mergejoin=off"]
    for round_no in range(12):
        options = variants[round_no % len(variants)]
        with psycopg.connect(env.dsn, autocommit=True, options="-c TimeZone=UTC " + options,
                             application_name=env.prefix + "-admin") as conn:
            owner = env.prefix + "-admin"
            bound = env.store.with_connection(conn)
            request = ClaimRequest(owner, [
                TypeSlots("tiny", 3, 30.0),
                TypeSlots("tiny-scoped", 2, 30.0, serialize_by_scope=True),
            ])
            jobs = bound.job_claim(request)
        returned = {j.id for j in jobs}
        leased = {str(r[0]) for r in env.q(
            "SELECT id FROM {s}.jobs_all WHERE status = 'running' AND lease_owner = %s", (owner,))}
        assert leased == returned
        assert sum(j.type == "tiny" for j in jobs) <= 3
        assert sum(j.type == "tiny-scoped" for j in jobs) <= 2
        leased_vs_returned.append(len(returned))
        # Give them back so the next round starts from the same tiny table.
        env.store.job_release_many(owner, [LeaseRef(j.id, j.lease_token) for j in jobs])
    # Real workers whose every connection plans without index scans.
    procs = [env.spawn(f"w{i}", [type_spec("tiny", concurrency=2),
                                  type_spec("tiny-scoped", concurrency=2,
                                            serialize_by_scope=True)],
                       worker={"batch_size": 3, "poll_interval": 0.05},
                       pool={"max_size": 4, "extra_options": PLANNER_OFF})
             for i in range(2)]
    wait_until(lambda: env.status_counts() == {"succeeded": 60}, timeout=60)
    counts = env.check_invariants(expected=60)
    # A row leased but not returned would only come back through the reaper: attempts 2.
    assert env.one("SELECT max(attempts) FROM {s}.jobs_all") == 1
    assert counts["runs"] == 60
    for proc in procs:
        assert proc.terminate() == 0
    report("12 claims under planner variance (index scans off, tiny table)",
           in_process_claims=len(leased_vs_returned), leased_equals_returned=True,
           max_per_claim=max(leased_vs_returned), **counts)
