"""The workflow page and its live fragment (``GET /workflows/{id}``, ``GET
/workflows/{id}/live``): the workflow's name, status and times, its graph (laid out by
:mod:`golemq_pg.web._graph`, drawn as SVG) and a table of its jobs with their parents.

Both read the workflow once (``workflow_get``: its record, its jobs by id and its edges)
and the database's clock. The page refreshes the fragment every two seconds while the
workflow runs, and stops once a fragment says it finished.
"""

from __future__ import annotations

from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse

from golemq_pg._validation import check_job_id
from golemq_pg.store import calls
from golemq_pg.web._graph import layout, parents_of
from golemq_pg.web._pages import job_rows, notice_of, read
from golemq_pg.web._render import page


async def _context(request: Request) -> dict[str, Any]:
    """The workflow's page context (404 for an id that is not a workflow's)."""
    try:
        workflow_id = check_job_id(request.path_params["workflow_id"])
    except ValueError:
        raise HTTPException(404, "no such workflow") from None
    found = await read(request, calls.workflow_get(workflow_id))
    if found is None:
        raise HTTPException(404, f"no workflow {workflow_id} (never added, or pruned)")
    now = await read(request, calls.now())
    counts: dict[str, int] = {}
    rows = job_rows(found.jobs, now)
    for row in rows:
        counts[row.shown] = counts.get(row.shown, 0) + 1
    return {
        "workflow": found,
        "graph": layout(found.jobs, found.edges, now),
        "rows": rows,
        "parents": parents_of(found.edges),
        "counts": counts,
        "live": found.status == "running",
        "now": now,
        "notice": notice_of(request),
    }


async def workflow(request: Request) -> HTMLResponse:
    """One workflow's page."""
    return page(request, "workflow.html", await _context(request))


async def workflow_live(request: Request) -> HTMLResponse:
    """The part of a workflow's page its script refreshes (an HTML fragment)."""
    return page(request, "_workflow.html", await _context(request))
