"""Scenario S27 of docs/RELIABILITY.md: crossed fan-ins (5,000 parents; 4,000 children, each
after 10 parents drawn at random) drained by 4 worker processes, with and without SIGKILLs.
Every completion statement finishes many parents whose children other statements share, in
every order: every job succeeds, none that succeeded is ever dead-lettered, and the server
detects no deadlock (migration 0020 locks the children of all of a statement's parents in job
id order).

The scenario runs on the throwaway cluster (tests/plugins/clusters.py): its server log and
its pg_stat_database.deadlocks count only this scenario's sessions, where the suite's server
counts every concurrent test's."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.support.fault_env import FaultEnv
from tests.support.fault_report import report
from tests.support.server_control import ThrowawayCluster
from tests.support.waiting import wait_until
from tests.support.workers import WorkerProc, type_spec
from tests.support.workflow_graphs import add_crossed_fan_ins

pytestmark = pytest.mark.faults

PARENTS = 5_000
CHILDREN = 4_000
PER_CHILD = 10
JOBS = PARENTS + CHILDREN
POLL = 0.1
LEASE = 1.5
#: After how many successes each kill of the variant with kills comes.
KILL_AT = (2_000, 5_000)


def _spawn(env: FaultEnv, name: str) -> WorkerProc:
    return env.spawn(name, [type_spec("cross.parent", concurrency=4),
                            type_spec("cross.child", concurrency=4)],
                     worker={"poll_interval": POLL, "lease_grace": LEASE})


def _log_size(path: Path) -> int:
    return path.stat().st_size


def _log_since(path: Path, offset: int) -> str:
    with path.open("rb") as log:
        log.seek(offset)
        return log.read().decode("utf-8", "replace")


def _deadlocks(env: FaultEnv) -> int:
    return int(env.one(
        "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"))


def _wait_succeeded(env: FaultEnv, procs: list[WorkerProc], count: int, *,
                    timeout: float) -> None:
    """Wait until at least ``count`` jobs succeeded (the workers' state if they do not)."""
    wait_until(lambda: env.succeeded() >= count, timeout=timeout, interval=0.05,
               what=lambda: env.stuck_report(procs, f"{count} jobs succeeded"))


def _drain(env: FaultEnv, cluster: ThrowawayCluster, *, kills: bool) -> dict[str, object]:
    """Add the fan-ins, drain them on 4 processes (SIGKILLing one at each of KILL_AT when
    ``kills``), and assert the outcome; returns what to report."""
    env.queue.pause("cross.parent")
    procs = [_spawn(env, f"w{i}") for i in range(4)]
    add_crossed_fan_ins(env.queue, PARENTS, CHILDREN, PER_CHILD, seed=25)
    log_offset = _log_size(cluster.log)
    deadlocks_before = _deadlocks(env)
    started = time.monotonic()
    env.queue.resume("cross.parent")
    killed = []
    if kills:
        for n, at in enumerate(KILL_AT):
            _wait_succeeded(env, procs, at, timeout=60)
            victim = procs[n]
            victim.signal(signal.SIGKILL)
            victim.wait(10)
            killed.append(victim.worker_id)
            procs.append(_spawn(env, f"w{n}-again"))
    _wait_succeeded(env, procs, JOBS, timeout=90)
    seconds = time.monotonic() - started
    for proc in procs:
        if proc.worker_id not in killed:
            assert proc.terminate() == 0, proc.output() + proc.log_text()[-3000:]
    server_deadlocks = _deadlocks(env) - deadlocks_before
    logged = _log_since(cluster.log, log_offset)
    worker_lines = [line for proc in procs for line in proc.log_text().splitlines()
                    if "deadlock" in line.lower()]
    assert server_deadlocks == 0, logged[-3000:]
    assert "deadlock detected" not in logged, logged[-3000:]
    assert not worker_lines, worker_lines[:5]
    # Nothing that succeeded, nor anything else, was ever dead-lettered.
    assert env.one("SELECT count(*) FROM {s}.audit WHERE new_status = 'failed'") == 0
    counts = env.check_invariants(expected=JOBS, reaper_interval=POLL,
                                  allow_double_runs=kills)
    assert counts == {**counts, "succeeded": JOBS}
    if not kills:
        assert counts["extra_runs"] == 0, counts
    assert env.one("SELECT count(*) FROM {s}.job_nodes WHERE open_parents <> 0") == 0
    return {"seconds": round(seconds, 2), "deadlocks": server_deadlocks,
            "extra_runs": counts["extra_runs"], "killed": len(killed)}


def test_s27_crossed_fan_ins_drain_on_4_processes_without_a_deadlock(
    cluster_fault_env: FaultEnv, throwaway_cluster: ThrowawayCluster,
) -> None:
    measured = _drain(cluster_fault_env, throwaway_cluster, kills=False)
    report("26 crossed fan-ins, 4 processes", jobs=JOBS, **measured)


def test_s27_crossed_fan_ins_drain_through_sigkills_without_a_deadlock(
    cluster_fault_env: FaultEnv, throwaway_cluster: ThrowawayCluster,
) -> None:
    measured = _drain(cluster_fault_env, throwaway_cluster, kills=True)
    report("26 crossed fan-ins, 4 processes, 2 SIGKILLs", jobs=JOBS, lease=LEASE,
           **measured)
