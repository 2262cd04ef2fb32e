"""The invariant checks themselves must be able to fail: each one is shown a seeded
violation (no worker involved) and must reject it."""

from __future__ import annotations

import time
from collections.abc import Callable

import psycopg
import pytest
from psycopg import sql

from golemq_pg.store.port import ClaimRequest, LeaseRef, TypeSlots
from tests.support.fault_env import FaultEnv

pytestmark = pytest.mark.faults


def _claim(env: FaultEnv, lease: float = 30.0) -> tuple[str, int]:
    env.queue.add("t", {})
    owner = env.prefix + "-admin"
    job = env.store.job_claim(ClaimRequest(owner, [TypeSlots("t", 1, lease)]))[0]
    return job.id, job.lease_token


def _fails(check: Callable[[], object], match: str) -> None:
    with pytest.raises(AssertionError, match=match):
        check()


def test_a_clean_queue_passes(fault_env: FaultEnv) -> None:
    job_id, token = _claim(fault_env)
    fault_env.store.job_complete_many(fault_env.prefix + "-admin", [LeaseRef(job_id, token)])
    fault_env.check_invariants(expected=1, ledger=False)


def test_i1_unfinished_and_missing_jobs(fault_env: FaultEnv) -> None:
    fault_env.queue.add("t", {})
    _fails(lambda: fault_env.check_invariants(ledger=False), "I1: 1 jobs not finished")
    _fails(lambda: fault_env.check_invariants(expected=2, terminal=False, ledger=False),
           "I1: 1 job rows, expected 2")


def test_i3_a_long_expired_running_row(fault_env: FaultEnv) -> None:
    _claim(fault_env, lease=0.01)
    time.sleep(0.1)
    _fails(lambda: fault_env.check_invariants(terminal=False, reaper_interval=0, slack=0,
                                              ledger=False), "I1|I3")


def test_i2_a_write_by_someone_who_does_not_hold_the_lease(fault_env: FaultEnv) -> None:
    job_id, _ = _claim(fault_env)
    with psycopg.connect(fault_env.dsn, autocommit=True,
                         application_name=fault_env.prefix + "-intruder") as conn:
        conn.execute(sql.SQL("UPDATE {}.jobs SET status = 'succeeded', lease_owner = NULL, "
                             "lease_expires_at = NULL WHERE id = %s")
                     .format(sql.Identifier(fault_env.schema)), (int(job_id),))
    _fails(lambda: fault_env.check_invariants(ledger=False), "I2: lease writes by a non-holder")


def test_i2_a_finished_job_revived(fault_env: FaultEnv) -> None:
    job_id, token = _claim(fault_env)
    owner = fault_env.prefix + "-admin"
    fault_env.store.job_complete_many(owner, [LeaseRef(job_id, token)])
    # live again beside its history row, as a faulty retry would leave it
    fault_env.q("INSERT INTO {s}.jobs (id, type, payload) VALUES (%s, 'x', '{{}}')",
                (int(job_id),))
    _fails(lambda: fault_env.check_invariants(terminal=False, ledger=False), "revived")


def test_i2_one_lease_run_twice_in_the_ledger(fault_env: FaultEnv) -> None:
    job_id, token = _claim(fault_env)
    for _ in range(2):
        fault_env.q("INSERT INTO {s}.effects (job_id, attempt, token, worker, pid) "
                    "VALUES (%s, 1, %s, 'w', 1)", (int(job_id), token))
    _fails(lambda: fault_env.check_invariants(terminal=False), "one lease ran twice")


def test_i4_a_run_past_the_attempt_budget_in_the_ledger(fault_env: FaultEnv) -> None:
    fault_env.queue.add("t", {}, max_attempts=1)
    owner = fault_env.prefix + "-admin"
    job = fault_env.store.job_claim(ClaimRequest(owner, [TypeSlots("t", 1, 30.0)]))[0]
    fault_env.q("INSERT INTO {s}.effects (job_id, attempt, token, worker, pid) "
                "VALUES (%s, 2, NULL, 'w', 1)", (int(job.id),))
    _fails(lambda: fault_env.check_invariants(terminal=False), "I4: runs past")


def test_i5_idle_in_transaction_and_idle_advisory_locks(fault_env: FaultEnv) -> None:
    app = fault_env.prefix + "-leaky"
    with psycopg.connect(fault_env.dsn, application_name=app) as conn:
        conn.execute("SELECT pg_advisory_xact_lock(42)")
        time.sleep(1.2)
        _fails(fault_env.check_connections, "I5: connections idle in transaction")
        conn.rollback()
    with psycopg.connect(fault_env.dsn, autocommit=True, application_name=app) as conn:
        conn.execute("SELECT pg_advisory_lock(43)")
        time.sleep(1.2)
        _fails(fault_env.check_connections, "I5: advisory locks held by idle connections")
