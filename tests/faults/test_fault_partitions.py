"""Scenarios 19-22 of docs/RELIABILITY.md: the network between workers and PostgreSQL fails.

Silent partitions (packets dropped, no RST) come from a network namespace joined by veth
pairs (tests/support/partition.py, root only); latency and connection resets from the TCP
proxy (tests/support/outage_proxy.py). Every worker keeps the store's default keepalives
(``tcp_user_timeout`` 10 s), so the times reported are the defaults' detection times.

Marked ``partitions`` as well as ``faults``: they take about two minutes, so the default
test run leaves them out and CI runs them in a step of their own (``-m partitions``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from tests.support.fault_env import FaultEnv
from tests.support.fault_report import env_seconds, report
from tests.support.outage_proxy import OutageProxy
from tests.support.partition import NetNamespace, unavailable
from tests.support.waiting import wait_until
from tests.support.workers import WorkerProc, type_spec

pytestmark = [pytest.mark.faults, pytest.mark.partitions]

#: The store's default ``tcp_user_timeout`` (what the detection times are measured with).
USER_TIMEOUT = 10.0
#: The log events of a worker whose connection broke (whichever thread meets it first).
CONNECTION_ERRORS = ("claim_failed", "maintenance_failed", "lease_renew_failed",
                     "listener_connection_lost", "completion_write_failed")
LEASE = {"lease_duration": 2.0, "lease_renew_interval": 0.5, "poll_interval": 0.1}


@pytest.fixture
def netns(fault_env: FaultEnv) -> Iterator[NetNamespace]:
    """A network namespace for this test's partitioned worker (torn down afterwards)."""
    why = unavailable()
    if why:
        pytest.skip(why)
    ns = NetNamespace(fault_env.dsn)
    try:
        yield ns
    finally:
        ns.close()


def _spawn_inside(env: FaultEnv, ns: NetNamespace, name: str, types: list[dict[str, Any]],
                  worker: dict[str, Any]) -> WorkerProc:
    return env.spawn(name, types, worker=worker, dsn=ns.queue_dsn(),
                     ledger_dsn=ns.ledger_dsn(), wrap=ns.command)


def _seconds_after(event: dict[str, Any], start: datetime) -> float:
    return (datetime.fromisoformat(event["timestamp"]) - start).total_seconds()


def _noisy_lines(proc: WorkerProc) -> list[dict[str, Any]]:
    """The worker's log lines at warning or above (stdlib lines and tracebacks included)."""
    return [e for e in proc.logs()
            if e.get("level") in ("warning", "error", "critical", "WARNING", "ERROR",
                                  "CRITICAL") or "raw" in e]


def _state(env: FaultEnv, job_id: str) -> tuple[str, int]:
    status, attempts = env.q(
        "SELECT status, attempts FROM {s}.jobs_all WHERE id = %s", (int(job_id),))[0]
    return str(status), int(attempts)


def _back_to_work(env: FaultEnv, proc: WorkerProc, count: int) -> None:
    """``proc`` (now alone) runs ``count`` new jobs: it went back to work, same process."""
    last = env.one("SELECT max(id) FROM {s}.jobs_all")
    env.queue.add_many("part", [{"after": n} for n in range(count)])
    wait_until(lambda: env.one(
        "SELECT count(*) FROM {s}.jobs_all WHERE id > %s AND status = 'succeeded'",
        (last,)) == count, timeout=30, what="the partitioned worker works again")
    runs = env.q("SELECT DISTINCT pid FROM {s}.effects WHERE job_id > %s", (last,))
    assert runs == [(proc.pid,)]
    assert proc.alive()


def _victim_writes_after(env: FaultEnv, proc: WorkerProc, job_id: str, at: datetime) -> list[Any]:
    return env.q("SELECT op, old_status, new_status FROM {s}.audit WHERE app = %s "
                 "AND job_id = %s AND at >= %s", (proc.worker_id, int(job_id), at))


