"""The maintenance loop: reaper, reconcile, schedules and retention, as small timed tasks.

* **reaper** (every ``poll_interval``, between 0.1 s and 5 s): ``lease_recover_expired``
  returns jobs whose lease ran out to PENDING, or dead-letters them past their budget.
  Any worker reaps anyone's expired leases, so a SIGKILLed worker's jobs come back within
  its lease plus one reaper interval. This worker's observers see "reclaimed" (with
  ``stuck_for``: seconds since the lease was last written) or "failed-terminal", with the
  error the store wrote to ``last_error`` (:data:`REAPED_ERRORS`; a dead letter's keeps the
  previous handler error after it).
* **reconcile** (every ``poll_interval``): asks the store which of this worker's leases it
  still holds; a job that vanished was cancelled by another process (its handler is aborted
  with reason ``"cancelled"``), one that is still there belongs to someone else now
  (``"lease-lost"``). This is the safety net under the cancel NOTIFY.
* **schedules** (every ``poll_interval``, between 0.1 s and 1 s, and sooner when a schedule
  this worker just fired is due again before that): fires due recurring schedules. Any
  number of workers run it; the store fires each due tick exactly once.
* **retention** (every ``Retention.sweep_interval``, opt-in): prunes old finished rows in
  batches of ``PRUNE_LIMIT``, one short statement each, back to back until the backlog is
  gone, with the other tasks running in between.

* **history** (every ``HISTORY_INTERVAL`` seconds): ``history_upkeep`` makes the history's
  storage days ahead, folds the maintained counts and moves an older release's finished
  rows out of the live table, ``HISTORY_LEGACY_BATCH`` a call (back to back while any are
  left). Any number of workers run it; the store makes it idempotent.

* **steps** (every ``STEP_SWEEP_INTERVAL`` seconds): ``job_step_sweep`` removes the durable
  steps of jobs gone for good (cancelled, pruned, deleted), looking at ``STEP_SWEEP_BATCH``
  job ids a pass, walking on from where the last pass stopped (at once again while a pass
  finds some).

* **heartbeat** (every :func:`heartbeat_interval`: ``4 * poll_interval`` between 1 s and
  10 s, so 2 s by default): the worker's row in the registry (``worker_heartbeat``: its
  handlers, how many jobs it holds, "running" or "stopping"), one small upsert that also
  sweeps rows of workers lost for over an hour. It runs first, so a started worker is
  listed at once; :meth:`Maintenance.announce_stopping` runs it again when the stop begins.
  It is never on the claim/complete path.

Each task fails on its own: an error is logged (rate-limited) and retried next time, so a
registry (or any) failure never stops the worker. Observers' ``on_error`` hear of it once
per incident: kind ``"schedule"`` for the schedules task, ``"maintenance"`` for the others
(one incident while any of them fails).
"""

from __future__ import annotations

import math
import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

import structlog

from golemq_pg._errortext import error_text
from golemq_pg._schedule import next_tick
from golemq_pg._types import WorkerErrorKind
from golemq_pg.store.port import (
    LEASE_EXHAUSTED_ERROR,
    LEASE_EXPIRED_ERROR,
    DueSchedule,
    WorkerBeat,
)
from golemq_pg.worker.events import CANCELLED, LEASE_LOST
from golemq_pg.worker.runtime import LOG_IDS, delete_types
from golemq_pg.worker.service import Service
from golemq_pg.worker.units import RUNNING, Unit

if TYPE_CHECKING:
    from golemq_pg.worker.config import WorkerConfig
    from golemq_pg.worker.runtime import Runtime
    from golemq_pg.worker.supervisor import Abort

log = structlog.get_logger("golemq_pg.worker.maintenance")

