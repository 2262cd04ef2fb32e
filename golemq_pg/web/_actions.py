"""The dashboard's actions (POST routes): retry, run now, cancel, retry all matching, pause
and resume a type. The guard (``_app.Guard``) has already refused read-only mode and
cross-origin posts; each action validates its input (400 and nothing changed when bad),
awaits the ``AsyncQueue`` verb (over either kind of store), and answers 303 back to the
page it came from with a fixed notice. Retrying every dead letter of a group first answers
a confirmation page."""

from __future__ import annotations

from dataclasses import replace
from urllib.parse import parse_qsl, urlencode, urlsplit

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from golemq_pg._validation import MAX_NAME_LENGTH, MAX_PAUSE_REASON, check_job_id, check_name
from golemq_pg.queue import AsyncQueue
from golemq_pg.store import calls
from golemq_pg.store.dashboard import BULK_CAP
from golemq_pg.web._forms import form_text, form_texts
from golemq_pg.web._pages import (
    FILTER_FIELDS,
    MAX_SEARCH,
    bad_request,
    job_query,
    notice_of,
    notice_params,
    read,
)
from golemq_pg.web._render import page

#: The longest error text a bulk retry's form may carry (last_error is bounded far below).
MAX_ERROR_FIELD = 10_000
#: What a confirmation page posts back (``confirm=1``; ``yes`` from older pages).
CONFIRMED = ("1", "yes")


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
            query = [(k, v) for k, v in parse_qsl(parts.query) if k not in ("notice", "ns")]
            target = parts.path + ("?" + urlencode(query) if query else "")
    sep = "&" if "?" in target else "?"
    return RedirectResponse(target + sep + urlencode(notice_params(notice)), status_code=303)


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
    """Cancel one pending or running job (a running one is aborted in its worker); without
    ``confirm=1``, the confirmation page and nothing changed."""
    job_id = _job_id(request)
    if job_id is None:
        return bad_request(request, "not a job id")
    form = await request.form()
    try:
        confirm = form_text(form, "confirm")
    except ValueError as exc:
        return bad_request(request, str(exc))
    if confirm not in CONFIRMED:
        return page(request, "confirm.html", {
            "question": f"Cancel job {job_id}?",
            "lead": "This cancels job",
            "count_text": job_id,
            "subject": "(a running one is aborted in its worker).",
            "outcome": "A cancelled job is deleted: it cannot be retried.",
            "target": f"/jobs/{job_id}/cancel",
            "fields": [("confirm", "1")],
            "button": "Cancel the job",
            "destructive": True,
            "back_to": f"/jobs/{job_id}",
            "notice": notice_of(request),
        })
    done = await _queue(request).cancel(job_id, reason="cancelled from web")
    if not done:  # not back(): the form was on the confirmation page, a POST route
        return RedirectResponse(f"{_base(request)}/jobs/{job_id}?notice=unchanged",
                                status_code=303)
    # The job is gone once cancelled: to the jobs list rather than its 404 page.
    return RedirectResponse(_base(request) + "/jobs?" + urlencode(
        notice_params(f"Job {job_id} cancelled.")), status_code=303)


async def retry_matching(request: Request) -> Response:
    """Every dead letter of one (type, error) group back to PENDING; without
    ``confirm=yes``, the confirmation page (how many, which group) and nothing changed."""
    form = await request.form()
    try:
        job_type = check_name(form_text(form, "type", limit=MAX_NAME_LENGTH), "type")
        error = form_text(form, "error", limit=MAX_ERROR_FIELD)
        confirm = form_text(form, "confirm")
    except ValueError as exc:
        return bad_request(request, str(exc))
    if confirm not in CONFIRMED:
        letters = await read(request, calls.dashboard_dead_letters())
        count = sum(g.count for g in letters.groups if g.type == job_type and g.error == error)
        fields = [("type", job_type), *([("error", error)] if error is not None else []),
                  ("confirm", "yes")]
        return page(request, "confirm.html", {
            "question": "Retry dead letters?",
            "lead": "This puts",
            "count_text": f"{count:,}" + ("+" if letters.capped else ""),
            "subject": f"dead letters of type {job_type} failing with",
            "error_text": error,
            "outcome": "back in the queue, due now, with their attempts reset.",
            "target": "/failed/retry",
            "fields": fields,
            "button": "Retry them all",
            "destructive": False,
            "back_to": "/failed",
            "notice": notice_of(request),
        })
    count = await read(request, calls.dashboard_retry_dead_letters(job_type, error))
    text = f"{count:,} dead letter{'' if count == 1 else 's'} of {job_type[:60]} retried."
    return RedirectResponse(_base(request) + "/failed?" + urlencode(notice_params(text)),
                            status_code=303)


