"""Scenarios 7 and 8 of docs/RELIABILITY.md: the PostgreSQL server restarts under load, and is
down for a while.

These restart and stop the server, so they run on a throwaway cluster the suite makes for
this module (``throwaway_cluster``, tests/plugins/clusters.py: initdb into a temporary
directory, a free port of 127.0.0.1), never on the server ``pg_dsn`` names, whose other
clients an outage would cut. Their workers, producers, ledger and checks all use the
cluster's DSN (``cluster_fault_env``). Where no cluster can be made (no PostgreSQL server
programs on the machine, or ``GOLEMQ_FAULTS_NO_SERVER_CONTROL`` set) they skip and say why.
Scenario 8's outage is ``$GOLEMQ_FAULTS_DOWNTIME`` seconds (default 6, to keep the default
run short; docs/RELIABILITY.md's 60 s for the full run). The cluster is always started
again, whatever happens.

Scenario 8 also runs against a TCP proxy in front of the suite's server (no server control,
nobody else disturbed): the workers' outage lasts ``$GOLEMQ_FAULTS_PROXY_DOWNTIME`` seconds
(default 20). That is where an outage longer than a few seconds showed its cost: the
connection pool's doubling reconnect delay left workers idle for many seconds after the
database was back.
"""

from __future__ import annotations

import time

import pytest

from golemq_pg import PostgresStore, Queue
from tests.support.fault_env import FaultEnv
from tests.support.fault_report import env_seconds, report
from tests.support.outage_proxy import OutageProxy
from tests.support.server_control import ThrowawayCluster, server_started_at
from tests.support.waiting import wait_until
from tests.support.workers import type_spec

pytestmark = pytest.mark.faults


def test_s07_postgres_restart_immediate_under_load(
    cluster_fault_env: FaultEnv, throwaway_cluster: ThrowawayCluster
) -> None:
    env, server = cluster_fault_env, throwaway_cluster
    total = 3000
    env.queue.add_many("load", [{"n": n, "sleep": 0.01} for n in range(total)])
    procs = [env.spawn(f"w{i}", [type_spec("load", concurrency=4)],
                     worker={"poll_interval": 0.1, "lease_grace": 15}) for i in range(2)]
    wait_until(lambda: env.succeeded() >= 600, timeout=60)
    pids = [p.pid for p in procs]
    before = [p.warnings() for p in procs]
    started_at = server_started_at(server.dsn)
    restarted = time.monotonic()
    try:
        server.restart_immediate()
    finally:
        server.ensure_running()
    up = time.monotonic()
    # The measure test_fault_zz_server_untouched.py relies on sees the restart.
    assert server_started_at(server.dsn) > started_at
    at_restart = env.succeeded()
    wait_until(lambda: env.succeeded() > at_restart + 50, timeout=60, interval=0.05,
               what="completions resumed")
    resumed = time.monotonic() - up
    wait_until(lambda: env.succeeded() == total, timeout=180, interval=0.2,
               what="every job succeeded")
    assert [p.pid for p in procs] == pids
    assert all(p.alive() for p in procs)  # recovered without a restart of the workers
    counts = env.check_invariants(expected=total, allow_double_runs=True)
    logged = [p.warnings() - b for p, b in zip(procs, before, strict=True)]
    for proc in procs:
        assert proc.terminate() == 0
    assert max(logged) < 100, logged  # bounded error-log rate through the outage
    report("7 PostgreSQL restart -m immediate under load (2 processes x 4)",
           restart_seconds=round(up - restarted, 2), completions_resumed_after=round(resumed, 2),
           warnings_logged_per_worker=logged, workers_restarted=0, jobs_lost=0, **counts)


