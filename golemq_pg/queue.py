"""The producer and administration API: ``Queue``.

Every argument is validated before any SQL is issued; bad input raises ``ValueError`` (or
``QueuePayloadError`` for payloads) and changes nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Generic, Literal, TypedDict, TypeVar, overload

import structlog

from golemq_pg import _local, _trace_hook
from golemq_pg._queue_control import ControlMethods
from golemq_pg._schedule import check_cron, check_timezone, next_cron_tick
from golemq_pg._types import (
    Duration,
    JobStatus,
    JobSummary,
    JobType,
    LifecycleObserver,
    ScheduleSummary,
    Scope,
    ScopeLike,
    Transition,
    WorkerSummary,
    type_name,
)
from golemq_pg._validation import (
    check_aware,
    check_int,
    check_name,
    check_positive_int,
    check_scope,
    check_statuses,
    check_tags,
    encode_payload,
    encode_payloads,
    to_seconds,
)
from golemq_pg.store.port import (
    CancelFilter,
    CancelledJob,
    EnqueueManyParams,
    EnqueueParams,
    FindParams,
    JobStore,
    ScheduleParams,
)

log = structlog.get_logger("golemq_pg.queue")

P = TypeVar("P", bound=Mapping[str, Any])
_T = TypeVar("_T")


class _InferPayloadLast(TypedDict, Generic[_T]):
    """Typing aid only, never built: in ``add(job_type: JobType[P], payload: P | ...)``
    mypy infers a dict literal before it has solved ``P`` from the JobType, so the literal
    gets no TypedDict context and the call fails to infer (python/mypy#19201). A union
    member holding a callable of ``P`` makes mypy infer the payload in its second pass,
    with ``P`` already known: the literal is then checked against the JobType's TypedDict.
    """

    golemq_typing_aid_only: Callable[[], _T]


_STATUSES = tuple(JobStatus)
#: The smallest step of a timestamp: a cron tick exactly at ``start_at`` is its first one.
_TICK = timedelta(microseconds=1)


class Queue(ControlMethods):
    """Enqueue, schedule, cancel and inspect jobs through a :class:`JobStore`.

    Pause / resume of a type and per-job ``retry`` / ``run_now`` come from
    :class:`golemq_pg._queue_control.ControlMethods`.
    """

    def __init__(
        self,
        store: JobStore,
        *,
        default_max_attempts: int = 3,
        observers: Sequence[LifecycleObserver] = (),
    ) -> None:
        self.store = store
        self.default_max_attempts = check_positive_int(
            default_max_attempts, "default_max_attempts"
        )
        for observer in observers:
            if not callable(getattr(observer, "on_transition", None)):
                raise ValueError("observers must have an on_transition(transition) method")
        self.observers = tuple(observers)

    # -- enqueue ----------------------------------------------------------------------------

    @overload
    def add(
        self,
        job_type: JobType[P],
        payload: P | _InferPayloadLast[P],
        *,
        scope: ScopeLike | None = ...,
        dedupe_key: str | None = ...,
        on_duplicate: Literal["reject", "replace"] = ...,
        run_at: datetime | None = ...,
        delay: Duration | None = ...,
        max_attempts: int | None = ...,
        priority: int = ...,
        tags: Iterable[str] | None = ...,
        connection: Any = ...,
    ) -> str | None: ...

    @overload
    def add(
        self,
        job_type: str,
        payload: Mapping[str, Any],
        *,
        scope: ScopeLike | None = ...,
        dedupe_key: str | None = ...,
        on_duplicate: Literal["reject", "replace"] = ...,
        run_at: datetime | None = ...,
        delay: Duration | None = ...,
        max_attempts: int | None = ...,
        priority: int = ...,
        tags: Iterable[str] | None = ...,
        connection: Any = ...,
    ) -> str | None: ...

    def add(
        self,
        job_type: str | JobType[Any],
        payload: Mapping[str, Any],
        *,
        scope: ScopeLike | None = None,
        dedupe_key: str | None = None,
        on_duplicate: Literal["reject", "replace"] = "reject",
        run_at: datetime | None = None,
        delay: Duration | None = None,
        max_attempts: int | None = None,
        priority: int = 0,
        tags: Iterable[str] | None = None,
        connection: Any = None,
    ) -> str | None:
        """Enqueue one job; returns its id, or None when rejected as a duplicate.

        With ``connection`` (a psycopg connection) the row is written inside the caller's
        transaction and becomes visible when the caller commits. ``tags``: at most 16 labels
        for :meth:`find` (duplicates collapse); a replacing add replaces them with the
        payload.
        """
        name = self._type(job_type)
        scope_v = check_scope(scope)
        if isinstance(job_type, JobType) and job_type.grouped and scope_v is None:
            raise ValueError(f"job type {name!r} is grouped: add() needs a scope")
        if dedupe_key is not None:
            check_name(dedupe_key, "dedupe_key")
        if on_duplicate not in ("reject", "replace"):
            raise ValueError("on_duplicate must be 'reject' or 'replace'")
        run_at_v, delay_s = _when(run_at, delay)
        attempts = self._max_attempts(max_attempts)
        prio = check_int(priority, "priority")
        tags_v = check_tags(tags)
        encoded = encode_payload(name, payload)
        params = EnqueueParams(
            type=name,
            payload=encoded,
            scope=scope_v,
            dedupe_key=dedupe_key,
            on_duplicate=on_duplicate,
            run_at=run_at_v,
            delay=delay_s,
            max_attempts=attempts,
            priority=prio,
            tags=tags_v,
        )
        tracer = _trace_hook.tracer
        if tracer is None:
            result = self.store.job_enqueue(params, connection=connection)
        else:  # golemq_pg.tracing: a send span around the insert, its context stored
            with tracer.send(name) as span:
                params = dataclasses.replace(params, trace_context=span.carrier)
                result = self.store.job_enqueue(params, connection=connection)
                span.sent(result.id)
        if result.id is not None and result.inserted and self.observers:
            self._notify(Transition(result.id, name, scope_v, "enqueued", 0))
        return result.id

    @overload
    def add_many(
        self,
        job_type: JobType[P],
        payloads: Iterable[P | _InferPayloadLast[P]],
        *,
        scope: ScopeLike | None = ...,
        max_attempts: int | None = ...,
        priority: int = ...,
        run_at: datetime | None = ...,
        delay: Duration | None = ...,
        tags: Iterable[str] | None = ...,
        connection: Any = ...,
    ) -> int: ...

    @overload
    def add_many(
        self,
        job_type: str,
        payloads: Iterable[Mapping[str, Any]],
        *,
        scope: ScopeLike | None = ...,
        max_attempts: int | None = ...,
        priority: int = ...,
        run_at: datetime | None = ...,
        delay: Duration | None = ...,
        tags: Iterable[str] | None = ...,
        connection: Any = ...,
    ) -> int: ...

    def add_many(
        self,
        job_type: str | JobType[Any],
        payloads: Iterable[Mapping[str, Any]],
        *,
        scope: ScopeLike | None = None,
        max_attempts: int | None = None,
        priority: int = 0,
        run_at: datetime | None = None,
        delay: Duration | None = None,
        tags: Iterable[str] | None = None,
        connection: Any = None,
    ) -> int:
        """Enqueue many jobs of one type in one round trip (COPY); returns how many.

        Every payload is validated first: one bad payload rejects the whole call. ``tags``
        (as for :meth:`add`) go on every job.
        """
        name = self._type(job_type)
        scope_v = check_scope(scope)
        if isinstance(job_type, JobType) and job_type.grouped and scope_v is None:
            raise ValueError(f"job type {name!r} is grouped: add_many() needs a scope")
        if isinstance(payloads, Mapping | str | bytes):
            raise ValueError("payloads must be an iterable of mappings, not a single value")
        run_at_v, delay_s = _when(run_at, delay)
        attempts = self._max_attempts(max_attempts)
        prio = check_int(priority, "priority")
        tags_v = check_tags(tags)
        encoded = encode_payloads(name, payloads)
        if not encoded:
            return 0
        params = EnqueueManyParams(
            type=name,
            payloads=encoded,
            scope=scope_v,
            run_at=run_at_v,
            delay=delay_s,
            max_attempts=attempts,
            priority=prio,
            tags=tags_v,
        )
        tracer = _trace_hook.tracer
        if tracer is None:
            return self.store.job_enqueue_many(params, connection=connection)
        with tracer.send(name, len(encoded)) as span:  # one span and context for the call
            params = dataclasses.replace(params, trace_context=span.carrier)
            return self.store.job_enqueue_many(params, connection=connection)

    # -- schedules ---------------------------------------------------------------------------

    def schedule(
        self,
        key: str,
        job_type: str | JobType[Any],
        payload: Mapping[str, Any],
        *,
        cron: str | None = None,
        every: Duration | None = None,
        timezone: str = "UTC",
        repeat_from: Literal["finished", "run_at"] = "finished",
        start_at: datetime | None = None,
        scope: ScopeLike | None = None,
        priority: int = 0,
        max_attempts: int | None = None,
    ) -> None:
        """Declare (or update) a recurring schedule; idempotent across processes by ``key``.

        Every process may declare the same schedule at start-up: the first declaration
        creates it, later ones update its type, payload, scope, priority and attempts, and
        keep its pending tick unless the timing (cron, every, timezone, repeat_from)
        changed. The first job is due at the first cron tick at or after ``start_at`` (or
        after now), or for ``every`` at ``start_at`` (or at once). See
        :mod:`golemq_pg._schedule` for the cadence rules and what happens after downtime.
        """
        check_name(key, "schedule key")
        name = self._type(job_type)
        scope_v = check_scope(scope)
        if isinstance(job_type, JobType) and job_type.grouped and scope_v is None:
            raise ValueError(f"job type {name!r} is grouped: schedule() needs a scope")
        if (cron is None) == (every is None):
            raise ValueError("give exactly one of cron= or every=")
        if repeat_from not in ("finished", "run_at"):
            raise ValueError("repeat_from must be 'finished' or 'run_at'")
        check_timezone(timezone)
        start: datetime | None = None
        if start_at is not None:
            start = check_aware(start_at, "start_at")
        every_s = to_seconds(every, "every", allow_zero=False) if every is not None else None
        prio = check_int(priority, "priority")
        attempts = self._max_attempts(max_attempts)
        encoded = encode_payload(name, payload)
        now = self.store.now()
        first: datetime | None = start
        if cron is not None:
            check_cron(cron, timezone, now)
            # The first tick after now, or at or after a future start_at (the cron search
            # is strictly after its argument, so a tick exactly at start_at counts).
            after = now if start is None or start <= now else start - _TICK
            first = next_cron_tick(cron, timezone, after)
        self.store.schedule_upsert(
            ScheduleParams(
                key=key,
                type=name,
                payload=encoded,
                cron=cron,
                every_seconds=every_s,
                timezone=timezone,
                repeat_from=repeat_from,
                first_run_at=first,
                scope=scope_v,
                priority=prio,
                max_attempts=attempts,
            )
        )

    def unschedule(self, key: str) -> bool:
        """Remove a schedule; True when it existed. Jobs it already enqueued stay."""
        return self.store.schedule_delete(check_name(key, "schedule key"))

    def schedules(self) -> list[ScheduleSummary]:
        """Every declared schedule."""
        return self.store.schedule_list()

    # -- cancellation ------------------------------------------------------------------------

    def cancel_for_scope(self, scope: ScopeLike, *, reason: str | None = None) -> int:
        """Drop queued jobs of ``scope`` and abort its running ones; returns how many."""
        scope_v = _required_scope(scope)
        return self._cancel(CancelFilter(scope=scope_v), reason)

    def cancel_pending_for_scope(self, scope: ScopeLike, *, reason: str | None = None) -> int:
        """Drop queued jobs of ``scope``, leaving running work alone; returns how many."""
        scope_v = _required_scope(scope)
        return self._cancel(CancelFilter(scope=scope_v, pending_only=True), reason)

    def cancel_by_dedupe_keys(
        self, job_type: str | JobType[Any], keys: Iterable[str], *, reason: str | None = None
    ) -> int:
        """Cancel live jobs of ``job_type`` with any of ``keys``; returns how many."""
        name = self._type(job_type)
        if isinstance(keys, str):
            raise ValueError("keys must be an iterable of dedupe keys, not a single string")
        key_list = [check_name(k, "dedupe_key") for k in keys]
        if not key_list:
            return 0
        return self._cancel(CancelFilter(type=name, dedupe_keys=key_list), reason)

    def cancel(self, job_id: str, *, reason: str | None = None) -> bool:
        """Cancel one pending or running job; True when it was live."""
        return self._cancel(CancelFilter(job_ids=[_job_id(job_id)]), reason) > 0

    def _cancel(self, selector: CancelFilter, reason: str | None) -> int:
        if reason is not None and not isinstance(reason, str):
            raise ValueError("reason must be a string")
        reason = (reason or "cancelled")[:500]
        cancelled = self.store.job_cancel(selector, reason)
        running = [c.id for c in cancelled if c.was_running]
        if running:
            _local.abort(self.store, running, reason)
        if self.observers:
            for job in cancelled:
                self._notify(_cancel_transition(job, reason))
        return len(cancelled)

    # -- inspection and administration -------------------------------------------------------

    def get(self, job_id: str) -> JobSummary | None:
        """One job by id, or None."""
        return self.store.job_get(_job_id(job_id))

    def wait(self, job_id: str, *, timeout: Duration | None = None) -> JobSummary:
        """Block until the job is terminal (SUCCEEDED or FAILED) and return its summary.

        ``timeout``: seconds or a timedelta (None: no limit, 0: look once). Raises
        ``TimeoutError`` past it, ``LookupError`` when the job does not exist or is deleted
        (cancelled, pruned, ``delete_on``) while waited for, and ``ValueError`` for a bad id
        or timeout, before anything else. Woken by the store's completion and cancel hints,
        with a poll as the fallback; on PostgreSQL every waiting thread of a store shares one
        listening connection and holds no pooled connection while it waits.
        """
        job = _job_id(job_id)
        seconds = None if timeout is None else to_seconds(timeout, "timeout")
        return self.store.job_wait(job, seconds)

    def find_for_scope(self, scope: ScopeLike) -> list[JobSummary]:
        """Every job of ``scope`` (newest first)."""
        scope_v = _required_scope(scope)
        return self.store.job_find(
            FindParams(scope_type=scope_v.type, scope_id=scope_v.id, limit=None)
        )

    def find(
        self,
        *,
        types: Sequence[str | JobType[Any]] | None = None,
        statuses: Sequence[JobStatus | str] | None = None,
        scope_type: str | None = None,
        scope_id: str | None = None,
        limit: int = 100,
        skip: int = 0,
        tags: Iterable[str] | None = None,
    ) -> list[JobSummary]:
        """Jobs matching every given filter, newest first; with ``tags``, only jobs carrying
        every listed tag. Statuses are accepted in any case ("FAILED", "failed")."""
        params = _find_params(types, statuses, scope_type, scope_id, limit, skip, need_limit=True)
        tags_v = check_tags(tags)
        if tags_v is not None:
            params = dataclasses.replace(params, tags=tags_v)
        return self.store.job_find(params)

    def workers(self) -> list[WorkerSummary]:
        """Every registered worker (running, stopping, or lost: no heartbeat for three of its
        intervals), by id. A cleanly stopped worker is not listed."""
        return self.store.worker_list()

    def count_by_status(self) -> dict[JobStatus, int]:
        """How many jobs are in each status (every status present)."""
        return self.store.job_count_by_status()

    def stats(self) -> dict[str, int]:
        """pending (due now), scheduled (future), running, succeeded, failed."""
        return self.store.job_stats()

    def retry_failed(
        self,
        *,
        types: Sequence[str | JobType[Any]] | None = None,
        scope_type: str | None = None,
        scope_id: str | None = None,
        limit: int | None = None,
        skip: int | None = None,
    ) -> int:
        """Move dead letters back to PENDING (attempts reset); no limit => every match."""
        params = _find_params(
            types, [JobStatus.FAILED], scope_type, scope_id, limit, skip or 0, need_limit=False
        )
        return self.store.job_retry_failed(params)

    def prune(
        self,
        *,
        older_than: datetime | Duration,
        statuses: Sequence[JobStatus | str] = (JobStatus.SUCCEEDED, JobStatus.FAILED),
    ) -> int:
        """Delete finished jobs older than a cut-off (aware datetime) or an age (duration)."""
        chosen = _statuses(statuses)
        if not chosen:
            raise ValueError("statuses must name at least one status")
        live = {JobStatus.PENDING, JobStatus.RUNNING} & set(chosen)
        if live:
            raise ValueError("prune only deletes finished jobs (succeeded, failed); use cancel")
        if isinstance(older_than, datetime):
            return self.store.job_prune(chosen, before=check_aware(older_than, "older_than"),
                                        age=None)
        age = to_seconds(older_than, "older_than")
        return self.store.job_prune(chosen, before=None, age=age)

    # -- helpers ------------------------------------------------------------------------------

    def _type(self, job_type: object) -> str:
        if isinstance(job_type, JobType):
            return check_name(job_type.name, "job type")
        return check_name(job_type, "job type")

    def _max_attempts(self, value: int | None) -> int:
        if value is None:
            return self.default_max_attempts
        return check_positive_int(value, "max_attempts")

    def _notify(self, transition: Transition) -> None:
        for observer in self.observers:
            try:
                observer.on_transition(transition)
            except Exception:
                log.exception(
                    "observer_failed", job_id=transition.job_id, type=transition.type,
                    outcome=transition.outcome,
                )


def _when(run_at: datetime | None, delay: Duration | None) -> tuple[datetime | None, float]:
    if run_at is not None and delay is not None:
        raise ValueError("give run_at or delay, not both")
    if run_at is not None:
        return check_aware(run_at, "run_at"), 0.0
    if delay is not None:
        return None, to_seconds(delay, "delay")
    return None, 0.0


def _required_scope(scope: ScopeLike | None) -> Scope:
    scope_v = check_scope(scope)
    if scope_v is None:
        raise ValueError("a scope is required")
    return scope_v


def _job_id(job_id: object) -> str:
    if isinstance(job_id, bool) or not isinstance(job_id, str | int):
        raise ValueError("job_id must be a string")
    text = str(job_id)
    if not text.isdigit() or len(text) > 19:
        raise ValueError("job_id must be a job id as returned by add()")
    return text


def _statuses(statuses: Sequence[JobStatus | str] | None) -> list[JobStatus]:
    if statuses is None:
        return []
    return check_statuses(statuses)


def _find_params(
    types: Sequence[str | JobType[Any]] | None,
    statuses: Sequence[JobStatus | str] | None,
    scope_type: str | None,
    scope_id: str | None,
    limit: int | None,
    skip: int,
    *,
    need_limit: bool,
) -> FindParams:
    if isinstance(types, str | JobType):
        types = [types]
    type_names = None
    if types is not None:
        type_names = [check_name(type_name(t), "job type") for t in types]
    if scope_type is not None:
        check_name(scope_type, "scope_type")
    if scope_id is not None:
        check_name(scope_id, "scope_id")
    if limit is None and need_limit:
        raise ValueError("limit must be a positive integer")
    if limit is not None:
        check_positive_int(limit, "limit")
    if isinstance(skip, bool) or not isinstance(skip, int) or skip < 0:
        raise ValueError("skip must be an integer >= 0")
    return FindParams(
        types=type_names,
        statuses=_statuses(statuses) if statuses is not None else None,
        scope_type=scope_type,
        scope_id=scope_id,
        limit=limit,
        skip=skip,
    )


def _cancel_transition(job: CancelledJob, reason: str) -> Transition:
    return Transition(job.id, job.type, job.scope, "cancelled", job.attempts, error=reason)


__all__ = ["Queue"]
