"""The control verbs of PostgresStore: pause / resume a type, retry or run one job now,
take stale leases back (``requeue_stale``).

Each is one statement of ``sql/queries/control.sql``, fenced on the row's current state
(``status = 'failed'``; ``status = 'pending' AND run_at > now()``), so a verb racing a claim,
a completion or the reaper either applies to the state it names or changes nothing. What
becomes claimable is announced on the jobs channel with its type name, in the same
statement (the NOTIFY is delivered at commit). The pause itself is enforced by the claim
statements (``claim.sql``), not here.
"""

from __future__ import annotations

from collections.abc import Sequence

from psycopg import errors as pg_errors

from golemq_pg._types import PausedType
from golemq_pg.store.port import (
    HISTORY_LIMIT,
    LEASE_STALE_ERROR,
    LEASE_STALE_EXHAUSTED_ERROR,
    Reclaimed,
)
from golemq_pg.store.postgres import _rows as rows
from golemq_pg.store.postgres import _steps
from golemq_pg.store.postgres._connections import StoreConnections, sync_verb
from golemq_pg.store.postgres._plans import IN_TRANSACTION, Atomic, Plan, PlanContext, Rows


def type_pause(ctx: PlanContext, job_type: str, reason: str | None) -> Plan[PausedType]:
    """Pause ``job_type`` (again: the reason is replaced, ``paused_at`` kept)."""
    row = (yield Rows(ctx.queries["type_pause"], {"type": job_type, "reason": reason}))[0]
    return PausedType(type=row[0], paused_at=row[1], reason=row[2])


def type_resume(ctx: PlanContext, job_type: str) -> Plan[bool]:
    """Resume ``job_type`` and wake its idle workers; False when it was not paused."""
    return bool((yield Rows(ctx.queries["type_resume"], {"type": job_type})))


def type_paused(ctx: PlanContext) -> Plan[dict[str, PausedType]]:
    """Every paused type, by name."""
    return {
        row[0]: PausedType(type=row[0], paused_at=row[1], reason=row[2])
        for row in (yield Rows(ctx.queries["type_paused"]))
    }


def job_retry(ctx: PlanContext, job_id: str, reset_steps: bool = False) -> Plan[bool]:
    """FAILED -> PENDING due now, attempts 0, ``last_error`` cleared, history kept; its
    durable steps kept, or deleted in the same transaction with ``reset_steps``.

    False (nothing changed) when the job is not FAILED, unknown, or keyed while a
    PENDING job holds its key.
    """
    number = rows.int_id(job_id)
    if number is None:
        return False
    try:
        if reset_steps:
            return bool((yield Atomic(_retry_resetting(ctx, number))))
        return bool((yield Rows(ctx.queries["job_retry"], {"id": number})))
    except pg_errors.UniqueViolation:
        # A job of the same key was enqueued while this one was being revived. In a
        # caller's transaction (now aborted) that must surface, not read as False.
        if (yield IN_TRANSACTION):
            raise
        return False


def _retry_resetting(ctx: PlanContext, number: int) -> Plan[bool]:
    """The revival, then (only when it revived the job) its steps deleted: one transaction,
    so no claim of the revived job can read the old steps."""
    revived = bool((yield Rows(ctx.queries["job_retry"], {"id": number})))
    if revived:
        yield from _steps.reset_steps(ctx, number)
    return revived


def job_run_now(ctx: PlanContext, job_id: str) -> Plan[bool]:
    """A PENDING job with a future ``run_at`` becomes due now; False otherwise."""
    number = rows.int_id(job_id)
    if number is None:
        return False
    return bool((yield Rows(ctx.queries["job_run_now"], {"id": number})))


def job_run_now_types(ctx: PlanContext, types: Sequence[str]) -> Plan[int]:
    """Every future PENDING job of ``types`` (paused types excepted) becomes due now."""
    if not types:
        return 0
    return int((yield Rows(ctx.queries["job_run_now_types"], {"types": list(types)}))[0][0])


def lease_requeue_stale(
    ctx: PlanContext, older_than: float, types: Sequence[str] | None, limit: int = 500
) -> Plan[list[Reclaimed]]:
    """RUNNING jobs whose lease was last written at least ``older_than`` seconds ago (of
    ``types``; None: all) get the reaper's outcome, at most ``limit`` of them (migration
    0014's reclaim_leases)."""
    args = {
        "limit": limit,
        "older_than": float(older_than),
        "types": None if types is None else list(types),
        "delete_types": [],
        "expired_error": LEASE_STALE_ERROR,
        "exhausted_error": LEASE_STALE_EXHAUSTED_ERROR,
        "history": HISTORY_LIMIT,
    }
    return [rows.reclaimed(r) for r in (yield Rows(ctx.queries["lease_requeue_stale"], args))]


def job_delete(ctx: PlanContext, job_id: str) -> Plan[bool]:
    """Delete one finished job (its history row, or an older release's finished row in
    ``jobs``); False when it is live or unknown. The history's count triggers keep the
    maintained counts exact."""
    number = rows.int_id(job_id)
    if number is None:
        return False
    return bool((yield Rows(ctx.queries["job_delete_finished"], {"id": number})))


class ControlVerbs(StoreConnections):
    """``type_pause``, ``type_resume``, ``type_paused``, ``job_retry``, ``job_run_now``,
    ``job_run_now_types``, ``job_delete``, ``lease_requeue_stale`` (see the module
    docstring; plans shared with AsyncPostgresStore)."""

    type_pause = sync_verb(type_pause)
    type_resume = sync_verb(type_resume)
    type_paused = sync_verb(type_paused)
    job_retry = sync_verb(job_retry)
    job_run_now = sync_verb(job_run_now)
    job_run_now_types = sync_verb(job_run_now_types)
    job_delete = sync_verb(job_delete)
    lease_requeue_stale = sync_verb(lease_requeue_stale)
