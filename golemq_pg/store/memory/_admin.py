"""Inspection and administration over the in-memory jobs table: stats, cancel, revive, prune.

Private to :mod:`golemq_pg.store.memory`. Plain functions of a :class:`JobTable`, always
called with the store's lock held and the verb's one reading of the clock; the store
publishes whatever notification follows from them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from golemq_pg._types import JobStatus
from golemq_pg.store.memory._graph import revive
from golemq_pg.store.memory._rows import JobRow, JobTable, cancel_selects, matching, page
from golemq_pg.store.port import CancelFilter, CancelledJob, FindParams

#: The buckets of ``job_stats``, in the order the port documents them.
STATS_BUCKETS = ("pending", "scheduled", "running", "succeeded", "failed", "waiting")


def _bucket(row: JobRow, now: datetime) -> str:
    """A row's ``job_stats`` bucket: PENDING splits into due now and scheduled later
    (WAITING is its own bucket: neither)."""
    status = row.shown_status  # claimed, handler not started: PENDING
    if status is JobStatus.PENDING:
        return "pending" if row.run_at <= now else "scheduled"
    return status.value


def stats(table: JobTable, now: datetime) -> dict[str, int]:
    """pending (due now), scheduled (future), running, succeeded, failed, waiting."""
    counts = dict.fromkeys(STATS_BUCKETS, 0)
    for row in table.rows.values():
        counts[_bucket(row, now)] += 1
    return counts


def stats_by_type(table: JobTable, now: datetime) -> dict[str, dict[str, int]]:
    """:func:`stats` per job type (types with no rows are absent)."""
    out: dict[str, dict[str, int]] = {}
    for row in table.rows.values():
        counts = out.setdefault(row.type, dict.fromkeys(STATS_BUCKETS, 0))
        counts[_bucket(row, now)] += 1
    return out


def oldest_due_age(table: JobTable, now: datetime) -> float | None:
    """Seconds the oldest due PENDING job has waited; None when nothing is due."""
    due = [
        row.run_at
        for row in table.rows.values()
        if row.status is JobStatus.PENDING and row.run_at <= now
    ]
    return (now - min(due)).total_seconds() if due else None


def cancel(table: JobTable, selector: CancelFilter) -> list[CancelledJob]:
    """Delete the live rows ``selector`` picks (by id order for ids); returns them."""
    if selector.job_ids:
        found = (table.get(job_id) for job_id in dict.fromkeys(selector.job_ids))
        candidates = sorted((row for row in found if row is not None), key=lambda r: r.id)
    else:
        candidates = list(table.rows.values())
    victims = [row for row in candidates if cancel_selects(row, selector)]
    cancelled = []
    for row in victims:
        was_running = row.status is JobStatus.RUNNING
        cancelled.append(
            CancelledJob(
                id=str(row.id),
                type=row.type,
                scope=row.scope,
                was_running=was_running,
                lease_owner=row.lease_owner if was_running else None,
                attempts=row.attempts,
            )
        )
        table.delete(row)
    return cancelled


def retry_failed(table: JobTable, params: FindParams, now: datetime) -> list[JobRow]:
    """FAILED -> PENDING due ``now``, attempts reset; returns the rows revived.

    A keyed dead letter stays FAILED when a PENDING job already holds its key (that job
    supersedes it), and among dead letters of one key only the newest is revived: one
    PENDING job per key. Matches are taken oldest first, then ``skip`` and ``limit``.
    """
    failed = FindParams(
        types=params.types,
        statuses=(JobStatus.FAILED,),
        scope_type=params.scope_type,
        scope_id=params.scope_id,
        limit=params.limit,
        skip=params.skip,
    )
    rows = sorted(matching(table.rows.values(), failed), key=lambda r: r.id)
    newest_failed: dict[tuple[str, str], int] = {}
    for row in table.rows.values():
        if row.status is JobStatus.FAILED and row.dedupe_key is not None:
            key = (row.type, row.dedupe_key)
            newest_failed[key] = max(newest_failed.get(key, 0), row.id)
    rows = [
        row
        for row in rows
        if row.dedupe_key is None
        or (
            table.pending_with_key(row.type, row.dedupe_key) is None
            and newest_failed[(row.type, row.dedupe_key)] == row.id
        )
    ]
    revived = page(rows, failed)
    for row in revived:
        revive(table, row, now)
    return revived


def prune(
    table: JobTable, statuses: Sequence[JobStatus], cutoff: datetime, limit: int | None,
    keep: Callable[[JobRow], bool],
) -> int:
    """Delete rows in ``statuses`` that finished before ``cutoff``, oldest first, at most
    ``limit`` (None: all), except those ``keep`` names (a parent whose children still
    wait); returns how many."""
    wanted = {JobStatus(s) for s in statuses}
    old = sorted(
        (
            row
            for row in table.rows.values()
            if row.status in wanted and row.finished_at is not None and row.finished_at < cutoff
            and not keep(row)
        ),
        key=lambda r: (r.finished_at, r.id),
    )
    if limit is not None:
        old = old[: max(limit, 0)]
    for row in old:
        table.delete(row)
    return len(old)
