"""The dashboard's formatters and its server-side throughput chart (pure functions)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from golemq_pg.store.dashboard import MinuteCount
from golemq_pg.web._render import age, capped_count, chart, environment


def test_ages_read_in_the_largest_useful_units() -> None:
    assert [age(None), age(-3), age(42), age(303), age(7800), age(3 * 86400 + 4 * 3600)] == [
        "", "0s", "42s", "5m 3s", "2h 10m", "3d 4h"
    ]


def test_counts_at_the_cap_read_as_at_least() -> None:
    assert capped_count(9_999, 10_000) == "9,999"
    assert capped_count(10_000, 10_000) == "10,000+"


def test_chart_stacks_failed_on_succeeded_scaled_to_the_busiest_minute() -> None:
    start = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    minutes = [MinuteCount(start + timedelta(minutes=i), ok, bad)
               for i, (ok, bad) in enumerate([(0, 0), (10, 0), (5, 5)])]
    drawn = chart(minutes)
    assert (drawn.peak, drawn.total_ok, drawn.total_bad) == (10, 15, 5)
    empty, full, mixed = drawn.bars
    assert (empty.ok_height, empty.bad_height) == (0, 0)
    assert full.ok_height == drawn.height - 4
    assert mixed.ok_height == mixed.bad_height == full.ok_height / 2
    assert mixed.bad_y + mixed.bad_height == mixed.ok_y  # failed sits on top of succeeded
    assert mixed.label == "12:02: 5 succeeded, 5 failed"
    assert chart([]).bars == ()


def test_templates_escape_every_value_even_from_strings() -> None:
    html = environment().from_string("<td>{{ v }}</td>").render(v="<script>x</script>")
    assert html == "<td>&lt;script&gt;x&lt;/script&gt;</td>"
