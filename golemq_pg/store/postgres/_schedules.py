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
from golemq_pg.store.postgres._plans import Count, Plan, PlanContext, Rows

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


class ScheduleVerbs(StoreConnections):
    """``schedule_upsert``, ``schedule_delete``, ``schedule_list`` (plans shared with
    AsyncPostgresStore), ``schedule_fire_due``."""

    schedule_upsert = sync_verb(schedule_upsert)
    schedule_delete = sync_verb(schedule_delete)
    schedule_list = sync_verb(schedule_list)

    def schedule_fire_due(self, next_tick: NextTick, limit: int = 100) -> list[str]:
        """Enqueue one job per due schedule and advance it; returns the new job ids."""
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
                self._q["schedule_fire"], {"keys": keys, "next_run_ats": nexts}
            ).fetchall()
        return [str(row[0]) for row in fired]
