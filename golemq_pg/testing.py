"""Helpers for testing code that uses golemq-pg, without a database.

* :class:`InMemoryStore` (re-exported): the full storage port in memory, same semantics as
  PostgreSQL, guards included. ``Queue(InMemoryStore())`` and ``Worker(InMemoryStore())``
  work as they do against PostgreSQL, except ``connection=`` (no transaction to join).
* :class:`FakeClock`: a clock you move by hand, to pass as ``InMemoryStore(clock=...)``,
  so that delays, backoffs, leases, schedules and rate windows can be tested without
  sleeping.
* :func:`memory_store`: an ``InMemoryStore`` on a fresh ``FakeClock``, returned together.

* :func:`assert_enqueued`: the job an application should have enqueued, found on any
  synchronous store (``PostgresStore``, ``InMemoryStore``), or an ``AssertionError`` saying
  what was expected and how the closest jobs of that type differ.

For pytest fixtures (a migrated store on a fresh schema, the in-memory store, a queue), see
:mod:`golemq_pg.pytest_plugin`.

To process everything that is due and then return, use ``Worker.run_until_empty(timeout)``
(the same on both stores). Jobs parked in the future (``delay=``, retry backoff) are not
due: advance the fake clock, then call ``run_until_empty`` again. With a fake clock,
nothing moves unless you move it — a lease never expires and a backoff never ends on its
own — which is what makes such tests deterministic.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from golemq_pg._types import UNLIMITED, JobSummary, JobType, Scope
from golemq_pg._validation import check_status
from golemq_pg.store.memory import InMemoryStore
from golemq_pg.store.port import FindParams, JobStore

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


#: The JobSummary fields ``assert_enqueued`` compares (``payload`` is its own argument).
_FIELDS = tuple(f.name for f in dataclasses.fields(JobSummary) if f.name not in ("id", "type"))
#: At most this many candidates are described in a failure message.
_SHOWN = 3


def assert_enqueued(
    store: JobStore, type: str | JobType[Any], payload: Mapping[str, Any] | None = None,
    **fields: Any,
) -> JobSummary:
    """The newest job of ``type`` whose payload equals ``payload`` (when given) and whose
    :class:`~golemq_pg.JobSummary` fields equal ``fields`` (``scope=("Article", "a1")``,
    ``status="pending"``, ``priority=5``, ``tags=("eu",)``, ``max_attempts=...`` (an int, or
    ``UNLIMITED`` / None for an unlimited budget), ...).

    Raises ``AssertionError`` when none matches, saying what was expected, how many jobs
    of the type there are, and for the closest few (fewest differences first) which fields
    differ, with their values, and which payload keys differ, by name only: payload values
    are left out of the message, which can end up in a CI log. ``TypeError`` for a field
    ``JobSummary`` does not have. Works on any synchronous store; for an
    ``AsyncPostgresStore``, pass a ``PostgresStore`` on the same schema.
    """
    name = type.name if isinstance(type, JobType) else type
    unknown = sorted(set(fields) - set(_FIELDS))
    if unknown:
        raise TypeError(f"assert_enqueued: JobSummary has no field {', '.join(unknown)}; "
                        f"use {', '.join(_FIELDS)}")
    wanted = {key: _normal(key, value) for key, value in fields.items()}
    expected_payload = None if payload is None else orjson.loads(orjson.dumps(dict(payload)))
    jobs = store.job_find(FindParams(types=[name], limit=None))
    differences: list[tuple[list[str], JobSummary]] = []
    for job in jobs:
        differs = [
            f"{key}: {getattr(job, key)!r} != {value!r}"
            for key, value in wanted.items()
            if _normal(key, getattr(job, key)) != value
        ]
        if expected_payload is not None:
            differs += _payload_differences(store, job, expected_payload)
        if not differs:
            return job
        differences.append((differs, job))
    expected = ", ".join([*(f"{k}={v!r}" for k, v in wanted.items()),
                          *(["payload=<given>"] if payload is not None else [])])
    lines = [f"no {name!r} job matches {expected or 'anything'}: "
             f"{len(jobs)} job(s) of that type"]
    for differs, job in sorted(differences, key=lambda item: len(item[0]))[:_SHOWN]:
        lines.append(f"  job {job.id} ({job.status.value}) differs in " + "; ".join(differs))
    raise AssertionError("\n".join(lines))


def _normal(key: str, value: Any) -> Any:
    """A field value as compared: scopes as Scope, statuses as JobStatus, tags as a tuple."""
    if key == "scope" and isinstance(value, tuple) and len(value) == 2:
        return Scope(*value)
    if key == "status" and value is not None:
        return check_status(value)
    if key == "tags" and value is not None and not isinstance(value, str):
        return tuple(value)
    if key == "max_attempts" and value is UNLIMITED:
        return None  # read back as None
    return value


def _payload_differences(store: JobStore, job: JobSummary, expected: Any) -> list[str]:
    """What differs between a job's payload and ``expected``, by top-level key name only."""
    raw = store.job_payload(job.id)
    actual = {} if raw is None else orjson.loads(raw)
    if actual == expected:
        return []
    keys = sorted(set(actual) | set(expected))
    missing = [k for k in keys if k not in actual]
    extra = [k for k in keys if k not in expected]
    changed = [k for k in keys if k in actual and k in expected and actual[k] != expected[k]]
    parts = [f"{label} {', '.join(map(repr, names))}"
             for label, names in (("missing", missing), ("unexpected", extra),
                                  ("other values for", changed)) if names]
    return ["payload: " + "; ".join(parts)]


__all__ = [
    "DEFAULT_START",
    "FakeClock",
    "InMemoryStore",
    "assert_enqueued",
    "memory_store",
]
