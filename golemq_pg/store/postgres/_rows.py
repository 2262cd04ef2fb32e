"""Conversions between PostgresStore's rows/parameters and the port's value types."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import orjson
from psycopg.types.json import Jsonb

from golemq_pg._types import AttemptError, JobStatus, JobSummary, ScheduleSummary, Scope
from golemq_pg.store.port import (
    CancelledJob,
    ClaimedJob,
    FailItem,
    FindParams,
    LeaseRef,
    Reclaimed,
    RetryItem,
)

_loads = orjson.loads

#: NOTIFY payloads must stay under 8000 bytes; keep a margin.
NOTIFY_LIMIT = 7900


def _passthrough(value: Any) -> bytes:
    return bytes(value)


def jsonb(encoded: bytes) -> Jsonb:
    """Send already-encoded JSON as a jsonb parameter without decoding it again."""
    return Jsonb(encoded, dumps=_passthrough)


def scope_of(scope_type: str | None, scope_id: str | None) -> Scope | None:
    """A Scope from its two columns (both NULL: unscoped)."""
    if scope_type is None or scope_id is None:
        return None
    return Scope(scope_type, scope_id)


def int_ids(ids: Iterable[str]) -> list[int]:
    """Job ids as bigints; ids that cannot be ours (not integers) are dropped."""
    out: list[int] = []
    for value in ids:
        number = int_id(value)
        if number is not None:
            out.append(number)
    return out


def int_id(value: str) -> int | None:
    """One job id as a bigint, or None when it cannot be one of ours."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if -(2**63) <= number < 2**63 else None


#: A comma-separated list of decimal ids that each fit a bigint (see :func:`_plain_id`).
_PLAIN_IDS = re.compile(r"[0-9]{1,18}(?:,[0-9]{1,18})*", re.ASCII)


def _plain_id(value: str) -> bool:
    """A decimal string that fits a bigint: what our ids look like."""
    return 0 < len(value) < 19 and value.isascii() and value.isdigit()


Held = TypeVar("Held", bound=LeaseRef | RetryItem | FailItem)


def in_id_order(
    items: Sequence[Held], started: Sequence[float | None] | None
) -> tuple[Sequence[Held], Sequence[float | None] | None]:
    """``items`` and ``started`` (paired by position) in job id order. A fenced write then
    locks its rows in that order whatever its plan (its unnest of the ids can be either side
    of the join), the order every statement that settles dependents locks their children in
    (migration 0020), so two writes sharing rows queue instead of deadlocking. A batch
    already in order is returned as it is."""
    ids = [i.id for i in items]
    try:
        keys = list(map(int, ids))  # at C speed; about 10 us for 100 ids already in order
    except ValueError:
        return items, started  # an id that cannot be ours: it matches no row anyway
    if keys == sorted(keys):
        return items, started
    order = sorted(range(len(keys)), key=keys.__getitem__)
    return ([items[k] for k in order],
            None if started is None else [started[k] for k in order])


def lease_args(owner: str, items: Sequence[LeaseRef | RetryItem | FailItem]) -> dict[str, Any]:
    """The owner, ids and tokens parameters of a fenced lease write or lookup."""
    # Ids and tokens travel as text array literals ("{1,2,3}", cast to bigint[] in SQL):
    # psycopg dumps a Python list element by element, which costs more than the statement
    # for a batch of a hundred. Ids are our decimal strings, checked all at once with one
    # pattern (per id, the check cost as much as the rest of the statement's arguments);
    # only a batch with an id that cannot be ours is checked id by id, and such an id
    # becomes -1, which matches no job.
    ids = ",".join([i.id for i in items])
    if _PLAIN_IDS.fullmatch(ids) is None:
        ids = ",".join([i.id if _plain_id(i.id) else "-1" for i in items])
    tokens = ",".join(map(str, map(int, [i.token for i in items])))
    return {"owner": owner, "ids": "{" + ids + "}", "tokens": "{" + tokens + "}"}


def seconds_array(started: Sequence[float | None] | None) -> str | None:
    """Handler starts (seconds before now, None: unknown) as a float8[] literal, like the ids
    of :func:`lease_args` (one join, not a dump per element); None when there are none."""
    if started is None:
        return None
    return "{" + ",".join(["NULL" if s is None else repr(float(s)) for s in started]) + "}"


def id_text_set(rows: Sequence[Sequence[Any]]) -> set[str]:
    """The ids a completing statement wrote, from its one row holding them as one
    comma-separated text (NULL: none): split at C speed, no row per job."""
    text = rows[0][0] if rows else None
    return set(text.split(",")) if text else set()


