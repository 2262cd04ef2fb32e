"""Scenario 23 of docs/RELIABILITY.md: the primary dies and its synchronous standby is
promoted, while producers add and worker processes drain.

A primary and a streaming standby made from it (``pg_basebackup -R``), both throwaway
clusters of the suite's own (``streaming_pair``, tests/plugins/clusters.py), on free ports of
127.0.0.1; synchronous replication (the primary's ``synchronous_standby_names`` names the
standby). Everything (the producer threads, the worker processes with their LISTEN
connections, the effects ledger, the checks) connects through one multi-host DSN with
``target_session_attrs=read-write`` (``standby_fault_env``). Mid-drain the primary is stopped
``-m immediate`` and the standby promoted (``pg_ctl promote``); nothing is restarted or
reconfigured on the clients' side. Where the server programs (pg_basebackup included) are
missing it skips and says why (fails instead with ``GOLEMQ_REQUIRE_THROWAWAY_CLUSTER``).
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import psycopg
import pytest

from golemq_pg import Queue
from tests.support.fault_env import FaultEnv
from tests.support.fault_report import env_seconds, report
from tests.support.server_control import StreamingPair
from tests.support.waiting import wait_until
from tests.support.workers import WorkerProc, type_spec

pytestmark = pytest.mark.faults

#: The Queue's default attempt budget, which every job here has.
MAX_ATTEMPTS = 3
#: The brief's bound: workers, producers and the listener carry on within this many seconds
#: of the promotion.
RECOVERY_BOUND = 10.0
#: Long enough that a probe started well within it was woken by NOTIFY, not found by a poll.
POLL_INTERVAL = 2.0
#: Seconds between the primary's death and the promotion: a failover manager's detection
#: time (Patroni's is its ``ttl``, 30 s by default), shortened. Long enough for the clients'
#: reconnect backoffs to grow past their first steps, so that their cost after the
#: promotion is measured too.
FAILOVER_DELAY = env_seconds("GOLEMQ_FAULTS_FAILOVER_DELAY", 3.0)


class _Producer:
    """``Queue.add`` in a thread, one job at a time, until stopped. ``acked``: (id, wall
    time) of every add that returned. A failed add (the primary gone, no read-write server
    yet) is unacknowledged: counted by exception type, and the thread goes on with the next
    job after a short pause, as an application that retries would."""

    def __init__(self, queue: Queue, name: str) -> None:
        self.queue = queue
        self.name = name
        self.acked: list[tuple[str, float]] = []
        self.errors: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            n += 1
            try:
                job_id = self.queue.add("work", {"producer": self.name, "n": n, "sleep": 0.02})
            except Exception as exc:  # unacknowledged: counted, not retried
                self.errors[type(exc).__name__] += 1
                self._stop.wait(0.05)
                continue
            self.acked.append((job_id, time.time()))
            self._stop.wait(0.02)

    def first_ack_after(self, moment: float) -> float | None:
        """Seconds from ``moment`` (wall clock) to the first add acknowledged after it."""
        later = [at for _, at in self.acked if at > moment]
        return min(later) - moment if later else None

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        assert not self._thread.is_alive(), f"producer {self.name} stuck in an add"


def _acked_after(producers: list[_Producer], moment: float) -> int:
    return sum(1 for p in producers for _, at in p.acked if at > moment)


def _count(env: FaultEnv, query: str, params: tuple[object, ...] = ()) -> int | None:
    """A count from the current primary; None while there is none."""
    try:
        return int(env.one(query, params))
    except psycopg.Error:
        return None


def _seconds_after(env: FaultEnv, query: str, moment: float) -> dict[str, float]:
    """``{key: seconds after moment}`` from a query of (key, epoch) rows."""
    return {str(key): float(at) - moment for key, at in env.q(query, (moment,))}


def _stuck_report(env: FaultEnv, procs: list[WorkerProc], what: str) -> str:
    """What the workers were doing when a wait after the failover ran out."""
    try:
        counts: object = env.status_counts()
    except psycopg.Error as exc:
        counts = f"unreadable: {type(exc).__name__}"
    parts = [f"{what} (jobs: {counts})"]
    for proc in procs:
        tail = "\n".join(proc.log_text().splitlines()[-15:])
        parts.append(f"--- {proc.worker_id} alive={proc.alive()}\n{tail}\n{proc.dump_stacks()}")
    return "\n".join(parts)


def _warnings(proc: WorkerProc) -> int:
    return sum(1 for e in proc.logs() if e.get("level") in ("warning", "error", "critical"))


def test_s23_failover_to_a_synchronous_standby_loses_no_acknowledged_job(
    standby_fault_env: FaultEnv, streaming_pair: StreamingPair
) -> None:
    env, pair = standby_fault_env, streaming_pair
    assert pair.sync_state() == "sync"
    env.queue.add_many("work", [{"n": n, "sleep": 0.05} for n in range(400)])
    backlog = [str(row[0]) for row in env.q("SELECT id FROM {s}.jobs_all")]
    procs = [env.spawn(f"w{i}", [type_spec("work", concurrency=4)],
                       worker={"poll_interval": POLL_INTERVAL, "lease_grace": 5})
             for i in range(2)]
    pids = [p.pid for p in procs]
    producers = [_Producer(env.queue, f"p{i}") for i in range(2)]
    try:
        wait_until(lambda: (_count(env, "SELECT count(*) FROM {s}.jobs_all "
                                        "WHERE status = 'succeeded'") or 0) >= 100,
                   timeout=60, what="100 jobs done before the failover")
        stopped = time.time()
        pair.primary.stop("immediate")
        time.sleep(FAILOVER_DELAY)
        promoting = time.time()
        pair.standby.promote()
        promoted = time.time()
        # The first job completed on the new primary (the audit row of its completion).
        wait_until(lambda: _count(env, "SELECT count(*) FROM {s}.audit WHERE new_status = "
                                       "'succeeded' AND at > to_timestamp(%s)", (promoting,)),
                   timeout=60, interval=0.05,
                   what=lambda: _stuck_report(env, procs, "a completion on the new primary"))
        # Every worker's listener is back: a LISTEN connection on the new primary.
        wait_until(lambda: all(env.backends(p.worker_id, listen=True) for p in procs),
                   timeout=30, interval=0.05,
                   what=lambda: _stuck_report(env, procs, "LISTEN on the new primary"))
        # Producers add for a while on the new primary too.
        wait_until(lambda: _acked_after(producers, promoting) >= 100, timeout=30,
                   what="100 adds acknowledged after the failover")
    finally:
        for producer in producers:
            producer.stop()
    acked = backlog + [job_id for p in producers for job_id, _ in p.acked]
    after = _acked_after(producers, promoting)
    wait_until(lambda: _count(env, "SELECT count(*) FROM {s}.jobs_all "
                                   "WHERE status NOT IN ('succeeded', 'failed')") == 0,
               timeout=90, interval=0.1,
               what=lambda: _stuck_report(env, procs, "every job finished"))

    # Nothing acknowledged lost: every acknowledged add, before or after the failover, is a
    # job on the new primary, and it succeeded.
    status = {str(i): s for i, s in env.q("SELECT id, status FROM {s}.jobs_all")}
    missing = [i for i in acked if i not in status]
    assert not missing, f"{len(missing)} acknowledged jobs lost, e.g. {missing[:5]}"
    unfinished = [(i, status[i]) for i in acked if status[i] != "succeeded"]
    assert not unfinished, f"acknowledged jobs that did not succeed: {unfinished[:5]}"
    # No run past the attempt budget (the ledger's attempts, not only the row's).
    over = env.q("SELECT job_id, attempt FROM {s}.effects WHERE attempt > %s", (MAX_ATTEMPTS,))
    assert not over, f"runs past the budget of {MAX_ATTEMPTS}: {over[:5]}"

    # Within the bound of the promotion: the first completion, each worker's first run,
    # each worker's LISTEN connection, each producer's first acknowledged add.
    first_done = env.one("SELECT extract(epoch FROM min(at))::float8 FROM {s}.audit "
                         "WHERE new_status = 'succeeded' AND at > to_timestamp(%s)",
                         (promoting,)) - promoting
    resumed = _seconds_after(env, "SELECT worker, extract(epoch FROM min(started_at))::float8 "
                                  "FROM {s}.effects WHERE started_at > to_timestamp(%s) "
                                  "GROUP BY worker", promoting)
    listening = _seconds_after(env, "SELECT application_name, extract(epoch FROM "
                                    "min(backend_start))::float8 FROM pg_stat_activity WHERE "
                                    "query ILIKE 'LISTEN%%' AND backend_start > to_timestamp(%s)"
                                    " GROUP BY application_name", promoting)
    produced = {p.name: p.first_ack_after(promoting) for p in producers}
    assert first_done < RECOVERY_BOUND, first_done
    assert set(resumed) == {p.worker_id for p in procs}, resumed
    assert max(resumed.values()) < RECOVERY_BOUND, resumed
    assert {p.worker_id for p in procs} <= set(listening), listening
    assert max(listening[p.worker_id] for p in procs) < RECOVERY_BOUND, listening
    assert all(s is not None and s < RECOVERY_BOUND for s in produced.values()), produced

    # A job added now is picked up within the bound, by NOTIFY or a poll (the report tells
    # which: NOTIFY takes milliseconds, a poll up to POLL_INTERVAL).
    picked_up = []
    for n in range(3):
        added = time.time()
        probe = env.queue.add("work", {"probe": n})
        wait_until(lambda probe=probe: env.q("SELECT 1 FROM {s}.effects WHERE job_id = %s",
                                             (int(probe),)),
                   timeout=RECOVERY_BOUND, interval=0.01, what="a probe job picked up")
        picked_up.append(env.one("SELECT extract(epoch FROM min(started_at))::float8 "
                                 "FROM {s}.effects WHERE job_id = %s", (int(probe),)) - added)
    assert max(picked_up) < RECOVERY_BOUND, picked_up

    # The same worker processes, never restarted, stop gracefully.
    assert [p.pid for p in procs] == pids
    assert all(p.alive() for p in procs)
    counts = env.check_invariants(allow_double_runs=True)
    logged = [_warnings(p) for p in procs]
    for proc in procs:
        assert proc.terminate() == 0
    report("23 failover to a synchronous standby (2 processes x 4, 2 producers)",
           primary_down_before_promote=round(promoting - stopped, 2),
           promote_seconds=round(promoted - promoting, 2),
           first_completion_after_promote=round(first_done, 2),
           workers_resumed_after_promote={k: round(v, 2) for k, v in resumed.items()},
           listen_back_after_promote={k: round(v, 2) for k, v in listening.items()},
           producers_acked_after_promote={k: round(v or -1, 2) for k, v in produced.items()},
           probe_pickup_seconds=[round(s, 3) for s in picked_up],
           acknowledged=len(acked), acknowledged_after_failover=after,
           failed_adds={p.name: dict(p.errors) for p in producers},
           warnings_logged_per_worker=logged, workers_restarted=0, jobs_lost=0, **counts)
