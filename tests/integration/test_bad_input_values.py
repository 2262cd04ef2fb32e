"""docs/RELIABILITY.md, bad input: payloads, cron strings and durations.

Each gets a clear error (naming the job type and the category, never the payload) before any
SQL, and changes nothing: no job, no schedule, no progress.
"""

from __future__ import annotations

import asyncio
import dataclasses
import decimal
import math
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from golemq_pg import (
    AsyncQueue,
    JobEvent,
    Queue,
    QueueConfigError,
    QueuePayloadError,
    Retention,
    Worker,
)

CANARY = "CANARY-bad-input-5e1d"


@dataclasses.dataclass
class Custom:
    secret: str = CANARY


class Recursive(dict):  # type: ignore[type-arg]
    """A mapping that contains itself."""


def _circular() -> dict[str, Any]:
    node: dict[str, Any] = {"secret": CANARY}
    node["again"] = [node]
    return node


BAD_PAYLOADS: list[tuple[Any, str]] = [
    ({"b": b"bytes", "s": CANARY}, "bytes"),
    ({"b": bytearray(b"x")}, "bytes"),
    ({"m": memoryview(b"x")}, "bytes"),
    ({"set": {1, 2}}, "sets"),
    ({"fs": frozenset({"a"})}, "sets"),
    ({"nan": math.nan}, "non-finite"),
    ({"inf": [1, {"x": math.inf}]}, "non-finite"),
    ({"ninf": -math.inf}, "non-finite"),
    (_circular(), "circular"),
    ({1: "int key"}, "not a string"),
    ({"nested": {(1, 2): "tuple key"}}, "not a string"),
    ({None: "none key"}, "not a string"),
    ({"obj": Custom()}, "Custom"),
    ({"dec": decimal.Decimal("1.5")}, "Decimal"),
    ({"when": datetime.now(UTC)}, "datetime"),
    ({"id": uuid.uuid4()}, "UUID"),
    ({"fn": print}, "functions"),
    ({"s": CANARY + "\x00"}, "NUL"),  # jsonb cannot store U+0000: its error quoted the payload
    ({"k\x00": CANARY}, "NUL"),
    ({"big": 2**80}, "64-bit"),
    ({"blob": "x" * (1024 * 1024), "s": CANARY}, "larger than"),
    (["not", "a", "mapping"], "mapping"),
    ("a string", "mapping"),
    (None, "mapping"),
]


def _nothing_written(store: Any) -> None:
    assert sum(store.job_count_by_status().values()) == 0
    assert store.schedule_list() == []


@pytest.mark.parametrize(("payload", "category"), BAD_PAYLOADS,
                         ids=[c for _, c in BAD_PAYLOADS])
def test_bad_payloads_get_a_clear_error_everywhere(store: Any, payload: Any,
                                                   category: str) -> None:
    queue = Queue(store)
    calls = [
        lambda: queue.add("email.send", payload),
        lambda: queue.add_many("email.send", [{"fine": 1}, payload]),
        lambda: queue.schedule("k", "email.send", payload, every=60),
    ]
    for call in calls:
        with pytest.raises(QueuePayloadError) as info:
            call()
        message = str(info.value)
        assert "email.send" in message
        assert category in message
        assert CANARY not in message
        assert info.value.__cause__ is None
    _nothing_written(store)


def test_progress_with_a_bad_value_is_refused_and_not_written(store: Any) -> None:
    queue = Queue(store)
    job_id = queue.add("work", {})
    worker = Worker(store, poll_interval=0.05)
    errors: list[str] = []

    @worker.handler("work")
    def work(job: JobEvent[Any]) -> None:
        for bad in (math.nan, math.inf, {"s": {1}}, {"secret": CANARY, "b": b"x"}, "text",
                    True):
            try:
                job.progress(bad)  # type: ignore[arg-type]
            except ValueError as exc:
                errors.append(str(exc))

    worker.run_until_empty(timeout=20)
    assert len(errors) == 6
    assert all(CANARY not in e for e in errors)
    assert queue.get(job_id).progress is None  # type: ignore[union-attr]


BAD_CRON = ["not a cron", "0 0 30 2 *", "* * * *", "61 * * * *", "* * * * * * * *",
            "@never", "", "   ", "0 25 * * *", "*/0 * * * *"]


@pytest.mark.parametrize("cron", BAD_CRON, ids=range(len(BAD_CRON)))
def test_cron_strings_that_do_not_parse_or_never_fire(store: Any, cron: str) -> None:
    with pytest.raises(ValueError, match="cron"):
        Queue(store).schedule("k", "report", {}, cron=cron)
    _nothing_written(store)


BAD_DURATIONS: list[Any] = [0, -1, -0.001, math.nan, math.inf, -math.inf, 1e20,
                            timedelta(seconds=-5), timedelta(days=10**6), "5", True, None]


