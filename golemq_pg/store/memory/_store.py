"""InMemoryStore: the JobStore port without a database, with the PostgreSQL semantics.

For tests and scripts. Every verb behaves as the PostgreSQL store does: the dedupe rule of
the ``jobs_dedupe_pending_uq`` index, the claim order and every guard, fenced lease writes,
the reaper, cancellation, schedules and wake-up notifications. One lock serialises every
verb (it stands in for the database's row locks and advisory locks); listeners wait on a
condition variable built on that lock. Time comes from an injectable clock (see
:class:`golemq_pg.testing.FakeClock`) and is read once per verb, like ``now()`` inside one
transaction.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import structlog

from golemq_pg._errortext import stored_error
from golemq_pg._types import JobStatus, JobSummary, PausedType, ScheduleSummary
from golemq_pg.store.memory import _admin as admin
from golemq_pg.store.memory._claim import ClaimPass
from golemq_pg.store.memory._control import ControlVerbs
from golemq_pg.store.memory._dashboard import DashboardVerbs
from golemq_pg.store.memory._graph import Effects, Graph
from golemq_pg.store.memory._metrics import MetricsVerbs
from golemq_pg.store.memory._rows import (
    JobRow,
    JobTable,
    MemoryListener,
    RateBudget,
    copy_progress,
    matching,
    page,
)
from golemq_pg.store.memory._schedules import ScheduleBook
from golemq_pg.store.memory._steps import StepVerbs
from golemq_pg.store.memory._waiting import wait_for_job
from golemq_pg.store.memory._workers import RegistryVerbs, WorkerBook
from golemq_pg.store.memory._workflows import WorkflowVerbs
from golemq_pg.store.port import (
    LEASE_EXHAUSTED_ERROR,
    LEASE_EXPIRED_ERROR,
    LEASE_STALE_ERROR,
    LEASE_STALE_EXHAUSTED_ERROR,
    NO_BUDGET,
    PREVIOUS_ERROR_LIMIT,
    PREVIOUS_ERROR_SEPARATOR,
    CancelFilter,
    CancelledJob,
    ClaimBatch,
    ClaimRequest,
    CompleteAndClaimParams,
    CompleteAndClaimResult,
    FailItem,
    FindParams,
    HistoryUpkeep,
    LeaseRef,
    NextTick,
    Notification,
    Reclaimed,
    ResultRef,
    RetryItem,
    ScheduleParams,
)

Clock = Callable[[], datetime]

log = structlog.get_logger("golemq_pg.store.memory")

def utc_now() -> datetime:
    """The real clock: an aware UTC datetime."""
    return datetime.now(UTC)


class InMemoryStore(
    WorkflowVerbs, RegistryVerbs, ControlVerbs, DashboardVerbs, MetricsVerbs, StepVerbs
):
    """The storage port kept in process memory, thread-safe, with the same guards.

    ``clock`` returns the current aware UTC datetime (default: real time); ``rate_window``
    is the length in seconds of a resource pool's fixed rate window. Job ids are strings of
    increasing integers. ``connection=`` (enqueue inside a caller's transaction) has no
    meaning here and raises ``TypeError``; so is ``Worker(listen_dsn=)`` on it, refused by
    the worker (``listen_dsn_supported``).
    """

    #: Whether a worker's ``listen_dsn`` means anything here: there is no database to listen
    #: on, so ``Worker(store, listen_dsn=...)`` is refused rather than ignored.
    listen_dsn_supported: ClassVar[bool] = False

    def __init__(self, *, clock: Clock | None = None, rate_window: float = 60.0) -> None:
        if rate_window <= 0:
            raise ValueError("rate_window must be > 0 seconds")
        self._clock: Clock = clock or utc_now
        self._rate_window = float(rate_window)
        self._lock = threading.Lock()
        self._wakeup = threading.Condition(self._lock)
        # job_wait callers: woken whenever a row finishes or is deleted (see _waiting).
        self._done = threading.Condition(self._lock)
        self._jobs = JobTable()
        self._jobs.on_done = self._done.notify_all
        self._graph = Graph()
        self._jobs.on_leave = self._graph.on_leave
        self._budgets: dict[str, RateBudget] = {}
        self._paused: dict[str, PausedType] = {}
        self._schedules = ScheduleBook()
        self._workers = WorkerBook()
        self._listeners: list[MemoryListener] = []

    def __repr__(self) -> str:
        return f"InMemoryStore(jobs={len(self._jobs.rows)})"

    # -- plumbing -------------------------------------------------------------------------
    def now(self) -> datetime:
        """The store's clock."""
        return self._read_clock()

    def _read_clock(self) -> datetime:
        now = self._clock()
        if now.tzinfo is None or now.utcoffset() is None:
            raise ValueError("the InMemoryStore clock must return an aware datetime")
        return now.astimezone(UTC)

    def open_listener(self, dsn: str | None = None) -> MemoryListener:
        """An in-process listener that receives every notification published from now on
        (``dsn`` is ignored: there is no database to listen on)."""
        with self._lock:
            self._listeners = [lst for lst in self._listeners if not lst.closed]
            listener = MemoryListener(self._wakeup)
            self._listeners.append(listener)
            return listener

    def close(self) -> None:
        """Close every listener (the data stays readable)."""
        with self._lock:
            listeners, self._listeners = self._listeners, []
        for listener in listeners:
            listener.close()

    def _publish(self, notification: Notification) -> None:
        # Called with the lock held: the condition shares it.
        for listener in self._listeners:
            listener.deliver(notification)
        self._wakeup.notify_all()

    def _announce_due(self, rows: Sequence[JobRow], now: datetime) -> None:
        """Like the INSERT trigger: one hint per statement naming the types that became due."""
        due_types = tuple(sorted({row.type for row in rows if row.run_at <= now}))
        if due_types:
            self._publish(Notification(kind="jobs", items=due_types))

    def _announce(self, effects: Effects) -> None:
        """Publish what a graph change made due (a "jobs" hint naming the types, as by an
        add) and what it finished (a "done" hint naming the jobs); lock held."""
        if effects.due_types:
            self._publish(Notification(kind="jobs", items=tuple(sorted(effects.due_types))))
        self._announce_done(effects.done)

    def _settle(self, now: datetime) -> None:
        """Apply the outcome of every job with children that left the live states during
        this verb to its children, and announce it (the dependents trigger of 0016); called
        by every verb that finishes or deletes live jobs, before it lets go of the lock."""
        if self._graph.left:
            self._announce(self._graph.settle(self._jobs, now))

    # -- producer -------------------------------------------------------------------------
    def _new_row(
        self,
        job_type: str,
        payload: bytes,
        scope: Any,
        priority: int,
        run_at: datetime,
        max_attempts: int | None,
        dedupe_key: str | None,
        now: datetime,
    ) -> JobRow:
        return JobRow(
            id=self._jobs.next_id(),
            type=job_type,
            payload=bytes(payload),
            scope=scope,
            status=JobStatus.PENDING,
            priority=priority,
            run_at=run_at,
            attempts=0,
            max_attempts=max_attempts,
            dedupe_key=dedupe_key,
            created_at=now,
            updated_at=now,
        )

    # -- consumer -------------------------------------------------------------------------
    def job_claim(self, request: ClaimRequest) -> ClaimBatch:
        """Lease up to the requested number of due jobs, honouring every guard.

        The result is a :class:`ClaimBatch` (a list of the claimed jobs) whose ``blocked``
        names what held back each guarded type that had due work and got nothing.
        """
        with self._lock:
            now = self._read_clock()
            return ClaimPass(
                self._jobs, self._budgets, request, now, self._rate_window, self._paused
            ).run()

    def _held(
        self, owner: str, items: Sequence[LeaseRef | RetryItem | FailItem]
    ) -> list[tuple[JobRow, LeaseRef | RetryItem | FailItem]]:
        # The fence of every lease write. A row listed twice is written once, as an
        # UPDATE ... FROM unnest(...) writes it once.
        held: dict[int, tuple[JobRow, LeaseRef | RetryItem | FailItem]] = {}
        for item in items:
            row = self._jobs.get(item.id)
            if row is not None and row.id not in held and row.holds(owner, item.token):
                held[row.id] = (row, item)
        return list(held.values())

    def job_complete_many(
        self, owner: str, items: Sequence[LeaseRef], *, delete_types: Sequence[str] = (),
        started: Sequence[float | None] | None = None,
    ) -> set[str]:
        """RUNNING -> SUCCEEDED for leases still held (a :class:`ResultRef`'s result kept);
        jobs of a type in ``delete_types`` are deleted instead. One "done" hint per call."""
        with self._lock:
            return self._complete(owner, items, delete_types, self._read_clock(), started)

    def job_complete_and_claim(self, params: CompleteAndClaimParams) -> CompleteAndClaimResult:
        """``job_complete_many`` then a claim of ``params.claim``, under one hold of the lock
        (the transaction): the claim sees the completed rows' capacity as free."""
        with self._lock:
            now = self._read_clock()
            written = self._complete(params.owner, params.items, params.delete_types, now,
                                     params.started)
            request = ClaimRequest(
                owner=params.owner, types=[params.claim], resources=params.resources,
                defer_start=params.defer_start,
            )
            claimed = ClaimPass(
                self._jobs, self._budgets, request, now, self._rate_window, self._paused
            ).run()
            return CompleteAndClaimResult(written=written, claimed=claimed)

    def _complete(
        self, owner: str, items: Sequence[LeaseRef], delete_types: Sequence[str], now: datetime,
        started: Sequence[float | None] | None = None,
    ) -> set[str]:
        """The body of ``job_complete_many``, with the lock held."""
        written: list[str] = []
        starts = _starts(items, started)
        for row, item in self._held(owner, items):
            _stamp_start(row, starts, now)
            if self._deleting(row, delete_types):
                self._jobs.delete(row)
            else:
                if isinstance(item, ResultRef):
                    row.result = item.result
                self._jobs.finish(row, JobStatus.SUCCEEDED, now)
            written.append(str(row.id))
        self._announce_done(written)
        self._settle(now)
        return set(written)

    def _deleting(self, row: JobRow, delete_types: Sequence[str]) -> bool:
        """Whether a finishing job is deleted (``delete_on``) rather than kept: never one
        whose children still wait (they read it)."""
        return row.type in delete_types and not self._graph.has_waiting_child(self._jobs, row.id)

    def job_fail_many(
        self, owner: str, items: Sequence[FailItem], *, delete_types: Sequence[str] = (),
        started: Sequence[float | None] | None = None,
    ) -> set[str]:
        """RUNNING -> FAILED (dead letter) with the last error, appended to the history;
        jobs of a type in ``delete_types`` are deleted instead. One "done" hint per call."""
        with self._lock:
            now = self._read_clock()
            written: list[str] = []
            starts = _starts(items, started)
            for row, item in self._held(owner, items):
                assert isinstance(item, FailItem)  # noqa: S101 - _held returns the input items
                _stamp_start(row, starts, now)
                if self._deleting(row, delete_types):
                    self._jobs.delete(row)
                else:
                    row.last_error = error = stored_error(item.error)
                    row.record_attempt(error, row.lease_owner, now, item.traceback)
                    self._jobs.finish(row, JobStatus.FAILED, now)
                written.append(str(row.id))
            self._announce_done(written)
            self._settle(now)
            return set(written)

    def job_retry_many(
        self, owner: str, items: Sequence[RetryItem], *,
        started: Sequence[float | None] | None = None,
    ) -> set[str]:
        """RUNNING -> PENDING after ``delay`` seconds; the attempt is refunded unless consumed.
        The attempt is appended to the history first."""
        with self._lock:
            now = self._read_clock()
            written = set()
            starts = _starts(items, started)
            for row, item in self._held(owner, items):
                assert isinstance(item, RetryItem)  # noqa: S101 - _held returns the input items
                _stamp_start(row, starts, now)
                row.last_error = error = stored_error(item.error)
                row.record_attempt(error, row.lease_owner, now, item.traceback)
                if not item.consume_attempt:
                    row.attempts = max(row.attempts - 1, 0)
                self._jobs.back_to_pending(row, now + timedelta(seconds=item.delay), now)
                written.add(str(row.id))
            self._settle(now)  # a superseded keyed job was deleted: cancelled
            return written

    def _announce_done(self, ids: Sequence[str]) -> None:
        """Like ``notify_jobs_done``: one "done" notification naming the ids (lock held)."""
        if ids:
            self._publish(Notification("done", tuple(ids)))

    def job_mark_started(
        self, owner: str, items: Sequence[LeaseRef], started: Sequence[float]
    ) -> set[str]:
        """Record the handler starts of held jobs that have none yet (see the port)."""
        with self._lock:
            now = self._read_clock()
            starts = _starts(items, started)
            written = set()
            for row, _ in self._held(owner, items):
                if row.started_at is None and starts.get(str(row.id)) is not None:
                    _stamp_start(row, starts, now)
                    written.add(str(row.id))
            return written

    def job_release_many(self, owner: str, items: Sequence[LeaseRef]) -> set[str]:
        """RUNNING -> PENDING due now, attempt refunded (claimed but never started)."""
        with self._lock:
            now = self._read_clock()
            written = set()
            for row, _ in self._held(owner, items):
                row.attempts = max(row.attempts - 1, 0)
                self._jobs.back_to_pending(row, now, now)
                written.add(str(row.id))
            self._settle(now)  # a superseded keyed job was deleted: cancelled
            return written

    def lease_renew(self, owner: str, items: Sequence[LeaseRef], seconds: float) -> set[str]:
        """Extend held, unexpired leases to now + ``seconds``; returns the ids renewed."""
        with self._lock:
            now = self._read_clock()
            renewed = set()
            for row, _ in self._held(owner, items):
                if row.is_live(now):
                    row.lease_expires_at = now + timedelta(seconds=seconds)
                    row.updated_at = now
                    renewed.add(str(row.id))
            return renewed

    def lease_held(self, owner: str, items: Sequence[LeaseRef]) -> set[str]:
        """Which of these leases this owner still holds."""
        with self._lock:
            return {str(row.id) for row, _ in self._held(owner, items)}

    def job_progress(self, owner: str, item: LeaseRef, progress: float | dict[str, Any]) -> bool:
        """Persist progress for a held lease; False when the lease is no longer held."""
        with self._lock:
            held = self._held(owner, [item])
            if not held:
                return False
            row = held[0][0]
            # updated_at stays: on a RUNNING row it is when the lease was last written
            row.progress = copy_progress(progress)
            return True

    def lease_recover_expired(
        self, limit: int = 500, delete_types: Sequence[str] = ()
    ) -> list[Reclaimed]:
        """Reaper: expired RUNNING leases go back to PENDING, or FAILED past their budget
        (deleted instead for a type in ``delete_types``)."""
        with self._lock:
            now = self._read_clock()
            expired = sorted(
                (
                    row
                    for row in self._jobs.running.values()
                    if row.lease_expires_at is None or row.lease_expires_at <= now
                ),
                key=lambda r: (r.lease_expires_at or now, r.id),
            )[: max(limit, 0)]
            return self._reclaim(expired, now, delete_types,
                                 LEASE_EXPIRED_ERROR, LEASE_EXHAUSTED_ERROR)

    def lease_requeue_stale(
        self, older_than: float, types: Sequence[str] | None, limit: int = 500
    ) -> list[Reclaimed]:
        """``queue.requeue_stale``: the reaper's outcomes for RUNNING jobs (of ``types``;
        None: all) whose lease was last written at least ``older_than`` seconds ago."""
        with self._lock:
            now = self._read_clock()
            cutoff = now - timedelta(seconds=older_than)
            wanted = None if types is None else set(types)
            stale = sorted(
                (
                    row
                    for row in self._jobs.running.values()
                    if row.updated_at <= cutoff and (wanted is None or row.type in wanted)
                ),
                key=lambda r: (r.lease_expires_at or now, r.id),
            )[: max(limit, 0)]
            return self._reclaim(stale, now, (),
                                 LEASE_STALE_ERROR, LEASE_STALE_EXHAUSTED_ERROR)

    def _reclaim(
        self, found: list[JobRow], now: datetime, delete_types: Sequence[str],
        expired_error: str, exhausted_error: str,
    ) -> list[Reclaimed]:
        """What reclaim_leases() (migration 0014) does to each row found: due again now
        within budget (a superseded keyed job deleted), dead-lettered past it with the
        previous handler error kept in ``last_error``; an unlimited budget is never spent.
        A RUNNING row's ``updated_at`` is when its lease was last written."""
        recovered = []
        dead: list[str] = []
        for row in found:
            owner = row.lease_owner
            stuck = max((now - row.updated_at).total_seconds(), 0.0)
            budget: int | None = row.max_attempts
            if budget is not None and row.attempts >= budget:
                error = exhausted_error
                previous = next((e.error for e in reversed(row.errors)
                                 if e.worker_id is not None and e.error), None)
                if previous is not None:
                    error += PREVIOUS_ERROR_SEPARATOR + previous[:PREVIOUS_ERROR_LIMIT]
                row.last_error = error
                row.record_attempt(exhausted_error, None, now)
                if self._deleting(row, delete_types):
                    self._jobs.delete(row)
                else:
                    self._jobs.finish(row, JobStatus.FAILED, now)
                exhausted = True
                dead.append(str(row.id))
            else:
                error = expired_error
                row.last_error = expired_error
                row.record_attempt(expired_error, None, now)
                self._jobs.back_to_pending(row, now, now)
                exhausted = False
            recovered.append(
                Reclaimed(
                    id=str(row.id),
                    type=row.type,
                    scope=row.scope,
                    attempts=row.attempts,
                    outcome="failed-terminal" if exhausted else "reclaimed",
                    lease_owner=owner,
                    stuck_for=stuck,
                    error=error,
                )
            )
        self._announce_done(dead)
        self._settle(now)
        return recovered

    # -- inspection and administration -----------------------------------------------------
    def job_get(self, job_id: str) -> JobSummary | None:
        """One job, or None."""
        with self._lock:
            row = self._jobs.get(job_id)
            return None if row is None else row.summary()

    def job_payload(self, job_id: str) -> bytes | None:
        """One job's payload as its JSON encoding, or None when the job does not exist."""
        with self._lock:
            row = self._jobs.get(job_id)
            return None if row is None else bytes(row.payload)

    def job_find(self, params: FindParams) -> list[JobSummary]:
        """Jobs matching the filters, newest (highest id) first."""
        with self._lock:
            rows = sorted(matching(self._jobs.rows.values(), params), key=lambda r: -r.id)
            return [row.summary() for row in page(rows, params)]

    def job_wait(self, job_id: str, timeout: float | None) -> JobSummary:
        """Block until the job is terminal and return it; ``LookupError`` when it does not
        exist or is deleted meanwhile, ``TimeoutError`` past ``timeout`` seconds."""
        return wait_for_job(self._jobs, self._done, job_id, timeout)

    def job_count_by_status(self) -> dict[JobStatus, int]:
        """Counts of every status (0 when none), WAITING included."""
        with self._lock:
            counts = dict.fromkeys(JobStatus, 0)
            for row in self._jobs.rows.values():
                counts[row.shown_status] += 1
            return counts

    def job_stats(self) -> dict[str, int]:
        """pending (due now), scheduled (future), running, succeeded, failed, waiting."""
        with self._lock:
            return admin.stats(self._jobs, self._read_clock())

    def job_stats_by_type(self) -> dict[str, dict[str, int]]:
        """``job_stats`` buckets per job type."""
        with self._lock:
            return admin.stats_by_type(self._jobs, self._read_clock())

    def job_oldest_due_age(self) -> float | None:
        """Seconds the oldest due PENDING job has waited; None when nothing is due."""
        with self._lock:
            return admin.oldest_due_age(self._jobs, self._read_clock())

    def job_cancel(self, selector: CancelFilter, reason: str | None) -> list[CancelledJob]:
        """Delete matching pending/running jobs; announce the running ones to listeners."""
        del reason  # nothing stores it; the Queue passes it to observers and workers
        with self._lock:
            cancelled = admin.cancel(self._jobs, selector)
            aborted = tuple(c.id for c in cancelled if c.was_running)
            if aborted:
                self._publish(Notification(kind="cancel", items=aborted))
            self._settle(self._read_clock())
            return cancelled

    def job_retry_failed(self, params: FindParams) -> int:
        """FAILED -> PENDING due now, attempts reset; ``params.limit=None`` means all.

        A keyed dead letter stays FAILED when a PENDING job already holds its key (that job
        supersedes it), and among dead letters of one key only the newest is revived: one
        PENDING job per key. Matches are taken oldest first, then ``skip`` and ``limit``.
        """
        with self._lock:
            now = self._read_clock()
            revived = admin.retry_failed(self._jobs, params, now)
            self._graph.rearm(self._jobs, revived, now)
            return len(revived)

    def job_prune(
        self,
        statuses: Sequence[JobStatus],
        *,
        before: datetime | None,
        age: float | None,
        limit: int | None = None,
    ) -> int:
        """Delete rows in ``statuses`` that finished before the cut-off, oldest first; a
        finished job whose children still wait is kept. Then the graph's records of jobs
        gone (nodes, edges, workflows none of whose jobs is left) are dropped."""
        with self._lock:
            now = self._read_clock()
            if before is not None:
                cutoff = before
            elif age is not None:
                cutoff = now - timedelta(seconds=age)
            else:
                raise ValueError("job_prune needs a cut-off: before= or age=")
            graph = self._graph
            pruned = admin.prune(
                self._jobs, statuses, cutoff, limit,
                keep=lambda row: graph.has_waiting_child(self._jobs, row.id),
            )
            graph.forget(self._jobs, cutoff)
            return pruned

    def history_upkeep(self, days_ahead: int = 3, legacy_limit: int = 5_000) -> HistoryUpkeep:
        """Nothing to keep: the in-memory store's history is its dict (and its counts are
        counted)."""
        del days_ahead, legacy_limit
        return HistoryUpkeep()

    # -- schedules --------------------------------------------------------------------------
    def schedule_upsert(self, params: ScheduleParams) -> None:
        """Create or update a schedule by key (a redeclaration keeps its pending tick)."""
        with self._lock:
            self._schedules.upsert(params, self._read_clock())

    def schedule_delete(self, key: str) -> bool:
        """Remove a schedule; True when it existed."""
        with self._lock:
            return self._schedules.delete(key)

    def schedule_list(self) -> list[ScheduleSummary]:
        """Every schedule, by key."""
        with self._lock:
            return self._schedules.summaries()

    def schedule_pause(self, key: str) -> bool:
        """Pause a schedule: no tick fires until it is resumed; False: unknown key."""
        with self._lock:
            return self._schedules.pause(key, self._read_clock())

    def schedule_resume(self, key: str, next_tick: NextTick) -> bool:
        """Resume a paused schedule, a tick missed during the pause replaced by
        ``next_tick``'s (the first after now); False: unknown key."""
        with self._lock:
            return self._schedules.resume(key, next_tick, self._read_clock())

    def schedule_run_now(self, key: str, default_max_attempts: int | None = 3) -> str | None:
        """Enqueue one job of the schedule now, as a tick would (paused or not); its id,
        or None for an unknown key. A schedule without a budget of its own gives the job
        ``default_max_attempts``."""
        with self._lock:
            schedule = self._schedules.get(key)
            if schedule is None:
                return None
            now = self._read_clock()
            row = self._new_row(
                schedule.type,
                schedule.payload,
                schedule.scope,
                schedule.priority,
                now,
                _budget(schedule.max_attempts, default_max_attempts),
                None,
                now,
            )
            row.schedule_key = schedule.key
            self._jobs.insert(row)
            self._schedules.ran_now(schedule, row.id, now)
            self._announce_due([row], now)
            return str(row.id)

    def schedule_fire_due(
        self, next_tick: NextTick, limit: int = 100, default_max_attempts: int | None = 3
    ) -> list[str]:
        """Enqueue one job per due schedule and advance it; returns the new job ids.
        A schedule without a budget of its own gives its job ``default_max_attempts``.

        Each job's ``run_at`` is the tick it was fired for (at or before now, so due at once).
        ``next_tick`` returning None leaves the schedule waiting until the job it produced
        finishes, after which a pass sets its next run to that finish time plus ``every``
        (or to now, when the job was deleted). A schedule whose ``next_tick`` raises is
        logged and skipped (no job), like on PostgreSQL.
        """
        with self._lock:
            now = self._read_clock()
            self._schedules.resume_finished(self._jobs, now)
            created: list[JobRow] = []
            for schedule in self._schedules.due(now, limit):
                due = self._schedules.tick(schedule)
                try:
                    following = next_tick(due, now)
                except Exception:  # noqa: BLE001 - one bad schedule must not stop the rest
                    log.warning("schedule_next_tick_failed", key=schedule.key, type=schedule.type)
                    continue
                row = self._new_row(
                    schedule.type,
                    schedule.payload,
                    schedule.scope,
                    schedule.priority,
                    due.next_run_at,  # the job's run_at is the tick it stands for
                    _budget(schedule.max_attempts, default_max_attempts),
                    None,
                    now,
                )
                row.schedule_key = schedule.key
                self._jobs.insert(row)
                created.append(row)
                self._schedules.advance(schedule, row.id, following, now)
            self._announce_due(created, now)
            return [str(row.id) for row in created]


def _budget(own: int | None, default: int | None) -> int | None:
    """A scheduled job's budget: the schedule's own, else (NO_BUDGET) the default."""
    return default if own == NO_BUDGET else own


__all__ = ["Clock", "InMemoryStore"]


def _starts(
    items: Sequence[LeaseRef | RetryItem | FailItem],
    started: Sequence[float | None] | None,
) -> dict[str, float | None]:
    """Each item's handler start (seconds before now) by job id; {} when none are given."""
    if started is None:
        return {}
    return {item.id: ago for item, ago in zip(items, started, strict=False)}


def _stamp_start(row: JobRow, starts: dict[str, float | None], now: datetime) -> None:
    """Write the handler's start to a held row that has none (``mark_jobs_started`` and the
    finishing functions of 0015): its own start wins."""
    if row.started_at is None:
        ago = starts.get(str(row.id))
        if ago is not None:
            row.started_at = now - timedelta(seconds=ago)
