"""Scenarios 4, 5, 6 and 9 of docs/RELIABILITY.md: a stalled worker, terminated connections, a
terminated LISTEN connection, and a database that turns read-only for a while."""

from __future__ import annotations

import signal
import time
from typing import Any

import psycopg
import pytest
import structlog
from psycopg import sql

from golemq_pg import InMemoryStore, Queue, Worker
from golemq_pg.store.postgres._listener import PgListener
from tests.support.fault_env import FaultEnv
from tests.support.fault_report import report
from tests.support.waiting import wait_until
from tests.support.workers import type_spec

pytestmark = pytest.mark.faults


def test_s04_sigstop_past_the_lease_then_sigcont(fault_env: FaultEnv) -> None:
    env = fault_env
    lease = {"lease_duration": 1.5, "lease_renew_interval": 0.4, "poll_interval": 0.1}
    job_id = env.queue.add("stall", {"sleep": 60, "only_on": "victim",
                                      "abort_on_signal": False})
    victim = env.spawn("victim", [type_spec("stall")], worker=lease)
    wait_until(lambda: env.one("SELECT count(*) FROM {s}.effects") == 1, timeout=20)
    victim.signal(signal.SIGSTOP)
    stopped_at = time.monotonic()
    thief = env.spawn("thief", [type_spec("stall")], worker=lease)
    # The victim's lease runs out; the thief's reaper takes the job back and runs it again.
    wait_until(lambda: env.one("SELECT status FROM {s}.jobs_all WHERE id = %s", (int(job_id),))
               == "succeeded", timeout=30, what="the thief finished the job")
    stalled = time.monotonic() - stopped_at
    cont_at = env.db_now()
    victim.signal(signal.SIGCONT)
    row = wait_until(lambda: env.q(
        "SELECT finished_at - %s, outcome, reason FROM {s}.effects "
        "WHERE worker = %s AND finished_at IS NOT NULL", (cont_at, victim.worker_id)),
        timeout=15, what="the victim's handler returned")
    signalled_after, outcome, reason = row[0]
    assert reason == "lease-lost"
    assert outcome == "ok"  # it returned normally: a late "success" that must not count
    # Old worker: its renew/complete changed 0 rows (nothing of it in the audit after SIGCONT).
    victim_writes = env.q("SELECT op, old_status, new_status FROM {s}.audit "
                          "WHERE app = %s AND at >= %s", (victim.worker_id, cont_at))
    assert victim_writes == []
    wait_until(lambda: victim.events("lease_lost"), timeout=10, what="lease_lost logged")
    summary = env.queue.get(job_id)
    assert summary is not None
    assert summary.attempts == 2
    counts = env.check_invariants(expected=1)
    assert victim.terminate() == 0
    assert thief.terminate() == 0
    report("4 SIGSTOP past the lease, reclaim elsewhere, SIGCONT",
           stalled_seconds=round(stalled, 2),
           handler_signalled_after_sigcont=round(signalled_after.total_seconds(), 3),
           victim_rows_written_after_sigcont=0, jobs_lost=0, **counts)


def test_s05_terminate_the_claim_and_renewal_connections(fault_env: FaultEnv) -> None:
    env = fault_env
    # Jobs run longer than the lease: only renewals keep them, so a broken renewal path
    # would show up as reclaims (attempts > 1) and double runs.
    total = 16
    env.queue.add_many("steady", [{"n": n, "sleep": 2.5} for n in range(total)])
    proc = env.spawn("w", [type_spec("steady", concurrency=4)],
                     worker={"lease_duration": 2.0, "lease_renew_interval": 0.4,
                             "poll_interval": 0.1}, pool={"max_size": 4})
    wait_until(lambda: env.one("SELECT count(*) FROM {s}.effects") >= 4, timeout=20)
    reconnects = []
    for _ in range(3):
        before = set(env.backends(proc.worker_id, listen=False))
        assert env.terminate_backends(proc.worker_id, listen=False) >= 1
        ended = time.monotonic()
        wait_until(lambda b=before: set(env.backends(proc.worker_id, listen=False)) - b,
                   timeout=15, interval=0.01, what="a new pool connection")
        reconnects.append(time.monotonic() - ended)
        time.sleep(1.0)
    wait_until(lambda: env.status_counts() == {"succeeded": total}, timeout=60,
               what="every job succeeded")
    counts = env.check_invariants(expected=total, reaper_interval=0.1)
    assert env.one("SELECT max(attempts) FROM {s}.jobs_all") == 1  # no lease was lost
    assert counts["runs"] == total
    assert proc.alive()
    failures = len(proc.events("lease_renew_failed")) + len(proc.events("claim_failed"))
    assert proc.terminate() == 0
    report("5 pg_terminate_backend on the claim/renewal connections (3 times)",
           pool_reconnect_seconds=[round(r, 3) for r in reconnects], renewals_lost=0,
           duplicates=0, jobs_lost=0, logged_failures=failures, **counts)


