"""The dashboard verbs of both PostgreSQL stores (statements in ``sql/queries/dashboard.sql``),
written as plans (see ``_plans``): ``PostgresStore`` runs them on its connections,
``AsyncPostgresStore`` on its asyncio ones.

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

from collections.abc import Mapping
from typing import Any

from golemq_pg._types import JobStatus, Resource
from golemq_pg.store.dashboard import (
    BULK_CAP,
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
    TypeFinishes,
    member_costs,
    page_cursors,
    page_window,
    sorted_groups,
)
from golemq_pg.store.postgres import _rows as rows
from golemq_pg.store.postgres._connections import StoreConnections, sync_verb
from golemq_pg.store.postgres._plans import Atomic, Plan, PlanContext, Rows


def _read(ctx: PlanContext, name: str, params: Mapping[str, Any]) -> Rows:
    """One dashboard statement, planned for these parameters (never prepared)."""
    return Rows(ctx.queries[name], params, prepare=False)


def _bounded(ctx: PlanContext) -> Rows:
    """The transaction's first statement: the dashboard's short timeout, no JIT."""
    return _read(ctx, "dashboard_timeout", {"timeout_ms": int(DASHBOARD_STATEMENT_TIMEOUT * 1000)})


def dashboard_overview(ctx: PlanContext, cap: int = COUNT_CAP) -> Plan[Overview]:
    """Per-type capped counts and per-status totals (succeeded: the last hour)."""
    cap = max(int(cap), 1)

    def read() -> Plan[Overview]:
        yield _bounded(ctx)
        found = yield _read(ctx, "dashboard_type_counts", {"cap": cap})
        hour = yield _read(ctx, "dashboard_throughput", {"minutes": 60})
        waiting = yield _read(ctx, "dashboard_waiting_count", {"cap": cap})
        estimate = yield _read(ctx, "dashboard_estimated_rows", {"schema": ctx.schema})
        types = tuple(
            TypeCounts(
                type=str(t), due=int(d), scheduled=int(s), running=int(r), failed=int(f),
                oldest_due_age=None if age is None else max(float(age), 0.0),
            )
            for t, d, s, r, f, age in found
        )
        first = estimate[0] if estimate else None
        return _overview(types, sum(int(r[1]) for r in hour), int(waiting[0][0]), first, cap)

    overview: Overview = yield Atomic(read())
    return overview


def dashboard_throughput(ctx: PlanContext, minutes: int = 60) -> Plan[list[MinuteCount]]:
    """Jobs finished per minute over the last ``minutes`` minutes, oldest first."""
    minutes = min(max(int(minutes), 1), 24 * 60)

    def read() -> Plan[list[MinuteCount]]:
        yield _bounded(ctx)
        found = yield _read(ctx, "dashboard_throughput", {"minutes": minutes})
        return [MinuteCount(at, int(ok), int(bad)) for at, ok, bad in found]

    counts: list[MinuteCount] = yield Atomic(read())
    return counts


def dashboard_type_finishes(ctx: PlanContext, limit: int = 10) -> Plan[list[TypeFinishes]]:
    """The types with the most jobs finished today (UTC), from the maintained counts."""
    limit = min(max(int(limit), 1), 100)

    def read() -> Plan[list[TypeFinishes]]:
        yield _bounded(ctx)
        found = yield _read(ctx, "dashboard_type_finishes", {"limit": limit})
        return [TypeFinishes(str(t), int(ok), int(bad)) for t, ok, bad in found]

    counts: list[TypeFinishes] = yield Atomic(read())
    return counts


def _job_filter(query: JobQuery) -> dict[str, Any]:
    """The parameters of ``fragment_dashboard_jobs_filter`` but the id range."""
    return {
        "type": query.type,
        "status": None if query.status is None else JobStatus(query.status).value,
        "scheduled": bool(query.scheduled),
        "scope_type": query.scope_type,
        "scope_id": query.scope_id,
        "tag": query.tag,
        "q": query.search or None,
    }


def dashboard_jobs(ctx: PlanContext, query: JobQuery) -> Plan[JobPage]:
    """One keyset page of jobs, newest first, scanning at most ``query.window`` ids."""
    limit = min(max(int(query.limit), 1), 500)
    args = {**_job_filter(query), "limit": limit}
    if query.job_id is not None:
        number = rows.int_id(query.job_id)
        if number is None:
            return JobPage((), None)
        args.update(last=number, floor=number)

        def one() -> Plan[JobPage]:
            yield _bounded(ctx)
            found = yield _read(ctx, "dashboard_jobs_page", args)
            return JobPage(tuple(rows.summary(r) for r in found), None)

        single: JobPage = yield Atomic(one())
        return single
    exact = _search_id(query)

    def page() -> Plan[JobPage]:
        yield _bounded(ctx)
        top_row = yield _read(ctx, "dashboard_jobs_top", {"floor": 0})
        top = int(top_row[0][0]) if top_row else 1
        floor, last, upwards = page_window(query, top)
        args.update(last=last, floor=floor)
        found = yield _read(ctx, "dashboard_jobs_page_up" if upwards else "dashboard_jobs_page",
                            args)
        jobs = [rows.summary(r) for r in found]
        if upwards:
            jobs.reverse()
        older = False
        if upwards or len(jobs) < limit:
            below = yield _read(ctx, "dashboard_jobs_top", {"floor": floor})
            older = bool(below[0][1]) if below else False
        if exact is not None:
            by_id = yield _read(ctx, "dashboard_jobs_page",
                                {**args, "q": None, "last": exact, "floor": exact})
            jobs = [*(rows.summary(r) for r in by_id if str(r[0]) not in
                      {j.id for j in jobs}), *jobs]
        return page_cursors(query, jobs, floor, last, top, older)

    found_page: JobPage = yield Atomic(page())
    return found_page


def _search_id(query: JobQuery) -> int | None:
    """The job id a search names, looked up on its first page only."""
    if query.search is None or query.after is not None or query.before is not None:
        return None
    text = query.search.strip()
    return rows.int_id(text) if text.isascii() and text.isdigit() else None


def dashboard_job_ids(ctx: PlanContext, query: JobQuery, cap: int = BULK_CAP) -> Plan[list[str]]:
    """The ids of ``query``'s matches among the newest ``query.window`` ids, newest first,
    at most ``cap`` (a search's exact id included)."""
    cap = min(max(int(cap), 1), BULK_CAP)
    args = {**_job_filter(query), "limit": cap}
    exact = _search_id(JobQuery(search=query.search))

    def read() -> Plan[list[str]]:
        yield _bounded(ctx)
        top_row = yield _read(ctx, "dashboard_jobs_top", {"floor": 0})
        top = int(top_row[0][0]) if top_row else 1
        args.update(last=top - 1, floor=max(top - max(int(query.window), 1), 0))
        found = yield _read(ctx, "dashboard_job_ids", args)
        ids = [str(r[0]) for r in found]
        if exact is not None and str(exact) not in ids:
            by_id = yield _read(ctx, "dashboard_job_ids", {**args, "q": None,
                                                           "last": exact, "floor": exact})
            ids = [*(str(r[0]) for r in by_id), *ids][:cap]
        return ids

    ids: list[str] = yield Atomic(read())
    return ids


def dashboard_dead_letters(ctx: PlanContext, cap: int = COUNT_CAP) -> Plan[DeadLetters]:
    """FAILED jobs grouped by (type, last_error), each type's newest ``cap`` at most."""
    cap = max(int(cap), 1)

    def read() -> Plan[list[Any]]:
        yield _bounded(ctx)
        found: list[Any] = yield _read(ctx, "dashboard_dead_letters", {"cap": cap})
        return found

    found: list[Any] = yield Atomic(read())
    groups = [
        DeadLetterGroup(str(t), err, int(n), str(newest), at)
        for t, err, n, newest, at, _ in found
        if int(n) > 0
    ]
    return DeadLetters(sorted_groups(groups), any(bool(r[5]) for r in found), cap)


def dashboard_retry_dead_letters(ctx: PlanContext, job_type: str, error: str | None) -> Plan[int]:
    """Every FAILED job of ``job_type`` with this ``last_error`` -> PENDING due now."""
    found = yield Rows(
        ctx.queries["dashboard_retry_dead_letters"], {"type": job_type, "error": error}
    )
    return int(found[0][0])


def dashboard_pools(ctx: PlanContext, resources: Mapping[str, Resource]) -> Plan[list[PoolState]]:
    """Pools with a rate budget or in ``resources``: window spend and in-use cost."""
    members = member_costs(resources)
    args = {
        "member_pools": [m[0] for m in members],
        "member_types": [m[1] for m in members],
        "member_costs": [m[2] for m in members],
        "names": sorted(resources),
        "rate_window": ctx.rate_window,
    }

    def read() -> Plan[list[Any]]:
        yield _bounded(ctx)
        found: list[Any] = yield _read(ctx, "dashboard_pools", args)
        return found

    found: list[Any] = yield Atomic(read())
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


class DashboardVerbs(StoreConnections):
    """``dashboard_overview``, ``dashboard_throughput``, ``dashboard_type_finishes``,
    ``dashboard_jobs``, ``dashboard_job_ids``, ``dashboard_dead_letters``,
    ``dashboard_retry_dead_letters``, ``dashboard_pools``: the plans above on
    ``PostgresStore``'s connections."""

    dashboard_overview = sync_verb(dashboard_overview)
    dashboard_throughput = sync_verb(dashboard_throughput)
    dashboard_jobs = sync_verb(dashboard_jobs)
    dashboard_job_ids = sync_verb(dashboard_job_ids)
    dashboard_type_finishes = sync_verb(dashboard_type_finishes)
    dashboard_dead_letters = sync_verb(dashboard_dead_letters)
    dashboard_retry_dead_letters = sync_verb(dashboard_retry_dead_letters)
    dashboard_pools = sync_verb(dashboard_pools)


def _overview(
    types: tuple[TypeCounts, ...], succeeded_hour: int, waiting: int, estimate: Any, cap: int
) -> Overview:
    by_status = {
        JobStatus.WAITING: waiting,
        JobStatus.PENDING: sum(t.due + t.scheduled for t in types),
        JobStatus.RUNNING: sum(t.running for t in types),
        JobStatus.SUCCEEDED: succeeded_hour,
        JobStatus.FAILED: sum(t.failed for t in types),
    }
    ages = [t.oldest_due_age for t in types if t.oldest_due_age is not None]
    rows_estimate = int(estimate[0]) if estimate is not None else -1
    return Overview(types, by_status, max(ages) if ages else None, rows_estimate, cap)