async def pause(request: Request) -> Response:
    """Pause a type in every worker (field ``reason``, optional)."""
    form = await request.form()
    try:
        reason = form_text(form, "reason", limit=MAX_PAUSE_REASON)
        text = reason.strip() if reason is not None and reason.strip() else None
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


# -- bulk actions on the jobs page ---------------------------------------------------------

#: ``POST /jobs/bulk`` actions: what the notice says was done, and whether the action is
#: destructive (then it is confirmed first, as any action on every job matching a filter).
BULK_ACTIONS = {
    "retry": ("retried", False),
    "run-now": ("made due now", False),
    "cancel": ("cancelled", True),
    "delete": ("deleted", True),
}
#: The most ``ids`` one bulk post may name (a jobs page shows 50).
MAX_BULK_IDS = 500
#: How many of the newest ids a bulk action with ``all=1`` looks at for matches.
BULK_SCAN_WINDOW = 200_000


#: The longest value of a filter field (the search box's own bound for ``q``).
FILTER_LIMITS = {name: MAX_SEARCH if name == "q" else 255 for name in FILTER_FIELDS}


def _filter_fields(form: FormData) -> list[tuple[str, str]]:
    """The jobs page's filter fields a bulk form carried (blank ones mean "any"), to post
    again and to go back to. A value that cannot filter (a NUL, a lone surrogate, over its
    bound) is a ValueError naming the field, never dropped: dropping it would widen an
    action on "every job matching the filter" to more jobs than the operator chose."""
    out = []
    for name in FILTER_FIELDS:
        value = form_text(form, name, limit=FILTER_LIMITS[name])
        if value is not None and value.strip():
            out.append((name, value))
    return out


def _ids(form: FormData) -> list[str]:
    if len(form.getlist("ids")) > MAX_BULK_IDS:
        raise ValueError(f"at most {MAX_BULK_IDS} ids a post (or all=1 with a filter)")
    ids: list[str] = []
    for value in form_texts(form, "ids", limit=40):
        try:
            job_id = check_job_id(value.strip())
        except ValueError:
            raise ValueError("ids must be job ids (digits, at most 2**63-1)") from None
        if job_id not in ids:
            ids.append(job_id)
    return ids


async def _act(request: Request, action: str, job_id: str) -> bool:
    queue = _queue(request)
    if action == "retry":
        return await queue.retry(job_id)
    if action == "run-now":
        return await queue.run_now(job_id)
    if action == "cancel":
        return await queue.cancel(job_id, reason="cancelled from web")
    return await queue.delete(job_id)


def _jobs_url(request: Request, fields: list[tuple[str, str]], notice: str) -> RedirectResponse:
    query = urlencode([*fields, *notice_params(notice)])
    return RedirectResponse(f"{_base(request)}/jobs?{query}", status_code=303)


