"""Scenarios 1-3 of docs/RELIABILITY.md: a clean multi-process drain, and SIGKILLed workers."""

from __future__ import annotations

import signal
import time

import pytest

from tests.support.fault_env import FaultEnv
from tests.support.fault_report import report
from tests.support.waiting import wait_until
from tests.support.workers import type_spec

pytestmark = pytest.mark.faults

#: Handler leases in the crash scenarios: short, so recovery is quick to observe.
LEASE = 1.5
POLL = 0.1


def test_s01_two_processes_four_threads_drain_5000_noop_jobs(fault_env: FaultEnv) -> None:
    env = fault_env
    assert env.queue.add_many("noop", [{"n": n} for n in range(5000)]) == 5000
    started = time.monotonic()
    procs = [env.spawn(f"w{i}", [type_spec("noop", concurrency=4)], mode="drain",
                       worker={"poll_interval": POLL}) for i in range(2)]
    for proc in procs:
        assert proc.wait(240) == 0, proc.output() + proc.log_text()[-3000:]
    seconds = time.monotonic() - started
    counts = env.check_invariants(expected=5000)
    assert counts == {**counts, "succeeded": 5000, "runs": 5000, "extra_runs": 0}
    per_worker = dict(env.q("SELECT worker, count(*) FROM {s}.effects GROUP BY worker"))
    assert len(per_worker) == 2, per_worker  # both processes took part
    assert env.one("SELECT max(attempts) FROM {s}.jobs_all") == 1
    report("1 5k no-op jobs, 2 processes x 4 threads", seconds=round(seconds, 2),
           jobs_per_second=round(5000 / seconds), per_worker=per_worker, jobs_lost=0,
           duplicates=0)


def _recover(env: FaultEnv, victim_id: str, killed_at: float, count: int) -> float:
    """Wait until every job the victim held has succeeded; seconds since the kill."""
    held = [r[0] for r in env.q(
        "SELECT id FROM {s}.jobs_all WHERE lease_owner = %s AND status = 'running'", (victim_id,))]
    assert len(held) == count, held
    wait_until(lambda: env.one(
        "SELECT count(*) FROM {s}.jobs_all WHERE id = ANY(%s) AND status = 'succeeded'",
        (held,)) == count, timeout=30, interval=0.02, what="the victim's jobs recovered")
    return time.monotonic() - killed_at


def _assert_all_leased(env: FaultEnv, count: int) -> None:
    """Every job is leased: the victim's one claim (``batch_size`` = all of them) took them
    all in one statement before any handler started, so this holds the moment a handler
    wrote its effect. (With a batch of half, the buffered half came from a second claim,
    which a loaded host could leave unsent for seconds after the first handlers wrote: no
    wait for it was ever certain to be long enough.)"""
    assert env.status_counts() == {"running": count}


def test_s02_sigkill_a_worker_holding_a_claimed_batch(fault_env: FaultEnv) -> None:
    env = fault_env
    # The rescuer is up (and stopped) before the victim claims, so recovery is measured from
    # the kill, not from a process start.
    rescuer = env.spawn("rescuer", [type_spec("slow", concurrency=4)],
                        worker={"poll_interval": POLL, "lease_grace": LEASE})
    rescuer.signal(signal.SIGSTOP)
    # 8 jobs: 4 run, 4 wait in the victim's buffer. batch_size 8: its first claim leases all
    # 8 in one statement, before any handler starts (an adaptive prefetch buffers nothing for
    # a type whose handler durations are not known yet, nor for slow ones).
    env.queue.add_many("slow", [{"n": n, "sleep": 60, "only_on": "victim"} for n in range(8)])
    victim = env.spawn("victim", [type_spec("slow", concurrency=4)],
                       worker={"poll_interval": POLL, "lease_grace": LEASE, "batch_size": 8})
    wait_until(lambda: env.one("SELECT count(*) FROM {s}.effects") == 4, timeout=20)
    _assert_all_leased(env, 8)
    victim.signal(signal.SIGKILL)
    victim.wait(10)
    killed_at = time.monotonic()
    rescuer.signal(signal.SIGCONT)
    recovery = _recover(env, victim.worker_id, killed_at, 8)
    counts = env.check_invariants(expected=8, reaper_interval=POLL)
    attempts = env.q("SELECT attempts, count(*) FROM {s}.jobs_all GROUP BY attempts")
    assert attempts == [(2, 8)]  # the killed claim counted once, the rescue once more
    assert rescuer.events("jobs_reaped")
    runs = dict(env.q("SELECT worker, count(*) FROM {s}.effects GROUP BY worker"))
    assert runs == {victim.worker_id: 4, rescuer.worker_id: 8}
    assert recovery < LEASE + POLL + 3.0, recovery
    report("2 SIGKILL a worker holding a claimed batch (4 running + 4 buffered)",
           recovery_seconds=round(recovery, 2), lease=LEASE, reaper_interval=POLL,
           jobs_lost=0, attempts_after="+1", **counts)
    assert rescuer.terminate() == 0


