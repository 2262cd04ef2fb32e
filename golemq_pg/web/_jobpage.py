"""The job page and its live fragment: every summary field, the attempt timeline, progress,
result, the actions that apply; its payload only when the app shows payloads.

The page links the job's workflow, its parents (with their status) and its children
(``job_links``). ``GET /jobs/{id}`` renders the page; ``GET /jobs/{id}/live`` renders only
the part the page's script refreshes (the page asks for it every two seconds while the job
is waiting, pending or running, and stops once a fragment says the job finished). Both
read one job by id (the primary key), its links (by its id) and the database's clock:
bounded whatever the table's size.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse

from golemq_pg._types import JobStatus, JobSummary
from golemq_pg._validation import check_job_id
from golemq_pg.store import calls
from golemq_pg.web._pages import notice_of, read
from golemq_pg.web._render import page, shown_status


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt on the job page's timeline.

    ``outcome``: "running", "succeeded", "failed" (the job's last, dead-lettered attempt)
    or "retried" (failed, the job was tried again). ``started_at`` is the attempt's start: kept with
    each failed attempt since migration 0012, else known for the latest attempt only (the
    row keeps its latest claim); ``ended_at`` is when a failed attempt was recorded, or the
    job's finish.
    """

    number: int
    outcome: str
    started_at: datetime | None
    ended_at: datetime | None
    duration: float | None
    error: str | None = None
    traceback: str | None = None
    worker_id: str | None = None


def timeline(job: JobSummary, now: datetime) -> tuple[Attempt, ...]:
    """The job's attempts, oldest first: each kept failed attempt (the last 20), then the
    running or succeeded one. Durations only where both ends are known."""
    out: list[Attempt] = []
    started = job.started_at
    previous_end: datetime | None = None
    for index, entry in enumerate(job.errors):
        last = index == len(job.errors) - 1
        outcome = "failed" if last and job.status is JobStatus.FAILED else "retried"
        # The latest claim started this attempt when it lies between the previous
        # attempt's end and this one's.
        own_start = entry.started_at or (
            started
            if started is not None
            and started <= entry.at
            and (previous_end is None or started > previous_end)
            else None
        )
        out.append(
            Attempt(
                number=entry.attempt,
                outcome=outcome,
                started_at=own_start,
                ended_at=entry.at,
                duration=None if own_start is None else (entry.at - own_start).total_seconds(),
                error=entry.error,
                traceback=entry.traceback,
                worker_id=entry.worker_id,
            )
        )
        previous_end = entry.at
    if started is not None and (previous_end is None or started > previous_end):
        if job.status is JobStatus.RUNNING:
            out.append(
                Attempt(job.attempts, "running", started, None, (now - started).total_seconds())
            )
        elif job.status is JobStatus.SUCCEEDED and job.finished_at is not None:
            out.append(
                Attempt(
                    job.attempts,
                    "succeeded",
                    started,
                    job.finished_at,
                    (job.finished_at - started).total_seconds(),
                )
            )
    return tuple(out)


def _is_live(job: JobSummary) -> bool:
    return job.status in (JobStatus.WAITING, JobStatus.PENDING, JobStatus.RUNNING)


async def _context(request: Request) -> dict[str, Any]:
    """The job's page context (404 for an id that is not a job's)."""
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
    links = await read(request, calls.job_links(job_id))
    now = await read(request, calls.now())
    return {
        "job": summary,
        "links": links,
        "parents": [(p, shown_status(p, now)) for p in links.parents],
        "now": now,
        "shown": shown_status(summary, now),
        "attempts": timeline(summary, now),
        "live": _is_live(summary),
        "payload": payload,
        "show_payloads": request.app.state.show_payloads,
        "can_retry": summary.status is JobStatus.FAILED,
        "can_run_now": summary.status is JobStatus.PENDING and summary.run_at > now,
        "can_cancel": _is_live(summary),
        "notice": notice_of(request),
    }


async def job(request: Request) -> HTMLResponse:
    """One job's page."""
    return page(request, "job.html", await _context(request))


async def job_live(request: Request) -> HTMLResponse:
    """The part of a job's page its script refreshes (an HTML fragment)."""
    return page(request, "_job.html", await _context(request))
