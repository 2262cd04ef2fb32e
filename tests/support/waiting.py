"""Waiting on a condition with a deadline: the suite's one polling helper.

Use it for state that is only visible by looking (a database row, a log file, a process);
for worker transitions, wait on :class:`tests.support.observers.Recorder` instead.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T | None],
    timeout: float = 10.0,
    interval: float = 0.02,
    what: str | Callable[[], str] = "condition",
) -> T:
    """Call ``predicate`` until it returns something truthy (returned), or fail after
    ``timeout`` seconds with ``what`` (a text, or a callable for a text computed only on
    failure, e.g. the tail of a log) in the message."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            label = what() if callable(what) else what
            raise AssertionError(f"{label} not met within {timeout}s")
        time.sleep(interval)