def test_s19_a_short_silent_partition_mid_job_late_writes_are_fenced(
    fault_env: FaultEnv, netns: NetNamespace,
) -> None:
    env, ns = fault_env, netns
    job_id = env.queue.add("part", {"sleep": 60, "only_on": "victim"})
    victim = _spawn_inside(env, ns, "victim", [type_spec("part")], LEASE)
    wait_until(lambda: env.one("SELECT count(*) FROM {s}.effects") == 1, timeout=20,
               what="the victim started the job")
    # The thief is up before the cut (a slow start on a loaded machine must not delay the
    # reclaim past the heal): it finds nothing while the victim's lease holds.
    thief = env.spawn("thief", [type_spec("part")], worker=LEASE)
    ns.cut()
    cut_at = datetime.now(UTC)
    wait_until(lambda: _state(env, job_id)[0] == "succeeded", timeout=30,
               what="the thief finished the job")
    taken_at = env.db_now()
    taken_after = (datetime.now(UTC) - cut_at).total_seconds()
    # Heal before the kernel gives up (tcp_user_timeout): the victim's renewal, queued in
    # its socket since the cut, reaches the server late and must change nothing.
    assert taken_after < USER_TIMEOUT - 2, "too slow to heal before tcp_user_timeout"
    ns.heal()
    healed_at = datetime.now(UTC)
    row = wait_until(lambda: env.q(
        "SELECT outcome, reason FROM {s}.effects WHERE worker = %s AND finished_at IS NOT NULL",
        (victim.worker_id,)), timeout=20, what="the victim's handler returned")
    assert row == [("aborted", "lease-lost")]
    lost = wait_until(lambda: victim.events("lease_lost"), timeout=10, what="lease_lost logged")
    # The renewal sent into the partition was not lost with its connection: it reached the
    # server after the heal, and found the lease taken (0 rows), as every late write must.
    time.sleep(LEASE["lease_renew_interval"] * 2)
    assert not victim.events("lease_renew_failed")
    assert _victim_writes_after(env, victim, job_id, taken_at) == []
    assert _state(env, job_id) == ("succeeded", 2)
    assert env.q("SELECT app FROM {s}.audit WHERE job_id = %s AND new_status = 'succeeded'",
                 (int(job_id),)) == [(thief.worker_id,)]
    assert thief.terminate() == 0
    _back_to_work(env, victim, 5)
    counts = env.check_invariants(expected=6)
    assert victim.terminate() == 0
    report("19 a short silent partition of one worker mid-job (healed before the kernel "
           "gave up)", reclaimed_after_cut_seconds=round(taken_after, 2),
           handler_aborted_after_cut_seconds=round(_seconds_after(lost[0], cut_at), 3),
           healed_after_cut_seconds=round((healed_at - cut_at).total_seconds(), 2),
           victim_rows_written_late=0, jobs_lost=0, **counts)


def test_s19_a_long_silent_partition_is_noticed_within_tcp_user_timeout(
    fault_env: FaultEnv, netns: NetNamespace,
) -> None:
    env, ns = fault_env, netns
    job_id = env.queue.add("part", {"sleep": 60, "only_on": "victim"})
    victim = _spawn_inside(env, ns, "victim", [type_spec("part")], LEASE)
    wait_until(lambda: env.one("SELECT count(*) FROM {s}.effects") == 1, timeout=20,
               what="the victim started the job")
    # The thief is up before the cut (a slow start on a loaded machine must not delay the
    # reclaim past the heal): it finds nothing while the victim's lease holds.
    thief = env.spawn("thief", [type_spec("part")], worker=LEASE)
    ns.cut()
    cut_at = datetime.now(UTC)
    wait_until(lambda: _state(env, job_id)[0] == "succeeded", timeout=30,
               what="the thief finished the job")
    taken_at = env.db_now()
    # The victim's handler is aborted during the partition (its ledger path is not cut)
    # once its lease must have run out, though its renewal is still blocked.
    row = wait_until(lambda: env.q(
        "SELECT outcome, reason, finished_at FROM {s}.effects WHERE worker = %s "
        "AND finished_at IS NOT NULL", (victim.worker_id,)),
        timeout=USER_TIMEOUT, what="the victim aborted its handler")
    assert row[0][:2] == ("aborted", "lease-lost")
    # Its connections fail once the kernel gives up on them (tcp_user_timeout).
    errors = wait_until(lambda: [e for e in victim.logs() if e.get("event") in CONNECTION_ERRORS],
                        timeout=USER_TIMEOUT + 10, what="a connection error")
    noticed = _seconds_after(errors[0], cut_at)
    assert noticed < USER_TIMEOUT + 3
    aborted = (row[0][2] - cut_at).total_seconds()
    partition = env_seconds("GOLEMQ_FAULTS_PARTITION_SECONDS", 15)
    time.sleep(max(partition - (datetime.now(UTC) - cut_at).total_seconds(), 0))
    ns.heal()
    healed = datetime.now(UTC)
    assert _victim_writes_after(env, victim, job_id, taken_at) == []
    assert thief.terminate() == 0
    _back_to_work(env, victim, 5)
    back = (datetime.now(UTC) - healed).total_seconds()
    counts = env.check_invariants(expected=6)
    noisy = len(_noisy_lines(victim))
    assert victim.terminate() == 0
    report("19 a long silent partition of one worker mid-job (past tcp_user_timeout)",
           partition_seconds=partition, tcp_user_timeout=USER_TIMEOUT,
           first_connection_error_after_cut_seconds=round(noticed, 2),
           first_connection_error=errors[0]["event"],
           handler_aborted_after_cut_seconds=round(aborted, 2),
           working_again_after_heal_seconds=round(back, 2), victim_warning_lines=noisy,
           victim_rows_written_late=0, jobs_lost=0, **counts)


