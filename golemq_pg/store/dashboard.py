"""The dashboard's reads (and its one bulk write): port verbs both stores implement.

``golemq_pg.web`` needs views the other verbs lack: throughput per minute, dead letters
grouped by (type, error), keyset pages of jobs newest first, per-type counts that stay cheap
on a table of millions of rows, resource-pool state. Every one is bounded: counts stop at a
cap (and say so), pages scan a bounded id range, groups look at a bounded number of the
newest dead letters. The PostgreSQL verbs also run under their own short
``statement_timeout`` (:data:`DASHBOARD_STATEMENT_TIMEOUT`), whatever the store's is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from golemq_pg._types import JobStatus, JobSummary, Resource

#: Seconds a dashboard read may run on PostgreSQL before the server cancels it.
DASHBOARD_STATEMENT_TIMEOUT = 5.0
#: Counts stop here (a bucket at the cap is shown as "cap or more").
COUNT_CAP = 10_000
#: How many ids below the cursor one jobs page looks at, at most (the rest: "older").
PAGE_SCAN_WINDOW = 100_000
#: How many ids one page of a search (``JobQuery.search``) looks at, at most.
SEARCH_SCAN_WINDOW = 50_000
#: The most jobs one bulk action of the dashboard selects by filter (``all=1``).
BULK_CAP = 1_000


@dataclass(frozen=True, slots=True)
class TypeCounts:
    """One job type on the overview. Counts are capped at the overview's ``cap``."""

    type: str
    due: int = 0
    scheduled: int = 0
    running: int = 0
    failed: int = 0
    #: Seconds since its oldest due PENDING job became due; None when nothing is due.
    oldest_due_age: float | None = None


@dataclass(frozen=True, slots=True)
class Overview:
    """Counts by type (types with live or failed work) and by status.

    ``by_status`` has every status; succeeded is the count finished in the last hour
    (finished rows may be kept for ever: counting them all would scan the table); waiting
    (jobs held until their parents finish) sums each type's count capped like the others.
    ``estimated_rows`` is the planner's estimate of the table's size; ``cap`` is where
    every count stops.
    """

    types: tuple[TypeCounts, ...]
    by_status: Mapping[JobStatus, int]
    oldest_due_age: float | None
    estimated_rows: int
    cap: int


@dataclass(frozen=True, slots=True)
class MinuteCount:
    """Jobs that finished in one minute (``at`` is its start, UTC)."""

    at: datetime
    succeeded: int
    failed: int


@dataclass(frozen=True, slots=True)
class TypeFinishes:
    """Jobs of one type that finished since the start of today (UTC) and are still kept."""

    type: str
    succeeded: int
    failed: int


@dataclass(frozen=True, slots=True)
class JobQuery:
    """A page of the jobs list, newest first. ``after``: jobs with smaller ids than it (the
    older page); ``before``: jobs with larger ids (the newer page, still shown newest
    first); neither starts from the newest. Filters that are None filter nothing.

    ``scheduled``: only PENDING jobs whose ``run_at`` is in the future. ``search``: a
    case-insensitive substring of the type or of ``last_error``; a search that is a job id
    also finds that job (on the first page), wherever its id lies.
    """

    type: str | None = None
    status: JobStatus | None = None
    scope_type: str | None = None
    scope_id: str | None = None
    tag: str | None = None
    job_id: str | None = None
    after: str | None = None
    limit: int = 50
    window: int = PAGE_SCAN_WINDOW
    before: str | None = None
    scheduled: bool = False
    search: str | None = None


@dataclass(frozen=True, slots=True)
class JobPage:
    """One page: ``jobs`` newest first, ``next_after`` (the ``after`` cursor of the older
    page, or None at the end) and ``prev_before`` (the ``before`` cursor of the newer page,
    or None at the newest). A page may hold fewer than ``limit`` jobs with a cursor still set
    when its scan window ran out: more matches may exist past it. ``scanned``: the lowest
    and highest id the page examined (None for a lookup by id)."""

    jobs: tuple[JobSummary, ...]
    next_after: str | None
    prev_before: str | None = None
    scanned: tuple[str, str] | None = None


@dataclass(frozen=True, slots=True)
class DeadLetterGroup:
    """FAILED jobs of one type with one ``last_error`` (None: no error text)."""

    type: str
    error: str | None
    count: int
    newest_id: str
    last_failed_at: datetime | None


@dataclass(frozen=True, slots=True)
class DeadLetters:
    """Groups, largest first. ``capped``: some type has more than ``cap`` dead letters and
    only its newest ``cap`` were grouped."""

    groups: tuple[DeadLetterGroup, ...]
    capped: bool
    cap: int


@dataclass(frozen=True, slots=True)
class PoolState:
    """A resource pool as far as the database knows it.

    ``spent``: rate cost charged in the current window (0 once the window has elapsed),
    ``window_start`` None when nothing was ever charged; ``in_use``: summed concurrency
    cost of its live-leased member jobs (None when the caller gave no membership).
    """

    name: str
    spent: int
    window_start: datetime | None
    in_use: int | None = None
    concurrency: int | None = None
    rate_per_minute: int | None = None
    types: tuple[str, ...] = field(default_factory=tuple)


