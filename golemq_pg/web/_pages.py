"""The dashboard's pages (GET routes). Each reads through typed store calls
(:mod:`golemq_pg.store.calls`): awaited on an ``AsyncPostgresStore``, in a worker thread on
a synchronous store (its verbs block); then renders one template. Bad query parameters get
a 400 page that says which, and unknown jobs a 404."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from golemq_pg._types import JobStatus, JobSummary, WorkerSummary
from golemq_pg._validation import (
    check_job_id,
    check_name,
    check_status,
    check_tags,
    check_text,
)
from golemq_pg.store import calls
from golemq_pg.store.calls import AnyStore, StoreCall
from golemq_pg.store.dashboard import (
    BULK_CAP,
    PAGE_SCAN_WINDOW,
    SEARCH_SCAN_WINDOW,
    JobQuery,
    TypeCounts,
)
from golemq_pg.web._render import page, shown_status

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


#: The longest notice a page shows (a longer ``?notice=`` is cut).
MAX_NOTICE = 200


#: Signs the notices actions compose (this process's own key), so that a link crafted
#: elsewhere (``/jobs?notice=Your+session+expired...``) cannot put its text on a page.
_NOTICE_KEY = secrets.token_bytes(32)


def _notice_signature(text: str) -> str:
    digest = hmac.new(_NOTICE_KEY, text.encode("utf-8", "replace"), hashlib.sha256)
    return digest.hexdigest()[:32]


def notice_params(text: str) -> list[tuple[str, str]]:
    """The query parameters that carry a notice an action composed: the text and its
    signature (``notice``, ``ns``). A fixed notice (:data:`NOTICES`) needs no signature."""
    text = text[:MAX_NOTICE]
    if text in NOTICES:
        return [("notice", text)]
    return [("notice", text), ("ns", _notice_signature(text))]


def notice_of(request: Request) -> str | None:
    """The page's notice: an action's redirect names a fixed one (:data:`NOTICES`) or
    carries a text it composed, signed by this process (:func:`notice_params`); any other
    ``?notice=`` is ignored, never shown. Escaped by the templates like every value."""
    raw = request.query_params.get("notice", "")
    if raw in NOTICES:
        return NOTICES[raw]
    signature = request.query_params.get("ns", "")
    if not raw or len(raw) > MAX_NOTICE:
        return None
    if not hmac.compare_digest(signature.encode("ascii", "replace"),
                               _notice_signature(raw).encode("ascii")):
        return None
    return raw


def bad_request(request: Request, message: str) -> HTMLResponse:
    """A 400 page naming what was wrong (escaped like everything else)."""
    return page(request, "error.html", {"status": 400, "message": message,
                                        "notice": notice_of(request)}, status_code=400)


async def not_found(request: Request, exc: Exception) -> Response:
    """The 404 page (unknown route or job)."""
    detail = exc.detail if isinstance(exc, HTTPException) else "not found"
    return page(request, "error.html", {"status": 404, "message": detail,
                                        "notice": notice_of(request)}, status_code=404)


#: The statuses the jobs page filters by beyond :class:`JobStatus` (``waiting`` among
#: them: jobs held back until their parents finish): ``scheduled`` (PENDING with ``run_at``
#: in the future).
EXTRA_STATUSES = ("scheduled",)
#: The longest search text (``q=``) a jobs page takes.
MAX_SEARCH = 200
#: The jobs page's filter fields (query parameters, and a bulk action's form fields).
FILTER_FIELDS = ("q", "type", "status", "scope_type", "scope_id", "tag")


def status_choices() -> list[str]:
    """Every value the jobs page's status filter takes."""
    values = [s.value for s in JobStatus]
    return [*values, *(v for v in EXTRA_STATUSES if v not in values)]


def job_query(params: Mapping[str, Any], window: int = PAGE_SCAN_WINDOW) -> JobQuery:
    """The jobs page's filters and cursors from ``params`` (a query string or a form);
    ValueError naming the parameter when one is bad."""

    def value(name: str) -> str:
        raw = params.get(name)
        return raw.strip() if isinstance(raw, str) else ""

    def text(name: str, what: str) -> str | None:
        found = value(name)
        return check_name(found, what) if found else None

    def job_id(name: str) -> str | None:
        found = value(name)
        if not found:
            return None
        try:
            return check_job_id(found)
        except ValueError:  # said with the parameter's name: the page has several id fields
            raise ValueError(f"{name} must be a job id (digits, at most 2**63-1)") from None

    status_text = value("status").lower()
    scheduled = status_text == "scheduled"
    status = JobStatus.PENDING if scheduled else (
        check_status(status_text) if status_text else None)
    tag = value("tag")
    search = value("q")
    if len(search) > MAX_SEARCH:
        raise ValueError(f"q must be at most {MAX_SEARCH} characters")
    search = check_text(search, "q")
    after, before = job_id("after"), job_id("before")
    if after is not None and before is not None:
        raise ValueError("give after or before, not both")
    return JobQuery(
        type=text("type", "type"),
        status=status,
        scheduled=scheduled,
        scope_type=text("scope_type", "scope_type"),
        scope_id=text("scope_id", "scope_id"),
        tag=(check_tags([tag], "tag") or (None,))[0] if tag else None,
        job_id=job_id("id"),
        after=after,
        before=before,
        search=search or None,
        limit=PAGE_SIZE,
        window=SEARCH_SCAN_WINDOW if search and window == PAGE_SCAN_WINDOW else window,
    )