def test_s08_postgres_down_for_a_while_then_back(
    cluster_fault_env: FaultEnv, throwaway_cluster: ThrowawayCluster
) -> None:
    env, server = cluster_fault_env, throwaway_cluster
    downtime = env_seconds("GOLEMQ_FAULTS_DOWNTIME", 6.0)
    procs = [env.spawn(f"w{i}", [type_spec("work", concurrency=4)],
                     worker={"poll_interval": 0.5, "lease_grace": 30}) for i in range(2)]
    env.queue.add_many("work", [{"n": n} for n in range(200)])
    # Due while the server is down or just after: no NOTIFY will announce them.
    env.queue.add_many("work", [{"n": n, "delayed": True} for n in range(100)],
                       delay=downtime + 1)
    wait_until(lambda: env.succeeded() == 200, timeout=60)
    env.store.pool.close()  # the producer side reconnects below
    stopped = time.monotonic()
    try:
        server.stop()
        time.sleep(downtime)
        server.start()
    finally:
        server.ensure_running()
    up = time.monotonic()
    up_at = env.db_now()
    wait_until(lambda: env.succeeded() == 300, timeout=60, interval=0.05,
               what=lambda: env.stuck_report(procs, "the delayed jobs ran after the outage"))
    delayed_done = time.monotonic() - up
    store = PostgresStore.connect(env.dsn, schema=env.schema, max_size=2,
                                  application_name=env.prefix + "-admin")
    try:
        # Enough work for both workers for several seconds: each must come back to it.
        added = time.monotonic()
        Queue(store).add_many("work", [{"n": n, "after": True, "sleep": 0.1}
                                       for n in range(400)])
        wait_until(lambda: env.succeeded() == 700, timeout=60, interval=0.05)
        fresh_done = time.monotonic() - added
    finally:
        store.close()
    assert all(p.alive() for p in procs)
    # When each worker ran its first job after the server came back (never alive-but-idle).
    resumed = dict(env.q("SELECT worker, extract(epoch FROM min(started_at) - %s)::float8 "
                         "FROM {s}.effects WHERE started_at > %s GROUP BY worker",
                         (up_at, up_at)))
    idle = [p for p in procs if p.worker_id not in resumed]
    stacks = {p.worker_id: p.dump_stacks() for p in idle}
    counts = env.check_invariants(expected=700)
    logged = [p.warnings() for p in procs]
    for proc in procs:
        assert proc.terminate() == 0
    assert len(resumed) == 2, (resumed, stacks)  # both workers work again
    assert max(resumed.values()) < 12, resumed  # claim and listener backoffs cap at 5 s
    report("8 PostgreSQL down, then back", downtime_seconds=downtime,
           outage_seconds=round(up - stopped, 2),
           delayed_jobs_done_after_restart=round(delayed_done, 2),
           first_job_after_restart_seconds={k: round(v, 2) for k, v in resumed.items()},
           fresh_400_done_seconds=round(fresh_done, 2),
           warnings_logged_per_worker=logged, jobs_lost=0, **counts)


def test_s08_a_long_outage_seen_through_a_proxy(fault_env: FaultEnv) -> None:
    env = fault_env
    downtime = env_seconds("GOLEMQ_FAULTS_PROXY_DOWNTIME", 20.0)
    proxy = OutageProxy(env.dsn)
    try:
        procs = [env.spawn(f"w{i}", [type_spec("work", concurrency=2)], dsn=proxy.dsn(),
                           worker={"poll_interval": 0.5, "lease_grace": 60})
                 for i in range(2)]
        env.queue.add_many("work", [{"n": n} for n in range(50)])
        wait_until(lambda: env.status_counts() == {"succeeded": 50}, timeout=30)
        proxy.down()
        time.sleep(downtime)
        # Queued during the outage (the producer is not behind the proxy): due at once.
        env.queue.add_many("work", [{"n": n, "sleep": 0.05} for n in range(200)])
        up_at = env.db_now()
        proxy.up()
        wait_until(lambda: env.status_counts() == {"succeeded": 250}, timeout=120,
                   interval=0.05, what="every job after the outage")
        resumed = dict(env.q(
            "SELECT worker, extract(epoch FROM min(started_at) - %s)::float8 FROM {s}.effects "
            "WHERE started_at > %s GROUP BY worker", (up_at, up_at)))
        counts = env.check_invariants(expected=250)
        logged = [p.warnings() for p in procs]
        assert all(p.alive() for p in procs)
        for proc in procs:
            assert proc.terminate() == 0
    finally:
        proxy.down()
    assert len(resumed) == 2, resumed
    # Reconnect attempts are at most ~4 s apart (plus a claim backoff step of up to 5 s).
    assert max(resumed.values()) < 6, resumed
    report("8 a long outage through a TCP proxy (only these workers cut off)",
           downtime_seconds=downtime,
           first_job_after_reconnect_seconds={k: round(v, 2) for k, v in resumed.items()},
           warnings_logged_per_worker=logged, jobs_lost=0, **counts)