async def bulk(request: Request) -> Response:
    """One action (field ``action``: retry, run-now, cancel, delete) on the jobs named by
    ``ids`` (repeated), or with ``all=1`` on the jobs matching the filter fields (the
    newest :data:`~golemq_pg.store.dashboard.BULK_CAP` at most). Cancel, delete and any
    ``all=1`` first answer a confirmation page that posts the same fields with
    ``confirm=1``. Then 303 to the jobs list with a notice saying how many changed."""
    form = await request.form()
    try:
        action = form_text(form, "action")
        every = form_text(form, "all") == "1"
        confirmed = form_text(form, "confirm") in CONFIRMED
        fields = _filter_fields(form)
    except ValueError as exc:
        return bad_request(request, str(exc))
    if action is None or action not in BULK_ACTIONS:
        return bad_request(request, "action must be one of retry, run-now, cancel, delete")
    try:
        ids = [] if every else _ids(form)
        query = job_query(dict(fields), window=BULK_SCAN_WINDOW) if every else None
    except ValueError as exc:
        return bad_request(request, str(exc))
    if not every and not ids:
        return _jobs_url(request, fields, "No job selected: tick some rows, or choose every "
                                          "job matching the filter.")
    done_text, destructive = BULK_ACTIONS[action]
    if every and query is not None:
        query = replace(query, after=None, before=None, job_id=None, window=BULK_SCAN_WINDOW)
        ids = await read(request, calls.dashboard_job_ids(query, BULK_CAP))
    if (destructive or every) and not confirmed:
        return _confirm_bulk(request, action, every, ids, fields)
    changed = 0
    for job_id in ids:
        changed += bool(await _act(request, action, job_id))
    notice = f"{changed:,} of {len(ids):,} job{'' if len(ids) == 1 else 's'} {done_text}."
    if changed < len(ids):
        notice += " The others were not in a state this action applies to."
    if every and len(ids) >= BULK_CAP:
        notice += f" One post acts on at most {BULK_CAP:,} jobs: post again for more."
    return _jobs_url(request, fields, notice)


def _confirm_bulk(
    request: Request, action: str, every: bool, ids: list[str], fields: list[tuple[str, str]]
) -> Response:
    done_text, destructive = BULK_ACTIONS[action]
    count = f"{len(ids):,}" + ("+" if every and len(ids) >= BULK_CAP else "")
    if every:
        shown = ", ".join(f"{k} {v!r}" for k, v in fields) or "none (every job)"
        details = [f"filter: {shown}"[:600],
                   f"matches among the newest {BULK_SCAN_WINDOW:,} job ids, at most "
                   f"{BULK_CAP:,} a post"]
    else:
        details = [f"ids: {', '.join(ids[:20])}{' …' if len(ids) > 20 else ''}"]
    outcome = {
        "retry": "Failed ones go back in the queue, due now, with their attempts reset.",
        "run-now": "Pending ones parked in the future become due now.",
        "cancel": "Pending ones are deleted and running ones aborted: a cancelled job "
                  "cannot be retried.",
        "delete": "Finished ones are removed for good; live ones are cancelled.",
    }[action]
    posted = [("action", action), *(("ids", i) for i in ([] if every else ids)),
              *fields, *([("all", "1")] if every else []), ("confirm", "1")]
    return page(request, "confirm.html", {
        "question": f"{action.replace('-', ' ').capitalize()} {count} "
                    f"job{'' if count == '1' else 's'}?",
        "lead": "This acts on",
        "count_text": count,
        "subject": "jobs matching the filter:" if every else "selected jobs:",
        "details": details,
        "outcome": outcome,
        "target": "/jobs/bulk",
        "fields": posted,
        "button": f"Yes, {action.replace('-', ' ')} {'them' if count != '1' else 'it'}",
        "destructive": destructive,
        "back_to": "/jobs?" + urlencode(fields),
        "notice": notice_of(request),
        "done_text": done_text,
    })


# -- schedules -----------------------------------------------------------------------------

#: ``POST /schedules/{key}/...``: what the notice says when it changed, and when not.
SCHEDULE_NOTICES = {
    "run-now": ("enqueued to run now", "not found"),
    "pause": ("paused", "not found or already paused"),
    "resume": ("resumed", "not found or not paused"),
}


async def schedule_action(request: Request) -> Response:
    """Run a schedule now, pause it or resume it (``/schedules/{key}/run-now|pause|resume``);
    303 back to the schedules page with a notice."""
    verb = request.path_params["action"]
    if verb not in SCHEDULE_NOTICES:
        return bad_request(request, "the action must be run-now, pause or resume")
    try:
        key = check_name(request.path_params["key"], "schedule key")
    except ValueError as exc:
        return bad_request(request, str(exc))
    queue = _queue(request)
    if verb == "run-now":
        done = await queue.run_schedule_now(key)
    elif verb == "pause":
        done = await queue.pause_schedule(key)
    else:
        done = await queue.resume_schedule(key)
    changed, unchanged = SCHEDULE_NOTICES[verb]
    text = f"Schedule {key[:80]} {changed if done else unchanged}."
    return RedirectResponse(f"{_base(request)}/schedules?{urlencode(notice_params(text))}",
                            status_code=303)
