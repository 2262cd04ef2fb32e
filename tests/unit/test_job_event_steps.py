"""``JobEvent.step`` / ``astep`` on an event built by hand (a user's unit test of a handler):
no store, so each step runs and is kept on the event for the attempt; the checks on names
and values are the worker's."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from golemq_pg import JobEvent, TerminalJobError
from golemq_pg.worker.events import StepRejected


def _event() -> JobEvent[Any]:
    return JobEvent(id="1", type="t", payload={})


def test_a_step_runs_its_function_and_returns_the_value_as_json_gives_it_back() -> None:
    event = _event()
    assert event.step("pair", lambda: (1, "two")) == [1, "two"]
    assert event.step("none", lambda: None) is None


def test_a_name_used_twice_is_refused_as_a_terminal_value_error() -> None:
    event = _event()
    event.step("a", lambda: 1)
    with pytest.raises(StepRejected, match="'a' was already used in this attempt") as info:
        event.step("a", lambda: 2)
    assert isinstance(info.value, TerminalJobError)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(("name", "problem"), [
    ("", "step name must be a non-empty string"),
    (7, "step name must be a string"),
    ("x" * 256, "step name must be at most 255 characters"),
])
def test_a_bad_name_is_refused_before_the_function_runs(name: Any, problem: str) -> None:
    ran: list[int] = []
    with pytest.raises(StepRejected, match=problem):
        _event().step(name, lambda: ran.append(1))
    assert ran == []


def test_a_value_that_is_not_json_safe_is_refused_without_showing_it() -> None:
    with pytest.raises(StepRejected) as info:
        _event().step("s", lambda: {"secret-v41": object()})
    assert str(info.value).startswith("step 's': value is not JSON-safe")
    assert "secret-v41" not in str(info.value)


def test_an_async_step_awaits_its_function_once_per_name() -> None:
    event = _event()
    calls: list[int] = []

    async def fetch() -> dict[str, int]:
        calls.append(1)
        return {"n": 1}

    async def run() -> Any:
        first = await event.astep("fetch", fetch)
        with pytest.raises(StepRejected):
            await event.astep("fetch", fetch)
        return first

    assert asyncio.run(run()) == {"n": 1}
    assert calls == [1]
