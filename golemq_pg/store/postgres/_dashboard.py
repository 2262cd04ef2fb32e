"""The dashboard verbs of PostgresStore (statements in ``sql/queries/dashboard.sql``).

Each read runs in one transaction that first lowers ``statement_timeout`` for itself only
(``SET LOCAL`` through ``set_config``): a dashboard page can never hold a connection or a
snapshot for longer than :data:`~golemq_pg.store.dashboard.DASHBOARD_STATEMENT_TIMEOUT`,
whatever the store's own timeout is (the pool's connections are shared with a worker or an
application when the dashboard is mounted in one).

Every statement is planned for its own parameters (``prepare=False``): their filters are
"NULL: no filter", so a generic plan cannot know which filters apply nor which index pays,
and once psycopg prepared them PostgreSQL's switch to a generic plan made a jobs page of a
big table up to ten times slower; planning one costs about a millisecond.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import psycopg

from golemq_pg._types import JobStatus, Resource
from golemq_pg.store.dashboard import (
    COUNT_CAP,
    DASHBOARD_STATEMENT_TIMEOUT,
    DeadLetterGroup,
    DeadLetters,
    JobPage,
    JobQuery,
    MinuteCount,
    Overview,
    PoolState,
    TypeCounts,
    member_costs,
    sorted_groups,
)
from golemq_pg.store.postgres import _rows as rows
from golemq_pg.store.postgres._connections import StoreConnections


class DashboardVerbs(StoreConnections):
    """``dashboard_overview``, ``dashboard_throughput``, ``dashboard_jobs``,
    ``dashboard_dead_letters``, ``dashboard_retry_dead_letters``, ``dashboard_pools``."""

    @contextmanager
    def _dashboard(self) -> Iterator[psycopg.Connection[Any]]:
        """A transaction whose statements stop after the dashboard's timeout."""
        with self._transaction() as conn:
            timeout_ms = int(DASHBOARD_STATEMENT_TIMEOUT * 1000)
            _run(conn, self._q["dashboard_timeout"], {"timeout_ms": timeout_ms})
            yield conn

    def dashboard_overview(self, cap: int = COUNT_CAP) -> Overview:
        """Per-type capped counts and per-status totals (succeeded: the last hour)."""
        cap = max(int(cap), 1)
        with self._dashboard() as conn:
            found = _run(conn, self._q["dashboard_type_counts"], {"cap": cap}).fetchall()
            hour = _run(conn, self._q["dashboard_throughput"], {"minutes": 60}).fetchall()
            schema = {"schema": self._shared.schema}
            estimate = _run(conn, self._q["dashboard_estimated_rows"], schema).fetchone()
        types = tuple(
            TypeCounts(
                type=str(t), due=int(d), scheduled=int(s), running=int(r), failed=int(f),
                oldest_due_age=None if age is None else max(float(age), 0.0),
            )
            for t, d, s, r, f, age in found
        )
        return _overview(types, sum(int(r[1]) for r in hour), estimate, cap)

    def dashboard_throughput(self, minutes: int = 60) -> list[MinuteCount]:
        """Jobs finished per minute over the last ``minutes`` minutes, oldest first."""
        minutes = min(max(int(minutes), 1), 24 * 60)
        with self._dashboard() as conn:
            found = _run(conn, self._q["dashboard_throughput"], {"minutes": minutes})
            return [MinuteCount(at, int(ok), int(bad)) for at, ok, bad in found.fetchall()]

    def dashboard_jobs(self, query: JobQuery) -> JobPage:
        """One keyset page of jobs, newest first, scanning at most ``query.window`` ids."""
        limit = min(max(int(query.limit), 1), 500)
        window = max(int(query.window), limit)
        args: dict[str, Any] = {
            "type": query.type,
            "status": None if query.status is None else JobStatus(query.status).value,
            "scope_type": query.scope_type,
            "scope_id": query.scope_id,
            "tag": query.tag,
            "limit": limit,
        }
        with self._dashboard() as conn:
            if query.job_id is not None:
                number = rows.int_id(query.job_id)
                if number is None:
                    return JobPage((), None)
                args.update(before=number + 1, floor=number)
                found = _run(conn, self._q["dashboard_jobs_page"], args).fetchall()
                return JobPage(tuple(rows.summary(r) for r in found), None)
            before = None if query.after is None else rows.int_id(query.after)
            top, _ = _run(conn, self._q["dashboard_jobs_top"], {"floor": 0}).fetchone() or (1, 0)
            before = int(top) if before is None else min(before, int(top))
            floor = max(before - window, 0)
            args.update(before=before, floor=floor)
            found = _run(conn, self._q["dashboard_jobs_page"], args).fetchall()
            jobs = tuple(rows.summary(r) for r in found)
            if len(jobs) == limit:
                return JobPage(jobs, jobs[-1].id)
            below = _run(conn, self._q["dashboard_jobs_top"], {"floor": floor}).fetchone()
            older = bool(below[1]) if below is not None else False
        return JobPage(jobs, str(floor) if older else None)

    def dashboard_dead_letters(self, cap: int = COUNT_CAP) -> DeadLetters:
        """FAILED jobs grouped by (type, last_error), each type's newest ``cap`` at most."""
        cap = max(int(cap), 1)
        with self._dashboard() as conn:
            found = _run(conn, self._q["dashboard_dead_letters"], {"cap": cap}).fetchall()
        groups = [
            DeadLetterGroup(str(t), err, int(n), str(newest), at)
            for t, err, n, newest, at, _ in found
            if int(n) > 0
        ]
        return DeadLetters(sorted_groups(groups), any(bool(r[5]) for r in found), cap)

    def dashboard_retry_dead_letters(self, job_type: str, error: str | None) -> int:
        """Every FAILED job of ``job_type`` with this ``last_error`` -> PENDING due now."""
        found = self._fetch("dashboard_retry_dead_letters", {"type": job_type, "error": error})
        return int(found[0][0])

    def dashboard_pools(self, resources: Mapping[str, Resource]) -> list[PoolState]:
        """Pools with a rate budget or in ``resources``: window spend and in-use cost."""
        members = member_costs(resources)
        args = {
            "member_pools": [m[0] for m in members],
            "member_types": [m[1] for m in members],
            "member_costs": [m[2] for m in members],
            "names": sorted(resources),
            "rate_window": self._shared.claimer.rate_window,
        }
        with self._dashboard() as conn:
            found = _run(conn, self._q["dashboard_pools"], args).fetchall()
        out: list[PoolState] = []
        for name, spent, window_start, in_use in found:
            pool = resources.get(name)
            out.append(
                PoolState(
                    name=name,
                    spent=int(spent or 0),
                    window_start=window_start,
                    in_use=None if pool is None else int(in_use),
                    concurrency=None if pool is None else pool.concurrency,
                    rate_per_minute=None if pool is None else pool.rate_per_minute,
                    types=() if pool is None else tuple(pool.types),
                )
            )
        return out


def _run(
    conn: psycopg.Connection[Any], query: Any, params: dict[str, Any]
) -> psycopg.Cursor[Any]:
    """Execute one dashboard statement, planned for these parameters (never prepared)."""
    return conn.execute(query, params, prepare=False)


def _overview(
    types: tuple[TypeCounts, ...], succeeded_hour: int, estimate: Any, cap: int
) -> Overview:
    by_status = {
        JobStatus.PENDING: sum(t.due + t.scheduled for t in types),
        JobStatus.RUNNING: sum(t.running for t in types),
        JobStatus.SUCCEEDED: succeeded_hour,
        JobStatus.FAILED: sum(t.failed for t in types),
    }
    ages = [t.oldest_due_age for t in types if t.oldest_due_age is not None]
    rows_estimate = int(estimate[0]) if estimate is not None else -1
    return Overview(types, by_status, max(ages) if ages else None, rows_estimate, cap)