def test_s03_sigkill_right_after_the_claim_commits(fault_env: FaultEnv) -> None:
    env = fault_env
    rescuer = env.spawn("rescuer", [type_spec("noop", concurrency=4)],
                        worker={"poll_interval": POLL, "lease_grace": LEASE})
    rescuer.signal(signal.SIGSTOP)
    env.queue.add_many("noop", [{"n": n} for n in range(8)])
    # batch_size 8: the first claim takes all 8 (4 for the slots, 4 for the buffer; an
    # adaptive prefetch buffers nothing before it knows the handler's durations).
    victim = env.spawn("victim", [type_spec("noop", concurrency=4)],
                       worker={"poll_interval": POLL, "lease_grace": LEASE, "batch_size": 8},
                       hooks={"kill_after_claim": True}, wait_ready=False)
    assert victim.wait(30) == -signal.SIGKILL
    killed_at = time.monotonic()
    assert env.one("SELECT count(*) FROM {s}.effects") == 0  # no handler started
    claimed = env.one("SELECT count(*) FROM {s}.jobs_all WHERE lease_owner = %s",
                      (victim.worker_id,))
    assert claimed == 8
    rescuer.signal(signal.SIGCONT)
    recovery = _recover(env, victim.worker_id, killed_at, 8)
    counts = env.check_invariants(expected=8, reaper_interval=POLL)
    assert env.q("SELECT attempts, count(*) FROM {s}.jobs_all GROUP BY attempts") == [(2, 8)]
    assert recovery < LEASE + POLL + 3.0, recovery
    report("3 SIGKILL right after the claim commits, before handlers start",
           recovery_seconds=round(recovery, 2), lease=LEASE, reaper_interval=POLL,
           jobs_lost=0, **counts)
    assert rescuer.terminate() == 0


def test_s14_sigterm_with_jobs_in_flight_within_and_past_the_grace(fault_env: FaultEnv) -> None:
    env = fault_env
    grace, abandon = 1.0, 0.5
    finishes = env.queue.add("mix", {"sleep": 0.6}, priority=9)
    cooperative = env.queue.add("mix", {"sleep": 30, "first_only": True}, priority=8)
    ignoring = env.queue.add("mix", {"sleep": 3, "ignore": True, "first_only": True},
                             priority=7)
    # Ignores the signal but returns within abandon_grace: still a success.
    late = env.queue.add("mix", {"sleep": 1.2, "ignore": True}, priority=6)
    buffered = [env.queue.add("mix", {"n": n}) for n in range(4)]
    # batch_size 8: the first claim leases all 8, 4 of them for the buffer (an adaptive
    # prefetch waits for durations).
    proc = env.spawn("w", [type_spec("mix", concurrency=4)],
                     worker={"shutdown_grace": grace, "abandon_grace": abandon,
                             "batch_size": 8})
    wait_until(lambda: env.one("SELECT count(*) FROM {s}.effects") == 4, timeout=20)
    _assert_all_leased(env, 8)  # 4 running, 4 in the local buffer
    signalled = time.monotonic()
    assert proc.terminate(timeout=30) == 0
    exit_seconds = time.monotonic() - signalled
    status = dict(env.q("SELECT id::text, status FROM {s}.jobs_all"))
    assert "running" not in status.values()  # none stuck RUNNING, no reaper needed
    assert status[finishes] == "succeeded"  # within the grace
    assert status[late] == "succeeded"  # finished after the signal: still a success
    assert status[cooperative] == "pending"  # signalled at the grace, released
    assert status[ignoring] == "pending"  # abandoned past abandon_grace, released
    assert all(status[b] == "pending" for b in buffered if b)  # given back at once
    refunded = env.q("SELECT attempts, count(*) FROM {s}.jobs_all WHERE status = 'pending' "
                     "GROUP BY attempts")
    assert refunded == [(0, 6)]  # released work does not burn an attempt
    assert exit_seconds < grace + abandon + 4.0
    env.check_invariants(expected=8, terminal=False)
    drain = env.spawn("drain", [type_spec("mix", concurrency=4)], mode="drain")
    assert drain.wait(60) == 0
    counts = env.check_invariants(expected=8)
    report("14 SIGTERM with jobs in flight (grace 1 s, abandon_grace 0.5 s)",
           exit_seconds=round(exit_seconds, 2), finished_in_grace=2, released_running=2,
           released_buffered=4, stuck_running=0, **counts)


