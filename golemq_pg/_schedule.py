"""Schedule arithmetic: cron parsing (croniter) and next-tick rules, clock-agnostic.

After downtime a schedule fires once, then resumes its cadence from the current time: missed
ticks are skipped, never replayed as a burst.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterBadDateError, croniter

from golemq_pg.store.port import DueSchedule


def check_timezone(name: object) -> ZoneInfo:
    """Resolve an IANA timezone name, raising ValueError when unknown."""
    if not isinstance(name, str) or not name:
        raise ValueError("timezone must be an IANA timezone name such as 'UTC'")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown timezone {name!r}") from exc


def next_cron_tick(expression: str, timezone: str, after: datetime) -> datetime:
    """The first tick of ``expression`` in ``timezone`` strictly after ``after`` (UTC result)."""
    zone = check_timezone(timezone)
    try:
        itr = croniter(expression, after.astimezone(zone))
        tick: datetime = itr.get_next(datetime)
    except CroniterBadDateError as exc:
        raise ValueError(f"cron expression {expression!r} never fires") from exc
    except (CroniterBadCronError, ValueError, KeyError) as exc:
        raise ValueError(f"invalid cron expression {expression!r}") from exc
    return tick.astimezone(UTC)


def check_cron(expression: object, timezone: str, now: datetime) -> str:
    """Validate a cron expression: it parses and fires at least once in the future."""
    if not isinstance(expression, str) or not expression.strip():
        raise ValueError("cron must be a non-empty cron expression")
    if not croniter.is_valid(expression):
        raise ValueError(f"invalid cron expression {expression!r}")
    next_cron_tick(expression, timezone, now)
    return expression


def next_tick(due: DueSchedule, now: datetime) -> datetime | None:
    """The scheduler's rule for the run after ``due`` fired at ``now`` (None: after finish)."""
    if due.cron is not None:
        return next_cron_tick(due.cron, due.timezone, now)
    if due.every_seconds is None:  # pragma: no cover - excluded by a CHECK constraint
        return None
    if due.repeat_from == "finished":
        return None
    every = timedelta(seconds=due.every_seconds)
    following = due.next_run_at + every
    if following <= now:
        # Skip the ticks missed while nothing ran, keeping the phase of the cadence.
        missed = math.floor((now - due.next_run_at) / every)
        following = due.next_run_at + every * (missed + 1)
    return following
