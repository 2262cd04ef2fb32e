"""Row types of the in-memory store: a job, a schedule, a rate budget, a listener.

Private to :mod:`golemq_pg.store.memory`. The fields mirror the columns of
``sql/migrations/0001_initial.sql`` so the two stores can be compared column by column.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import orjson

from golemq_pg._errortext import bounded_traceback
from golemq_pg._types import AttemptError, JobStatus, JobSummary, ScheduleSummary, Scope
from golemq_pg.store.port import HISTORY_LIMIT, CancelFilter, FindParams, Notification

Progress = float | dict[str, Any]


def copy_progress(progress: Progress | None) -> Progress | None:
    """A detached copy of a progress value, round-tripped through JSON as jsonb would do."""
    if progress is None:
        return None
    value = orjson.loads(orjson.dumps(progress))
    if isinstance(value, dict):
        return value
    return float(value)


def copy_trace(context: Mapping[str, str] | None) -> dict[str, str] | None:
    """A trace context as the row keeps it: its own copy (None: the add was not traced)."""
    return None if context is None else dict(context)


@dataclass(slots=True)
class JobRow:
    """One job, as the ``jobs`` table stores it (the id is an int; the port shows a str)."""

    id: int
    type: str
    payload: bytes
    scope: Scope | None
    status: JobStatus
    priority: int
    run_at: datetime
    attempts: int
    max_attempts: int | None  # None: unlimited
    dedupe_key: str | None
    created_at: datetime
    updated_at: datetime
    last_error: str | None = None
    lease_owner: str | None = None
    lease_token: int = 0
    lease_expires_at: datetime | None = None
    schedule_key: str | None = None
    progress: Progress | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    #: The handler's return value, encoded (as the jsonb column holds it).
    result: bytes | None = None
    #: The failed attempts, oldest first, at most port.HISTORY_LIMIT.
    errors: list[AttemptError] = field(default_factory=list)
    tags: tuple[str, ...] = ()
    #: The add's trace context (the jsonb column's object), None when it was not traced.
    trace_context: dict[str, str] | None = None
    #: Durable steps (``job_steps`` on PostgreSQL): name -> the value's JSON encoding. On
    #: the row, so they go wherever the row goes and vanish with it.
    steps: dict[str, bytes] = field(default_factory=dict)

    def record_attempt(
        self, error: str | None, worker_id: str | None, now: datetime,
        traceback: str | None = None,
    ) -> None:
        """Append the failed attempt ``attempts`` to the history, keeping the newest
        :data:`~golemq_pg.store.port.HISTORY_LIMIT` (``append_attempt_error`` in 0002, 0010
        and 0012: with the attempt's start), its traceback bounded as the PostgreSQL store
        bounds it."""
        self.errors.append(
            AttemptError(
                self.attempts, now, error or "", worker_id, bounded_traceback(traceback),
                self.started_at,
            )
        )
        if len(self.errors) > HISTORY_LIMIT:
            del self.errors[: len(self.errors) - HISTORY_LIMIT]

    @property
    def shown_status(self) -> JobStatus:
        """The status readers report: a leased row whose handler has not started (no
        ``started_at``: held in a worker's buffer) is PENDING, as on PostgreSQL."""
        if self.status is JobStatus.RUNNING and self.started_at is None:
            return JobStatus.PENDING
        return self.status

    def is_live(self, now: datetime) -> bool:
        """Running under a lease that has not expired: the only kind of row a guard sees."""
        return (
            self.status is JobStatus.RUNNING
            and self.lease_expires_at is not None
            and self.lease_expires_at > now
        )

    def holds(self, owner: str, token: int) -> bool:
        """The fencing predicate every lease write uses."""
        return (
            self.status is JobStatus.RUNNING
            and self.lease_owner == owner
            and self.lease_token == token
        )

    def summary(self) -> JobSummary:
        """A detached, read-only snapshot."""
        return JobSummary(
            id=str(self.id),
            type=self.type,
            scope=self.scope,
            status=self.shown_status,
            attempts=self.attempts,
            max_attempts=self.max_attempts,
            last_error=self.last_error,
            priority=self.priority,
            progress=copy_progress(self.progress),
            run_at=self.run_at,
            created_at=self.created_at,
            updated_at=self.updated_at,
            started_at=self.started_at,
            finished_at=self.finished_at,
            result=None if self.result is None else orjson.loads(self.result),
            errors=tuple(self.errors),
            tags=self.tags,
            steps={name: orjson.loads(value) for name, value in self.steps.items()},
        )


@dataclass(slots=True)
class ScheduleRow:
    """One recurring schedule, as the ``schedules`` table stores it."""

    key: str
    type: str
    payload: bytes
    scope: Scope | None
    priority: int
    max_attempts: int | None  # None: unlimited; NO_BUDGET (0): the enqueuer's default
    cron: str | None
    every_seconds: float | None
    timezone: str
    repeat_from: str
    next_run_at: datetime | None
    created_at: datetime
    updated_at: datetime
    last_run_at: datetime | None = None
    last_job_id: int | None = None
    paused_at: datetime | None = None

    def summary(self) -> ScheduleSummary:
        """A read-only snapshot."""
        return ScheduleSummary(
            key=self.key,
            type=self.type,
            cron=self.cron,
            every=None if self.every_seconds is None else timedelta(seconds=self.every_seconds),
            timezone=self.timezone,
            repeat_from=self.repeat_from,
            next_run_at=self.next_run_at,
            last_run_at=self.last_run_at,
            paused=self.paused_at is not None,
        )


@dataclass(slots=True)
class RateBudget:
    """A resource pool's fixed-window rate counter; like the table row it outlives jobs."""

    window_start: datetime
    spent: int = 0


class MemoryListener:
    """An in-process wake-up source: every notification the store publishes, in order.

    It waits on the store's condition variable, so a ``wait`` returns as soon as an enqueue
    or a cancel is published, and every open listener receives every notification.
    """

    def __init__(self, condition: threading.Condition) -> None:
        self._condition = condition
        self._inbox: list[Notification] = []
        self._closed = False

    def deliver(self, notification: Notification) -> None:
        """Queue a notification (called with the store's lock held)."""
        if not self._closed:
            self._inbox.append(notification)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def wait(self, timeout: float) -> list[Notification]:
        """Block up to ``timeout`` seconds for notifications; return (and forget) them."""
        with self._condition:
            if not self._inbox and not self._closed:
                self._condition.wait_for(lambda: bool(self._inbox) or self._closed, timeout)
            arrived, self._inbox = self._inbox, []
            return arrived

    def close(self) -> None:
        """Stop receiving; a blocked ``wait`` returns at once."""
        with self._condition:
            self._closed = True
            self._inbox.clear()
            self._condition.notify_all()


class JobTable:
    """The jobs "table" with the indexes the verbs need, kept consistent in one place.

    ``pending``, ``running`` and ``waiting`` mirror the partial indexes of the schema;
    ``pending_keys`` mirrors the unique index ``jobs_dedupe_pending_uq`` (one PENDING row per
    type and key), ``waiting_keys`` ``jobs_dedupe_waiting_uq`` (one WAITING row per key).
    """

    def __init__(self) -> None:
        #: Called (with the store's lock held) whenever a row finishes or is deleted: the
        #: store wakes its ``job_wait`` callers with it. Hooked here, where rows change, so
        #: that no verb finishing or deleting a row can forget it.
        self.on_done: Callable[[], None] = _nothing
        #: Called (lock held) with a row and its outcome whenever it leaves the live states
        #: (WAITING, PENDING, RUNNING): SUCCEEDED / FAILED when it finishes, None when it is
        #: deleted while live (cancelled, superseded). The dependency graph settles the
        #: row's children from it, as the settle trigger on ``jobs`` (0016, 0020) does.
        self.on_leave: Callable[[JobRow, JobStatus | None], None] = _left
        self.rows: dict[int, JobRow] = {}
        self.pending: dict[int, JobRow] = {}
        self.running: dict[int, JobRow] = {}
        self.waiting: dict[int, JobRow] = {}
        self.pending_keys: dict[tuple[str, str], JobRow] = {}
        self.waiting_keys: dict[tuple[str, str], JobRow] = {}
        self._last_id = 0

    def next_id(self) -> int:
        """The next identity value (ids only grow, like ``GENERATED ... AS IDENTITY``)."""
        self._last_id += 1
        return self._last_id

    def get(self, job_id: str) -> JobRow | None:
        """The row with this port-level (string) id, or None for an unknown or malformed id."""
        try:
            return self.rows.get(int(job_id))
        except (TypeError, ValueError):
            return None

    def insert(self, row: JobRow) -> None:
        """Add a new row (the caller has already checked the dedupe rule)."""
        self.rows[row.id] = row
        self._index(row)

    def set_status(self, row: JobRow, status: JobStatus) -> None:
        """Move a row to ``status``, keeping every index in step."""
        self._unindex(row)
        row.status = status
        self._index(row)

    def delete(self, row: JobRow) -> None:
        """Remove a row (one deleted while live is cancelled: ``on_leave`` is told)."""
        live = row.status in LIVE_STATUSES
        self._unindex(row)
        del self.rows[row.id]
        self.on_done()
        if live:
            self.on_leave(row, None)

    def discard(self, row: JobRow) -> None:
        """Take back a row this verb inserted (a workflow that failed half-way): no hook is
        told, as a rolled back insert tells nobody."""
        self._unindex(row)
        self.rows.pop(row.id, None)

    def finish(self, row: JobRow, status: JobStatus, now: datetime) -> None:
        """RUNNING (or WAITING) -> SUCCEEDED / FAILED: the lease is cleared."""
        _clear_lease(row)
        self.set_status(row, status)
        row.finished_at = now
        row.updated_at = now
        self.on_done()
        self.on_leave(row, status)

    def back_to_pending(self, row: JobRow, run_at: datetime, now: datetime) -> None:
        """RUNNING -> PENDING at ``run_at``: the lease is cleared.

        A job that returns to the line while a newer PENDING job holds its dedupe key (a
        "replace" enqueued while it ran) is superseded by that job, which carries the newer
        payload: it is deleted rather than run again with the stale one. This is also what
        the unique index on pending keys leaves as the only consistent outcome.
        """
        _clear_lease(row)
        if row.dedupe_key is not None and self.pending_with_key(row.type, row.dedupe_key):
            self.delete(row)
            return
        self.set_status(row, JobStatus.PENDING)
        row.run_at = run_at
        row.updated_at = now

    def pending_with_key(self, job_type: str, key: str) -> JobRow | None:
        """The PENDING row holding ``(type, dedupe_key)``, if any."""
        return self.pending_keys.get((job_type, key))

    def waiting_with_key(self, job_type: str, key: str) -> JobRow | None:
        """The WAITING row holding ``(type, dedupe_key)``, if any."""
        return self.waiting_keys.get((job_type, key))

    def live_holder(self, job_type: str, key: str) -> JobRow | None:
        """The PENDING, else the WAITING row holding ``(type, dedupe_key)``, if any."""
        return self.pending_keys.get((job_type, key)) or self.waiting_keys.get((job_type, key))

    def running_with_key(self, job_type: str, key: str) -> bool:
        """Whether a RUNNING row (live lease or not) holds ``(type, dedupe_key)``."""
        return any(r.type == job_type and r.dedupe_key == key for r in self.running.values())

    def _index(self, row: JobRow) -> None:
        if row.status is JobStatus.PENDING:
            self.pending[row.id] = row
            if row.dedupe_key is not None:
                self.pending_keys[(row.type, row.dedupe_key)] = row
        elif row.status is JobStatus.RUNNING:
            self.running[row.id] = row
        elif row.status is JobStatus.WAITING:
            self.waiting[row.id] = row
            if row.dedupe_key is not None:
                self.waiting_keys.setdefault((row.type, row.dedupe_key), row)

    def _unindex(self, row: JobRow) -> None:
        if row.status is JobStatus.PENDING:
            self.pending.pop(row.id, None)
            if row.dedupe_key is not None:
                self.pending_keys.pop((row.type, row.dedupe_key), None)
        elif row.status is JobStatus.RUNNING:
            self.running.pop(row.id, None)
        elif row.status is JobStatus.WAITING:
            self.waiting.pop(row.id, None)
            key = (row.type, row.dedupe_key or "")
            if row.dedupe_key is not None and self.waiting_keys.get(key) is row:
                del self.waiting_keys[key]


def _nothing() -> None:
    """The default ``JobTable.on_done``: nobody to tell."""


def _left(row: JobRow, outcome: JobStatus | None) -> None:
    """The default ``JobTable.on_leave``: no graph to settle."""
    del row, outcome


#: The statuses of a row that has not finished: deleting one cancels it.
LIVE_STATUSES = frozenset({JobStatus.WAITING, JobStatus.PENDING, JobStatus.RUNNING})


def _clear_lease(row: JobRow) -> None:
    row.lease_owner = None
    row.lease_expires_at = None


def matching(rows: Iterable[JobRow], params: FindParams) -> list[JobRow]:
    """The rows that pass ``params``' type, status, scope and tag filters (no paging)."""
    types = None if params.types is None else set(params.types)
    statuses = None if params.statuses is None else {JobStatus(s) for s in params.statuses}
    return [
        row
        for row in rows
        if (types is None or row.type in types)
        and (statuses is None or row.shown_status in statuses)
        and (
            params.scope_type is None
            or (row.scope is not None and row.scope.type == params.scope_type)
        )
        and (params.scope_id is None or (row.scope is not None and row.scope.id == params.scope_id))
        and (params.tags is None or set(params.tags).issubset(row.tags))
    ]


def page(rows: list[JobRow], params: FindParams) -> list[JobRow]:
    """``params.skip`` then ``params.limit`` (None: no limit) applied to ordered rows."""
    start = max(params.skip or 0, 0)
    if params.limit is None:
        return rows[start:]
    return rows[start : start + max(params.limit, 0)]


def cancel_selects(row: JobRow, selector: CancelFilter) -> bool:
    """Whether ``selector`` picks this row. Only live work (waiting, pending, running) is
    cancelled; a WAITING row counts as PENDING (``pending_only`` too)."""
    if row.status not in LIVE_STATUSES:
        return False
    if selector.pending_only and row.status is JobStatus.RUNNING:
        return False
    if selector.job_ids:
        return True  # the caller looked the ids up
    if selector.scope is not None:
        return row.scope == selector.scope
    if selector.type is not None and selector.dedupe_keys:
        return row.type == selector.type and row.dedupe_key in selector.dedupe_keys
    return False
