"""The dashboard's formatters, its server-side charts, the job page's attempt timeline, the
overview's unattended types and the workflow graph's layout (pure functions)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from golemq_pg._types import AttemptError, JobStatus, JobSummary, WorkerSummary
from golemq_pg.store.dashboard import MinuteCount, TypeCounts, TypeFinishes
from golemq_pg.web._graph import MAX_COLUMNS, MAX_DRAWN, depths, layout, parents_of
from golemq_pg.web._jobpage import timeline
from golemq_pg.web._overview import unattended
from golemq_pg.web._render import (
    age,
    capped_count,
    chart,
    environment,
    nice_ceiling,
    seconds,
    shown_status,
    stamp,
    type_bars,
)

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


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
    assert full.ok_height == drawn.plot_height  # 10 is a round top: the bar fills the plot
    assert full.ok_y == drawn.top
    assert mixed.ok_height == mixed.bad_height == full.ok_height / 2
    assert mixed.bad_y + mixed.bad_height == mixed.ok_y  # failed sits on top of succeeded
    assert mixed.ok_y + mixed.ok_height == drawn.baseline
    assert mixed.label == "12:02: 5 succeeded, 5 failed"
    assert all(drawn.left <= b.x and b.x + b.width <= drawn.width - drawn.right
               for b in drawn.bars)
    assert chart([]).bars == ()


def test_chart_axes_have_round_y_ticks_and_a_time_label_every_ten_minutes() -> None:
    start = datetime(2026, 1, 1, 11, 5, tzinfo=UTC)
    minutes = [MinuteCount(start + timedelta(minutes=i), 37 if i == 30 else 0, 0)
               for i in range(60)]
    drawn = chart(minutes)
    assert [t.label for t in drawn.y_ticks] == ["0", "10", "20", "30", "40"]
    assert drawn.y_ticks[0].at == drawn.baseline
    assert drawn.y_ticks[-1].at == drawn.top
    assert [t.label for t in drawn.x_ticks] == ["11:10", "11:20", "11:30", "11:40", "11:50",
                                                "12:00"]
    xs = [t.at for t in drawn.x_ticks]
    assert xs == sorted(xs)
    # An idle hour still has an axis: 0-4.
    assert [t.label for t in chart([]).y_ticks] == ["0", "1", "2", "3", "4"]


def test_nice_ceiling_rounds_up_to_one_two_five_steps() -> None:
    assert [nice_ceiling(p) for p in (0, 1, 4, 5, 9, 37, 120, 999, 12_345)] == [
        (4, 1), (1, 1), (4, 1), (6, 2), (10, 5), (40, 10), (150, 50), (1000, 500),
        (15_000, 5_000),
    ]


def test_type_bars_scale_to_the_busiest_type() -> None:
    bars = type_bars([TypeFinishes("a", 30, 10), TypeFinishes("b", 5, 15)])
    assert [(b.type, b.ok_width, b.bad_width) for b in bars] == [("a", 75.0, 25.0),
                                                                  ("b", 12.5, 37.5)]
    assert type_bars([]) == ()


def test_timestamps_render_as_time_elements_with_iso_utc_and_absolute_text() -> None:
    html = str(stamp(datetime(2026, 3, 4, 5, 6, 7, 890000, tzinfo=UTC)))
    assert html == '<time datetime="2026-03-04T05:06:07.890Z">2026-03-04 05:06:07 UTC</time>'
    assert str(stamp(None)) == ""
    rendered = environment().from_string("{{ t | stamp }}").render(t=T0)
    assert rendered.startswith('<time datetime="2026-01-01T12:00:00.000Z">')
    assert [seconds(None), seconds(0.0123), seconds(3.44), seconds(125)] == [
        "", "12 ms", "3.4 s", "2m 5s"
    ]


def test_templates_escape_every_value_even_from_strings() -> None:
    html = environment().from_string("<td>{{ v }}</td>").render(v="<script>x</script>")
    assert html == "<td>&lt;script&gt;x&lt;/script&gt;</td>"


def _job(status: JobStatus, **fields: object) -> JobSummary:
    values: dict[str, object] = {
        "id": "7", "type": "t", "scope": None, "status": status, "attempts": 1,
        "max_attempts": 3, "last_error": None, "priority": 0, "progress": None,
        "run_at": T0, "created_at": T0, "updated_at": T0, "started_at": None,
        "finished_at": None,
    }
    values.update(fields)
    return JobSummary(**values)  # type: ignore[arg-type]


def test_a_pending_job_not_due_yet_shows_as_scheduled() -> None:
    later = _job(JobStatus.PENDING, run_at=T0 + timedelta(minutes=5))
    assert shown_status(later, T0) == "scheduled"
    assert shown_status(later, T0 + timedelta(minutes=5)) == "pending"
    assert shown_status(_job(JobStatus.FAILED), T0) == "failed"


def test_timeline_lists_failed_attempts_then_the_latest_with_its_duration() -> None:
    errors = (
        AttemptError(1, T0 + timedelta(seconds=10), "E: one", "w1", "Traceback: one"),
        AttemptError(2, T0 + timedelta(seconds=40), "E: two", None),
    )
    done = _job(JobStatus.SUCCEEDED, attempts=3, errors=errors,
                started_at=T0 + timedelta(seconds=60), finished_at=T0 + timedelta(seconds=62.5))
    steps = timeline(done, T0 + timedelta(hours=1))
    assert [(a.number, a.outcome, a.duration) for a in steps] == [
        (1, "retried", None), (2, "retried", None), (3, "succeeded", 2.5)
    ]
    assert steps[0].traceback == "Traceback: one"
    assert steps[1].worker_id is None  # the reaper recorded it
    dead = _job(JobStatus.FAILED, attempts=2, errors=errors,
                started_at=T0 + timedelta(seconds=35), finished_at=T0 + timedelta(seconds=40))
    assert [(a.outcome, a.duration) for a in timeline(dead, T0)] == [
        ("retried", None), ("failed", 5.0)
    ]
    running = _job(JobStatus.RUNNING, attempts=1, started_at=T0)
    (only,) = timeline(running, T0 + timedelta(seconds=9))
    assert (only.outcome, only.duration, only.ended_at) == ("running", 9.0, None)
    assert timeline(_job(JobStatus.PENDING), T0) == ()


def test_timeline_gives_every_attempt_that_kept_its_start_a_duration() -> None:
    errors = (
        AttemptError(1, T0 + timedelta(seconds=10), "E: one", "w1",
                     started_at=T0 + timedelta(seconds=8)),
        AttemptError(2, T0 + timedelta(seconds=40), "E: two", None,
                     started_at=T0 + timedelta(seconds=20)),
    )
    dead = _job(JobStatus.FAILED, attempts=2, errors=errors,
                started_at=T0 + timedelta(seconds=20), finished_at=T0 + timedelta(seconds=40))
    assert [(a.number, a.started_at, a.duration) for a in timeline(dead, T0)] == [
        (1, T0 + timedelta(seconds=8), 2.0), (2, T0 + timedelta(seconds=20), 20.0)
    ]


def test_types_with_due_jobs_and_no_live_worker_are_flagged_unless_paused() -> None:
    types = [TypeCounts("handled", due=3), TypeCounts("orphan", due=1),
             TypeCounts("only-lost", due=2), TypeCounts("held", due=5),
             TypeCounts("idle-orphan", scheduled=4)]
    workers = [
        WorkerSummary("w1", "h", 1, T0, T0, {"handled": 2}, 0, "running"),
        WorkerSummary("w2", "h", 2, T0, T0, {"only-lost": 1}, 0, "lost"),
    ]
    assert unattended(types, workers, ["held"]) == ["only-lost", "orphan"]


# -- the workflow graph -------------------------------------------------------------------


def test_a_jobs_layer_is_its_longest_path_from_a_root() -> None:
    # 1 -> 2 -> 3 -> 4 and a shortcut 1 -> 4: 4 sits below 3, not beside 2.
    edges = [("1", "2"), ("2", "3"), ("3", "4"), ("1", "4"), ("5", "4")]
    assert depths(["1", "2", "3", "4", "5"], edges) == {"1": 0, "2": 1, "3": 2, "4": 3, "5": 0}
    assert depths(["1", "2"], [("1", "9"), ("9", "2")]) == {"1": 0, "2": 0}  # unknown ids
    # A cycle (no store writes one) still ends, each member placed.
    assert set(depths(["1", "2"], [("1", "2"), ("2", "1")])) == {"1", "2"}


def test_the_graph_puts_parents_above_children_and_links_every_edge() -> None:
    jobs = [_job(JobStatus.SUCCEEDED, id="10", type="doc.fetch"),
            _job(JobStatus.RUNNING, id="11", type="doc.extract"),
            _job(JobStatus.PENDING, id="12", type="doc.extract", run_at=T0 + timedelta(hours=1)),
            _job(JobStatus.WAITING, id="13", type="doc.index")]
    edges = [("10", "11"), ("10", "12"), ("11", "13"), ("12", "13")]
    graph = layout(jobs, edges, T0)
    by_id = {n.id: n for n in graph.nodes}
    assert [by_id[i].status for i in ("10", "11", "12", "13")] == [
        "succeeded", "running", "scheduled", "waiting"]
    assert by_id["10"].y < by_id["11"].y == by_id["12"].y < by_id["13"].y
    assert by_id["11"].x < by_id["12"].x
    assert graph.layers == 3
    assert len(graph.edges) == 4
    first = graph.edges[0]
    start = f"M{by_id['10'].x + graph.node_width / 2:.1f},{by_id['10'].y + graph.node_height:.1f}"
    assert first.path.startswith(start)
    for node in graph.nodes:
        assert node.x >= 0
        assert node.x + graph.node_width <= graph.width
        assert node.y >= 0
        assert node.y + graph.node_height <= graph.height


def test_a_wide_layer_wraps_and_a_child_stays_under_its_parents() -> None:
    jobs = [_job(JobStatus.PENDING, id="1"), _job(JobStatus.PENDING, id="2")]
    jobs += [_job(JobStatus.WAITING, id=str(i)) for i in range(100, 120)]
    edges = [("1", str(i)) for i in range(100, 110)] + [("2", str(i)) for i in range(110, 120)]
    graph = layout(jobs, edges, T0)
    second = [n for n in graph.nodes if n.layer == 1]
    rows = sorted({n.y for n in second})
    assert len(rows) == -(-20 // MAX_COLUMNS)
    assert max(sum(1 for n in second if n.y == y) for y in rows) == MAX_COLUMNS
    order = [n.id for n in sorted(second, key=lambda n: (n.y, n.x))]
    assert order == [str(i) for i in range(100, 120)]  # 1's children first, then 2's
    assert graph.width == 2 * 16 + MAX_COLUMNS * graph.node_width + (MAX_COLUMNS - 1) * 14


def test_a_gone_job_stays_on_the_graph_and_a_huge_workflow_is_not_drawn() -> None:
    graph = layout([_job(JobStatus.SUCCEEDED, id="1")], [("1", "2")], T0)
    (gone,) = [n for n in graph.nodes if n.id == "2"]
    assert gone.gone
    assert gone.status == "gone"
    assert len(graph.edges) == 1
    many = [_job(JobStatus.PENDING, id=str(i)) for i in range(MAX_DRAWN + 1)]
    assert layout(many, [], T0).drawn is False
    assert layout([], [], T0).nodes == ()
    long_type = _job(JobStatus.PENDING, id="1", type="x" * 60)
    (node,) = layout([long_type], [], T0).nodes
    assert len(node.label) <= 22
    assert node.label.endswith("…")
    assert "x" * 60 in node.title


def test_parents_of_lists_each_childs_parents_numerically() -> None:
    assert parents_of([("10", "3"), ("9", "3"), ("1", "2")]) == {"3": ["9", "10"], "2": ["1"]}
