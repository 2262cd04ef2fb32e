"""Control of single jobs and of types: the plans of ``pause``, ``resume``, ``paused``,
``retry`` and ``run_now``, methods of :class:`golemq_pg.Queue` and
:class:`golemq_pg.AsyncQueue` (see ``_queue_core``).

Kept apart from ``_queue_plans`` so each stays readable. Every argument is validated before
the store is called; bad input raises ``ValueError`` and changes nothing.
"""

from __future__ import annotations

from typing import Any

from golemq_pg._queue_core import QueueCore, QueuePlan, call, check_job_id
from golemq_pg._types import JobType, PausedType

#: The longest pause reason accepted (the ``paused_types.reason`` column's bound).
MAX_PAUSE_REASON = 1000

__all__ = ["MAX_PAUSE_REASON", "check_job_id", "pause", "paused", "resume", "retry", "run_now"]


def pause(
    q: QueueCore, job_type: str | JobType[Any], reason: str | None = None
) -> QueuePlan[None]:
    """Stop every worker (every process, every claim path) from claiming ``job_type``.

    Jobs of the type already running finish; enqueueing keeps working; the type's jobs
    count as not due for ``run_until_empty``. Pausing a paused type replaces its reason.
    ``reason``: at most 1000 characters, shown by ``paused()`` and the CLI.
    """
    name = q._check_type(job_type)
    if reason is not None:
        if not isinstance(reason, str):
            raise ValueError(f"reason must be a string, got {type(reason).__name__}")
        if len(reason) > MAX_PAUSE_REASON:
            raise ValueError(f"reason must be at most {MAX_PAUSE_REASON} characters")
        if "\x00" in reason:
            raise ValueError("reason must not contain NUL characters")
    yield call("type_pause", name, reason)


def resume(q: QueueCore, job_type: str | JobType[Any]) -> QueuePlan[bool]:
    """Let workers claim ``job_type`` again; idle workers are woken at once (a
    notification), not at their next poll. False when the type was not paused."""
    return bool((yield call("type_resume", q._check_type(job_type))))


def paused(q: QueueCore) -> QueuePlan[dict[str, PausedType]]:
    """Every paused type, by name: ``PausedType(type, paused_at, reason)``."""
    found: dict[str, PausedType] = yield call("type_paused")
    return found


def retry(q: QueueCore, job_id: str) -> QueuePlan[bool]:
    """Move one dead letter (FAILED) back to PENDING, due now, with attempts 0 and
    ``last_error`` cleared (the attempt history is kept). False, and nothing changed,
    when the job is not FAILED (or unknown, or keyed while a PENDING job holds its key).
    """
    return bool((yield call("job_retry", check_job_id(job_id))))


def run_now(q: QueueCore, job_id: str) -> QueuePlan[bool]:
    """Make one PENDING job parked in the future (scheduled, retry backoff) due now.
    False, and nothing changed, when it is already due, running, finished or unknown."""
    return bool((yield call("job_run_now", check_job_id(job_id))))