def filter_args(params: FindParams) -> dict[str, Any]:
    """The filter parameters of ``job_find`` and ``job_retry_failed``."""
    return {
        "types": None if params.types is None else list(params.types),
        "scope_type": params.scope_type,
        "scope_id": params.scope_id,
        "limit": params.limit,
        "skip": params.skip or 0,
    }


def decode_json(text: str | None) -> Any:
    """A jsonb column read as text."""
    return None if text is None else orjson.loads(text)


def claimed(row: Sequence[Any], offset: int = 0) -> ClaimedJob:
    """A ClaimedJob from the columns of ``fragment_claimed_output`` starting at ``offset``.

    Called once per claimed row on the claim loop's thread, which is the drain's bottleneck:
    positional arguments and no slicing (a third cheaper than keywords over a slice).
    """
    scope_type = row[offset + 3]
    scope_id = row[offset + 4]
    return ClaimedJob(
        str(row[offset]),
        row[offset + 8],  # lease token
        row[offset + 1],
        _loads(row[offset + 2]),
        None if scope_type is None or scope_id is None else Scope(scope_type, scope_id),
        row[offset + 5],  # attempts: this claim's attempt number
        row[offset + 6],
        row[offset + 7],
        row[offset + 9],  # created_at: enqueued_at
        row[offset + 10],
        None if row[offset + 11] is None else _loads(row[offset + 11]),  # trace context
        row[offset + 12],  # waited
    )


def summary(row: Sequence[Any]) -> JobSummary:
    """A JobSummary from the columns of ``fragment_summary_columns``."""
    (
        job_id,
        job_type,
        scope_type,
        scope_id,
        status,
        attempts,
        max_attempts,
        last_error,
        priority,
        progress,
        run_at,
        created_at,
        updated_at,
        started_at,
        finished_at,
        result,
        errors,
        tags,
    ) = row
    return JobSummary(
        id=str(job_id),
        type=job_type,
        scope=scope_of(scope_type, scope_id),
        # A leased row whose handler has not started (no started_at: held in a worker's
        # buffer, migration 0015) is reported PENDING.
        status=JobStatus.PENDING if status == "running" and started_at is None
        else JobStatus(status),
        attempts=attempts,
        max_attempts=max_attempts,
        last_error=last_error,
        priority=priority,
        progress=decode_json(progress),
        run_at=run_at,
        created_at=created_at,
        updated_at=updated_at,
        started_at=started_at,
        finished_at=finished_at,
        result=decode_json(result),
        errors=attempt_errors(errors),
        tags=tuple(tags or ()),
    )


def attempt_errors(text: str | None) -> tuple[AttemptError, ...]:
    """The ``errors`` column (a JSON array of attempts, oldest first) as AttemptErrors."""
    if not text:
        return ()
    return tuple(
        AttemptError(
            attempt=int(item["attempt"]),
            # to_jsonb(now()) writes the session's TimeZone offset: normalise to UTC.
            at=datetime.fromisoformat(item["at"]).astimezone(UTC),
            error=str(item["error"]),
            worker_id=item.get("worker_id"),
            # absent from entries made without one (the reaper, releases before 0010)
            traceback=item.get("traceback"),
            # absent from entries made before 0012
            started_at=_utc(item.get("started")),
        )
        for item in orjson.loads(text)
    )


def status_args(statuses: Sequence[JobStatus] | None) -> dict[str, Any]:
    """A status filter on the statuses readers are shown (``statuses``, running rows
    whose handler has not started included in PENDING, migration 0015) as the statements'
    two parameters: ``statuses``, the stored statuses to read (running as well when pending
    is wanted, so a partitioned read still prunes by status), and ``running_started``,
    which running rows of those to keep (True: started, False: not yet, None: both)."""
    if statuses is None:
        return {"statuses": None, "running_started": None}
    wanted = {JobStatus(s) for s in statuses}
    stored = {s.value for s in wanted}
    pending, running = JobStatus.PENDING in wanted, JobStatus.RUNNING in wanted
    if pending:
        stored.add(JobStatus.RUNNING.value)
    started = None if pending == running else running
    return {"statuses": sorted(stored), "running_started": started}


def _utc(stamp: str | None) -> datetime | None:
    """An ISO timestamp of a jsonb entry (the session's offset) in UTC, or None."""
    return None if stamp is None else datetime.fromisoformat(stamp).astimezone(UTC)


