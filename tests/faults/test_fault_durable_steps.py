"""Durable steps across a real crash: a worker process SIGKILLed after a step and before
its job completed. The next attempt (another process, after the lease expired and the
reaper took the job back) gets the stored value and does not run the step's function again.
Proved by a side-effect ledger the step's function writes (``step`` payload key of the
fault handler, tests/support/worker_process.py)."""

from __future__ import annotations

import signal

import pytest

from tests.support.fault_env import FaultEnv
from tests.support.waiting import wait_until
from tests.support.workers import type_spec

pytestmark = pytest.mark.faults

LEASE = 1.5
POLL = 0.1


def test_a_step_is_not_run_again_after_the_worker_process_is_killed(
    fault_env: FaultEnv,
) -> None:
    env = fault_env
    env.q("CREATE TABLE {s}.step_ledger (job_id bigint, attempt int, pid int, kind text, "
          "value jsonb)")
    # The victim runs the step, then sleeps (only it: "only_on") until it is killed.
    job_id = env.queue.add("fetch", {"step": "fetch", "sleep": 60, "only_on": "victim"},
                           max_attempts=3)
    assert job_id is not None
    victim = env.spawn("victim", [type_spec("fetch", concurrency=1)],
                       worker={"poll_interval": POLL, "lease_grace": LEASE})
    wait_until(lambda: env.one("SELECT count(*) FROM {s}.step_ledger WHERE kind = 'got'") == 1,
               timeout=20, what="the victim's step stored and given back")
    victim_pid = victim.pid
    victim.signal(signal.SIGKILL)
    victim.wait(10)
    assert env.one("SELECT status FROM {s}.jobs_all WHERE id = %s", (int(job_id),)) == "running"

    rescuer = env.spawn("rescuer", [type_spec("fetch", concurrency=1)],
                        worker={"poll_interval": POLL, "lease_grace": LEASE})
    done = env.queue.wait(job_id, timeout=60)
    rescuer.terminate()
    assert (done.status.value, done.attempts) == ("succeeded", 2)
    stored = {"attempt": 1, "pid": victim_pid}
    assert done.steps == {"fetch": stored}
    rows = env.q("SELECT attempt, pid, kind, value FROM {s}.step_ledger ORDER BY attempt, kind")
    assert [(a, kind, value) for a, _, kind, value in rows] == [
        (1, "got", stored), (1, "ran", stored),  # the victim ran it once
        (2, "got", stored),  # the rescuer got the stored value back: no second 'ran'
    ]
    assert rows[2][1] != victim_pid  # given back in another process