@pytest.mark.parametrize("value", BAD_DURATIONS, ids=range(len(BAD_DURATIONS)))
def test_bad_durations_on_the_queue(store: Any, value: Any) -> None:
    queue = Queue(store)
    if value is not None:
        with pytest.raises(ValueError, match="every"):
            queue.schedule("k", "t", {}, every=value)
    if value != 0 and value is not None:  # a zero delay is "now"
        with pytest.raises(ValueError, match="delay"):
            queue.add("t", {}, delay=value)
        with pytest.raises(ValueError, match="delay"):
            queue.add_many("t", [{}], delay=value)
        with pytest.raises(ValueError, match="older_than"):
            queue.prune(older_than=value)
    _nothing_written(store)


@pytest.mark.parametrize("value", BAD_DURATIONS, ids=range(len(BAD_DURATIONS)))
def test_bad_durations_on_the_worker(mem_store: Any, value: Any) -> None:
    positive = ["poll_interval", "lease_duration"]
    non_negative = ["lease_grace", "base_backoff", "max_backoff", "abandon_grace",
                    "shutdown_grace"]
    for option in positive + (non_negative if value != 0 else []):
        if value is None and option in ("lease_duration",):
            continue  # None: "not set"
        with pytest.raises(QueueConfigError, match=option):
            Worker(mem_store, **{option: value})
    if value is not None:
        with pytest.raises(QueueConfigError, match="timeout"):
            Worker(mem_store).handler("t", timeout=value)(lambda job: None)
        with pytest.raises(QueueConfigError):
            Worker(mem_store, retention=Retention(older_than=value))
        with pytest.raises(QueueConfigError):
            Worker(mem_store, retention=Retention(older_than=60, sweep_interval=value))
    if value != 0 and value is not None:
        worker = Worker(mem_store)
        with pytest.raises(QueueConfigError):
            worker.stop(timeout=value)
        with pytest.raises(QueueConfigError):
            worker.run_until_empty(timeout=value)
        assert not worker.running


def test_naive_and_non_datetime_times_are_refused(store: Any) -> None:
    queue = Queue(store)
    naive = datetime(2030, 1, 1)
    for bad in (naive, "2030-01-01T00:00:00Z", 1893456000):
        with pytest.raises(ValueError, match="run_at"):
            queue.add("t", {}, run_at=bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="start_at"):
            queue.schedule("k", "t", {}, every=60, start_at=bad)  # type: ignore[arg-type]
        if not isinstance(bad, int):  # a number is an age in seconds
            with pytest.raises(ValueError, match="older_than"):
                queue.prune(older_than=bad)  # type: ignore[arg-type]
    _nothing_written(store)


def test_a_huge_but_finite_delay_is_refused_not_overflowed(store: Any) -> None:
    # Just below the limit is stored; the database's timestamp range is never hit.
    queue = Queue(store)
    far = queue.add("t", {}, delay=timedelta(days=365 * 99))
    assert far is not None
    summary = queue.get(far)
    assert summary is not None
    assert summary.run_at.year >= datetime.now(UTC).year + 98
    with pytest.raises(ValueError, match="too large"):
        queue.add("t", {}, delay=timedelta(days=365 * 101))
    assert sum(store.job_count_by_status().values()) == 1


