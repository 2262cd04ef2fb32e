"""Scenario S26 of docs/RELIABILITY.md: dependency chains 1,000 and 10,000 deep whose root is
cancelled while it runs, fails terminally, or loses its lease on its last attempt (its worker
SIGKILLed, with another dead worker's job expiring at the same time). Each time the whole
chain settles within seconds, the other job is reclaimed and run, no worker logs "stack depth
limit exceeded", and the workers go on (a probe job added afterwards runs at once)."""

from __future__ import annotations

import signal
import time

import pytest

from tests.support.fault_env import FaultEnv
from tests.support.fault_report import report
from tests.support.waiting import wait_until
from tests.support.workers import WorkerProc, type_spec
from tests.support.workflow_graphs import AddedChain, add_chain

pytestmark = pytest.mark.faults

POLL = 0.1
LEASE = 1.5
DEPTHS = [1_000, 10_000]
#: How long a chain may take to settle once its root is finished (or its lease expired).
SETTLE_SECONDS = 15


def _chain_failed(env: FaultEnv, chain: AddedChain, count: int) -> float:
    """Wait until ``count`` jobs of the chain are FAILED; seconds waited."""
    started = time.monotonic()
    ids = [int(i) for i in chain.ids]
    wait_until(lambda: env.one(
        "SELECT count(*) FROM {s}.jobs_all WHERE id = ANY(%s) AND status = 'failed'",
        (ids,)) == count, timeout=SETTLE_SECONDS, interval=0.05,
        what=lambda: f"the chain settled ({env.status_counts()})")
    return time.monotonic() - started


def _workers_go_on(env: FaultEnv, procs: list[WorkerProc]) -> None:
    """No worker hit the stack limit, and a job added now runs within seconds."""
    for proc in procs:
        assert "stack depth limit exceeded" not in proc.log_text(), proc.log_text()[-3000:]
    probe = env.queue.add("probe", {})
    assert probe is not None
    wait_until(lambda: env.one("SELECT status FROM {s}.jobs_all WHERE id = %s",
                               (int(probe),)) == "succeeded",
               timeout=10, what="a probe job ran after the chain settled")


def _spawn(env: FaultEnv, name: str, *types: str) -> WorkerProc:
    return env.spawn(name, [type_spec(t, concurrency=2) for t in types],
                     worker={"poll_interval": POLL, "lease_grace": LEASE})


@pytest.mark.parametrize("depth", DEPTHS)
def test_s26_cancelling_a_running_root_dead_letters_the_whole_chain(
    fault_env: FaultEnv, depth: int,
) -> None:
    env = fault_env
    worker = _spawn(env, "w", "chain.root", "chain.step", "probe")
    chain = add_chain(env.queue, depth, root_payload={"sleep": 60})
    wait_until(lambda: env.one("SELECT count(*) FROM {s}.effects") == 1, timeout=10,
               what="the root started")
    started = time.monotonic()
    assert env.queue.cancel(chain.root)
    cancel_seconds = time.monotonic() - started
    settled = _chain_failed(env, chain, depth - 1) + cancel_seconds
    _workers_go_on(env, [worker])
    assert env.one("SELECT last_error FROM {s}.jobs_all WHERE id = %s",
                   (int(chain.tail),)) == f"parent {chain.ids[-2]} failed"
    counts = env.check_invariants(expected=depth, reaper_interval=POLL)  # root gone, + probe
    assert counts == {**counts, "failed": depth - 1, "succeeded": 1}
    report(f"25 chain {depth} deep, running root cancelled", cancel_seconds=round(
        cancel_seconds, 2), settled_seconds=round(settled, 2))


@pytest.mark.parametrize("depth", DEPTHS)
def test_s26_a_root_failing_terminally_dead_letters_the_whole_chain(
    fault_env: FaultEnv, depth: int,
) -> None:
    env = fault_env
    worker = _spawn(env, "w", "chain.root", "chain.step", "probe")
    started = time.monotonic()
    chain = add_chain(env.queue, depth, root_payload={"raise": "Terminal"})
    settled = _chain_failed(env, chain, depth)
    _workers_go_on(env, [worker])
    assert env.one("SELECT last_error FROM {s}.jobs_all WHERE id = %s",
                   (int(chain.ids[1]),)) == f"parent {chain.root} failed"
    counts = env.check_invariants(expected=depth + 1, reaper_interval=POLL)
    assert counts == {**counts, "failed": depth, "succeeded": 1, "runs": 2}
    report(f"25 chain {depth} deep, root fails terminally",
           add_to_settled_seconds=round(time.monotonic() - started, 2),
           settled_seconds=round(settled, 2))


@pytest.mark.parametrize("depth", DEPTHS)
def test_s26_a_root_expiring_on_its_last_attempt_with_another_expired_job(
    fault_env: FaultEnv, depth: int,
) -> None:
    env = fault_env
    # The rescuer is up (and stopped) before the victims claim, so the recovery is measured
    # from their kill; it serves "other" (run again once reclaimed), never the root.
    rescuer = _spawn(env, "rescuer", "other", "probe")
    rescuer.signal(signal.SIGSTOP)
    chain = add_chain(env.queue, depth, root_payload={"sleep": 60},
                      root_options={"max_attempts": 1})
    other = env.queue.add("other", {"sleep": 60, "only_on": "v2"}, max_attempts=3)
    assert other is not None
    victims = [_spawn(env, "v1", "chain.root"), _spawn(env, "v2", "other")]
    wait_until(lambda: env.one("SELECT count(*) FROM {s}.effects") == 2, timeout=10,
               what="the root and the other job started")
    for victim in victims:
        victim.signal(signal.SIGKILL)
        victim.wait(10)
    killed_at = time.monotonic()
    rescuer.signal(signal.SIGCONT)
    _chain_failed(env, chain, depth)
    wait_until(lambda: env.one("SELECT status FROM {s}.jobs_all WHERE id = %s",
                               (int(other),)) == "succeeded",
               timeout=SETTLE_SECONDS, what="the other job reclaimed and run")
    recovered = time.monotonic() - killed_at
    _workers_go_on(env, [rescuer])
    assert env.one("SELECT attempts FROM {s}.jobs_all WHERE id = %s", (int(other),)) == 2
    assert env.one("SELECT last_error FROM {s}.jobs_all WHERE id = %s",
                   (int(chain.root),)).startswith("LeaseExpired: attempts exhausted")
    counts = env.check_invariants(expected=depth + 2, reaper_interval=POLL)
    assert counts == {**counts, "failed": depth, "succeeded": 2}
    report(f"25 chain {depth} deep, root's last lease expired with another job's",
           kill_to_settled_seconds=round(recovered, 2), lease=LEASE, reaper_interval=POLL)
