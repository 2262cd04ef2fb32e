"""Driving a plan: a generator that yields the effects it needs (a statement, a store call)
and receives their results. Written once for every plan of the package: the store verbs
(``golemq_pg.store.postgres._plans``) and the queue methods (``golemq_pg.queue.plans``).

:func:`drive` runs a plan with a synchronous ``execute`` of one effect, :func:`drive_async`
with a coroutine one; an effect that raises has its exception thrown into the plan at its
``yield``, where the plan may catch it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

R = TypeVar("R")


class Done:
    """What :func:`advance` returns when the plan has finished: its return value."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def start(plan: Generator[Any, Any, Any]) -> Any:
    """The plan's first effect, or :class:`Done` when it needs none at all."""
    try:
        return next(plan)
    except StopIteration as stop:
        return Done(stop.value)


def advance(
    plan: Generator[Any, Any, Any], result: Any = None, error: BaseException | None = None
) -> Any:
    """Resume ``plan`` with an effect's result (or throw its error in): the next effect, or
    :class:`Done`. An exception the plan does not catch propagates."""
    try:
        if error is not None:
            return plan.throw(error)
        return plan.send(result)
    except StopIteration as stop:
        return Done(stop.value)


def drive(plan: Generator[Any, Any, R], execute: Callable[[Any], Any], step: Any) -> Done:
    """Run ``plan`` from its effect ``step`` (from :func:`start`) to its end."""
    while type(step) is not Done:
        try:
            result = execute(step)
        except Exception as exc:  # noqa: BLE001 - thrown into the plan, which decides
            step = advance(plan, error=exc)
        else:
            step = advance(plan, result)
    return step


async def drive_async(
    plan: Generator[Any, Any, R], execute: Callable[[Any], Awaitable[Any]], step: Any
) -> Done:
    """:func:`drive` with a coroutine ``execute``."""
    while type(step) is not Done:
        try:
            result = await execute(step)
        except Exception as exc:  # noqa: BLE001 - thrown into the plan, which decides
            step = advance(plan, error=exc)
        else:
            step = advance(plan, result)
    return step