def test_s20_a_partition_of_the_listen_connection_only(
    fault_env: FaultEnv, netns: NetNamespace,
) -> None:
    env, ns = fault_env, netns
    poll = 2.0
    proc = _spawn_inside(env, ns, "w", [type_spec("hinted", concurrency=2)],
                         {"poll_interval": poll})
    first = wait_until(lambda: env.backends(proc.worker_id, listen=True), timeout=10,
                       what="LISTEN")
    time.sleep(0.3)
    held = ns.queue.hold(listen_only=True)
    assert len(held) == 1, held
    ns.drop_from([held[0].peer[1]])
    cut_at = datetime.now(UTC)
    # No hint reaches the worker now: its poll finds the job.
    added = env.db_now()
    env.queue.add("hinted", {"n": 1})
    wait_until(lambda: env.one("SELECT count(*) FROM {s}.effects") == 1, timeout=poll * 3)
    polled = (env.one("SELECT started_at FROM {s}.effects") - added).total_seconds()
    assert polled < poll + 1.0
    # The listener notices through its keepalives and comes back by itself.
    lost = wait_until(lambda: proc.events("listener_connection_lost"),
                      timeout=USER_TIMEOUT + 15, what="the listener noticed")
    wait_until(lambda: set(env.backends(proc.worker_id, listen=True)) - set(first),
               timeout=15, what="a new LISTEN connection")
    noticed = _seconds_after(lost[0], cut_at)
    assert noticed < USER_TIMEOUT + 5
    back = wait_until(lambda: proc.events("listener_reconnected"), timeout=10)
    time.sleep(0.3)
    # Hints work again: a job starts far sooner than a poll.
    added = env.db_now()
    env.queue.add("hinted", {"n": 2})
    wait_until(lambda: env.one("SELECT count(*) FROM {s}.effects") == 2, timeout=poll * 3,
               interval=0.01)
    hinted = (env.one("SELECT max(started_at) FROM {s}.effects") - added).total_seconds()
    assert hinted < poll / 2
    ns.undrop()
    ns.queue.release()
    wait_until(lambda: env.status_counts() == {"succeeded": 2}, timeout=10)
    counts = env.check_invariants(expected=2)
    assert proc.terminate() == 0
    report("20 a silent partition of the LISTEN connection only", poll_interval=poll,
           picked_up_by_polling_seconds=round(polled, 3),
           listener_noticed_after_seconds=round(noticed, 2),
           listener_back_after_seconds=round(_seconds_after(back[0], cut_at), 2),
           next_hint_latency_seconds=round(hinted, 3), tcp_user_timeout=USER_TIMEOUT,
           jobs_lost=0, **counts)


