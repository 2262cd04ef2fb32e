"""The overview page and its live fragment (``GET /``, ``GET /?fragment=live``).

Counts by status and type (capped), due backlog and its oldest age, throughput per minute
over the last hour (the history's per-minute counts), the types that finished most today
(its per-day counts), workers, paused types, and the types with due jobs that no live
worker handles. Every read is bounded: capped counts, a loose index scan over types, a
few hundred count rows, the worker registry (one row per worker process).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse

from golemq_pg._types import WorkerSummary
from golemq_pg.store import calls
from golemq_pg.store.dashboard import TypeCounts
from golemq_pg.web._pages import notice_of, read
from golemq_pg.web._render import chart, page, type_bars

#: How many types the finishes-per-type chart shows.
TOP_TYPES = 8


def unattended(
    types: Iterable[TypeCounts], workers: Sequence[WorkerSummary], paused: Iterable[str]
) -> list[str]:
    """Types with due jobs that no live (not lost) worker has a handler for, paused types
    left out (nobody is meant to run them), by name."""
    handled = {t for w in workers if w.state != "lost" for t in w.handlers}
    held = set(paused)
    return sorted(
        t.type for t in types if t.due > 0 and t.type not in handled and t.type not in held
    )


async def overview(request: Request) -> HTMLResponse:
    """The overview; with ``?fragment=live`` only the part the page's script refreshes."""
    summary = await read(request, calls.dashboard_overview())
    minutes = await read(request, calls.dashboard_throughput(60))
    finishes = await read(request, calls.dashboard_type_finishes(TOP_TYPES))
    workers = await read(request, calls.worker_list())
    paused = await read(request, calls.type_paused())
    context: dict[str, Any] = {
        "overview": summary,
        "chart": chart(minutes),
        "type_bars": type_bars(finishes),
        "workers": workers,
        "alive": [w for w in workers if w.state != "lost"],
        "paused": paused,
        "unattended": unattended(summary.types, workers, paused),
        "notice": notice_of(request),
    }
    live = request.query_params.get("fragment") == "live"
    return page(request, "_live.html" if live else "overview.html", context)