class DashboardReads(Protocol):
    """The verbs ``golemq_pg.web`` reads the queue with (part of the ``JobStore`` port)."""

    def dashboard_overview(self, cap: int = COUNT_CAP) -> Overview:
        """Per-type capped counts of due, scheduled, running and failed jobs with the
        oldest due age; per-status totals (succeeded: last hour)."""

    def dashboard_throughput(self, minutes: int = 60) -> list[MinuteCount]:
        """Jobs finished per minute over the last ``minutes`` minutes, oldest first, one
        entry per minute (zeros included), the current minute last."""

    def dashboard_type_finishes(self, limit: int = 10) -> list[TypeFinishes]:
        """The ``limit`` types with the most jobs finished today (UTC, still kept), most
        first: exact counts from the history's maintained per-day counts (no row scan)."""

    def dashboard_jobs(self, query: JobQuery) -> JobPage:
        """One keyset page of jobs, newest first (see :class:`JobQuery`)."""

    def dashboard_job_ids(self, query: JobQuery, cap: int = BULK_CAP) -> list[str]:
        """The ids of ``query``'s matches (its cursor and page size ignored) among the
        newest ``query.window`` ids, newest first, at most ``cap``: what a bulk action
        selected by filter acts on."""

    def dashboard_dead_letters(self, cap: int = COUNT_CAP) -> DeadLetters:
        """FAILED jobs grouped by (type, last_error), each type's newest ``cap`` at most."""

    def dashboard_retry_dead_letters(self, job_type: str, error: str | None) -> int:
        """Every FAILED job of ``job_type`` whose ``last_error`` is ``error`` -> PENDING due
        now, attempts reset (as ``job_retry_failed``); returns how many."""

    def dashboard_pools(self, resources: Mapping[str, Resource]) -> list[PoolState]:
        """Every pool the database has a rate budget for, plus those in ``resources``
        (whose membership gives ``in_use``), by name."""


def window_spent(
    spent: int, window_start: datetime | None, now: datetime, rate_window: float
) -> int:
    """A budget's spend in the current window: 0 once its window has elapsed."""
    if window_start is None or (now - window_start).total_seconds() >= rate_window:
        return 0
    return spent


def member_costs(resources: Mapping[str, Resource]) -> list[tuple[str, str, int]]:
    """(pool, type, concurrency cost) for every member type of every pool."""
    return [
        (name, job_type, pool.cost_of(job_type))
        for name, pool in sorted(resources.items())
        for job_type in pool.types
    ]


MAX_JOB_ID = 2**63 - 1


def page_window(query: JobQuery, top: int) -> tuple[int, int, bool]:
    """The id range [floor, last] one page of ``query`` examines, and whether it is read
    upwards (a ``before`` page). ``top`` is the newest id + 1. Both stores use it."""
    limit = min(max(int(query.limit), 1), 500)
    window = max(int(query.window), limit)
    before_id, after_id = cursor_id(query.before), cursor_id(query.after)
    if before_id is not None:
        start = min(before_id + 1, MAX_JOB_ID)
        return start, min(start + window - 1, max(top - 1, start)), True
    before = top if after_id is None else min(after_id, top)
    return max(before - window, 0), before - 1, False


def cursor_id(value: str | None) -> int | None:
    """A page cursor as a number; None for none or one that is not an id (no cursor)."""
    if value is None or not (value.isascii() and value.isdigit()) or len(value) > 19:
        return None
    number = int(value)
    return number if number <= MAX_JOB_ID else None


def page_cursors(
    query: JobQuery, jobs: Sequence[JobSummary], floor: int, last: int, top: int,
    older_exist: bool,
) -> JobPage:
    """The page of ``jobs`` (newest first) found in [floor, last], with its cursors:
    ``older_exist`` says whether any id lies below ``floor``; ``top`` is the newest id + 1."""
    limit = min(max(int(query.limit), 1), 500)
    full = len(jobs) == limit
    scanned = (str(floor), str(max(last, floor)))
    if cursor_id(query.before) is not None:
        newer = (jobs[0].id if full else str(last)) if last < top - 1 or full else None
        return JobPage(tuple(jobs), str(floor) if older_exist else None, newer, scanned)
    older = jobs[-1].id if full else (str(floor) if older_exist else None)
    newer = str(last) if cursor_id(query.after) is not None and last < top - 1 else None
    return JobPage(tuple(jobs), older, newer, scanned)


def sorted_groups(groups: Sequence[DeadLetterGroup]) -> tuple[DeadLetterGroup, ...]:
    """Dead-letter groups largest first, then by type and newest id (both stores alike)."""
    return tuple(sorted(groups, key=lambda g: (-g.count, g.type, -int(g.newest_id))))
