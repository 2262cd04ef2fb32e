"""Schedule arithmetic: cron parsing (croniter) and next-tick rules, clock-agnostic.

A schedule holds one pending tick (``next_run_at``). Every worker's maintenance loop asks
the store to fire due ticks; the store locks each due schedule, enqueues one job whose
``run_at`` is the tick, and advances ``next_run_at`` with :func:`next_tick`, all in one
transaction, so any number of workers produce exactly one job per tick. All instants are
the store's clock (the database's ``now()``).

* ``cron`` (with an IANA ``timezone``): ticks are wall-clock times in that zone, evaluated
  by croniter, so they follow daylight-saving changes. A wall time skipped by a
  spring-forward fires once, at the first instant after the gap; an hourly expression
  keeps firing every real hour through a fall-back; a daily one fires once per day.
* ``every`` with ``repeat_from="run_at"``: a fixed cadence, ``start + k * every``.
* ``every`` with ``repeat_from="finished"``: no tick is pending while the job runs; once
  it finished (succeeded or failed) the next tick is its finish time plus ``every`` (at
  once when the job was cancelled or pruned).

After downtime (no worker ran, or the database was unreachable) a schedule fires **once**,
for its overdue tick, and then resumes its cadence from the current time: the ticks missed
meanwhile are skipped, never replayed as a burst. A ``run_at`` cadence keeps its phase (the
next tick is the first ``start + k * every`` after now), a cron schedule takes its next
tick after now.
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


#: Most repeated wall-clock ticks skipped in one search (a fall-back repeats an hour or so).
_MAX_REPEATS_SKIPPED = 1000


def next_cron_tick(expression: str, timezone: str, after: datetime) -> datetime:
    """The first tick of ``expression`` in ``timezone`` strictly after ``after`` (UTC result).

    Daylight saving, as cron does it: a wall time that a spring-forward skips fires once,
    at the end of the gap, when the hour field names hours (``30 2 * * *``) and not at all
    when it is a wildcard (``30 * * * *`` still fires every real hour). A wall time that a
    fall-back repeats fires at its first occurrence only when the hour field names hours
    (a daily job runs once that day), and at both when it is a wildcard (every real hour).
    """
    zone = check_timezone(timezone)
    try:
        itr = croniter(expression, after.astimezone(zone))
        hours_named = itr.expanded[1] != ["*"]
        tick: datetime = itr.get_next(datetime)
        for _ in range(_MAX_REPEATS_SKIPPED):
            if not (hours_named and _repeated_wall_time(tick.astimezone(zone))):
                break
            tick = itr.get_next(datetime)
    except CroniterBadDateError as exc:
        raise ValueError(f"cron expression {expression!r} never fires") from exc
    except (CroniterBadCronError, ValueError, KeyError) as exc:
        raise ValueError(f"invalid cron expression {expression!r}") from exc
    return tick.astimezone(UTC)


def _repeated_wall_time(local: datetime) -> bool:
    """Whether ``local`` is the second occurrence of a wall time repeated by a fall-back."""
    return local.fold == 1 and local.replace(fold=0).utcoffset() != local.utcoffset()


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


def resumed_tick(due: DueSchedule, now: datetime) -> datetime | None:
    """The pending tick of a schedule resumed at ``now`` whose tick (``due.next_run_at``)
    passed while it was paused: the first tick after ``now``, so the ticks missed during the
    pause are skipped, never fired as a burst (nor as one catch-up run). A cron schedule
    takes its next tick after now, a ``run_at`` cadence its next tick in phase, a
    ``finished`` one runs ``every`` after now."""
    if due.cron is not None:
        return next_cron_tick(due.cron, due.timezone, now)
    if due.every_seconds is None:  # pragma: no cover - excluded by a CHECK constraint
        return None
    if due.repeat_from == "finished":
        return now + timedelta(seconds=due.every_seconds)
    return next_tick(due, now)
