"""Worker option validation: every bad value raises QueueConfigError naming the option."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import pytest

from golemq_pg import InMemoryStore, JobStatus, QueueConfigError, Resource, Retention, Worker
from golemq_pg.worker.config import WorkerConfig, WorkerOptions, default_worker_id


def build(**options: Any) -> Worker:
    return Worker(InMemoryStore(), **options)


def test_defaults_are_valid_and_normalised() -> None:
    worker = build()
    cfg = worker.config
    assert cfg.poll_interval == 0.5
    assert cfg.lease_grace == 30.0
    assert cfg.base_backoff == 2.0
    assert cfg.max_backoff == 300.0
    assert cfg.batch_size is None
    assert cfg.default_max_attempts == 3
    assert worker.worker_id == cfg.worker_id
    assert cfg.worker_id.count("-") >= 2


def test_durations_accept_timedelta() -> None:
    cfg = build(poll_interval=timedelta(milliseconds=250), lease_duration=timedelta(minutes=1),
                lease_renew_interval=timedelta(seconds=10)).config
    assert cfg.poll_interval == 0.25
    assert cfg.lease_duration == 60.0
    assert cfg.lease_renew_interval == 10.0


@pytest.mark.parametrize(
    ("option", "value", "fragment"),
    [
        ("poll_interval", 0, "poll_interval"),
        ("poll_interval", -1, "poll_interval"),
        ("poll_interval", math.nan, "poll_interval"),
        ("poll_interval", math.inf, "poll_interval"),
        ("poll_interval", "1", "poll_interval"),
        ("poll_interval", True, "poll_interval"),
        ("lease_duration", 0, "lease_duration"),
        ("lease_grace", -0.1, "lease_grace"),
        ("base_backoff", -1, "base_backoff"),
        ("max_backoff", -1, "max_backoff"),
        ("abandon_grace", -1, "abandon_grace"),
        ("shutdown_grace", math.nan, "shutdown_grace"),
        ("batch_size", 0, "batch_size"),
        ("batch_size", 1.5, "batch_size"),
        ("batch_size", 10**9, "batch_size"),
        ("default_max_attempts", 0, "default_max_attempts"),
        ("default_max_attempts", True, "default_max_attempts"),
        ("worker_id", "   ", "worker_id"),
        ("worker_id", "", "worker_id"),
        ("worker_id", "x" * 256, "worker_id"),
        ("worker_id", 5, "worker_id"),
        ("notify", "yes", "notify"),
        ("retry_strategy", 42, "retry_strategy"),
        ("observers", [object()], "on_transition"),
        ("observers", "abc", "observers"),
    ],
)
def test_bad_options_raise_naming_the_option(option: str, value: Any, fragment: str) -> None:
    with pytest.raises(QueueConfigError, match=fragment):
        build(**{option: value})


def test_an_unknown_option_is_a_type_error_naming_it() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'poll_intervall'"):
        build(poll_intervall=1)


def test_every_declared_option_reaches_the_validated_config() -> None:
    # WorkerOptions is the one declaration: each name it lists is a WorkerConfig field.
    assert set(WorkerOptions.__annotations__) == set(WorkerConfig.__dataclass_fields__)


def test_graces_and_backoffs_may_be_zero() -> None:
    cfg = build(lease_grace=0, base_backoff=0, max_backoff=0, abandon_grace=0,
                shutdown_grace=0).config
    assert (cfg.lease_grace, cfg.base_backoff, cfg.max_backoff) == (0, 0, 0)


def test_max_backoff_below_base_is_rejected() -> None:
    with pytest.raises(QueueConfigError, match="max_backoff"):
        build(base_backoff=10, max_backoff=5)


def test_renew_interval_needs_lease_duration_and_must_be_shorter() -> None:
    with pytest.raises(QueueConfigError, match="needs lease_duration"):
        build(lease_renew_interval=1)
    with pytest.raises(QueueConfigError, match="shorter"):
        build(lease_duration=3, lease_renew_interval=3)
    assert build(lease_duration=3, lease_renew_interval=1).config.lease_renew_interval == 1


@pytest.mark.parametrize(
    ("pool", "fragment"),
    [
        (Resource(types=["a"]), "needs concurrency"),
        (Resource(concurrency=0, types=["a"]), "concurrency"),
        (Resource(concurrency=-1, types=["a"]), "concurrency"),
        (Resource(rate_per_minute=0, types=["a"]), "rate_per_minute"),
        (Resource(concurrency=2, types=[]), "at least one"),
        (Resource(concurrency=2, types="a"), "list"),  # type: ignore[arg-type]
        (Resource(concurrency=2, types=["a"], costs={"b": 1}), "not a member"),
        (Resource(concurrency=2, types=["a"], costs={"a": 0}), "positive"),
        (Resource(concurrency=2, types=["a"], costs={"a": 1.5}), "positive"),  # type: ignore[dict-item]
        (Resource(concurrency=2, types=["a"], costs={"a": 3}), "never run"),
        (Resource(rate_per_minute=5, types=["a"], rate_costs={"a": 6}), "never run"),
        (Resource(rate_per_minute=5, types=["a"], rate_costs={"x": 1}), "not a member"),
    ],
)
def test_bad_resources(pool: Resource, fragment: str) -> None:
    with pytest.raises(QueueConfigError, match=fragment):
        build(resources={"api": pool})


def test_resource_names_and_types_are_checked() -> None:
    with pytest.raises(QueueConfigError):
        build(resources={"": Resource(concurrency=1, types=["a"])})
    with pytest.raises(QueueConfigError, match="must be a Resource"):
        build(resources={"api": {"concurrency": 1}})
    with pytest.raises(QueueConfigError, match="mapping"):
        build(resources=[Resource(concurrency=1, types=["a"])])


def test_good_resources_are_kept() -> None:
    pools = build(resources={"api": Resource(concurrency=4, rate_per_minute=180,
                                             types=["a", "b"], costs={"a": 2},
                                             rate_costs={"b": 50})}).config.resources
    assert pools["api"].cost_of("a") == 2
    assert pools["api"].rate_cost_of("b") == 50


@pytest.mark.parametrize(
    ("retention", "fragment"),
    [
        (Retention(older_than=0), "older_than"),
        (Retention(older_than=-5), "older_than"),
        (Retention(older_than=60, sweep_interval=0), "sweep_interval"),
        (Retention(older_than=60, statuses=(JobStatus.PENDING,)), "finished"),
        (Retention(older_than=60, statuses=("bogus",)), "unknown"),  # type: ignore[arg-type]
        (Retention(older_than=60, statuses=()), "at least one"),
    ],
)
def test_bad_retention(retention: Retention, fragment: str) -> None:
    with pytest.raises(QueueConfigError, match=fragment):
        build(retention=retention)


def test_retention_normalised() -> None:
    cfg = build(retention=Retention(older_than=timedelta(days=7), sweep_interval=60,
                                    statuses=["failed"])).config  # type: ignore[list-item]
    assert cfg.retention is not None
    assert cfg.retention.older_than == 7 * 86400
    assert cfg.retention.statuses == (JobStatus.FAILED,)


def test_store_must_be_a_job_store() -> None:
    with pytest.raises(QueueConfigError, match="JobStore"):
        Worker(object())  # type: ignore[arg-type]


def test_default_worker_ids_are_unique() -> None:
    assert len({default_worker_id() for _ in range(50)}) == 50