def test_s15_handlers_raising_base_exceptions(fault_env: FaultEnv) -> None:
    env = fault_env
    proc = env.spawn("w", [type_spec("boom", concurrency=2)])
    names = ("KeyboardInterrupt", "SystemExit", "BaseException")
    ids = {name: env.queue.add("boom", {"raise": name}, max_attempts=2) for name in names}
    wait_until(lambda: env.status_counts() == {"failed": 3}, timeout=30)
    for name, job_id in ids.items():
        summary = env.queue.get(job_id)  # type: ignore[arg-type]
        assert summary is not None
        assert summary.attempts == 2  # retried once, then dead-lettered
        assert summary.last_error is not None
        assert summary.last_error.startswith(name)
    assert proc.alive()
    # The pool is intact: two slots still run side by side.
    env.queue.add_many("boom", [{"sleep": 0.5, "n": n} for n in range(6)])
    wait_until(lambda: env.status_counts() == {"failed": 3, "succeeded": 6}, timeout=30)
    overlap = env.one(
        "SELECT max(n) FROM (SELECT (SELECT count(*) FROM {s}.effects o "
        "WHERE o.started_at <= e.started_at AND o.finished_at > e.started_at) AS n "
        "FROM {s}.effects e WHERE e.outcome = 'ok') x")
    assert overlap == 2
    assert not proc.events("slot_internal_error")
    counts = env.check_invariants(expected=9)
    assert proc.terminate() == 0
    report("15 handlers raising KeyboardInterrupt / SystemExit / BaseException",
           failed_after_retry=3, concurrent_slots_after=overlap, pool_intact=True, **counts)


def test_s16_a_handler_ignoring_its_signal_past_abandon_grace(fault_env: FaultEnv) -> None:
    env = fault_env
    stuck = env.queue.add("stubborn", {"sleep": 3, "ignore": True, "first_only": True},
                          priority=5)
    others = [env.queue.add("stubborn", {"n": n}) for n in range(3)]
    proc = env.spawn("w", [type_spec("stubborn", concurrency=1, timeout=0.5)],
                     worker={"abandon_grace": 0.5})
    wait_until(lambda: env.status_counts() == {"succeeded": 4}, timeout=20)
    first, second = env.q(
        "SELECT started_at, finished_at, outcome, reason, token FROM {s}.effects "
        "WHERE job_id = %s ORDER BY attempt", (int(stuck),))  # type: ignore[arg-type]
    # The slot was freed and the job retried while the first attempt still slept: the
    # documented double-run window (timeout + abandon_grace onwards).
    assert second[0] < (first[1] or env.db_now())
    wait_until(lambda: env.one("SELECT finished_at FROM {s}.effects WHERE job_id = %s "
                               "AND attempt = 1", (int(stuck),)), timeout=10)  # type: ignore[arg-type]
    first = env.q("SELECT started_at, finished_at, outcome, reason FROM {s}.effects "
                  "WHERE job_id = %s AND attempt = 1", (int(stuck),))[0]  # type: ignore[arg-type]
    assert first[3] == "timeout"
    others_done = env.one("SELECT max(finished_at) FROM {s}.effects WHERE job_id = ANY(%s)",
                          ([int(i) for i in others if i],))
    assert others_done < first[1]  # the other jobs did not wait for the stuck thread
    summary = env.queue.get(stuck)  # type: ignore[arg-type]
    assert summary is not None
    assert summary.attempts == 2
    counts = env.check_invariants(expected=4)  # the late first result was not written
    window = (first[1] - second[0]).total_seconds()
    assert proc.events("handler_abandoned")
    assert proc.terminate() == 0
    report("16 handler ignores its signal past abandon_grace (timeout 0.5 s, grace 0.5 s)",
           slot_freed=True, retried=True, double_run_window_seconds=round(window, 2),
           late_result_written=False, **counts)
