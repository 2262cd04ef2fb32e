"""Cron and interval next-tick rules, evaluated with fixed instants (no real clock)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from golemq_pg._schedule import check_cron, next_cron_tick, next_tick, resumed_tick
from golemq_pg.store.port import DueSchedule

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _due(**kw: object) -> DueSchedule:
    base: dict[str, object] = {
        "key": "k", "type": "t", "cron": None, "every_seconds": None,
        "timezone": "UTC", "repeat_from": "run_at", "next_run_at": NOW,
    }
    base.update(kw)
    return DueSchedule(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize("expr", ["bad", "61 * * * *", "* * *", "", "0 0 30 2 *"])
def test_invalid_or_never_firing_cron(expr: str) -> None:
    with pytest.raises(ValueError, match="cron"):
        check_cron(expr, "UTC", NOW)


def test_unknown_timezone() -> None:
    with pytest.raises(ValueError, match="timezone"):
        check_cron("0 6 * * *", "Mars/Olympus", NOW)


def test_cron_in_timezone_across_spring_forward() -> None:
    # Europe/Berlin jumps 02:00 -> 03:00 on 2026-03-29: the 02:30 tick happens at 03:00 local.
    after = datetime(2026, 3, 28, 12, 0, tzinfo=UTC)
    tick = next_cron_tick("30 2 * * *", "Europe/Berlin", after)
    assert tick == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    following = next_cron_tick("30 2 * * *", "Europe/Berlin", tick)
    assert following == datetime(2026, 3, 30, 0, 30, tzinfo=UTC)  # 02:30 CEST


def test_cron_across_fall_back_keeps_hourly_spacing() -> None:
    # On 2026-10-25 Berlin repeats 02:00-03:00: hourly ticks stay one real hour apart.
    tick = datetime(2026, 10, 24, 22, 30, tzinfo=UTC)
    ticks = []
    for _ in range(4):
        tick = next_cron_tick("0 * * * *", "Europe/Berlin", tick)
        ticks.append(tick)
    assert [b - a for a, b in itertools.pairwise(ticks)] == [timedelta(hours=1)] * 3


def test_daily_cron_in_utc() -> None:
    assert next_cron_tick("0 6 * * *", "UTC", NOW) == datetime(2026, 3, 2, 6, 0, tzinfo=UTC)


def test_interval_run_at_keeps_cadence() -> None:
    due = _due(every_seconds=60.0)
    assert next_tick(due, NOW + timedelta(seconds=1)) == NOW + timedelta(seconds=60)


def test_interval_after_downtime_fires_once_then_resumes_phase() -> None:
    due = _due(every_seconds=60.0)
    later = NOW + timedelta(minutes=10, seconds=5)
    assert next_tick(due, later) == NOW + timedelta(minutes=11)


def test_interval_from_finish_waits_for_the_job() -> None:
    assert next_tick(_due(every_seconds=60.0, repeat_from="finished"), NOW) is None


def test_cron_schedule_next_tick_is_after_now_not_a_burst() -> None:
    due = _due(cron="*/5 * * * *", next_run_at=NOW - timedelta(hours=3))
    assert next_tick(due, NOW) == NOW + timedelta(minutes=5)


def test_a_resumed_schedule_takes_one_tick_after_now_whatever_it_missed() -> None:
    paused_since = NOW - timedelta(days=3, minutes=20)
    # cron: its next tick after now (not the three nightly ticks missed).
    cron = _due(cron="0 3 * * *", next_run_at=paused_since)
    assert resumed_tick(cron, NOW) == datetime(2026, 3, 2, 3, 0, tzinfo=UTC)
    # run_at cadence: the next tick in phase with the original cadence, after now.
    hourly = _due(every_seconds=3600.0, next_run_at=NOW - timedelta(hours=5, minutes=20))
    assert resumed_tick(hourly, NOW) == NOW + timedelta(minutes=40)
    # finished cadence: one interval after now.
    after_finish = _due(every_seconds=600.0, repeat_from="finished", next_run_at=paused_since)
    assert resumed_tick(after_finish, NOW) == NOW + timedelta(minutes=10)
