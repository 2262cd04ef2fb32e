"""The schedule verbs of PostgresStore (statements in ``sql/queries/schedules.sql``).

A due schedule is fired in one transaction: its row is locked (``schedule_claim_due``), the
caller's ``next_tick`` computes its following tick from the database's ``now()``, and one
statement enqueues the jobs and advances the schedules (``schedule_fire``), so two workers
never fire the same tick.
"""

from __future__ import annotations

from datetime import datetime

import structlog

from golemq_pg._types import ScheduleSummary
from golemq_pg.store.port import DueSchedule, NextTick, ScheduleParams
from golemq_pg.store.postgres import _rows as rows
from golemq_pg.store.postgres._connections import StoreConnections, sync_verb
from golemq_pg.store.postgres._plans import Atomic, Count, Plan, PlanContext, Rows

log = structlog.get_logger("golemq_pg.store.postgres")


def schedule_upsert(ctx: PlanContext, params: ScheduleParams) -> Plan[None]:
    """Create or update a schedule by key."""
    scope = params.scope
    args = {
        "key": params.key,
        "type": params.type,
        "payload": rows.jsonb(params.payload),
        "scope_type": None if scope is None else scope[0],
        "scope_id": None if scope is None else scope[1],
        "priority": params.priority,
        "max_attempts": params.max_attempts,
        "cron": params.cron,
        "every_seconds": params.every_seconds,
        "timezone": params.timezone,
        "repeat_from": params.repeat_from,
        "first_run_at": params.first_run_at,
    }
    yield Count(ctx.queries["schedule_upsert"], args)


def schedule_delete(ctx: PlanContext, key: str) -> Plan[bool]:
    """Remove a schedule; True when it existed."""
    return bool((yield Rows(ctx.queries["schedule_delete"], {"key": key})))


def schedule_list(ctx: PlanContext) -> Plan[list[ScheduleSummary]]:
    """Every schedule, by key."""
    return [rows.schedule(r) for r in (yield Rows(ctx.queries["schedule_list"]))]


def schedule_pause(ctx: PlanContext, key: str) -> Plan[bool]:
    """Pause a schedule (the scheduler skips it); False for an unknown key."""
    return bool((yield Rows(ctx.queries["schedule_pause"], {"key": key})))


def schedule_resume(ctx: PlanContext, key: str, next_tick: NextTick) -> Plan[bool]:
    """Resume a paused schedule, its tick missed during the pause replaced by
    ``next_tick``'s (see ``JobStore.schedule_resume``); False for an unknown key."""
    found: bool = yield Atomic(_resume(ctx, key, next_tick))
    return found


def _resume(ctx: PlanContext, key: str, next_tick: NextTick) -> Plan[bool]:
    """The resume, in one transaction: the row locked, its next tick computed, written."""
    found = yield Rows(ctx.queries["schedule_lock"], {"key": key})
    if not found:
        return False
    key, job_type, cron, every, timezone, repeat_from, next_run_at, db_now, paused = found[0]
    if not paused:
        return True
    following: datetime | None = next_run_at
    if next_run_at is not None and next_run_at <= db_now:
        tick = DueSchedule(
            key=key,
            type=job_type,
            cron=cron,
            every_seconds=every,
            timezone=timezone,
            repeat_from=repeat_from,
            next_run_at=next_run_at,
        )
        following = next_tick(tick, db_now)
    yield Count(ctx.queries["schedule_resume"], {"key": key, "next_run_at": following})
    return True


def schedule_run_now(
    ctx: PlanContext, key: str, default_max_attempts: int | None = 3
) -> Plan[str | None]:
    """Enqueue one job of the schedule now (paused or not); its id, or None for an
    unknown key. A schedule without a budget of its own gives ``default_max_attempts``."""
    found = yield Rows(
        ctx.queries["schedule_run_now"],
        {"key": key, "default_max_attempts": default_max_attempts},
    )
    return str(found[0][0]) if found else None


class ScheduleVerbs(StoreConnections):
    """``schedule_upsert``, ``schedule_delete``, ``schedule_list``, ``schedule_pause``,
    ``schedule_resume``, ``schedule_run_now`` (plans shared with AsyncPostgresStore),
    ``schedule_fire_due``."""

    schedule_upsert = sync_verb(schedule_upsert)
    schedule_delete = sync_verb(schedule_delete)
    schedule_list = sync_verb(schedule_list)
    schedule_pause = sync_verb(schedule_pause)
    schedule_resume = sync_verb(schedule_resume)
    schedule_run_now = sync_verb(schedule_run_now)

    def schedule_fire_due(
        self, next_tick: NextTick, limit: int = 100, default_max_attempts: int | None = 3
    ) -> list[str]:
        """Enqueue one job per due schedule and advance it; returns the new job ids. A
        schedule without a budget of its own gives its job ``default_max_attempts``."""
        with self._transaction() as conn:
            conn.execute(self._q["schedule_resume_finished"])
            due = conn.execute(self._q["schedule_claim_due"], {"limit": limit}).fetchall()
            keys: list[str] = []
            nexts: list[datetime | None] = []
            for key, job_type, cron, every, timezone, repeat_from, next_run_at, db_now in due:
                tick = DueSchedule(
                    key=key,
                    type=job_type,
                    cron=cron,
                    every_seconds=every,
                    timezone=timezone,
                    repeat_from=repeat_from,
                    next_run_at=next_run_at,
                )
                try:
                    nxt = next_tick(tick, db_now)
                except Exception as exc:  # noqa: BLE001 - one bad schedule must not stop the rest
                    log.warning(
                        "schedule_next_tick_failed",
                        key=key,
                        type=job_type,
                        error=type(exc).__name__,
                    )
                    continue
                keys.append(key)
                nexts.append(nxt)
            if not keys:
                return []
            fired = conn.execute(
                self._q["schedule_fire"],
                {"keys": keys, "next_run_ats": nexts,
                 "default_max_attempts": default_max_attempts},
            ).fetchall()
        return [str(row[0]) for row in fired]
