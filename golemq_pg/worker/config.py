"""The ``Worker`` options: declared once (:class:`WorkerOptions`), validated once when the
worker is built (:func:`build_config`, where each option's default sits beside its check).

Out-of-range or inconsistent values raise :class:`golemq_pg.errors.QueueConfigError` with a
message that names the option. Durations become float seconds here, so nothing downstream
deals with ``timedelta``.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

from golemq_pg._types import (
    Duration,
    JobStatus,
    LifecycleObserver,
    Resource,
    Retention,
    RetryStrategy,
    Unlimited,
    check_attempt_budget,
)
from golemq_pg._validation import (
    check_delete_on,
    check_dsn,
    check_name,
    check_status,
    to_seconds,
)
from golemq_pg.errors import QueueConfigError
from golemq_pg.worker.middleware import Middleware, check_middleware

#: The most jobs one claim may ask for: bounds one round trip and one buffer refill.
MAX_BATCH_SIZE = 10_000
#: The largest ``max_concurrency`` (jobs held at once by one worker).
MAX_WORKER_CONCURRENCY = 1_000_000
#: Finished statuses the retention sweep may delete (live work is cancelled, never pruned).
PRUNABLE = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED})


#: When a handler's finished rows are deleted instead of kept.
DeleteOn = Literal["never", "success", "always"]


class WorkerOptions(TypedDict, total=False):
    """Every keyword option of :class:`~golemq_pg.Worker`, the one place each is declared.

    ``Worker(store, **options)`` takes exactly these (mypy checks names and types; an unknown
    name is a ``TypeError`` at run time). Defaults and checks: :func:`build_config`; meanings:
    the README's worker options table.
    """

    poll_interval: Duration
    notify: bool
    batch_size: int | None
    lease_duration: Duration | None
    lease_renew_interval: Duration | None
    lease_grace: Duration
    base_backoff: Duration
    max_backoff: Duration
    abandon_grace: Duration
    shutdown_grace: Duration
    default_max_attempts: int | Unlimited
    worker_id: str | None
    resources: Mapping[str, Resource] | None
    retention: Retention | None
    observers: Sequence[LifecycleObserver]
    retry_strategy: RetryStrategy | None
    delete_on: DeleteOn
    listen_dsn: str | None
    max_concurrency: int | None
    middleware: Sequence[Middleware]


@dataclass(frozen=True, slots=True)
class RetentionConfig:
    """A validated :class:`Retention`: seconds instead of durations."""

    older_than: float
    sweep_interval: float
    statuses: tuple[JobStatus, ...]


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """Every Worker option, validated and normalised (durations in float seconds)."""

    poll_interval: float
    notify: bool
    batch_size: int | None
    lease_duration: float | None
    lease_renew_interval: float | None
    lease_grace: float
    base_backoff: float
    max_backoff: float
    abandon_grace: float
    shutdown_grace: float
    #: The budget of the jobs this worker enqueues itself (schedule ticks whose schedule has
    #: none of its own); None: unlimited.
    default_max_attempts: int | None
    worker_id: str
    resources: Mapping[str, Resource]
    retention: RetentionConfig | None
    observers: tuple[LifecycleObserver, ...]
    retry_strategy: RetryStrategy | None
    #: When finished rows are deleted: "never", "success" or "always" (handlers may override).
    delete_on: str = "never"
    #: Where the listener's LISTEN connection goes (None: the store's choice).
    listen_dsn: str | None = None
    #: Most jobs held (claimed, running) at once across all the worker's types (None: no
    #: cap beyond each handler's ``concurrency``).
    max_concurrency: int | None = None
    #: Around each attempt, outermost first (composed into each handler when registered).
    middleware: tuple[Middleware, ...] = ()

    def lease_seconds(self, timeout: float | None) -> float:
        """The lease a claim of a type with handler ``timeout`` asks for: ``lease_duration``
        when set (renewed), else ``timeout + lease_grace`` written once, else
        ``lease_grace`` (renewed)."""
        if self.lease_duration is not None:
            return self.lease_duration
        if timeout is not None:
            return timeout + self.lease_grace
        return self.lease_grace


def _seconds(value: object, what: str, *, positive: bool) -> float:
    try:
        return to_seconds(value, what, allow_zero=not positive)
    except ValueError as exc:
        raise QueueConfigError(str(exc)) from None


def _positive_int(value: object, what: str, *, upper: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise QueueConfigError(f"{what} must be a positive integer")
    if upper is not None and value > upper:
        raise QueueConfigError(f"{what} must be at most {upper}")
    return value


def _name(value: object, what: str) -> str:
    try:
        return check_name(value, what)
    except ValueError as exc:
        raise QueueConfigError(str(exc)) from None


def default_worker_id() -> str:
    """``host-pid-random``: unique per process, readable in ``lease_owner``."""
    host = (socket.gethostname() or "host")[:200]
    return f"{host}-{os.getpid()}-{secrets.token_hex(3)}"


def check_resources(resources: object) -> dict[str, Resource]:
    """Validate resource pools: positive limits, member types, positive integer costs."""
    if resources is None:
        return {}
    if not isinstance(resources, Mapping):
        raise QueueConfigError("resources must be a mapping of pool name to Resource")
    checked: dict[str, Resource] = {}
    for raw_name, pool in resources.items():
        name = _name(raw_name, "resource name")
        checked[name] = _check_resource(name, pool)
    return checked


def _check_resource(name: str, pool: object) -> Resource:
    """One pool of :func:`check_resources`, validated and copied."""
    if not isinstance(pool, Resource):
        raise QueueConfigError(f"resource {name!r} must be a Resource")
    if pool.concurrency is None and pool.rate_per_minute is None:
        raise QueueConfigError(
            f"resource {name!r} needs concurrency, rate_per_minute, or both"
        )
    if pool.concurrency is not None:
        _positive_int(pool.concurrency, f"resource {name!r} concurrency")
    if pool.rate_per_minute is not None:
        _positive_int(pool.rate_per_minute, f"resource {name!r} rate_per_minute")
    if isinstance(pool.types, str):
        raise QueueConfigError(f"resource {name!r} types must be a list of job types")
    members = [_name(t, f"resource {name!r} member type") for t in pool.types]
    if not members:
        raise QueueConfigError(f"resource {name!r} must name at least one member type")
    _check_costs(name, pool.costs, "costs", members, pool.concurrency, "its concurrency")
    _check_costs(name, pool.rate_costs, "rate_costs", members, pool.rate_per_minute,
                 "rate_per_minute")
    return Resource(
        concurrency=pool.concurrency,
        rate_per_minute=pool.rate_per_minute,
        types=tuple(members),
        costs=dict(pool.costs),
        rate_costs=dict(pool.rate_costs),
    )


def _check_costs(name: str, costs: object, what: str, members: list[str],
                 limit: int | None, limit_name: str) -> None:
    """A pool's ``costs`` or ``rate_costs``: member types only, positive integers, none above
    the limit it is spent from (``limit``, None: no such limit), which it could never fit."""
    if not isinstance(costs, Mapping):
        raise QueueConfigError(f"resource {name!r} {what} must be a mapping")
    for job_type, cost in costs.items():
        if job_type not in members:
            raise QueueConfigError(
                f"resource {name!r} {what} names {job_type!r}, which is not a member "
                "type of the pool"
            )
        _positive_int(cost, f"resource {name!r} {what}[{job_type!r}]")
    if limit is None:
        return
    for job_type, cost in costs.items():
        if cost > limit:
            kind = "cost" if what == "costs" else "rate cost"
            raise QueueConfigError(
                f"resource {name!r}: {kind} of {job_type!r} exceeds {limit_name}, "
                "so it could never run"
            )


def check_retention(retention: object) -> RetentionConfig | None:
    """Validate a :class:`Retention`: positive age and interval, finished statuses only."""
    if retention is None:
        return None
    if not isinstance(retention, Retention):
        raise QueueConfigError("retention must be a Retention(older_than=..., ...)")
    older_than = _seconds(retention.older_than, "retention older_than", positive=True)
    interval = _seconds(retention.sweep_interval, "retention sweep_interval", positive=True)
    raw: Sequence[object] = retention.statuses
    if isinstance(raw, str):
        raw = (raw,)
    statuses: list[JobStatus] = []
    for status in raw:
        try:
            value = check_status(status)
        except ValueError as exc:
            raise QueueConfigError(f"retention: {exc}") from None
        if value not in PRUNABLE:
            raise QueueConfigError("retention only prunes finished jobs (succeeded, failed)")
        statuses.append(value)
    if not statuses:
        raise QueueConfigError("retention statuses must name at least one status")
    return RetentionConfig(older_than, interval, tuple(dict.fromkeys(statuses)))


def check_observers(observers: object) -> tuple[LifecycleObserver, ...]:
    """Observers: a sequence of objects with an ``on_transition`` method."""
    if observers is None:
        return ()
    if not isinstance(observers, Sequence) or isinstance(observers, str):
        raise QueueConfigError("observers must be a sequence of LifecycleObserver objects")
    for observer in observers:
        if not callable(getattr(observer, "on_transition", None)):
            raise QueueConfigError("observers must have an on_transition(transition) method")
    return tuple(observers)


def build_config(options: WorkerOptions) -> WorkerConfig:
    """Validate the Worker's keyword options into a :class:`WorkerConfig` (a missing option
    takes its default, written here beside its check)."""
    unknown = sorted(set(options) - set(WorkerOptions.__annotations__))
    if unknown:
        raise TypeError(f"Worker() got an unexpected keyword argument {unknown[0]!r}")
    get = options.get
    notify: object = get("notify", True)
    listen_dsn: object = get("listen_dsn")
    if not isinstance(notify, bool):
        raise QueueConfigError("notify must be True or False")
    listen = None
    if listen_dsn is not None:
        try:
            listen = check_dsn(listen_dsn, "listen_dsn")
        except ValueError as exc:
            raise QueueConfigError(str(exc)) from None
        if not notify:
            raise QueueConfigError(
                "listen_dsn is for the LISTEN connection, which notify=False does not open: "
                "drop one of them"
            )
    poll = _seconds(get("poll_interval", 0.5), "poll_interval", positive=True)
    batch_size = get("batch_size")
    batch = None if batch_size is None else _positive_int(
        batch_size, "batch_size", upper=MAX_BATCH_SIZE
    )
    lease_duration = get("lease_duration")
    lease = None if lease_duration is None else _seconds(
        lease_duration, "lease_duration", positive=True
    )
    renew: float | None = None
    lease_renew_interval = get("lease_renew_interval")
    if lease_renew_interval is not None:
        if lease is None:
            raise QueueConfigError("lease_renew_interval needs lease_duration")
        renew = _seconds(lease_renew_interval, "lease_renew_interval", positive=True)
        if renew >= lease:
            raise QueueConfigError(
                "lease_renew_interval must be shorter than lease_duration, or leases expire "
                "between renewals"
            )
    grace = _seconds(get("lease_grace", 30), "lease_grace", positive=False)
    base = _seconds(get("base_backoff", 2), "base_backoff", positive=False)
    cap = _seconds(get("max_backoff", 300), "max_backoff", positive=False)
    if cap < base:
        raise QueueConfigError("max_backoff must be >= base_backoff")
    abandon = _seconds(get("abandon_grace", 5), "abandon_grace", positive=False)
    shutdown = _seconds(get("shutdown_grace", 15), "shutdown_grace", positive=False)
    try:
        attempts = check_attempt_budget(get("default_max_attempts", 3), "default_max_attempts")
    except ValueError as exc:
        raise QueueConfigError(str(exc)) from None
    worker_id = get("worker_id")
    owner = default_worker_id() if worker_id is None else _name(worker_id, "worker_id")
    retry_strategy: object = get("retry_strategy")
    if retry_strategy is not None and not callable(retry_strategy):
        raise QueueConfigError("retry_strategy must be a callable(RetryContext) -> float | None")
    strategy: Callable[..., Any] | None = retry_strategy
    try:
        deleting = check_delete_on(get("delete_on", "never"), "delete_on")
    except ValueError as exc:
        raise QueueConfigError(str(exc)) from None
    max_concurrency = get("max_concurrency")
    cap_all = None if max_concurrency is None else _positive_int(
        max_concurrency, "max_concurrency", upper=MAX_WORKER_CONCURRENCY
    )
    return WorkerConfig(
        poll_interval=poll,
        notify=notify,
        batch_size=batch,
        lease_duration=lease,
        lease_renew_interval=renew,
        lease_grace=grace,
        base_backoff=base,
        max_backoff=cap,
        abandon_grace=abandon,
        shutdown_grace=shutdown,
        default_max_attempts=attempts,
        worker_id=owner,
        resources=check_resources(get("resources")),
        retention=check_retention(get("retention")),
        observers=check_observers(get("observers", ())),
        retry_strategy=strategy,
        delete_on=deleting,
        listen_dsn=listen,
        max_concurrency=cap_all,
        middleware=check_middleware(get("middleware", ())),
    )


__all__ = [
    "MAX_BATCH_SIZE",
    "MAX_WORKER_CONCURRENCY",
    "DeleteOn",
    "RetentionConfig",
    "WorkerConfig",
    "WorkerOptions",
    "build_config",
    "check_observers",
    "check_resources",
    "check_retention",
    "default_worker_id",
]
