"""JobEvent, BatchEvent and CancelSignal as handlers see them."""

from __future__ import annotations

import threading
import time

import pytest

from golemq_pg import BatchEvent, CancelSignal, JobEvent, Scope
from golemq_pg.errors import JobAborted


def test_signal_starts_clear_and_fires_once() -> None:
    signal = CancelSignal()
    assert not signal.cancelled
    assert signal.reason is None
    signal.raise_if_cancelled()
    assert signal.wait(0) is False
    assert signal.fire("timeout")
    assert not signal.fire("shutdown")
    assert signal.cancelled
    assert signal.reason == "timeout"
    assert signal.wait(0) is True
    with pytest.raises(JobAborted, match="timeout"):
        signal.raise_if_cancelled()


def test_wait_is_woken_by_fire_from_another_thread() -> None:
    signal = CancelSignal()
    results: list[bool] = []
    waiter = threading.Thread(target=lambda: results.append(signal.wait(10)))
    waiter.start()
    time.sleep(0.02)
    started = time.monotonic()
    signal.fire("cancelled")
    waiter.join(5)
    assert results == [True]
    assert time.monotonic() - started < 1


def test_wait_times_out() -> None:
    started = time.monotonic()
    assert CancelSignal().wait(0.05) is False
    assert time.monotonic() - started >= 0.04


def test_job_event_repr_never_shows_the_payload() -> None:
    event = JobEvent(id="1", type="t", payload={"secret": "hunter2"}, scope=Scope("A", "1"))
    assert "hunter2" not in repr(event)
    assert "secret" not in repr(event)
    batch = BatchEvent(type="t", scope=None, jobs=[event], attempt=1, signal=event.signal)
    assert "hunter2" not in repr(batch)


def test_hand_built_event_defaults_and_local_progress() -> None:
    event = JobEvent(id="1", type="t", payload={})
    assert event.attempt == 1
    assert event.connection is None
    assert not event.signal.cancelled
    event.progress(0.5)
    event.progress({"step": 2})


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "50%", None, True, [1],
                                   {"x": b"bytes"}, {1: "x"}])
def test_progress_rejects_bad_values(value: object) -> None:
    event = JobEvent(id="1", type="t", payload={})
    with pytest.raises(ValueError):
        event.progress(value)  # type: ignore[arg-type]