#: Most rows one reaper call recovers / one prune call deletes.
REAP_LIMIT = 500
PRUNE_LIMIT = 1_000
#: The history upkeep's period, how many days of storage it keeps made ahead, and how many
#: finished rows of an older release one call moves.
HISTORY_INTERVAL = 5.0
HISTORY_DAYS_AHEAD = 3
HISTORY_LEGACY_BATCH = 5_000
#: Seconds between passes of the orphaned-steps sweep, and job ids one pass looks at.
STEP_SWEEP_INTERVAL = 60.0
STEP_SWEEP_BATCH = 1_000
#: Most vanished leases looked up one by one to tell a cancel from a lost lease.
LOOKUP_LIMIT = 50
#: The ``last_error`` both stores write when the reaper recovers a job, by outcome; the
#: reaper reports the same text to observers.
REAPED_ERRORS = {
    "reclaimed": LEASE_EXPIRED_ERROR,
    "failed-terminal": LEASE_EXHAUSTED_ERROR,
}
#: The schedules task never re-runs sooner than this after a pass; a wait computed from a
#: known next tick gets ``SCHEDULE_MARGIN`` on top, so that the pass finds the tick due.
SCHEDULE_MIN_WAIT = 0.01
SCHEDULE_MARGIN = 0.005
#: Most schedules fired in one pass; a full pass runs again at once.
SCHEDULE_BATCH = 100
#: Bounds of the registry heartbeat interval (seconds); see :func:`heartbeat_interval`.
HEARTBEAT_MIN = 1.0
HEARTBEAT_MAX = 10.0
#: The longest a stop waits for its registry row's removal (seconds).
DEREGISTER_WAIT = 2.0


def heartbeat_interval(config: WorkerConfig) -> float:
    """How often a worker refreshes its registry row: ``4 * poll_interval`` kept between
    1 s and 10 s (2 s with the default poll), so a dead worker reads as lost within a few
    seconds (three intervals) without a write more often than once a second."""
    return min(max(4 * config.poll_interval, HEARTBEAT_MIN), HEARTBEAT_MAX)


class Task:
    """A periodic task: runs ``fn`` every ``interval`` seconds; errors are contained.

    ``fn`` may return a number of seconds: the task then runs again after that long if it
    is sooner than ``interval``.
    """

    def __init__(self, name: str, interval: float, fn: Callable[[], float | None]) -> None:
        self.name = name
        self.interval = interval
        self.fn = fn
        self.next_at = 0.0
        self.failures = 0
        #: What its failures are reported as to observers' ``on_error``.
        self.kind: WorkerErrorKind = "schedule" if name == "schedules" else "maintenance"


