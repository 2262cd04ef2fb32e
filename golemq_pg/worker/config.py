"""Validation of every ``Worker`` option, done once when the worker is built.

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
from typing import Any

from golemq_pg._types import JobStatus, LifecycleObserver, Resource, Retention, RetryStrategy
from golemq_pg._validation import (
    check_delete_on,
    check_dsn,
    check_name,
    check_status,
    to_seconds,
)
from golemq_pg.errors import QueueConfigError

#: The most jobs one claim may ask for: bounds one round trip and one buffer refill.
MAX_BATCH_SIZE = 10_000
#: Finished statuses the retention sweep may delete (live work is cancelled, never pruned).
PRUNABLE = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED})


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
    default_max_attempts: int
    worker_id: str
    resources: Mapping[str, Resource]
    retention: RetentionConfig | None
    observers: tuple[LifecycleObserver, ...]
    retry_strategy: RetryStrategy | None
    #: When finished rows are deleted: "never", "success" or "always" (handlers may override).
    delete_on: str = "never"
    #: Where the listener's LISTEN connection goes (None: the store's choice).
    listen_dsn: str | None = None

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


def build_config(
    *,
    poll_interval: object,
    notify: object,
    batch_size: object,
    lease_duration: object,
    lease_renew_interval: object,
    lease_grace: object,
    base_backoff: object,
    max_backoff: object,
    abandon_grace: object,
    shutdown_grace: object,
    default_max_attempts: object,
    worker_id: object,
    resources: object,
    retention: object,
    observers: object,
    retry_strategy: object,
    delete_on: object = "never",
    listen_dsn: object = None,
) -> WorkerConfig:
    """Validate the Worker's keyword arguments into a :class:`WorkerConfig`."""
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
    poll = _seconds(poll_interval, "poll_interval", positive=True)
    batch = None if batch_size is None else _positive_int(
        batch_size, "batch_size", upper=MAX_BATCH_SIZE
    )
    lease = None if lease_duration is None else _seconds(
        lease_duration, "lease_duration", positive=True
    )
    renew: float | None = None
    if lease_renew_interval is not None:
        if lease is None:
            raise QueueConfigError("lease_renew_interval needs lease_duration")
        renew = _seconds(lease_renew_interval, "lease_renew_interval", positive=True)
        if renew >= lease:
            raise QueueConfigError(
                "lease_renew_interval must be shorter than lease_duration, or leases expire "
                "between renewals"
            )
    grace = _seconds(lease_grace, "lease_grace", positive=False)
    base = _seconds(base_backoff, "base_backoff", positive=False)
    cap = _seconds(max_backoff, "max_backoff", positive=False)
    if cap < base:
        raise QueueConfigError("max_backoff must be >= base_backoff")
    abandon = _seconds(abandon_grace, "abandon_grace", positive=False)
    shutdown = _seconds(shutdown_grace, "shutdown_grace", positive=False)
    attempts = _positive_int(default_max_attempts, "default_max_attempts", upper=2**31 - 1)
    owner = default_worker_id() if worker_id is None else _name(worker_id, "worker_id")
    if retry_strategy is not None and not callable(retry_strategy):
        raise QueueConfigError("retry_strategy must be a callable(RetryContext) -> float | None")
    strategy: Callable[..., Any] | None = retry_strategy
    try:
        deleting = check_delete_on(delete_on, "delete_on")
    except ValueError as exc:
        raise QueueConfigError(str(exc)) from None
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
        resources=check_resources(resources),
        retention=check_retention(retention),
        observers=check_observers(observers),
        retry_strategy=strategy,
        delete_on=deleting,
        listen_dsn=listen,
    )


__all__ = [
    "MAX_BATCH_SIZE",
    "RetentionConfig",
    "WorkerConfig",
    "build_config",
    "check_observers",
    "check_resources",
    "check_retention",
    "default_worker_id",
]