def cancelled(row: Sequence[Any]) -> CancelledJob:
    """A CancelledJob from the columns of ``fragment_cancelled_columns``."""
    job_id, job_type, scope_type, scope_id, status, lease_owner, attempts = row
    running = status == JobStatus.RUNNING.value
    return CancelledJob(
        id=str(job_id),
        type=job_type,
        scope=scope_of(scope_type, scope_id),
        was_running=running,
        lease_owner=lease_owner if running else None,
        attempts=attempts,
    )


def reclaimed(row: Sequence[Any]) -> Reclaimed:
    """A Reclaimed from a row of ``lease_recover_expired`` or ``lease_requeue_stale``."""
    job_id, job_type, scope_type, scope_id, attempts, outcome, lease_owner, stuck, error = row
    return Reclaimed(
        id=str(job_id),
        type=job_type,
        scope=scope_of(scope_type, scope_id),
        attempts=attempts,
        outcome="failed-terminal" if outcome == "failed-terminal" else "reclaimed",
        lease_owner=lease_owner,
        stuck_for=None if stuck is None else float(stuck),
        error=error,
    )


def schedule(row: Sequence[Any]) -> ScheduleSummary:
    """A ScheduleSummary from a row of ``schedule_list``."""
    key, job_type, cron, every_seconds, timezone, repeat_from, next_run_at, last_run_at, paused = (
        row
    )
    return ScheduleSummary(
        key=key,
        type=job_type,
        cron=cron,
        every=None if every_seconds is None else timedelta(seconds=every_seconds),
        timezone=timezone,
        repeat_from=repeat_from,
        next_run_at=next_run_at,
        last_run_at=last_run_at,
        paused=bool(paused),
    )


def json_array_chunks(items: Sequence[str | int], limit: int = NOTIFY_LIMIT) -> list[str]:
    """JSON arrays of ``items``, each encoding to fewer than ``limit`` bytes."""
    chunks: list[str] = []
    current: list[str | int] = []
    size = 2
    for item in items:
        width = len(orjson.dumps(item)) + 1
        if current and size + width > limit:
            chunks.append(orjson.dumps(current).decode())
            current, size = [], 2
        current.append(item)
        size += width
    if current:
        chunks.append(orjson.dumps(current).decode())
    return chunks


def copy_escape(value: bytes) -> bytes:
    """Escape one field for COPY's text format (backslash, newline, carriage return, tab)."""
    if b"\\" in value:
        value = value.replace(b"\\", b"\\\\")
    if b"\n" in value:
        value = value.replace(b"\n", b"\\n")
    if b"\r" in value:
        value = value.replace(b"\r", b"\\r")
    if b"\t" in value:
        value = value.replace(b"\t", b"\\t")
    return value


def copy_join(values: Sequence[bytes], separator: bytes) -> bytes:
    """Escape ``values`` for COPY's text format and join them with ``separator``.

    Compact JSON rarely holds a byte COPY must escape: one joined scan decides, and only a
    batch that has one pays for escaping field by field.
    """
    together = b"".join(values)
    if any(special in together for special in (b"\\", b"\n", b"\r", b"\t")):
        return separator.join(copy_escape(value) for value in values)
    return separator.join(values)


def copy_tags(tags: Sequence[str]) -> bytes:
    """The tags column as one COPY text field: an array literal of double-quoted tags (quoted
    so a tag spelled ``NULL`` stays a string; validated tags need no escaping)."""
    return ('{"' + '","'.join(tags) + '"}').encode("ascii")


def trace_jsonb(context: Mapping[str, str] | None) -> Jsonb | None:
    """The trace_context parameter of an add (NULL when the add was not traced)."""
    return None if context is None else jsonb(orjson.dumps(dict(context)))


def trace_text(context: Mapping[str, str] | None) -> str | None:
    """A trace_context as JSON text (an element of a text[] parameter cast to jsonb)."""
    return None if context is None else orjson.dumps(dict(context)).decode("utf-8")


def json_value(value: Any) -> Jsonb:
    """Any JSON-safe value as a jsonb parameter."""
    return jsonb(orjson.dumps(value))


def copy_trace(context: Mapping[str, str] | None) -> bytes:
    """The trace_context column of a traced COPY, one text field (``\\N`` for none)."""
    if context is None:
        return b"\\N"
    return copy_escape(orjson.dumps(dict(context)))


def copy_field(value: str | int | None) -> bytes:
    """One COPY text field: ``\\N`` for NULL, escaped UTF-8 otherwise."""
    if value is None:
        return b"\\N"
    return copy_escape(str(value).encode("utf-8"))
