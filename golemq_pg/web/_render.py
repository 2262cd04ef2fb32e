"""Rendering for the dashboard: the Jinja2 environment (autoescaping every value), the
value formatters its templates use, and the server-side SVG throughput chart."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Any
from urllib.parse import quote

import orjson
from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse

from golemq_pg.store.dashboard import MinuteCount


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
    """The throughput chart: bars, the largest minute, and the chart's size."""

    bars: tuple[Bar, ...]
    peak: int
    total_ok: int
    total_bad: int
    width: int = 600
    height: int = 120


def chart(minutes: Sequence[MinuteCount]) -> Chart:
    """Stacked bars (succeeded below, failed above) of jobs finished per minute."""
    base = Chart((), 0, 0, 0)
    peak = max((m.succeeded + m.failed for m in minutes), default=0)
    if not minutes:
        return base
    step = base.width / len(minutes)
    scale = (base.height - 4) / peak if peak else 0.0
    bars = []
    for index, minute in enumerate(minutes):
        ok_h = minute.succeeded * scale
        bad_h = minute.failed * scale
        ok_y = base.height - ok_h
        bars.append(
            Bar(
                x=round(index * step, 2),
                width=round(max(step - 1, 1), 2),
                ok_y=round(ok_y, 2),
                ok_height=round(ok_h, 2),
                bad_y=round(ok_y - bad_h, 2),
                bad_height=round(bad_h, 2),
                label=f"{minute.at.astimezone(UTC):%H:%M}: {minute.succeeded} succeeded, "
                f"{minute.failed} failed",
            )
        )
    return Chart(
        tuple(bars),
        peak,
        sum(m.succeeded for m in minutes),
        sum(m.failed for m in minutes),
    )