def test_s06_terminate_the_listen_connection_and_enqueue_during_the_gap(
    fault_env: FaultEnv,
) -> None:
    env = fault_env
    poll = 5.0  # long: only a re-poll after the reconnect can explain a prompt pick-up
    proc = env.spawn("w", [type_spec("hinted", concurrency=4)], worker={"poll_interval": poll})
    wait_until(lambda: env.backends(proc.worker_id, listen=True), timeout=10)
    time.sleep(0.3)  # past the first poll
    # Stopped, the worker cannot notice the drop: the enqueue's NOTIFY is certainly lost.
    proc.signal(signal.SIGSTOP)
    assert env.terminate_backends(proc.worker_id, listen=True) == 1
    env.queue.add_many("hinted", [{"n": n} for n in range(100)])
    resumed_at = env.db_now()
    resumed = time.monotonic()
    proc.signal(signal.SIGCONT)
    wait_until(lambda: env.backends(proc.worker_id, listen=True), timeout=10, interval=0.005,
               what="LISTEN again")
    reconnect = time.monotonic() - resumed
    wait_until(lambda: env.one("SELECT count(*) FROM {s}.effects") == 100, timeout=poll * 2,
               what="all 100 jobs picked up")
    picked = env.one("SELECT max(started_at) - %s FROM {s}.effects", (resumed_at,))
    assert picked.total_seconds() < poll
    # LISTEN works again: a new job starts at once, far sooner than a poll.
    time.sleep(0.3)
    added = time.monotonic()
    env.queue.add("hinted", {"after": True})
    wait_until(lambda: env.one("SELECT count(*) FROM {s}.effects") == 101, timeout=poll,
               interval=0.005)
    hinted = time.monotonic() - added
    assert hinted < poll / 2
    wait_until(lambda: env.status_counts() == {"succeeded": 101}, timeout=10)
    counts = env.check_invariants(expected=101)
    assert proc.events("listener_connection_lost") or proc.events("listener_reconnected")
    assert proc.terminate() == 0
    report("6 terminate the LISTEN connection, enqueue 100 during the gap",
           listen_reconnect_seconds=round(reconnect, 3),
           all_100_picked_up_seconds=round(picked.total_seconds(), 3), poll_interval=poll,
           next_hint_latency_seconds=round(hinted, 3), jobs_lost=0, **counts)


