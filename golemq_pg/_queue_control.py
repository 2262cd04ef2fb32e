"""Control of single jobs and of types, as :class:`golemq_pg.Queue` methods.

A base of ``Queue`` (kept apart so ``queue.py`` stays readable): pause / resume a type,
list the paused ones, retry one dead letter, run one parked job now. Every argument is
validated before the store is called; bad input raises ``ValueError`` and changes nothing.
"""

from __future__ import annotations

from typing import Any

from golemq_pg._types import JobType, PausedType
from golemq_pg._validation import check_name
from golemq_pg.store.port import JobStore

#: The longest pause reason accepted (the ``paused_types.reason`` column's bound).
MAX_PAUSE_REASON = 1000


class ControlMethods:
    """``pause``, ``resume``, ``paused``, ``retry``, ``run_now`` (see the module docstring)."""

    store: JobStore

    def pause(self, job_type: str | JobType[Any], reason: str | None = None) -> None:
        """Stop every worker (every process, every claim path) from claiming ``job_type``.

        Jobs of the type already running finish; enqueueing keeps working; the type's jobs
        count as not due for ``run_until_empty``. Pausing a paused type replaces its reason.
        ``reason``: at most 1000 characters, shown by ``paused()`` and the CLI.
        """
        name = _type_name(job_type)
        if reason is not None:
            if not isinstance(reason, str):
                raise ValueError(f"reason must be a string, got {type(reason).__name__}")
            if len(reason) > MAX_PAUSE_REASON:
                raise ValueError(f"reason must be at most {MAX_PAUSE_REASON} characters")
            if "\x00" in reason:
                raise ValueError("reason must not contain NUL characters")
        self.store.type_pause(name, reason)

    def resume(self, job_type: str | JobType[Any]) -> bool:
        """Let workers claim ``job_type`` again; idle workers are woken at once (a
        notification), not at their next poll. False when the type was not paused."""
        return self.store.type_resume(_type_name(job_type))

    def paused(self) -> dict[str, PausedType]:
        """Every paused type, by name: ``PausedType(type, paused_at, reason)``."""
        return self.store.type_paused()

    def retry(self, job_id: str) -> bool:
        """Move one dead letter (FAILED) back to PENDING, due now, with attempts 0 and
        ``last_error`` cleared (the attempt history is kept). False, and nothing changed,
        when the job is not FAILED (or unknown, or keyed while a PENDING job holds its key).
        """
        return self.store.job_retry(check_job_id(job_id))

    def run_now(self, job_id: str) -> bool:
        """Make one PENDING job parked in the future (scheduled, retry backoff) due now.
        False, and nothing changed, when it is already due, running, finished or unknown."""
        return self.store.job_run_now(check_job_id(job_id))


def _type_name(job_type: object) -> str:
    if isinstance(job_type, JobType):
        return check_name(job_type.name, "job type")
    return check_name(job_type, "job type")


def check_job_id(job_id: object) -> str:
    """A job id as ``add()`` returns it (the rule of ``Queue``'s other by-id methods)."""
    if isinstance(job_id, bool) or not isinstance(job_id, str | int):
        raise ValueError("job_id must be a string")
    text = str(job_id)
    if not text.isdigit() or len(text) > 19:
        raise ValueError("job_id must be a job id as returned by add()")
    return text
