"""The cancel verb of PostgresStore: delete live jobs, next to transactional handlers too.

A transactional handler's claim is an open transaction holding its job's row lock, so a
plain DELETE would wait for the whole handler. The cancel's DELETE therefore first waits
for row locks only briefly; when that runs out, it announces the selector's locked rows on
the cancel channel (and to this process's workers), so their workers abort the handlers and
end their transactions, and runs again, waiting for real. Pending-only cancels skip locked
rows instead: those are running work. The statements are in ``sql/queries/cancel.sql``.
Every cancel that deleted rows also sends the completion hint (``notify_jobs_done``), which
wakes ``queue.wait`` callers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import structlog
from psycopg import errors as pg_errors

from golemq_pg import _local
from golemq_pg.store.port import CancelFilter, CancelledJob
from golemq_pg.store.postgres import _rows as rows
from golemq_pg.store.postgres._connections import (
    RETRYABLE,
    StoreConnections,
    retry_or_raise,
    sync_verb,
)
from golemq_pg.store.postgres._plans import (
    OWNED,
    Atomic,
    Count,
    Plan,
    PlanContext,
    Rows,
    channels,
)

log = structlog.get_logger("golemq_pg.store.postgres")

#: How long a cancel's DELETE first waits for a row lock before it announces the locked rows
#: (held by transactional handlers) to their workers and waits for real.
_CANCEL_BRIEF_WAIT_MS = 100


@dataclass(frozen=True, slots=True)
class _CancelStatements:
    """The statements of one kind of selector (ids, scope or dedupe keys)."""

    delete: str  # the live rows; waits for row locks
    delete_pending: str  # the pending rows only; skips locked rows
    locked: str  # the live rows another transaction holds locked right now


_BY_IDS = _CancelStatements("job_cancel_ids", "job_cancel_pending_ids", "job_cancel_locked_ids")
_BY_SCOPE = _CancelStatements(
    "job_cancel_scope", "job_cancel_pending_scope", "job_cancel_locked_scope"
)
_BY_KEYS = _CancelStatements("job_cancel_keys", "job_cancel_pending_keys", "job_cancel_locked_keys")


def job_cancel(
    ctx: PlanContext, selector: CancelFilter, reason: str | None
) -> Plan[list[CancelledJob]]:
    """Delete matching live jobs; NOTIFY the ids of running ones on the cancel channel.

    ``reason`` is for the caller's own signalling; it is not stored or sent.

    Rows held by transactional handlers (an open claim transaction locks the row): the
    DELETE first waits for row locks only briefly; if that runs out, the rows of the
    selector that are locked are announced on the cancel channel (and to this process's
    workers), so their workers abort the handlers and end their transactions, and the
    DELETE runs again, waiting for real. Pending-only cancels skip locked rows: they are
    running work. See ``sql/queries/cancel.sql``.
    """
    if selector.job_ids:
        statements = _BY_IDS
        args: dict[str, Any] = {"ids": rows.int_ids(selector.job_ids)}
    elif selector.scope is not None:
        statements = _BY_SCOPE
        args = {"scope_type": selector.scope[0], "scope_id": selector.scope[1]}
    elif selector.type is not None and selector.dedupe_keys:
        statements = _BY_KEYS
        args = {"type": selector.type, "keys": list(selector.dedupe_keys)}
    else:
        return []
    if selector.pending_only:
        name = statements.delete_pending
    else:
        name = statements.delete
        args["pending_only"] = False
    cancel_channel = (yield from channels(ctx))[1]
    bound = not (yield OWNED)  # a caller's connection (``with_connection``)
    # Not inside a caller's transaction: a lock timeout would abort it, and an
    # announcement would only be delivered at its commit. There the DELETE just waits.
    brief = not selector.pending_only and not bound
    attempt = 1
    while True:
        try:
            deleted: list[CancelledJob] = yield Atomic(
                _delete(ctx, name, args, cancel_channel, brief)
            )
            break
        except pg_errors.LockNotAvailable:
            if not brief:
                raise
            brief = False
            yield Atomic(_announce_locked(ctx, statements.locked, args, cancel_channel, reason))
        except RETRYABLE as exc:
            # Deleting many rows can deadlock with a batch write locking them in another
            # order; the delete is idempotent, so run it again (the store's one policy).
            retry_or_raise("job_cancel", exc, attempt, once=bound)
            attempt += 1
    if deleted:
        running = sum(job.was_running for job in deleted)
        log.info("jobs_cancelled", count=len(deleted), running=running)
    return deleted


def _delete(
    ctx: PlanContext, name: str, args: dict[str, Any], cancel_channel: str, brief: bool
) -> Plan[list[CancelledJob]]:
    """One attempt at the DELETE, in one transaction, with its announcements."""
    q = ctx.queries
    if brief:
        yield Count(q["cancel_brief_lock_wait"], {"ms": str(_CANCEL_BRIEF_WAIT_MS)})
    deleted = [rows.cancelled(r) for r in (yield Rows(q[name], args))]
    running = [int(job.id) for job in deleted if job.was_running]
    for chunk in rows.json_array_chunks(running):
        yield Count(q["notify"], {"channel": cancel_channel, "payload": chunk})
    if deleted:
        # The completion hint too: queue.wait() callers on these jobs (pending ones
        # included, which the cancel channel does not name) raise now.
        yield Count(q["notify_jobs_done"], {"ids": [int(j.id) for j in deleted]})
    return deleted


def _announce_locked(
    ctx: PlanContext, name: str, args: dict[str, Any], channel: str, reason: str | None
) -> Plan[None]:
    """NOTIFY (committed at once: its own transaction) the live rows of a cancel that
    another transaction holds locked (statement ``name``), and abort them in this process's
    workers, before the DELETE waits."""
    locked = [int(r[0]) for r in (yield Rows(ctx.queries[name], args))]
    if not locked:
        return
    for chunk in rows.json_array_chunks(locked):
        yield Count(ctx.queries["notify"], {"channel": channel, "payload": chunk})
    # The context carries the queue's identity, the key _local aborts by.
    _local.abort(ctx, [str(i) for i in locked], reason or "cancelled")
    log.info("cancel_announced_locked_jobs", count=len(locked))


class CancelVerbs(StoreConnections):
    """``job_cancel`` (see the module docstring; a plan shared with AsyncPostgresStore)."""

    job_cancel = sync_verb(job_cancel)
