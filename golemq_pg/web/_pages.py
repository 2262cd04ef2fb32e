"""The dashboard's pages (GET routes). Each reads through typed store calls
(:mod:`golemq_pg.store.calls`): awaited on an ``AsyncPostgresStore``, in a worker thread on
a synchronous store (its verbs block); then renders one template. Bad query parameters get
a 400 page that says which, and unknown jobs a 404."""

from __future__ import annotations

from typing import Any, TypeVar

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from golemq_pg._types import JobStatus
from golemq_pg._validation import check_job_id, check_name, check_status, check_tags
from golemq_pg.store import calls
from golemq_pg.store.calls import AnyStore, StoreCall
from golemq_pg.store.dashboard import JobQuery
from golemq_pg.web._render import chart, page

T = TypeVar("T")

#: Rows on one jobs page.
PAGE_SIZE = 50

#: What an action's redirect may announce (``?notice=``): fixed texts, never echoed input.
NOTICES = {
    "retried": "Retried: the job is pending again.",
    "run-now": "The job is due now.",
    "cancelled": "The job was cancelled.",
    "paused": "The type is paused.",
    "resumed": "The type is resumed.",
    "retried-all": "The matching dead letters are pending again.",
    "unchanged": "Nothing changed: the job is not in a state this action applies to.",
}


async def read(request: Request, call: StoreCall[T]) -> T:
    """Make one store call for a route: awaited, or in Starlette's thread pool."""
    store: AnyStore = request.app.state.store
    return await calls.run_async(store, call, run_in_threadpool)


def _notice(request: Request) -> str | None:
    return NOTICES.get(request.query_params.get("notice", ""))


def bad_request(request: Request, message: str) -> HTMLResponse:
    """A 400 page naming what was wrong (escaped like everything else)."""
    return page(request, "error.html", {"status": 400, "message": message}, status_code=400)


async def not_found(request: Request, exc: Exception) -> Response:
    """The 404 page (unknown route or job)."""
    detail = exc.detail if isinstance(exc, HTTPException) else "not found"
    return page(request, "error.html", {"status": 404, "message": detail}, status_code=404)


async def overview(request: Request) -> HTMLResponse:
    """Counts by status and type, backlog age, throughput, workers, paused types; with
    ``?fragment=live`` only the part the page's script refreshes."""
    minutes = await read(request, calls.dashboard_throughput(60))
    context: dict[str, Any] = {
        "overview": await read(request, calls.dashboard_overview()),
        "chart": chart(minutes),
        "workers": await read(request, calls.worker_list()),
        "paused": await read(request, calls.type_paused()),
        "statuses": list(JobStatus),
    }
    context["notice"] = _notice(request)
    live = request.query_params.get("fragment") == "live"
    return page(request, "_live.html" if live else "overview.html", context)


def _job_query(request: Request) -> JobQuery:
    """The jobs page's filters from the query string (ValueError for a bad one)."""
    params = request.query_params

    def text(name: str, what: str) -> str | None:
        value = params.get(name, "").strip()
        return check_name(value, what) if value else None

    def job_id(name: str) -> str | None:
        value = params.get(name, "").strip()
        if not value:
            return None
        try:
            return check_job_id(value)
        except ValueError:  # said with the parameter's name: the page has two id fields
            raise ValueError(f"{name} must be a job id (digits, at most 2**63-1)") from None

    status_text = params.get("status", "").strip()
    tag = params.get("tag", "").strip()
    return JobQuery(
        type=text("type", "type"),
        status=check_status(status_text) if status_text else None,
        scope_type=text("scope_type", "scope_type"),
        scope_id=text("scope_id", "scope_id"),
        tag=(check_tags([tag], "tag") or (None,))[0] if tag else None,
        job_id=job_id("id"),
        after=job_id("after"),
        limit=PAGE_SIZE,
    )


async def jobs(request: Request) -> HTMLResponse:
    """Jobs newest first, filtered by type, status, scope, tag or id, one keyset page."""
    try:
        query = _job_query(request)
    except ValueError as exc:
        return bad_request(request, str(exc))
    found = await read(request, calls.dashboard_jobs(query))
    filters = {
        k: request.query_params.get(k, "")
        for k in ("type", "status", "scope_type", "scope_id", "tag", "id")
    }
    next_filters = {k: v for k, v in filters.items() if v}
    if found.next_after is not None:
        next_filters["after"] = found.next_after
    return page(
        request,
        "jobs.html",
        {
            "page": found,
            "filters": filters,
            "next_query": next_filters if found.next_after is not None else None,
            "statuses": list(JobStatus),
        },
    )


async def job(request: Request) -> HTMLResponse:
    """One job: every summary field, attempt history, progress, result, the actions that
    apply; its payload only when the app shows payloads."""
    try:
        job_id = check_job_id(request.path_params["job_id"])
    except ValueError:
        raise HTTPException(404, "no such job") from None
    summary = await read(request, calls.job_get(job_id))
    if summary is None:
        raise HTTPException(404, f"no job {job_id} (never added, or cancelled or pruned)")
    payload = None
    if request.app.state.show_payloads:
        raw = await read(request, calls.job_payload(job_id))
        payload = None if raw is None else raw.decode("utf-8", "replace")
    now = await read(request, calls.now())
    return page(
        request,
        "job.html",
        {
            "job": summary,
            "payload": payload,
            "show_payloads": request.app.state.show_payloads,
            "can_retry": summary.status is JobStatus.FAILED,
            "can_run_now": summary.status is JobStatus.PENDING and summary.run_at > now,
            "can_cancel": summary.status in (JobStatus.PENDING, JobStatus.RUNNING),
            "notice": _notice(request),
        },
    )


async def failed(request: Request) -> HTMLResponse:
    """Dead letters grouped by (type, error), with retry one / retry all matching."""
    letters = await read(request, calls.dashboard_dead_letters())
    return page(request, "failed.html", {"letters": letters, "notice": _notice(request)})


async def schedules(request: Request) -> HTMLResponse:
    """Every recurring schedule with its next and last run."""
    found = await read(request, calls.schedule_list())
    return page(request, "schedules.html", {"schedules": found})


async def workers(request: Request) -> HTMLResponse:
    """The worker registry, paused types and the resource pools the database knows."""
    context: dict[str, Any] = {
        "workers": await read(request, calls.worker_list()),
        "pools": await read(request, calls.dashboard_pools(request.app.state.resources)),
        "paused": await read(request, calls.type_paused()),
    }
    context["notice"] = _notice(request)
    return page(request, "workers.html", context)
