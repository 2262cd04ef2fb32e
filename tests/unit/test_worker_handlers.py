"""Handler registration: option validation, duplicates, cycles, one-sided exclusions, and
which handlers are async."""

from __future__ import annotations

import functools
from typing import Any, TypedDict

import pytest
import structlog

from golemq_pg import (
    BatchEvent,
    InMemoryStore,
    JobEvent,
    JobType,
    QueueConfigError,
    Worker,
)
from golemq_pg.worker.handlers import build_spec


def noop(job: Any) -> None:
    return None


def worker() -> Worker:
    return Worker(InMemoryStore(), poll_interval=0.05)


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"concurrency": 0}, "concurrency"),
        ({"concurrency": -2}, "concurrency"),
        ({"concurrency": 1.5}, "concurrency"),
        ({"concurrency": True}, "concurrency"),
        ({"concurrency": 10**6}, "at most"),
        ({"timeout": 0}, "timeout"),
        ({"timeout": -1}, "timeout"),
        ({"timeout": float("nan")}, "timeout"),
        ({"max_batch": 5}, "grouped"),
        ({"grouped": True, "max_batch": 0}, "max_batch"),
        ({"grouped": "yes"}, "grouped"),
        ({"serialize_by_scope": 1}, "serialize_by_scope"),
        ({"waits_for": ["t"]}, "itself"),
        ({"waits_for": [3]}, "waits_for"),
        ({"not_while_running": [""]}, "not_while_running"),
        ({"not_while_running": 5}, "not_while_running"),
        ({"grouped": True, "transactional": True}, "grouped"),
    ],
)
def test_bad_handler_options(options: dict[str, Any], fragment: str) -> None:
    w = worker()
    with pytest.raises(QueueConfigError, match=fragment):
        w.handler("t", **options)(noop)


@pytest.mark.parametrize("name", ["", "   ", "x" * 256, 5, None])
def test_bad_type_names(name: Any) -> None:
    with pytest.raises(QueueConfigError):
        worker().handler(name)(noop)


def test_handler_must_be_callable() -> None:
    with pytest.raises(QueueConfigError, match="callable"):
        worker().handler("t")(42)  # type: ignore[type-var]


def test_registering_a_type_twice_is_an_error() -> None:
    w = worker()
    w.handler("t")(noop)
    with pytest.raises(QueueConfigError, match="already registered"):
        w.handler("t", concurrency=2)(noop)


def test_decorator_returns_the_function_and_accepts_job_types() -> None:
    class Payload(TypedDict):
        n: int

    typed = JobType("typed", Payload)
    grouped = JobType("grouped", Payload, grouped=True)
    w = worker()

    @w.handler(typed, concurrency=2)
    def handle(job: JobEvent[Payload]) -> None:
        return None

    @w.handler(grouped, max_batch=10)
    def handle_batch(batch: BatchEvent[Payload]) -> None:
        return None

    assert handle(JobEvent(id="1", type="typed", payload={"n": 1})) is None
    assert w.handler_types == ("typed", "grouped")


def test_max_batch_allowed_for_grouped_job_type() -> None:
    w = worker()
    w.handler(JobType("g", grouped=True), max_batch=3)(noop)
    w.handler("h", grouped=True, max_batch=3)(noop)


def test_registration_after_start_adds_the_handler_and_stopping_refuses_it() -> None:
    w = worker()
    w.handler("t")(noop)
    w.start()
    try:
        w.handler("u")(noop)
        assert w.handler_types == ("t", "u")
        with pytest.raises(QueueConfigError, match="already registered"):
            w.handler("u")(noop)
    finally:
        w.stop()
    w.handler("v")(noop)  # a stopped worker takes it for its next start
    assert w.handler_types == ("t", "u", "v")


def test_single_type_string_is_accepted_for_type_lists() -> None:
    w = worker()
    w.handler("a", not_while_running="b", waits_for=JobType("c"))(noop)


def test_waits_for_cycle_is_rejected_at_start() -> None:
    w = worker()
    w.handler("a", waits_for=["b"])(noop)
    w.handler("b", waits_for=["c"])(noop)
    w.handler("c", waits_for=["a"])(noop)
    with pytest.raises(QueueConfigError, match="a -> b -> c -> a"):
        w.start()
    assert not w.running


def test_waits_for_on_foreign_types_is_not_a_cycle() -> None:
    w = worker()
    w.handler("a", waits_for=["b", "x"])(noop)
    w.handler("b", waits_for=["x"])(noop)
    w.start()
    w.stop()


def test_one_sided_not_while_running_logs_a_warning() -> None:
    w = worker()
    w.handler("a", not_while_running=["b"])(noop)
    w.handler("b")(noop)
    w.handler("c", not_while_running=["d"])(noop)
    w.handler("d", not_while_running=["c"])(noop)
    with structlog.testing.capture_logs() as logs:
        w.start()
        w.stop()
    warnings = [e for e in logs if e["event"] == "one_sided_not_while_running"]
    assert len(warnings) == 1
    assert "'a'" in warnings[0]["detail"]
    assert "'b'" in warnings[0]["detail"]


def test_lease_grace_zero_needs_timeouts() -> None:
    w = Worker(InMemoryStore(), lease_grace=0)
    w.handler("a")(noop)
    with pytest.raises(QueueConfigError, match="lease_grace"):
        w.start()
    w2 = Worker(InMemoryStore(), lease_grace=0)
    w2.handler("a", timeout=5)(noop)
    w2.start()
    w2.stop()


def test_transactional_needs_a_store_that_supports_it() -> None:
    with pytest.raises(QueueConfigError, match="transactional"):
        worker().handler("t", transactional=True)(noop)


def test_a_stopped_worker_can_start_again() -> None:
    w = worker()
    w.handler("t")(noop)
    w.stop()  # before start: nothing to do
    w.start()
    w.start()  # idempotent while running
    w.stop()
    w.stop()  # idempotent
    assert not w.running
    w.start()
    assert w.running
    w.stop()


async def async_noop(job: Any) -> None:
    return None


class _AsyncCallable:
    async def __call__(self, job: Any) -> None:
        return None


class _SyncCallable:
    def __call__(self, job: Any) -> None:
        return None


@pytest.mark.parametrize(
    ("fn", "expected"),
    [
        (async_noop, True),
        (functools.partial(async_noop), True),
        (_AsyncCallable(), True),
        (noop, False),
        (lambda job: None, False),
        (functools.partial(noop), False),
        (_SyncCallable(), False),
    ],
)
def test_async_handlers_are_recognised_however_they_are_made(fn: Any, expected: bool) -> None:
    assert build_spec("t", fn).is_async is expected