def _drain(env: FaultEnv, count: int, payload: dict[str, Any]) -> float:
    """Enqueue ``count`` jobs and wait until all succeeded; returns the seconds it took."""
    before = env.one("SELECT count(*) FROM {s}.jobs_all WHERE status = 'succeeded'")
    started = time.monotonic()
    env.queue.add_many("steady", [{**payload, "n": n} for n in range(count)])
    wait_until(lambda: env.one("SELECT count(*) FROM {s}.jobs_all WHERE status = 'succeeded'")
               == before + count, timeout=120, what="the drain")
    return time.monotonic() - started


def test_s21_two_hundred_ms_of_round_trip_latency(fault_env: FaultEnv) -> None:
    env = fault_env
    proxy = OutageProxy(env.dsn)
    try:
        procs = [env.spawn(f"w{i}", [type_spec("steady", concurrency=4)],
                           worker={"lease_duration": 1.5, "lease_renew_interval": 0.5,
                                   "poll_interval": 0.1}, dsn=proxy.dsn())
                 for i in range(2)]
        plain = _drain(env, 200, {})
        proxy.set_latency(0.1)
        with psycopg.connect(proxy.dsn(), autocommit=True) as conn:
            started = time.monotonic()
            conn.execute("SELECT 1")
            round_trip = time.monotonic() - started
        assert round_trip >= 0.2  # the latency is in effect
        slow = _drain(env, 200, {})
        # Jobs longer than the lease: only renewals through the latency keep them.
        long_jobs = _drain(env, 16, {"sleep": 2.5})
        counts = env.check_invariants(expected=416)
        assert env.one("SELECT max(attempts) FROM {s}.jobs_all") == 1  # no lease was lost
        assert counts["runs"] == 416  # no job ran twice
        noisy = [line for proc in procs for line in _noisy_lines(proc)]
        assert noisy == []  # nothing errored
        for proc in procs:
            assert proc.terminate() == 0
    finally:
        proxy.down()
    report("21 200 ms of added round-trip latency (2 workers x 4)",
           round_trip_seconds=round(round_trip, 3), drain_200_plain_seconds=round(plain, 2),
           drain_200_with_latency_seconds=round(slow, 2),
           drain_16_long_jobs_seconds=round(long_jobs, 2), leases_lost=0, **counts)


def test_s22_a_connection_reset_storm(fault_env: FaultEnv) -> None:
    env = fault_env
    storm = env_seconds("GOLEMQ_FAULTS_RESET_STORM_SECONDS", 24)
    every = 3.0
    proxy = OutageProxy(env.dsn)
    try:
        procs = [env.spawn(f"w{i}", [type_spec("steady", concurrency=4)],
                           worker={"lease_duration": 3.0, "lease_renew_interval": 0.5,
                                   "poll_interval": 0.2}, dsn=proxy.dsn())
                 for i in range(2)]
        total = 0
        resets = []
        started = time.monotonic()
        while time.monotonic() - started < storm:
            env.queue.add_many("steady", [{"n": n, "sleep": 0.1} for n in range(40)])
            total += 40
            time.sleep(every)
            resets.append(proxy.reset())
        wait_until(lambda: env.status_counts() == {"succeeded": total}, timeout=90,
                   what="every job succeeded after the storm")
        counts = env.check_invariants(expected=total, allow_double_runs=True)
        noisy = {proc.worker_id: len(_noisy_lines(proc)) for proc in procs}
        ours = {proc.worker_id: len([e for e in _noisy_lines(proc) if "timestamp" in e])
                for proc in procs}
        # Bounded log rate: a few lines per reset (one per thread that met the broken
        # connection, plus psycopg_pool's line per discarded connection), not a line per
        # retry. golemq-pg's own lines carry a timestamp; the pool's are stdlib lines.
        for worker_id, lines in noisy.items():
            assert ours[worker_id] <= 5 * len(resets), ours
            assert lines <= 10 * len(resets), noisy
        for proc in procs:
            assert proc.alive()
            assert proc.terminate() == 0
    finally:
        proxy.down()
    report("22 a connection reset storm (every connection reset every 3 s)",
           storm_seconds=storm, resets=len(resets), connections_reset=sum(resets),
           warning_lines_per_worker=noisy, golemq_warning_lines_per_worker=ours,
           warning_lines_per_minute=round(60 * max(noisy.values()) / storm, 1),
           jobs_lost=0, **counts)
