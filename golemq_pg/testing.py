"""Helpers for testing code that uses golemq-pg, without a database.

* :class:`InMemoryStore` (re-exported): the full storage port in memory, same semantics as
  PostgreSQL, guards included. ``Queue(InMemoryStore())`` and ``Worker(InMemoryStore())``
  work as they do against PostgreSQL, except ``connection=`` (no transaction to join).
* :class:`FakeClock`: a clock you move by hand, to pass as ``InMemoryStore(clock=...)``,
  so that delays, backoffs, leases, schedules and rate windows can be tested without
  sleeping.
* :func:`memory_store`: an ``InMemoryStore`` on a fresh ``FakeClock``, returned together.

To process everything that is due and then return, use ``Worker.run_until_empty(timeout)``
(the same on both stores). Jobs parked in the future (``delay=``, retry backoff) are not
due: advance the fake clock, then call ``run_until_empty`` again. With a fake clock,
nothing moves unless you move it — a lease never expires and a backoff never ends on its
own — which is what makes such tests deterministic.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

from golemq_pg.store.memory import InMemoryStore

#: Where a FakeClock starts unless told otherwise: a fixed, unremarkable instant.
DEFAULT_START = datetime(2024, 1, 1, 12, 0, tzinfo=UTC)


class FakeClock:
    """A thread-safe manual clock returning aware UTC datetimes.

    Call it (or :meth:`now`) for the current time; :meth:`advance` moves it forward.
    """

    def __init__(self, start: datetime | None = None) -> None:
        start = DEFAULT_START if start is None else start
        if start.tzinfo is None or start.utcoffset() is None:
            raise ValueError("FakeClock needs an aware start datetime")
        self._now = start.astimezone(UTC)
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        return self.now()

    def __repr__(self) -> str:
        return f"FakeClock({self.now().isoformat()})"

    def now(self) -> datetime:
        """The current fake time."""
        with self._lock:
            return self._now

    def advance(self, seconds: float | timedelta) -> datetime:
        """Move forward by ``seconds`` (or a timedelta); returns the new time."""
        step = seconds if isinstance(seconds, timedelta) else timedelta(seconds=seconds)
        if step < timedelta(0):
            raise ValueError("a FakeClock only moves forward")
        with self._lock:
            self._now += step
            return self._now

    def set(self, when: datetime) -> None:
        """Jump to ``when`` (aware, not earlier than the current time)."""
        if when.tzinfo is None or when.utcoffset() is None:
            raise ValueError("FakeClock.set needs an aware datetime")
        with self._lock:
            if when < self._now:
                raise ValueError("a FakeClock only moves forward")
            self._now = when.astimezone(UTC)


def memory_store(
    start: datetime | None = None, *, rate_window: float = 60.0
) -> tuple[InMemoryStore, FakeClock]:
    """A fresh :class:`InMemoryStore` driven by a new :class:`FakeClock`."""
    clock = FakeClock(start)
    return InMemoryStore(clock=clock, rate_window=rate_window), clock


__all__ = ["DEFAULT_START", "FakeClock", "InMemoryStore", "memory_store"]