@dataclass(frozen=True, slots=True)
class JobRow:
    """A job on the jobs list: the status it shows ("scheduled" for a pending job due
    later) and its duration, ``seconds`` from start to finish (or to now while it runs;
    None when it never started), ``running`` for the latter."""

    job: JobSummary
    shown: str
    seconds: float | None
    running: bool


def job_rows(jobs: Sequence[JobSummary], now: datetime) -> list[JobRow]:
    """The jobs list's rows, each with its shown status and duration."""
    out = []
    for j in jobs:
        running = j.status is JobStatus.RUNNING and j.started_at is not None
        end = j.finished_at if j.finished_at is not None else (now if running else None)
        seconds = None if j.started_at is None or end is None else (
            max((end - j.started_at).total_seconds(), 0.0))
        out.append(JobRow(j, shown_status(j, now), seconds, running))
    return out


def types_without_workers(
    types: Iterable[TypeCounts], workers: Iterable[WorkerSummary],
    paused: Iterable[str] = (),
) -> list[str]:
    """The types with due jobs that no live worker (state other than "lost") has a handler
    for, sorted: nothing will run them until one starts. ``types`` as the overview reads
    them (``Overview.types``), ``workers`` as ``worker_list`` (``Queue.workers()``);
    ``paused`` types are left out (nobody is meant to run them)."""
    handled = {t for w in workers if w.state != "lost" for t in w.handlers}
    held = set(paused)
    return sorted(t.type for t in types
                  if t.due > 0 and t.type not in handled and t.type not in held)


async def jobs(request: Request) -> HTMLResponse:
    """Jobs newest first, filtered by type, status (``scheduled`` and ``waiting`` too),
    scope, tag, id, or a search (``q``: an id, a type substring, error text), one keyset page
    each way; with ``?fragment=rows`` only the table the page's script refreshes."""
    try:
        query = job_query(request.query_params)
    except ValueError as exc:
        return bad_request(request, str(exc))
    found = await read(request, calls.dashboard_jobs(query))
    now = await read(request, calls.now())
    filters = {k: request.query_params.get(k, "") for k in (*FILTER_FIELDS, "id")}
    kept = {k: v for k, v in filters.items() if v}
    cursor = {k: request.query_params[k] for k in ("after", "before")
              if request.query_params.get(k)}
    context: dict[str, Any] = {
        "page": found,
        "rows": job_rows(found.jobs, now),
        "filters": filters,
        "older_query": {**kept, "after": found.next_after} if found.next_after else None,
        "newer_query": {**kept, "before": found.prev_before} if found.prev_before else None,
        "live_query": {**kept, **cursor, "fragment": "rows"},
        "statuses": status_choices(),
        "searched": query.search is not None,
        "window": SEARCH_SCAN_WINDOW if query.search else PAGE_SCAN_WINDOW,
        "bulk_cap": BULK_CAP,
        "notice": notice_of(request),
    }
    if request.query_params.get("fragment") == "rows":
        return page(request, "_jobs_rows.html", context)
    overview = await read(request, calls.dashboard_overview())
    workers_found = await read(request, calls.worker_list())
    paused = await read(request, calls.type_paused())
    context["types"] = [t.type for t in overview.types]
    context["unhandled"] = types_without_workers(overview.types, workers_found, paused)
    return page(request, "jobs.html", context)


async def failed(request: Request) -> HTMLResponse:
    """Dead letters grouped by (type, error), with retry one / retry all matching."""
    letters = await read(request, calls.dashboard_dead_letters())
    context: dict[str, Any] = {"letters": letters, "notice": notice_of(request)}
    overview = await read(request, calls.dashboard_overview())
    workers_found = await read(request, calls.worker_list())
    paused = await read(request, calls.type_paused())
    context["unhandled"] = types_without_workers(overview.types, workers_found, paused)
    return page(request, "failed.html", context)


async def schedules(request: Request) -> HTMLResponse:
    """Every recurring schedule with its next and last run."""
    found = await read(request, calls.schedule_list())
    return page(request, "schedules.html", {"schedules": found, "notice": notice_of(request)})


async def workers(request: Request) -> HTMLResponse:
    """The worker registry, paused types and the resource pools the database knows."""
    context: dict[str, Any] = {
        "workers": await read(request, calls.worker_list()),
        "pools": await read(request, calls.dashboard_pools(request.app.state.resources)),
        "paused": await read(request, calls.type_paused()),
    }
    context["notice"] = notice_of(request)
    return page(request, "workers.html", context)
