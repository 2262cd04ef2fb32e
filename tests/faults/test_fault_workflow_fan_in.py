"""A fan-in under racing completions: 100 parents finished by four worker processes at
once release their one child exactly once (migration 0016: the child's node row is
counted down under its row lock, so one completion, and only one, sees the last parent go)."""

from __future__ import annotations

import pytest

from golemq_pg import JobStatus
from tests.support.fault_env import FaultEnv
from tests.support.fault_report import report
from tests.support.waiting import wait_until
from tests.support.workers import type_spec

pytestmark = pytest.mark.faults

PARENTS = 100


def test_a_fan_in_of_100_parents_releases_its_child_once_under_4_processes(
    fault_env: FaultEnv,
) -> None:
    env = fault_env
    # The four processes (4 threads each) are up and idle before the parents become
    # claimable at once (a resume wakes them all): every parent sleeps the same short
    # moment, so they finish in waves of up to 16 concurrent completions, the last racing.
    env.queue.pause("parent")
    procs = [env.spawn(f"w{i}", [type_spec("parent", concurrency=4),
                                 type_spec("child", concurrency=2)],
                       worker={"poll_interval": 0.05, "batch_size": 1})
             for i in range(4)]
    parents = [env.queue.add("parent", {"n": n, "sleep": 0.05}) for n in range(PARENTS)]
    assert all(p is not None for p in parents)
    child = env.queue.add("child", {}, depends_on=[p for p in parents if p is not None])
    assert child is not None
    assert env.queue.get(child).status is JobStatus.WAITING  # type: ignore[union-attr]
    env.queue.resume("parent")
    wait_until(lambda: env.one(
        "SELECT status FROM {s}.jobs_all WHERE id = %s", (int(child),)) == "succeeded",
        timeout=120, interval=0.05, what="the child ran")
    for proc in procs:
        assert proc.terminate() == 0, proc.output() + proc.log_text()[-3000:]
    counts = env.check_invariants(expected=PARENTS + 1)
    assert counts == {**counts, "succeeded": PARENTS + 1, "extra_runs": 0}
    runs = env.q("SELECT attempt, worker FROM {s}.effects WHERE job_id = %s", (int(child),))
    assert len(runs) == 1, runs
    assert env.one("SELECT attempts FROM {s}.jobs_all WHERE id = %s", (int(child),)) == 1
    assert env.one("SELECT open_parents FROM {s}.job_nodes WHERE job_id = %s",
                   (int(child),)) == 0
    finishers = env.one(
        "SELECT count(DISTINCT lease_owner) FROM {s}.jobs_all WHERE id = ANY(%s)",
        ([int(p) for p in parents if p is not None],))
    workers = dict(env.q("SELECT worker, count(*) FROM {s}.effects GROUP BY worker"))
    assert len(workers) == 4, workers  # every process finished parents
    report("fan-in of 100 parents, 4 processes", child_runs=len(runs),
           parent_finishers=finishers, per_worker=workers)
