"""Rendering for the dashboard: the Jinja2 environment (autoescaping every value), the
value formatters its templates use, and the server-side SVG charts (throughput per minute
with its axes, finishes per type): coordinates computed here, drawn by the templates."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Any
from urllib.parse import quote

import orjson
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import HTMLResponse

from golemq_pg._types import JobStatus, JobSummary
from golemq_pg.store.dashboard import MinuteCount, TypeFinishes


@cache
def environment() -> Environment:
    """The templates' environment: package data ``golemq_pg/web/templates``, every
    ``{{ value }}`` HTML-escaped (``autoescape`` for every file, strings included)."""
    env = Environment(
        loader=PackageLoader("golemq_pg.web", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = when
    env.filters["stamp"] = stamp
    env.filters["seconds"] = seconds
    env.filters["age"] = age
    env.filters["json"] = as_json
    env.filters["count"] = capped_count
    env.filters["segment"] = path_segment
    env.tests["dot_segment"] = is_dot_segment
    return env


def page(
    request: Request, template: str, context: Mapping[str, Any], status_code: int = 200
) -> HTMLResponse:
    """Render ``template`` with the app's common context (title, base path, read-only)."""
    state = request.app.state
    values = {
        "title": state.title,
        "base": request.scope.get("root_path", "").rstrip("/"),
        "read_only": state.read_only,
        "path": request.url.path,
        **context,
    }
    html = environment().get_template(template).render(values)
    return HTMLResponse(html, status_code=status_code)


def path_segment(value: object) -> str:
    """A value as one percent-encoded URL path segment (or query value): every byte but
    ``A-Za-z0-9_.-~`` encoded, "/" included, so a type named ``evil/../victim`` stays one
    segment and a browser cannot resolve it to another route. The routes see it decoded."""
    return quote(str(value), safe="")


def is_dot_segment(value: object) -> bool:
    """Whether ``value`` is "." or "..": a path segment no encoding keeps (browsers resolve
    ``%2e%2e`` like ``..``), so a form cannot post to a URL naming it."""
    return str(value) in (".", "..")


def when(value: datetime | None) -> str:
    """A timestamp as UTC text, seconds precision ("" for None)."""
    if value is None:
        return ""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def stamp(value: datetime | None) -> Markup:
    """A timestamp as ``<time datetime="ISO 8601 UTC">UTC text</time>`` (app.js shows it
    relative, the absolute text on hover; without script the UTC text stays); "" for None."""
    if value is None:
        return Markup("")
    utc = value.astimezone(UTC)
    iso = utc.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return Markup('<time datetime="{}">{}</time>').format(iso, when(utc))


def seconds(value: float | None) -> str:
    """A short duration with sub-second precision: 12 ms, 3.4 s, then as :func:`age`."""
    if value is None:
        return ""
    value = max(value, 0.0)
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 60:
        return f"{value:.1f} s"
    return age(value)


def age(seconds: float | None) -> str:
    """A duration in seconds as short text: 42s, 5m 3s, 2h 10m, 3d 4h ("" for None)."""
    if seconds is None:
        return ""
    total = int(max(seconds, 0))
    if total < 60:
        return f"{total}s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes}m {secs}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h {minutes}m"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h"


def as_json(value: Any) -> str:
    """A value as indented JSON text (escaped by the template like any other text)."""
    return orjson.dumps(value, option=orjson.OPT_INDENT_2, default=str).decode()


def capped_count(value: int, cap: int) -> str:
    """A count, shown as "cap+" once it reached the cap."""
    return f"{cap:,}+" if value >= cap else f"{value:,}"


#: Every status the pages colour (``class="status status-<name>"``): the stored four, and
#: "scheduled" (pending, due later) and "waiting" (pending on other jobs).
SHOWN_STATUSES = ("pending", "scheduled", "waiting", "running", "succeeded", "failed")


def shown_status(job: JobSummary, now: datetime) -> str:
    """The status a page shows: "scheduled" for a pending job not due yet, else the stored
    one."""
    if job.status is JobStatus.PENDING and job.run_at > now:
        return "scheduled"
    return str(job.status.value)


@dataclass(frozen=True, slots=True)
class Tick:
    """One axis tick: its position along the axis (SVG units) and its label."""

    at: float
    label: str