def test_s09_database_read_only_for_a_while(fault_env: FaultEnv) -> None:
    env = fault_env
    role = env.create_role("rw")
    readonly_for = 3.0
    env.queue.add_many("rw", [{"n": n, "sleep": 0.05} for n in range(30)])
    proc = env.spawn("w", [type_spec("rw", concurrency=2)], dsn=env.role_dsn(role),
                     worker={"poll_interval": 0.1, "lease_grace": 30, "base_backoff": 0.05,
                             "max_backoff": 1})
    wait_until(lambda: env.status_counts().get("succeeded", 0) >= 5, timeout=30)
    ident = sql.Identifier(role)
    with env.connect() as admin:
        admin.execute(sql.SQL("ALTER ROLE {} SET default_transaction_read_only = on")
                      .format(ident))
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                      "WHERE usename = %s", (role,))
    went_read_only = time.monotonic()
    try:
        env.queue.add_many("rw", [{"n": n, "later": True} for n in range(30, 50)])
        time.sleep(readonly_for)
        frozen = env.status_counts()
        assert frozen.get("failed", 0) == 0
        assert proc.alive()
    finally:
        with env.connect() as admin:
            admin.execute(sql.SQL("ALTER ROLE {} RESET default_transaction_read_only")
                          .format(ident))
    writable_at = time.monotonic()
    # No help from outside: the worker's connections must find their way back to writing.
    wait_until(lambda: env.status_counts() == {"succeeded": 50}, timeout=60,
               what="full resume after read-only")
    resume = time.monotonic() - writable_at
    counts = env.check_invariants(expected=50)
    logged = [e for e in proc.logs() if e.get("level") in ("warning", "error")]
    outage = writable_at - went_read_only
    assert proc.alive()
    assert proc.terminate() == 0
    assert len(logged) < 60, logged[-5:]
    report("9 database read-only for a while (default_transaction_read_only)",
           read_only_seconds=round(outage, 2), resume_seconds=round(resume, 2),
           failed=0, warnings_logged=len(logged), jobs_lost=0, **counts)


def test_listener_backs_off_while_the_server_is_unreachable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The worker's listener thread calls wait() a quarter second at a time; the reconnect
    # backoff must hold across those calls, and the warnings must not repeat per attempt
    # (scenario 8's outage logged two lines every 0.25 s per worker before this).
    attempts: list[float] = []
    real_connect = psycopg.connect

    def counting_connect(*args: Any, **kwargs: Any) -> Any:
        attempts.append(time.monotonic())
        return real_connect(*args, **kwargs)

    monkeypatch.setattr(psycopg, "connect", counting_connect)
    with structlog.testing.capture_logs() as logs:
        listener = PgListener("host=127.0.0.1 port=1 dbname=none connect_timeout=2",
                              {"jobs_channel": "jobs"})
        started = time.monotonic()
        notes = []
        try:
            while time.monotonic() - started < 3.2:
                notes += listener.wait(0.25)
        finally:
            listener.close()
    # The loss is said once, not per attempt.
    assert [n.kind for n in notes] == ["lost"], notes
    # Backoff 0.1, 0.2, 0.4, 0.8, 1.6 s...: about 6 attempts in 3.2 s (not 26).
    assert 3 <= len(attempts) <= 8, len(attempts)
    warnings = [e for e in logs if e["log_level"] == "warning"]
    assert 1 <= len(warnings) <= 2, warnings


class _Outage:
    """A store whose claims fail for a while, then one claim waits 2 s for the database to
    come back (as a pool connection request does after an outage), then all is well."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def job_claim(self, request: Any) -> Any:
        self.calls += 1
        if 3 <= self.calls < 6:
            raise ConnectionError("database unreachable")
        if self.calls == 6:
            time.sleep(2.0)
        return self._store.job_claim(request)


def test_a_claim_that_waited_out_an_outage_does_not_inflate_the_prefetch() -> None:
    # Scenario 8 found it: the adaptive prefetch counted the claim that waited for the
    # database to return as one slow round trip, so that worker prefetched ~500 jobs and the
    # other worker, back just as fast, found the queue empty (alive but idle).
    memory = InMemoryStore()
    store = _Outage(memory)
    Queue(memory).add_many("fast", [{"n": n} for n in range(400)])
    worker = Worker(store, poll_interval=0.05, base_backoff=0, max_backoff=0)  # type: ignore[arg-type]
    worker.handler("fast", concurrency=2)(lambda job: time.sleep(0.01))
    peak = 0
    worker.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            counts = memory.job_count_by_status()
            peak = max(peak, counts["running"])
            if counts["succeeded"] == 400:
                break
            time.sleep(0.005)
    finally:
        worker.stop()
    assert store.calls >= 7  # the outage happened
    assert memory.job_count_by_status()["succeeded"] == 400
    assert peak <= 40, peak  # before the fix: well over 100 leased at once