def test_concurrent_bad_input_never_half_writes(store: Any) -> None:
    # Many threads mixing good and bad calls: exactly the good ones are written.
    queue = Queue(store)
    errors: list[BaseException] = []

    def mixed(n: int) -> None:
        for i in range(20):
            try:
                queue.add_many("t", [{"ok": i}, {"bad": {1}} if i % 2 else {"ok": -i}])
            except QueuePayloadError:
                continue
            except BaseException as exc:
                errors.append(exc)

    threads = [threading.Thread(target=mixed, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert sum(store.job_count_by_status().values()) == 4 * 10 * 2


# -- values that would be stored but not read back ----------------------------------------

PLUS_14 = timezone(timedelta(hours=14))
MINUS_14 = timezone(timedelta(hours=-14))
#: Aware times whose UTC instant is outside what reads back (year 0, year 10000, the edges).
UNREADABLE_TIMES = [datetime(1, 1, 1, 5, tzinfo=PLUS_14), datetime(1, 1, 1, tzinfo=UTC),
                    datetime(9999, 12, 31, 20, tzinfo=MINUS_14),
                    datetime(9999, 12, 31, tzinfo=UTC)]


def _all_writes(queue: Any, **kwargs: Any) -> list[Callable[[], Any]]:
    return [lambda: queue.add("t", {}, **kwargs), lambda: queue.add_many("t", [{}], **kwargs)]


@pytest.mark.parametrize("when", UNREADABLE_TIMES, ids=range(len(UNREADABLE_TIMES)))
def test_a_run_at_that_cannot_be_read_back_is_refused(store: Any, when: datetime) -> None:
    queue = Queue(store)
    for call in _all_writes(queue, run_at=when):
        with pytest.raises(ValueError, match="run_at"):
            call()
    with pytest.raises(ValueError, match="start_at"):
        queue.schedule("k", "t", {}, every=60, start_at=when)
    with pytest.raises(ValueError, match="run_at"):
        asyncio.run(AsyncQueue(store).add("t", {}, run_at=when))
    _nothing_written(store)


def test_the_earliest_and_latest_run_at_read_back_everywhere(store: Any) -> None:
    queue = Queue(store)
    first = queue.add("t", {}, run_at=datetime(1, 1, 2, 14, tzinfo=PLUS_14))
    last = queue.add("t", {}, run_at=datetime(9999, 12, 29, 10, tzinfo=MINUS_14))
    assert first is not None
    assert last is not None
    assert queue.get(first).run_at == datetime(1, 1, 2, tzinfo=UTC)  # type: ignore[union-attr]
    assert queue.get(last).run_at == datetime(9999, 12, 30, tzinfo=UTC)  # type: ignore[union-attr]
    assert {j.id for j in queue.find(types=["t"])} == {first, last}


def test_max_attempts_past_the_integer_column_is_refused(store: Any) -> None:
    queue = Queue(store)
    for bad in (2**31, 2**63, 10**30):
        for call in _all_writes(queue, max_attempts=bad):
            with pytest.raises(ValueError, match="max_attempts must be at most 2147483647"):
                call()
        with pytest.raises(ValueError, match="max_attempts"):
            queue.schedule("k", "t", {}, every=60, max_attempts=bad)
        with pytest.raises(ValueError, match="default_max_attempts"):
            Queue(store, default_max_attempts=bad)
        with pytest.raises(ValueError, match="max_attempts"):
            asyncio.run(AsyncQueue(store).add("t", {}, max_attempts=bad))
    _nothing_written(store)
    job_id = queue.add("t", {}, max_attempts=2**31 - 1)
    assert queue.get(job_id).max_attempts == 2**31 - 1  # type: ignore[arg-type, union-attr]


@pytest.mark.parametrize("every", [0.5, 0.999, timedelta(milliseconds=999), 1e-9],
                         ids=range(4))
def test_an_every_under_one_second_is_refused(store: Any, every: Any) -> None:
    with pytest.raises(ValueError, match="every must be at least one second"):
        Queue(store).schedule("k", "t", {}, every=every)
    with pytest.raises(ValueError, match="every"):
        asyncio.run(AsyncQueue(store).schedule("k", "t", {}, every=every))
    _nothing_written(store)


LONE = "\udc80"  # half of a surrogate pair: not Unicode, cannot be encoded to UTF-8


def test_lone_surrogates_are_refused_naming_the_field(store: Any) -> None:
    queue = Queue(store)
    cases: list[tuple[Callable[[], Any], str]] = [
        (lambda: queue.add("t" + LONE, {}), "job type"),
        (lambda: queue.add_many(LONE, [{}]), "job type"),
        (lambda: queue.add("t", {}, dedupe_key=LONE), "dedupe_key"),
        (lambda: queue.add("t", {}, scope=(LONE, "1")), "scope type"),
        (lambda: queue.add("t", {}, scope=("S", "1" + LONE)), "scope id"),
        (lambda: queue.add("t", {}, tags=["a" + LONE]), "tags"),
        (lambda: queue.add("t", {"s": CANARY + LONE}), "surrogate"),
        (lambda: queue.add("t", {"k" + LONE: CANARY}), "surrogate"),
        (lambda: queue.add("t", {"deep": [{"s": LONE}]}), "surrogate"),
        (lambda: queue.add_many("t", [{}, {"s": LONE}]), "surrogate"),
        (lambda: queue.schedule(LONE, "t", {}, every=60), "schedule key"),
        (lambda: queue.schedule("k", "t", {"s": LONE}, every=60), "surrogate"),
        (lambda: queue.schedule("k", "t", {}, cron="0 " + LONE + " * * *"), "cron"),
        (lambda: queue.schedule("k", "t", {}, every=60, timezone=LONE), "timezone"),
        (lambda: queue.pause("t", "deploy " + LONE), "reason"),
        (lambda: queue.find(types=[LONE]), "job type"),
        (lambda: queue.cancel_for_scope(("S", LONE)), "scope id"),
        (lambda: asyncio.run(AsyncQueue(store).add("t", {"s": LONE})), "surrogate"),
        (lambda: asyncio.run(AsyncQueue(store).add(LONE, {})), "job type"),
    ]
    for call, field in cases:
        with pytest.raises(ValueError, match=field) as info:
            call()
        assert CANARY not in str(info.value)
        assert LONE not in str(info.value)
    _nothing_written(store)
    assert store.type_paused() == {}
