"""Scenario 24 of docs/RELIABILITY.md: minutes of mixed faults while producers add.

For ``$GOLEMQ_CHAOS_SECONDS`` (default 300) three worker processes run jobs while two
producer threads add more (tests/support/producers.py records every acknowledged add), and a
seeded schedule injects, one after another with random pauses:

* **kills**: SIGKILL one worker (now and then all three), then start a new one in its place
  (a new worker id, so the audit can tell the incarnations apart);
* **terminate storms**: a few rounds of ``pg_terminate_backend`` on every queue connection
  (pool and LISTEN) of every live worker;
* **restarts**: ``pg_ctl restart -m immediate`` of the module's throwaway cluster.

The first three faults are one of each kind, so a short run injects every kind. After each
storm and restart the test waits (60 s at most) for completions to resume; after each kill,
without blocking, for the jobs the dead worker held to leave its lease (the reaper). Once the
faults stop, the producers stop and the workers drain the queue; then: every acknowledged job
exists, no job exists that no add asked for, each job ended as its kind says (plain, long
and flaky jobs succeeded; poison jobs failed with their budget spent), no worker died of a
fault it was not sent, and I1-I5 (``FaultEnv.check_invariants``, double runs allowed: a
completion lost to a kill or a restart runs again).

The schedule is drawn from a seed: ``$GOLEMQ_CHAOS_SEED`` (default :data:`DEFAULT_SEED`), printed
at the start and in the report. The seed fixes which faults come in which order and the
producers' plans; the timing of processes and the server does not replay exactly.

Like S7 it runs on a throwaway cluster of its own (``throwaway_cluster``, module scope),
never on the suite's server; it skips where none can be made and fails instead with
``GOLEMQ_REQUIRE_THROWAWAY_CLUSTER`` set.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from tests.support.fault_env import FaultEnv
from tests.support.fault_report import env_seconds, report
from tests.support.producers import AddPlan, Producer
from tests.support.server_control import ThrowawayCluster, server_started_at
from tests.support.waiting import wait_until
from tests.support.workers import WorkerProc, type_spec

SECONDS_ENV = "GOLEMQ_CHAOS_SECONDS"
SEED_ENV = "GOLEMQ_CHAOS_SEED"
#: The schedule of the default run (any integer replays another one).
DEFAULT_SEED = 39
SECONDS = env_seconds(SECONDS_ENV, 300.0)

# The drain and the checks after the faults take well under a minute; the rest is margin for
# a loaded machine.
pytestmark = [pytest.mark.faults, pytest.mark.timeout(int(SECONDS) + 300)]

WORKERS = 3
POLL = 0.2
#: Leases of 2 s renewed every 0.5 s: a killed worker's jobs come back within seconds, and
#: the long jobs (3 s) live on renewals only.
WORKER_OPTIONS = {"poll_interval": POLL, "lease_duration": 2.0, "lease_renew_interval": 0.5}
TYPES = [type_spec("chaos", concurrency=4)]
#: Enough attempts that the faults alone never spend a budget (a kill or a restart costs
#: the jobs in flight one attempt each).
BUDGET = 25
POISON_BUDGET = 3
#: How long completions may take to resume after a storm or a restart, and a killed
#: worker's jobs to be reaped.
RECOVERY_TIMEOUT = 60.0


def plan_add(rng: random.Random) -> AddPlan:
    """One producer add: mostly short jobs, some longer than the lease, some failing."""
    roll = rng.random()
    count = 1 if rng.random() < 0.5 else rng.randint(2, 8)
    if roll < 0.75:
        return AddPlan("plain", [{"sleep": round(rng.uniform(0, 0.2), 3)}
                                 for _ in range(count)], BUDGET)
    if roll < 0.85:
        return AddPlan("long", [{"sleep": 3.0}], BUDGET)
    if roll < 0.95:  # fails its first run, then succeeds
        return AddPlan("flaky", [{"raise": "Retryable", "first_only": True}
                                 for _ in range(count)], BUDGET)
    return AddPlan("poison", [{"raise": "Retryable"}], POISON_BUDGET)


#: How each kind of job must end.
FINAL = {"plain": "succeeded", "long": "succeeded", "flaky": "succeeded", "poison": "failed"}


class WorkerSlots:
    """``count`` worker processes; a killed one is replaced by a new incarnation."""

    def __init__(self, env: FaultEnv, count: int) -> None:
        self.env = env
        self.incarnations = [0] * count
        self.procs = [self._spawn(slot) for slot in range(count)]
        self.killed: list[WorkerProc] = []

    def _spawn(self, slot: int) -> WorkerProc:
        return self.env.spawn(f"w{slot}-{self.incarnations[slot]}", TYPES,
                              worker=WORKER_OPTIONS)

    def kill(self, slot: int) -> WorkerProc:
        victim = self.procs[slot]
        victim.kill()
        self.killed.append(victim)
        return victim

    def respawn(self, slot: int) -> None:
        self.incarnations[slot] += 1
        self.procs[slot] = self._spawn(slot)


@dataclass
class Tally:
    """What the schedule did, and how long recovery took."""

    kills: int = 0
    kills_of_every_worker: int = 0
    storms: int = 0
    terminations: int = 0
    restarts: int = 0
    recovery: dict[str, list[float]] = field(
        default_factory=lambda: {"kill": [], "storm": [], "restart": []})

    def worst(self, kind: str) -> float:
        return round(max(self.recovery[kind], default=0.0), 2)


@dataclass
class Reaping:
    """The jobs a killed worker held, waiting for the reaper."""

    victim: str
    held: list[int]
    killed_at: float


class Chaos:
    """The fault schedule: :meth:`step` injects one fault and waits for recovery."""

    def __init__(self, env: FaultEnv, server: ThrowawayCluster, workers: WorkerSlots,
                 rng: random.Random) -> None:
        self.env = env
        self.server = server
        self.workers = workers
        self.rng = rng
        self.tally = Tally()
        self.reaping: list[Reaping] = []
        first = ["kill", "storm", "restart"]
        rng.shuffle(first)
        self._first = first

    def step(self) -> None:
        kind = (self._first.pop(0) if self._first else
                self.rng.choices(["kill", "storm", "restart"], weights=[45, 40, 15])[0])
        fault: Callable[[], None] = {"kill": self.kill, "storm": self.storm,
                                     "restart": self.restart}[kind]
        fault()

    # -- faults ----------------------------------------------------------------------------
    def kill(self) -> None:
        everyone = self.rng.random() < 0.1
        slots = list(range(WORKERS)) if everyone else [self.rng.randrange(WORKERS)]
        victims = [self.workers.kill(slot) for slot in slots]
        killed_at = time.monotonic()
        for victim in victims:
            held = [int(r[0]) for r in self.env.q(
                "SELECT id FROM {s}.jobs_all WHERE lease_owner = %s AND status = 'running'",
                (victim.worker_id,))]
            self.reaping.append(Reaping(victim.worker_id, held, killed_at))
        self.tally.kills += len(victims)
        self.tally.kills_of_every_worker += everyone
        time.sleep(self.rng.uniform(0, 1.0))  # the slots stay empty for a moment
        for slot in slots:
            self.workers.respawn(slot)

    def storm(self) -> None:
        for _ in range(self.rng.randint(2, 6)):
            for proc in self.workers.procs:
                self.tally.terminations += self.env.terminate_backends(proc.worker_id)
            time.sleep(self.rng.uniform(0.05, 0.5))
        self.tally.storms += 1
        self._completions_resume("storm", time.monotonic())

    def restart(self) -> None:
        started_at = server_started_at(self.server.dsn)
        try:
            self.server.restart_immediate()
        finally:
            self.server.ensure_running()
        up = time.monotonic()
        assert server_started_at(self.server.dsn) > started_at
        self.tally.restarts += 1
        self._completions_resume("restart", up)

    # -- recovery --------------------------------------------------------------------------
    def _completions_resume(self, kind: str, since: float) -> None:
        done = self.env.succeeded()
        wait_until(lambda: self.env.succeeded() > done, timeout=RECOVERY_TIMEOUT,
                   interval=0.05, what=lambda: self.env.stuck_report(
                       self.workers.procs, f"completions after a {kind}"))
        self.tally.recovery[kind].append(time.monotonic() - since)

    def check_reaping(self) -> bool:
        """Record the killed workers whose jobs all left their lease; fail on one that
        still holds some after :data:`RECOVERY_TIMEOUT`. Whether none is left waiting."""
        for item in list(self.reaping):
            still = self.env.one(
                "SELECT count(*) FROM {s}.jobs_all WHERE id = ANY(%s) AND lease_owner = %s "
                "AND status = 'running'", (item.held, item.victim))
            waited = time.monotonic() - item.killed_at
            if still == 0:
                self.tally.recovery["kill"].append(waited)
                self.reaping.remove(item)
            else:
                assert waited < RECOVERY_TIMEOUT, (
                    f"{still} jobs of the killed {item.victim} still leased after "
                    f"{waited:.1f}s\n" + self.env.stuck_report(self.workers.procs, "reaping"))
        return not self.reaping


def test_s24_minutes_of_kills_terminate_storms_and_restarts_lose_no_acknowledged_job(
    cluster_fault_env: FaultEnv, throwaway_cluster: ThrowawayCluster
) -> None:
    env, server = cluster_fault_env, throwaway_cluster
    seed = int(os.environ.get(SEED_ENV) or DEFAULT_SEED)
    print(f"chaos: seed {seed} for {SECONDS:g} s (replay: {SEED_ENV}={seed} "
          f"{SECONDS_ENV}={SECONDS:g})")
    rng = random.Random(seed)
    workers = WorkerSlots(env, WORKERS)
    producers = [Producer(env.dsn, env.schema, f"p{n}", application_name=f"{env.prefix}-admin",
                          job_type="chaos", plan=plan_add, seed=seed * 10 + n,
                          pause=(0.1, 0.4))
                 for n in range(2)]
    for producer in producers:
        producer.start()
    chaos = Chaos(env, server, workers, rng)
    started = time.monotonic()
    try:
        while time.monotonic() - started < SECONDS:
            chaos.step()
            pause = time.monotonic() + rng.uniform(0.5, 3.0)
            while time.monotonic() < pause:
                chaos.check_reaping()
                env.check_connections(idle_for=5.0)  # I5 during the run too, loosely
                time.sleep(0.25)
    finally:
        for producer in producers:
            producer.stop()
        server.ensure_running()
    faulted = time.monotonic() - started
    for producer in producers:
        assert producer.error is None, f"{producer.name}: {producer.error!r}"
    wait_until(chaos.check_reaping,
               timeout=RECOVERY_TIMEOUT, interval=0.1, what="the killed workers' jobs reaped")
    drained_from = time.monotonic()
    wait_until(lambda: not env.one(
        "SELECT count(*) FROM {s}.jobs_all WHERE status IN ('pending', 'running')"),
        timeout=180, interval=0.2,
        what=lambda: env.stuck_report(workers.procs, "the drain after the faults"))
    drain = time.monotonic() - drained_from

    # Nothing acknowledged lost, nothing added that no producer asked for, no job twice.
    acknowledged: dict[str, str] = {}
    unacknowledged: dict[str, str] = {}
    for producer in producers:
        acknowledged.update(producer.acknowledged)
        unacknowledged.update(producer.unacknowledged)
    rows = env.q("SELECT payload->>'key', payload->>'kind', status, attempts, max_attempts "
                 "FROM {s}.jobs_all")
    keys = Counter(str(r[0]) for r in rows)
    assert not [k for k, n in keys.items() if n > 1], "one add's job stored twice"
    lost = sorted(set(acknowledged) - set(keys))
    assert not lost, f"I1: {len(lost)} acknowledged jobs lost, e.g. {lost[:10]}"
    unasked = sorted(set(keys) - set(acknowledged) - set(unacknowledged))
    assert not unasked, f"jobs no add asked for: {unasked[:10]}"
    wrong = [r for r in rows if r[2] != FINAL[r[1]]
             or (r[1] == "poison" and r[3] != r[4])]
    assert not wrong, f"{len(wrong)} jobs ended wrongly (key, kind, status, attempts, max): " \
                      f"{wrong[:10]}"
    counts = env.check_invariants(expected=len(rows), reaper_interval=POLL,
                                  allow_double_runs=True)

    # The workers survived every fault they were not sent, and stop cleanly.
    died = [p.worker_id for p in workers.procs if not p.alive()]
    assert not died, f"workers that died on their own: {died}"
    warnings = sum(p.warnings() for p in env.procs)
    for proc in workers.procs:
        assert proc.terminate() == 0, proc.log_text()[-3000:]
    assert all(p.popen.returncode == -signal.SIGKILL for p in workers.killed)
    tally = chaos.tally
    report(f"24 {faulted:.0f} s of worker kills, terminate storms and restarts while 2 "
           f"producers add (3 workers x 4)", seed=seed, seconds=round(faulted, 1),
           kills=tally.kills, kills_of_every_worker=tally.kills_of_every_worker,
           storms=tally.storms, terminations=tally.terminations, restarts=tally.restarts,
           adds_failed=sum(sum(p.failures.values()) for p in producers),
           add_errors=dict(sum((p.failures for p in producers), Counter())),
           jobs_added=len(rows), jobs_acknowledged=len(acknowledged),
           jobs_unacknowledged=len(unacknowledged),
           jobs_unacknowledged_stored=len(set(unacknowledged) & set(keys)),
           jobs_done=counts.get("succeeded", 0), poison_failed=counts.get("failed", 0),
           max_kill_recovery_seconds=tally.worst("kill"),
           max_storm_recovery_seconds=tally.worst("storm"),
           max_restart_recovery_seconds=tally.worst("restart"),
           drain_seconds=round(drain, 1), warnings_logged=warnings, jobs_lost=0, **counts)