@dataclass(frozen=True, slots=True)
class Bar:
    """One minute of the throughput chart (SVG coordinates)."""

    x: float
    width: float
    ok_y: float
    ok_height: float
    bad_y: float
    bad_height: float
    label: str


@dataclass(frozen=True, slots=True)
class Chart:
    """The throughput chart: stacked bars in the plot area (``left``, ``top``, ``plot_width``
    x ``plot_height``) of an SVG of ``width`` x ``height``, its axes' ticks, and totals."""

    bars: tuple[Bar, ...]
    peak: int
    total_ok: int
    total_bad: int
    y_ticks: tuple[Tick, ...] = ()
    x_ticks: tuple[Tick, ...] = ()
    width: int = 960
    height: int = 220
    left: int = 48
    top: int = 10
    right: int = 12
    bottom: int = 26

    @property
    def plot_width(self) -> int:
        """Width of the plot area."""
        return self.width - self.left - self.right

    @property
    def plot_height(self) -> int:
        """Height of the plot area."""
        return self.height - self.top - self.bottom

    @property
    def baseline(self) -> int:
        """The y of the x axis."""
        return self.height - self.bottom


def nice_ceiling(peak: int, ticks: int = 4) -> tuple[int, int]:
    """(top, step): the y axis' top and tick step, a 1-2-5 multiple of a power of ten, so
    that ``top`` >= ``peak`` in at most ``ticks`` steps (an empty chart reads 0-4)."""
    if peak <= 0:
        return ticks, 1
    step = 1
    while True:
        for factor in (1, 2, 5):
            if step * factor * ticks >= peak:
                size = step * factor
                return size * -(-peak // size), size
        step *= 10


def chart(minutes: Sequence[MinuteCount]) -> Chart:
    """Stacked bars (succeeded below, failed above) of jobs finished per minute, a y axis of
    round ticks and an x axis labelled every ten minutes (UTC)."""
    base = Chart((), 0, 0, 0)
    peak = max((m.succeeded + m.failed for m in minutes), default=0)
    top_value, step_value = nice_ceiling(peak)
    scale = base.plot_height / top_value
    y_ticks = tuple(
        Tick(round(base.baseline - v * scale, 2), f"{v:,}")
        for v in range(0, top_value + 1, step_value)
    )
    if not minutes:
        return Chart((), 0, 0, 0, y_ticks)
    step = base.plot_width / len(minutes)
    gap = min(2.0, step / 4)
    bars: list[Bar] = []
    x_ticks: list[Tick] = []
    for index, minute in enumerate(minutes):
        at = minute.at.astimezone(UTC)
        x = base.left + index * step
        ok_h = minute.succeeded * scale
        bad_h = minute.failed * scale
        ok_y = base.baseline - ok_h
        bars.append(
            Bar(
                x=round(x + gap / 2, 2),
                width=round(max(step - gap, 1), 2),
                ok_y=round(ok_y, 2),
                ok_height=round(ok_h, 2),
                bad_y=round(ok_y - bad_h, 2),
                bad_height=round(bad_h, 2),
                label=f"{at:%H:%M}: {minute.succeeded} succeeded, {minute.failed} failed",
            )
        )
        if at.minute % 10 == 0:
            x_ticks.append(Tick(round(x + step / 2, 2), f"{at:%H:%M}"))
    return Chart(
        tuple(bars),
        peak,
        sum(m.succeeded for m in minutes),
        sum(m.failed for m in minutes),
        y_ticks,
        tuple(x_ticks),
    )


@dataclass(frozen=True, slots=True)
class TypeBar:
    """One type's row of the finishes-per-type chart: its counts and bar widths (percent
    of the busiest type's total)."""

    type: str
    succeeded: int
    failed: int
    ok_width: float
    bad_width: float


def type_bars(finishes: Sequence[TypeFinishes]) -> tuple[TypeBar, ...]:
    """Horizontal stacked bars of each type's finishes, scaled to the busiest type."""
    peak = max((f.succeeded + f.failed for f in finishes), default=0)
    if peak <= 0:
        return ()
    return tuple(
        TypeBar(
            f.type,
            f.succeeded,
            f.failed,
            round(100 * f.succeeded / peak, 2),
            round(100 * f.failed / peak, 2),
        )
        for f in finishes
    )
