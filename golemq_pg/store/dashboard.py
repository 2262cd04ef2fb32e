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
    (finished rows may be kept for ever: counting them all would scan the table).
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
    """A page of the jobs list, newest first. ``after``: the id the previous page ended at
    (exclusive); None starts from the newest. Filters that are None filter nothing."""

    type: str | None = None
    status: JobStatus | None = None
    scope_type: str | None = None
    scope_id: str | None = None
    tag: str | None = None
    job_id: str | None = None
    after: str | None = None
    limit: int = 50
    window: int = PAGE_SCAN_WINDOW


@dataclass(frozen=True, slots=True)
class JobPage:
    """One page: ``jobs`` newest first, and ``next_after`` (the cursor of the next page, or
    None at the end). A page may hold fewer than ``limit`` jobs with a cursor still set when
    its scan window ran out: older matches may exist below it."""

    jobs: tuple[JobSummary, ...]
    next_after: str | None


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


def sorted_groups(groups: Sequence[DeadLetterGroup]) -> tuple[DeadLetterGroup, ...]:
    """Dead-letter groups largest first, then by type and newest id (both stores alike)."""
    return tuple(sorted(groups, key=lambda g: (-g.count, g.type, -int(g.newest_id))))