class Maintenance(Service):
    """Runs the maintenance tasks on one thread, each on its own timer; the reconcile pass
    takes vanished leases away through ``abort``."""

    def __init__(self, runtime: Runtime, *, abort: Abort) -> None:
        super().__init__("golemq-maintenance", runtime.owner)
        self.runtime = runtime
        self._abort = abort
        cfg = runtime.config
        poll = cfg.poll_interval
        self.heartbeat_seconds = heartbeat_interval(cfg)
        self._stopping = False
        self._steps_after: str | None = None
        self._host = socket.gethostname()
        self._pid = os.getpid()
        self.tasks: list[Task] = []
        if callable(getattr(runtime.store, "worker_heartbeat", None)):
            self.tasks.append(Task("heartbeat", self.heartbeat_seconds, self.heartbeat))
        self.tasks += [
            Task("reaper", min(max(poll, 0.1), 5.0), self.reap),
            Task("reconcile", max(poll, 0.05), self.reconcile),
            Task("schedules", min(max(poll, 0.1), 1.0), self.fire_schedules),
            Task("history", HISTORY_INTERVAL, self.keep_history),
            Task("steps", STEP_SWEEP_INTERVAL, self.sweep_steps),
        ]
        if cfg.retention is not None:
            self.tasks.append(Task("retention", cfg.retention.sweep_interval, self.prune))

    def step(self) -> float:
        """Run every due task; return the wait until the next one."""
        for task in self.tasks:
            if self.stop_event.is_set():
                break
            if time.monotonic() < task.next_at:
                continue
            wait = task.interval
            try:
                sooner = task.fn()
                if sooner is not None:
                    wait = min(wait, max(sooner, 0.0))
                if task.failures:
                    log.info("maintenance_recovered", task=task.name, failures=task.failures)
                    self.runtime.hub.errors.recovered(task.kind, task.name)
                task.failures = 0
            except Exception as exc:  # noqa: BLE001 - one task's failure is contained
                task.failures += 1
                # Observers' on_error: once per incident of the schedules task, or of the
                # other tasks together ("maintenance").
                self.runtime.hub.errors.failed(task.kind, exc, task.name)
                if task.failures == 1 or task.failures % 20 == 0:
                    log.warning(
                        "maintenance_failed", task=task.name, worker_id=self.runtime.owner,
                        failures=task.failures, error_type=type(exc).__name__,
                        error=error_text(exc),
                    )
            task.next_at = time.monotonic() + wait
        if not self.runtime.maintained.is_set():
            self.runtime.maintained.set()
            self.runtime.wake.set()
        next_at = min((task.next_at for task in self.tasks), default=math.inf)
        return max(next_at - time.monotonic(), 0.0)

    def beat_soon(self) -> None:
        """The handlers changed (``Worker.handler`` / ``remove_handler`` / ``set_concurrency``
        on a running worker): write the registry row at the next step."""
        for task in self.tasks:
            if task.name == "heartbeat":
                task.next_at = 0.0
        self.kick()

    def announce_stopping(self) -> None:
        """The worker's stop began: write "stopping" to the registry at the next step."""
        self._stopping = True
        for task in self.tasks:
            if task.name == "heartbeat":
                task.next_at = 0.0
        self.kick()

    def deregister(self, wait: float = DEREGISTER_WAIT) -> None:
        """After a clean stop (this loop stopped): remove the worker's registry row, waiting
        at most ``wait`` seconds (``DEREGISTER_WAIT`` at most: a database that is down must
        not hold the stop up for the pool's timeout). A failure is logged; the row then
        reads as lost and is swept an hour later."""
        if not callable(getattr(self.runtime.store, "worker_remove", None)):
            return
        wait = min(max(wait, 0.05), DEREGISTER_WAIT)
        remover = threading.Thread(target=self._remove, name="golemq-deregister", daemon=True)
        remover.start()
        remover.join(wait)
        if remover.is_alive():
            log.warning("worker_deregister_slow", worker_id=self.runtime.owner,
                        waited=round(wait, 3))

    def _remove(self) -> None:
        runtime = self.runtime
        try:
            runtime.store.worker_remove(runtime.owner)
        except Exception as exc:  # noqa: BLE001 - the registry must never fail a stop
            log.warning("worker_deregister_failed", worker_id=runtime.owner,
                        error_type=type(exc).__name__, error=error_text(exc))

    # -- tasks ------------------------------------------------------------------------------
    def heartbeat(self) -> None:
        """Refresh this worker's registry row (and sweep long-lost ones)."""
        runtime = self.runtime
        # Running: the jobs whose handlers started (a buffered one is PENDING to readers).
        held = sum(len(unit.jobs) for unit in runtime.units() + runtime.tx_units()
                   if unit.state == RUNNING)
        stopping = self._stopping or runtime.stopping
        swept = runtime.store.worker_heartbeat(
            WorkerBeat(
                worker_id=runtime.owner,
                host=self._host,
                pid=self._pid,
                handlers={spec.type: spec.concurrency for spec in runtime.handlers
                          if spec.type not in runtime.retiring},
                heartbeat_seconds=self.heartbeat_seconds,
                running=held,
                state="stopping" if stopping else "running",
            )
        )
        if swept:
            log.info("lost_workers_swept", worker_id=runtime.owner, count=swept)

    def reap(self) -> None:
        """Recover expired leases (anyone's); report them to observers."""
        runtime = self.runtime
        # delete_on="always" of this worker's handlers holds for the jobs it dead-letters too.
        erase = delete_types(runtime)[1]
        while True:
            recovered = runtime.store.lease_recover_expired(REAP_LIMIT, erase)
            if not recovered:
                return
            failed = [r for r in recovered if r.outcome == "failed-terminal"]
            log.warning(
                "jobs_reaped", worker_id=runtime.owner, count=len(recovered),
                dead_lettered=len(failed), job_ids=[r.id for r in recovered[:LOG_IDS]],
                types=sorted({r.type for r in recovered}),
                attempts=[r.attempts for r in recovered[:LOG_IDS]],
                owners=sorted({r.lease_owner or "?" for r in recovered})[:LOG_IDS],
            )
            hub = runtime.hub
            if hub:
                for r in recovered:
                    hub.emit(r.id, r.type, r.scope, r.outcome, r.attempts,
                             error=r.error or REAPED_ERRORS[r.outcome],
                             stuck_for=r.stuck_for if r.outcome == "reclaimed" else None)
            if len(recovered) < REAP_LIMIT or self.stop_event.is_set():
                return

    def reconcile(self) -> None:
        """Abort local handlers whose lease vanished (cancelled elsewhere, or lost)."""
        runtime = self.runtime
        units = runtime.held_units()
        if not units:
            return
        newest = _newest_tokens(units)
        refs = [ref for unit in units for ref in unit.refs if newest[ref.id] == ref.token]
        held = runtime.store.lease_held(runtime.owner, refs)
        gone = [
            unit for unit in units
            if not unit.settled
            and not all(ref.id in held and newest[ref.id] == ref.token for ref in unit.refs)
        ]
        if not gone:
            return
        cancelled: list[Unit] = []
        lost: list[Unit] = []
        for unit in gone:
            missing = next(ref.id for ref in unit.refs
                           if ref.id not in held or newest[ref.id] != ref.token)
            if len(gone) <= LOOKUP_LIMIT and runtime.store.job_get(missing) is None:
                cancelled.append(unit)
            else:
                lost.append(unit)
        if cancelled:
            self._abort(cancelled, CANCELLED)
        if lost:
            self._abort(lost, LEASE_LOST)

    def fire_schedules(self) -> float | None:
        """Enqueue one job per due schedule tick; return the wait until the soonest next
        tick of the schedules fired now (None when none is known), so a schedule with a
        short interval is fired on time rather than up to one task interval late."""
        runtime = self.runtime
        soonest: list[float] = []

        def tick(due: DueSchedule, now: datetime) -> datetime | None:
            following = next_tick(due, now)
            if following is not None:
                # Both instants come from the store's clock: their difference is a duration.
                soonest.append((following - now).total_seconds())
            return following

        # A schedule without a budget of its own gives its jobs this worker's default.
        created = runtime.store.schedule_fire_due(
            tick, SCHEDULE_BATCH, runtime.config.default_max_attempts
        )
        if created:
            log.info("schedules_fired", worker_id=runtime.owner, jobs=len(created),
                     job_ids=created[:LOG_IDS])
        if len(created) >= SCHEDULE_BATCH:
            return 0.0  # more may be due: the next pass comes right after the other tasks
        if not soonest:
            return None
        return max(min(soonest) + SCHEDULE_MARGIN, SCHEDULE_MIN_WAIT)

    def keep_history(self) -> float | None:
        """One ``history_upkeep``; at once again while an older release's rows are moving."""
        done = self.runtime.store.history_upkeep(HISTORY_DAYS_AHEAD, HISTORY_LEGACY_BATCH)
        if done.created or done.moved:
            log.info("history_upkeep", worker_id=self.runtime.owner, created=done.created,
                     moved=done.moved)
        return 0.0 if done.moved >= HISTORY_LEGACY_BATCH else None

    def sweep_steps(self) -> float | None:
        """One bounded pass of the orphaned-steps sweep; at once again while it finds some
        and the walk has not reached the end."""
        done = self.runtime.store.job_step_sweep(self._steps_after, STEP_SWEEP_BATCH)
        self._steps_after = done.after
        if done.removed:
            log.info("steps_swept", worker_id=self.runtime.owner, removed=done.removed)
        return 0.0 if done.removed and done.after is not None else None

    def prune(self) -> float | None:
        """Delete finished rows older than the retention age: one bounded batch per call.

        Each batch is one short statement (``PRUNE_LIMIT`` rows, oldest first, skipping rows
        locked by anyone), so no lock is held for long. A full batch asks to run again at
        once (returns 0): the backlog drains batch after batch while the reaper and the
        reconcile pass still get their turn between batches.
        """
        runtime = self.runtime
        retention = runtime.config.retention
        if retention is None:  # pragma: no cover - the task exists only with retention
            return None
        limit = PRUNE_LIMIT
        deleted = runtime.store.job_prune(
            retention.statuses, before=None, age=retention.older_than, limit=limit
        )
        if deleted:
            log.info("jobs_pruned", worker_id=runtime.owner, count=deleted,
                     statuses=[str(s) for s in retention.statuses])
        return 0.0 if deleted >= limit else None


__all__ = ["Maintenance", "Task", "heartbeat_interval"]


def _newest_tokens(units: list[Unit]) -> dict[str, int]:
    """Each held job's newest lease token. A job this worker holds twice (taken back by
    requeue_stale or the reaper, then claimed here again) is held under its newest lease
    only: the store answers by id, so the older unit is told lost by reconcile, not by the
    answer for the newer lease."""
    newest: dict[str, int] = {}
    for unit in units:
        for ref in unit.refs:
            newest[ref.id] = max(newest.get(ref.id, ref.token), ref.token)
    return newest
