"""The dashboard verbs of InMemoryStore (see :mod:`golemq_pg.store.dashboard`).

Private to :mod:`golemq_pg.store.memory`; a base of :class:`InMemoryStore`, whose lock,
table, clock, budgets and notifications it uses. The same results as PostgreSQL's
``sql/queries/dashboard.sql``, caps and scan windows included, so a test written against
one store holds on the other.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from golemq_pg._types import JobStatus, Resource
from golemq_pg.store.dashboard import (
    BULK_CAP,
    COUNT_CAP,
    MAX_JOB_ID,
    DeadLetterGroup,
    DeadLetters,
    JobPage,
    JobQuery,
    MinuteCount,
    Overview,
    PoolState,
    TypeCounts,
    TypeFinishes,
    page_cursors,
    page_window,
    sorted_groups,
    window_spent,
)
from golemq_pg.store.memory._graph import Graph, revive
from golemq_pg.store.memory._rows import JobRow, JobTable, RateBudget
from golemq_pg.store.port import Notification

_MINUTE = timedelta(minutes=1)


class DashboardVerbs:
    """``dashboard_overview``, ``dashboard_throughput``, ``dashboard_jobs``,
    ``dashboard_job_ids``, ``dashboard_dead_letters``, ``dashboard_retry_dead_letters``,
    ``dashboard_pools``."""

    _lock: threading.Lock
    _jobs: JobTable
    _graph: Graph
    _budgets: dict[str, RateBudget]
    _rate_window: float
    _read_clock: Callable[[], datetime]
    _publish: Callable[[Notification], None]

    def dashboard_overview(self, cap: int = COUNT_CAP) -> Overview:
        """Per-type capped counts and per-status totals (succeeded: the last hour)."""
        cap = max(int(cap), 1)
        with self._lock:
            now = self._read_clock()
            live = [*self._jobs.pending.values(), *self._jobs.running.values()]
            failed = [r for r in self._jobs.rows.values() if r.status is JobStatus.FAILED]
            waiting: dict[str, int] = {}
            for row in self._jobs.waiting.values():
                waiting[row.type] = waiting.get(row.type, 0) + 1
            hour = self._finished_per_minute(now, 60)
            estimate = len(self._jobs.rows)
        per_type: dict[str, dict[str, int]] = {}
        oldest: dict[str, datetime] = {}
        for row in [*live, *failed]:
            counts = per_type.setdefault(row.type, dict.fromkeys(("d", "s", "r", "f"), 0))
            if row.status is JobStatus.RUNNING and row.started_at is not None:
                counts["r"] += 1
            elif row.status is JobStatus.RUNNING:
                counts["d"] += 1  # claimed, its handler not started: shown as due
            elif row.status is JobStatus.FAILED:
                counts["f"] += 1
            elif row.run_at <= now:
                counts["d"] += 1
                oldest[row.type] = min(oldest.get(row.type, row.run_at), row.run_at)
            else:
                counts["s"] += 1
        types = tuple(
            TypeCounts(
                type=name,
                due=min(c["d"], cap),
                scheduled=min(c["s"], cap),
                running=c["r"],
                failed=min(c["f"], cap),
                oldest_due_age=(now - oldest[name]).total_seconds() if name in oldest else None,
            )
            for name, c in sorted(per_type.items())
        )
        by_status = {
            JobStatus.PENDING: sum(t.due + t.scheduled for t in types),
            JobStatus.RUNNING: sum(t.running for t in types),
            JobStatus.SUCCEEDED: sum(m.succeeded for m in hour),
            JobStatus.FAILED: sum(t.failed for t in types),
            JobStatus.WAITING: sum(min(n, cap) for n in waiting.values()),
        }
        ages = [t.oldest_due_age for t in types if t.oldest_due_age is not None]
        return Overview(types, by_status, max(ages) if ages else None, estimate, cap)

    def dashboard_throughput(self, minutes: int = 60) -> list[MinuteCount]:
        """Jobs finished per minute over the last ``minutes`` minutes, oldest first."""
        minutes = min(max(int(minutes), 1), 24 * 60)
        with self._lock:
            return self._finished_per_minute(self._read_clock(), minutes)

    def _finished_per_minute(self, now: datetime, minutes: int) -> list[MinuteCount]:
        current = now.replace(second=0, microsecond=0)
        start = current - (minutes - 1) * _MINUTE
        ok = [0] * minutes
        bad = [0] * minutes
        for row in self._jobs.rows.values():
            at = row.finished_at
            if at is None or at < start or row.status not in (
                JobStatus.SUCCEEDED, JobStatus.FAILED
            ):
                continue
            index = int((at - start) // _MINUTE)
            if index >= minutes:
                continue
            (ok if row.status is JobStatus.SUCCEEDED else bad)[index] += 1
        return [MinuteCount(start + i * _MINUTE, ok[i], bad[i]) for i in range(minutes)]

    def dashboard_type_finishes(self, limit: int = 10) -> list[TypeFinishes]:
        """The types with the most jobs finished today (UTC, still kept), most first."""
        limit = min(max(int(limit), 1), 100)
        with self._lock:
            now = self._read_clock().astimezone(UTC)
            start = now.replace(hour=0, minute=0, second=0, microsecond=0)
            counts: dict[str, list[int]] = {}
            for row in self._jobs.rows.values():
                at = row.finished_at
                if at is None or at < start or row.status not in (
                    JobStatus.SUCCEEDED, JobStatus.FAILED
                ):
                    continue
                pair = counts.setdefault(row.type, [0, 0])
                pair[0 if row.status is JobStatus.SUCCEEDED else 1] += 1
        ranked = sorted(counts.items(), key=lambda kv: (-(kv[1][0] + kv[1][1]), kv[0]))
        return [TypeFinishes(name, ok, bad) for name, (ok, bad) in ranked[:limit]]

    def dashboard_jobs(self, query: JobQuery) -> JobPage:
        """One keyset page of jobs, newest first, scanning at most ``query.window`` ids."""
        limit = min(max(int(query.limit), 1), 500)
        with self._lock:
            now = self._read_clock()
            table = self._jobs.rows
            if query.job_id is not None:
                row = self._jobs.get(query.job_id)
                hit = row is not None and _passes(row, query, now)
                return JobPage((row.summary(),) if hit and row is not None else (), None)
            top = (max(table) if table else 0) + 1
            floor, last, upwards = page_window(query, top)
            picked: list[JobRow] = []
            for number in sorted((i for i in table if floor <= i <= last), reverse=not upwards):
                row = table[number]
                if _passes(row, query, now):
                    picked.append(row)
                    if len(picked) == limit:
                        break
            if upwards:
                picked.reverse()
            jobs = [r.summary() for r in picked]
            older = any(i < floor for i in table)
            exact = _search_id(query)
            if exact is not None and exact not in {r.id for r in picked}:
                row = table.get(exact)
                unsearched = replace(query, search=None)
                if row is not None and _passes(row, unsearched, now):
                    jobs.insert(0, row.summary())
        return page_cursors(query, jobs, floor, last, top, older)

    def dashboard_job_ids(self, query: JobQuery, cap: int = BULK_CAP) -> list[str]:
        """The ids of ``query``'s matches among the newest ``query.window`` ids, newest
        first, at most ``cap`` (a search's exact id included)."""
        cap = min(max(int(cap), 1), BULK_CAP)
        with self._lock:
            now = self._read_clock()
            table = self._jobs.rows
            top = (max(table) if table else 0) + 1
            floor = max(top - max(int(query.window), 1), 0)
            ids = [i for i in sorted(table, reverse=True)
                   if i >= floor and _passes(table[i], query, now)][:cap]
            exact = _search_id(JobQuery(search=query.search))
            unsearched = replace(query, search=None)
            if (exact is not None and exact not in ids and exact in table
                    and _passes(table[exact], unsearched, now)):
                ids = [exact, *ids][:cap]
        return [str(i) for i in ids]

    def dashboard_dead_letters(self, cap: int = COUNT_CAP) -> DeadLetters:
        """FAILED jobs grouped by (type, last_error), each type's newest ``cap`` at most."""
        cap = max(int(cap), 1)
        with self._lock:
            failed = sorted(
                (r for r in self._jobs.rows.values() if r.status is JobStatus.FAILED),
                key=lambda r: r.id,
                reverse=True,
            )
        seen: dict[str, int] = {}
        groups: dict[tuple[str, str | None], DeadLetterGroup] = {}
        capped = False
        for row in failed:
            seen[row.type] = seen.get(row.type, 0) + 1
            if seen[row.type] > cap:
                capped = True
                continue
            key = (row.type, row.last_error)
            group = groups.get(key)
            if group is None:
                groups[key] = DeadLetterGroup(row.type, row.last_error, 1, str(row.id),
                                              row.finished_at)
            else:
                last = group.last_failed_at
                if row.finished_at is not None and (last is None or row.finished_at > last):
                    last = row.finished_at
                groups[key] = DeadLetterGroup(group.type, group.error, group.count + 1,
                                              group.newest_id, last)
        return DeadLetters(sorted_groups(list(groups.values())), capped, cap)

    def dashboard_retry_dead_letters(self, job_type: str, error: str | None) -> int:
        """Every FAILED job of ``job_type`` with this ``last_error`` -> PENDING due now."""
        with self._lock:
            now = self._read_clock()
            table = self._jobs
            failed = sorted(
                (r for r in table.rows.values() if r.status is JobStatus.FAILED),
                key=lambda r: r.id,
            )
            newest: dict[str, int] = {
                r.dedupe_key: r.id for r in failed if r.type == job_type and r.dedupe_key
            }
            revived = []
            for row in failed:
                if row.type != job_type or row.last_error != error:
                    continue
                key = row.dedupe_key
                if key is not None and (
                    table.pending_with_key(job_type, key) is not None or newest[key] != row.id
                ):
                    continue
                revive(table, row, now)
                revived.append(row)
            if revived:
                # back in the graph: WAITING again while a parent is not done
                self._graph.rearm(table, revived, now)
                self._publish(Notification(kind="jobs", items=(job_type,)))
            return len(revived)

    def dashboard_pools(self, resources: Mapping[str, Resource]) -> list[PoolState]:
        """Pools with a rate budget or in ``resources``: window spend and in-use cost."""
        with self._lock:
            now = self._read_clock()
            live = [r for r in self._jobs.running.values() if r.is_live(now)]
            budgets = dict(self._budgets)
        out: list[PoolState] = []
        for name in sorted(set(budgets) | set(resources)):
            budget = budgets.get(name)
            start = None if budget is None else budget.window_start
            spent = 0 if budget is None else budget.spent
            pool = resources.get(name)
            in_use = None
            if pool is not None:
                members = set(pool.types)
                in_use = sum(pool.cost_of(r.type) for r in live if r.type in members)
            out.append(
                PoolState(
                    name=name,
                    spent=window_spent(spent, start, now, self._rate_window),
                    window_start=start,
                    in_use=in_use,
                    concurrency=None if pool is None else pool.concurrency,
                    rate_per_minute=None if pool is None else pool.rate_per_minute,
                    types=() if pool is None else tuple(pool.types),
                )
            )
        return out


def _search_id(query: JobQuery) -> int | None:
    """The job id a search names, looked up on its first page only."""
    if query.search is None or query.after is not None or query.before is not None:
        return None
    text = query.search.strip()
    number = int(text) if text.isascii() and text.isdigit() else None
    return number if number is not None and 0 < number <= MAX_JOB_ID else None


def _found(text: str | None, search: str) -> bool:
    return text is not None and search.lower() in text.lower()


def _passes(row: JobRow, query: JobQuery, now: datetime) -> bool:
    return (
        (query.type is None or row.type == query.type)
        and (query.status is None or row.shown_status is JobStatus(query.status))
        and (not query.scheduled or (row.shown_status is JobStatus.PENDING and row.run_at > now))
        and (query.scope_type is None or (row.scope is not None
                                          and row.scope.type == query.scope_type))
        and (query.scope_id is None or (row.scope is not None and row.scope.id == query.scope_id))
        and (query.tag is None or query.tag in row.tags)
        and (not query.search or _found(row.type, query.search)
             or _found(row.last_error, query.search))
    )
