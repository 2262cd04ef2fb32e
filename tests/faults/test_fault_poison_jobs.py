"""Scenario 25 of docs/RELIABILITY.md (the brief's 23; S23 and S24 were taken): poison jobs
among good ones on real worker processes.

A job's outcome is written or dead-lettered on its own; another job's data cannot block it.
Nine poison jobs (an exception text holding a NUL, one holding a lone surrogate, an exception
whose ``__str__`` raises; each from a sync, an ``async def`` and a transactional handler) run
among 1,000 good jobs on 3 worker processes, in one run: every good job succeeds, run once
(the effects ledger); each poison job is dead-lettered after its own attempts with a
readable ``last_error``; and jobs added after the last poison job died still complete, so no
worker's completer is stuck retrying a batch.
"""

from __future__ import annotations

import time

import pytest

from tests.support.fault_env import FaultEnv
from tests.support.fault_report import report
from tests.support.waiting import wait_until
from tests.support.workers import type_spec

pytestmark = pytest.mark.faults

GOOD = 1000
ATTEMPTS = 3
#: The handler kinds, by job type.
KINDS = {
    "sync": type_spec("sync", concurrency=4),
    "async": type_spec("async", concurrency=4, async_handler=True),
    "tx": type_spec("tx", concurrency=2, transactional=True),
}
#: What each poison's ``last_error`` reads: escaped visibly, or the unprintable marker.
POISONS = {
    "nul": "ValueError: poison \\x00 nul",
    "surrogate": "ValueError: poison \\udcff surrogate",
    "str-raises": "PoisonStrError: <unprintable error>",
}


def test_s25_poison_jobs_among_1000_good_ones_on_3_processes(fault_env: FaultEnv) -> None:
    env = fault_env
    types = list(KINDS)
    started = time.monotonic()
    # Short backoff: each poison job spends its three attempts within a second.
    procs = [env.spawn(f"w{i}", list(KINDS.values()),
                       worker={"poll_interval": 0.1, "base_backoff": 0.05, "max_backoff": 0.2})
             for i in range(3)]
    half = GOOD // 2
    for n in range(half):
        env.queue.add(types[n % 3], {"n": n})
    poison_ids = {
        (job_type, poison): env.queue.add(job_type, {"poison": poison}, max_attempts=ATTEMPTS)
        for job_type in types for poison in POISONS
    }
    env.queue.add_many("sync", [{"n": n} for n in range(half, half + 167)])
    env.queue.add_many("async", [{"n": n} for n in range(half + 167, half + 334)])
    env.queue.add_many("tx", [{"n": n} for n in range(half + 334, GOOD)])
    total = GOOD + len(poison_ids)

    def settled() -> bool:
        return env.status_counts() == {"succeeded": GOOD, "failed": len(poison_ids)}

    wait_until(settled, timeout=60, interval=0.1,
               what=lambda: env.stuck_report(procs, "1,000 good jobs and 9 poison ones"))
    drained = time.monotonic() - started
    # Added after every poison job is dead, in rounds until each process has completed one
    # of them: no process's completer is stuck behind a poison outcome.
    late: list[int] = []
    workers = {proc.worker_id for proc in procs}
    for _ in range(10):
        late += [int(env.queue.add(types[n % 3], {"n": GOOD + len(late) + n}) or 0)
                 for n in range(30)]
        expected = {"succeeded": GOOD + len(late), "failed": len(poison_ids)}
        wait_until(lambda: env.status_counts() == expected,  # noqa: B023 - waited for here
                   timeout=20, interval=0.05, what=lambda: env.stuck_report(procs, "late jobs"))
        done_by = {row[0] for row in env.q(
            "SELECT DISTINCT worker FROM {s}.effects WHERE job_id = ANY(%s)", (late,))}
        if done_by == workers:
            break
    assert done_by == workers, done_by
    seconds = time.monotonic() - started

    for (job_type, poison), job_id in poison_ids.items():
        assert job_id is not None
        summary = env.queue.get(job_id)
        assert summary is not None
        assert (summary.status.value, summary.attempts) == ("failed", ATTEMPTS), summary
        assert summary.last_error == POISONS[poison], (job_type, summary.last_error)
        assert [e.error for e in summary.errors] == [POISONS[poison]] * ATTEMPTS
        runs = env.one("SELECT count(*) FROM {s}.effects WHERE job_id = %s", (int(job_id),))
        assert runs == ATTEMPTS, (job_type, poison, runs)
    poison_rows = [int(i) for i in poison_ids.values() if i is not None]
    good_runs = dict(env.q(
        "SELECT job_id, count(*) FROM {s}.effects WHERE NOT job_id = ANY(%s) GROUP BY job_id",
        (poison_rows,)))
    assert len(good_runs) == GOOD + len(late)  # every good job ran ...
    assert set(good_runs.values()) == {1}  # ... once
    good_attempts = env.q(
        "SELECT attempts, count(*) FROM {s}.jobs_all WHERE status = 'succeeded' "
        "GROUP BY attempts")
    assert good_attempts == [(1, GOOD + len(late))]
    per_worker = dict(env.q("SELECT worker, count(*) FROM {s}.effects GROUP BY worker"))
    assert len(per_worker) == 3, per_worker  # all three processes took part
    for proc in procs:
        assert proc.alive()
        # No write refused, nothing retried, nothing expired: the texts were storable.
        for event in ("completion_write_failed", "outcome_unwritable",
                      "claims_held_outcomes_unwritten", "lease_lost", "jobs_reaped"):
            assert not proc.events(event), (proc.worker_id, event, proc.events(event)[:3])
    # The ledger's own I2 check wants each run's lease token, which a transactional run's
    # ledger row (another connection, before the claim's transaction commits) cannot see:
    # it is checked here for the other kinds, the runs above for all.
    unrun = env.q(
        "SELECT j.id FROM {s}.jobs_all j WHERE j.status = 'succeeded' AND j.type <> 'tx' "
        "AND NOT EXISTS (SELECT 1 FROM {s}.effects e WHERE e.job_id = j.id "
        "AND e.token = j.lease_token)")
    assert not unrun, unrun[:5]
    counts = env.check_invariants(expected=total + len(late), ledger=False)
    for proc in procs:
        assert proc.terminate() == 0
    report("25 9 poison jobs (NUL, lone surrogate, unprintable; sync, async, transactional) "
           "among 1,000 good ones, 3 processes", seconds=round(seconds, 2),
           drain_seconds=round(drained, 2), good_failed=0, good_run_twice=0,
           poison_dead_lettered=len(poison_ids), poison_attempts=ATTEMPTS,
           late_jobs=len(late), **counts)
