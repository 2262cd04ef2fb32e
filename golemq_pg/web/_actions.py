"""The dashboard's actions (POST routes): retry, run now, cancel, retry all matching, pause
and resume a type. The guard (``_app.Guard``) has already refused read-only mode and
cross-origin posts; each action validates its input (400 and nothing changed when bad),
awaits the ``AsyncQueue`` verb (over either kind of store), and answers 303 back to the
page it came from with a fixed notice. Retrying every dead letter of a group first answers
a confirmation page."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from golemq_pg._validation import check_job_id, check_name
from golemq_pg.queue import AsyncQueue
from golemq_pg.store import calls
from golemq_pg.web._pages import bad_request, read
from golemq_pg.web._render import page

#: The longest error text a bulk retry's form may carry (last_error is bounded far below).
MAX_ERROR_FIELD = 10_000


def _queue(request: Request) -> AsyncQueue:
    queue: AsyncQueue = request.app.state.queue
    return queue


def _base(request: Request) -> str:
    root: str = request.scope.get("root_path", "")
    return root.rstrip("/")


def back(request: Request, default: str, notice: str) -> RedirectResponse:
    """303 to the page the form was on (its same-origin ``Referer``, inside this app), else
    to ``default`` (a path below the app), with ``?notice=``."""
    base = _base(request)
    target = base + default
    referer = request.headers.get("referer")
    if referer:
        parts = urlsplit(referer)
        inside = parts.path.startswith(base + "/") and not parts.path.startswith("//")
        if parts.netloc == request.headers.get("host") and inside:
            query = [(k, v) for k, v in parse_qsl(parts.query) if k != "notice"]
            target = parts.path + ("?" + urlencode(query) if query else "")
    sep = "&" if "?" in target else "?"
    return RedirectResponse(target + sep + urlencode({"notice": notice}), status_code=303)


def _job_id(request: Request) -> str | None:
    try:
        return check_job_id(request.path_params["job_id"])
    except ValueError:
        return None


async def retry(request: Request) -> Response:
    """One dead letter back to PENDING, due now."""
    job_id = _job_id(request)
    if job_id is None:
        return bad_request(request, "not a job id")
    done = await _queue(request).retry(job_id)
    return back(request, f"/jobs/{job_id}", "retried" if done else "unchanged")


async def run_now(request: Request) -> Response:
    """One job parked in the future becomes due now."""
    job_id = _job_id(request)
    if job_id is None:
        return bad_request(request, "not a job id")
    done = await _queue(request).run_now(job_id)
    return back(request, f"/jobs/{job_id}", "run-now" if done else "unchanged")


async def cancel(request: Request) -> Response:
    """Cancel one pending or running job (a running one is aborted in its worker)."""
    job_id = _job_id(request)
    if job_id is None:
        return bad_request(request, "not a job id")
    done = await _queue(request).cancel(job_id, reason="cancelled from web")
    if not done:
        return back(request, f"/jobs/{job_id}", "unchanged")
    # The job is gone once cancelled: to the jobs list rather than its 404 page.
    return RedirectResponse(_base(request) + "/jobs?notice=cancelled", status_code=303)


def _error_field(form: FormData) -> str | None:
    value = form.get("error")
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_ERROR_FIELD:
        raise ValueError(f"error must be text of at most {MAX_ERROR_FIELD} characters")
    return value


async def retry_matching(request: Request) -> Response:
    """Every dead letter of one (type, error) group back to PENDING; without
    ``confirm=yes``, the confirmation page (how many, which group) and nothing changed."""
    form = await request.form()
    try:
        job_type = check_name(form.get("type"), "type")
        error = _error_field(form)
    except ValueError as exc:
        return bad_request(request, str(exc))
    if form.get("confirm") != "yes":
        letters = await read(request, calls.dashboard_dead_letters())
        count = sum(g.count for g in letters.groups if g.type == job_type and g.error == error)
        return page(
            request,
            "confirm.html",
            {"type": job_type, "error": error, "count": count, "capped": letters.capped},
        )
    await read(request, calls.dashboard_retry_dead_letters(job_type, error))
    return RedirectResponse(_base(request) + "/failed?notice=retried-all", status_code=303)


async def pause(request: Request) -> Response:
    """Pause a type in every worker (field ``reason``, optional)."""
    form = await request.form()
    reason = form.get("reason")
    try:
        text = reason.strip() if isinstance(reason, str) and reason.strip() else None
        job_type = check_name(request.path_params["job_type"], "type")
        await _queue(request).pause(job_type, text)
    except ValueError as exc:
        return bad_request(request, str(exc))
    return back(request, "/", "paused")


async def resume(request: Request) -> Response:
    """Resume a paused type."""
    try:
        job_type = check_name(request.path_params["job_type"], "type")
    except ValueError as exc:
        return bad_request(request, str(exc))
    await _queue(request).resume(job_type)
    return back(request, "/", "resumed")
