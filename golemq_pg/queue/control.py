"""Control of jobs and of types: the plans of the cancel methods, ``pause``, ``resume``,
``paused``, ``retry``, ``run_now`` and ``requeue_stale``, methods of
:class:`golemq_pg.Queue` and :class:`golemq_pg.AsyncQueue` (see ``queue.core``).

Kept apart from ``queue.plans`` so each stays readable. Every argument is validated before
the store is called; bad input raises ``ValueError`` and changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from golemq_pg import _local
from golemq_pg._errortext import storable_text
from golemq_pg._types import JobType, PausedType, ScopeLike, Transition
from golemq_pg._validation import (
    check_job_id,
    check_job_type,
    check_name,
    check_pause_reason,
    check_required_scope,
    to_seconds,
)
from golemq_pg.queue.core import QueueCore, QueuePlan
from golemq_pg.store import calls
from golemq_pg.store.port import CancelFilter, CancelledJob, Reclaimed

__all__ = [
    "cancel",
    "cancel_by_dedupe_keys",
    "cancel_for_scope",
    "cancel_pending_for_scope",
    "cancel_workflow",
    "delete",
    "pause",
    "paused",
    "requeue_stale",
    "resume",
    "retry",
    "run_now",
]

#: Most jobs one statement of :func:`requeue_stale` takes back (it repeats until done).
REQUEUE_BATCH = 500


def pause(
    q: QueueCore[Any], job_type: str | JobType[Any], reason: str | None = None
) -> QueuePlan[None]:
    """Stop every worker (every process, every claim path) from claiming ``job_type``.

    Jobs of the type already running finish; enqueueing keeps working; the type's jobs
    count as not due for ``run_until_empty``. Pausing a paused type replaces its reason.
    ``reason``: at most 1000 characters, shown by ``paused()`` and the CLI.
    """
    name = check_job_type(job_type)
    yield from calls.type_pause(name, check_pause_reason(reason))


def resume(q: QueueCore[Any], job_type: str | JobType[Any]) -> QueuePlan[bool]:
    """Let workers claim ``job_type`` again; idle workers are woken at once (a
    notification), not at their next poll. False when the type was not paused."""
    return bool((yield from calls.type_resume(check_job_type(job_type))))


def paused(q: QueueCore[Any]) -> QueuePlan[dict[str, PausedType]]:
    """Every paused type, by name: ``PausedType(type, paused_at, reason)``."""
    found: dict[str, PausedType] = yield from calls.type_paused()
    return found


def retry(q: QueueCore[Any], job_id: str, reset_steps: bool = False) -> QueuePlan[bool]:
    """Move one dead letter (FAILED) back to PENDING, due now, with attempts 0 and
    ``last_error`` cleared (the attempt history is kept). False, and nothing changed,
    when the job is not FAILED (or unknown, or keyed while a PENDING job holds its key).

    Its durable steps (``job.step``) are kept: the revived job gets their stored values
    back without running them again. ``reset_steps=True`` deletes them with the revival,
    so every step runs again.
    """
    if not isinstance(reset_steps, bool):
        raise ValueError("reset_steps must be True or False")
    return bool((yield from calls.job_retry(check_job_id(job_id), reset_steps)))


def run_now(q: QueueCore[Any], job_id: str) -> QueuePlan[bool]:
    """Make one PENDING job parked in the future (scheduled, retry backoff) due now.
    False, and nothing changed, when it is already due, running, finished or unknown."""
    return bool((yield from calls.job_run_now(check_job_id(job_id))))


def requeue_stale(
    q: QueueCore[Any],
    older_than: float | timedelta = 600,
    types: Iterable[str | JobType[Any]] | None = None,
) -> QueuePlan[int]:
    """Take back RUNNING jobs whose lease was last written (claimed or renewed) more than
    ``older_than`` seconds ago (a number >= 0 or a timedelta), expired or not, of ``types``
    (None: every type), as the reaper takes back an expired lease: within its budget a job
    is due again now, its attempt counted and ``last_error`` saying why; with no attempt
    left it is dead-lettered. The old holder's lease is void: its late completion, failure
    or renewal is refused (its worker aborts the handler as a lost lease). Observers see
    "reclaimed" (with ``stuck_for``) or "failed-terminal". Returns how many jobs were taken
    back."""
    seconds = to_seconds(older_than, "older_than")
    names: list[str] | None = None
    if types is not None:
        if isinstance(types, str | JobType):
            raise ValueError("types must be an iterable of job types, not a single one")
        try:
            names = sorted({check_job_type(t) for t in types})
        except TypeError:
            raise ValueError("types must be an iterable of job types") from None
        if not names:
            return 0
    taken = 0
    while True:
        batch: list[Reclaimed] = yield from calls.lease_requeue_stale(
            seconds, names, REQUEUE_BATCH)
        taken += len(batch)
        if q.observers:
            for r in batch:
                q._notify(Transition(
                    r.id, r.type, r.scope, r.outcome, r.attempts, error=r.error,
                    stuck_for=r.stuck_for if r.outcome == "reclaimed" else None))
        if len(batch) < REQUEUE_BATCH:
            return taken


# -- cancellation ------------------------------------------------------------------------


def cancel_for_scope(
    q: QueueCore[Any], scope: ScopeLike, *, reason: str | None = None
) -> QueuePlan[int]:
    """Drop queued jobs of ``scope`` and abort its running ones; returns how many."""
    scope_v = check_required_scope(scope)
    return (yield from _cancel(q, CancelFilter(scope=scope_v), reason))


def cancel_pending_for_scope(
    q: QueueCore[Any], scope: ScopeLike, *, reason: str | None = None
) -> QueuePlan[int]:
    """Drop queued jobs of ``scope``, leaving running work alone; returns how many."""
    scope_v = check_required_scope(scope)
    return (yield from _cancel(q, CancelFilter(scope=scope_v, pending_only=True), reason))


def cancel_by_dedupe_keys(
    q: QueueCore[Any],
    job_type: str | JobType[Any],
    keys: Iterable[str],
    *,
    reason: str | None = None,
) -> QueuePlan[int]:
    """Cancel live jobs of ``job_type`` with any of ``keys``; returns how many."""
    name = check_job_type(job_type)
    if isinstance(keys, str):
        raise ValueError("keys must be an iterable of dedupe keys, not a single string")
    key_list = [check_name(k, "dedupe_key") for k in keys]
    if not key_list:
        return 0
    return (yield from _cancel(q, CancelFilter(type=name, dedupe_keys=key_list), reason))


def cancel(q: QueueCore[Any], job_id: str, *, reason: str | None = None) -> QueuePlan[bool]:
    """Cancel one pending or running job; True when it was live."""
    return (yield from _cancel(q, CancelFilter(job_ids=[check_job_id(job_id)]), reason)) > 0


def delete(q: QueueCore[Any], job_id: str) -> QueuePlan[bool]:
    """Remove one job: a finished one (SUCCEEDED or FAILED) is deleted with its result
    and attempt history (the status counts stay exact); a live one (PENDING or RUNNING) is
    cancelled as :meth:`cancel` does (a running handler is aborted, observers see
    "cancelled"). True when a job was removed; False for an unknown id.
    """
    job = check_job_id(job_id)
    if (yield from calls.job_delete(job)):
        return True
    if (yield from _cancel(q, CancelFilter(job_ids=[job]), "deleted")) > 0:
        return True
    # Live at the first look, finished by the cancel's: it finished in between.
    return bool((yield from calls.job_delete(job)))


def cancel_workflow(q: QueueCore[Any], workflow_id: str) -> QueuePlan[int]:
    """Cancel every live job (waiting, pending, running) of a workflow and mark it
    cancelled; returns how many jobs were cancelled (0 for an unknown id or a finished
    workflow). Running handlers are aborted as by :meth:`cancel`; observers see
    "cancelled" for each."""
    try:
        wf = check_job_id(workflow_id)
    except ValueError:
        raise ValueError("workflow_id must be a workflow id as add_workflow() returns it") from None
    cancelled: list[CancelledJob] = yield from calls.workflow_cancel(wf)
    return _cancelled(q, cancelled, "workflow cancelled")


def _cancel(q: QueueCore[Any], selector: CancelFilter, reason: str | None) -> QueuePlan[int]:
    if reason is not None and not isinstance(reason, str):
        raise ValueError("reason must be a string")
    # A reason is a description, often made from user code's own text (an exception's
    # message): made storable, never refused (an escaped NUL still says what was there).
    reason = storable_text((reason or "cancelled")[:500])
    cancelled: list[CancelledJob] = yield from calls.job_cancel(selector, reason)
    return _cancelled(q, cancelled, reason)


def _cancelled(q: QueueCore[Any], cancelled: list[CancelledJob], reason: str) -> int:
    """Abort the running ones in this process, tell observers; how many were cancelled."""
    running = [c.id for c in cancelled if c.was_running]
    if running:
        _local.abort(q.store, running, reason)
    if q.observers:
        for job in cancelled:
            q._notify(_cancel_transition(job, reason))
    return len(cancelled)


def _cancel_transition(job: CancelledJob, reason: str) -> Transition:
    return Transition(job.id, job.type, job.scope, "cancelled", job.attempts, error=reason)
