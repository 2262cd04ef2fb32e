"""What every measured system offers the scenarios, and the small helpers they share."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from benchmarks.sandbox import Sandbox

T = TypeVar("T")

#: The job type / task name / entrypoint every system uses for its no-op job.
JOB_TYPE = "bench_noop"


class UnavailableError(Exception):
    """The system cannot run here (package missing, not implemented yet); skipped with a note."""


class UnsupportedError(Exception):
    """The system has no equivalent for this scenario; the pair is skipped silently."""


@dataclass(frozen=True, slots=True)
class Variant:
    """One configuration of a system, e.g. PGQueuer with 2 consumers x batch 100."""

    system: str
    key: str
    label: str
    options: Mapping[str, Any] = field(default_factory=dict)
    #: A reference figure for ratios (raw ceiling, the peer's best configuration).
    reference: bool = False
    full_only: bool = False


@dataclass(frozen=True, slots=True)
class SteadyResult:
    """Producers and consumers running together for ``seconds``."""

    enqueued: int
    processed: int
    seconds: float


class LatencyProbe:
    """Enqueue-commit and handler-start timestamps (``time.perf_counter``) per job index."""

    def __init__(self, count: int) -> None:
        self.committed: list[float | None] = [None] * count
        self.started: list[float | None] = [None] * count

    def start(self, index: int) -> None:
        """Record a handler start; only the first start of an index counts."""
        if 0 <= index < len(self.started) and self.started[index] is None:
            self.started[index] = time.perf_counter()

    def done(self) -> bool:
        """Whether every job's handler has started."""
        return all(s is not None for s in self.started)

    def latencies(self) -> list[float]:
        """Seconds from commit to handler start, for the jobs that have both."""
        return [s - c for c, s in zip(self.committed, self.started, strict=True)
                if c is not None and s is not None]


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.005) -> bool:
    """Poll ``predicate`` until it holds or ``timeout`` seconds pass."""
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def run_async(factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine on a fresh event loop (uvloop when installed: the peers' best setting)."""
    try:
        import uvloop  # noqa: PLC0415 - optional accelerator shipped with PGQueuer
    except ImportError:
        return asyncio.run(factory())
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(factory())


def paced(start: float, index: int, interval: float) -> float:
    """Seconds to sleep so that job ``index`` is sent at ``start + index * interval``."""
    return max(0.0, start + index * interval - time.perf_counter())


class System:
    """A queue implementation driven through its public API (or, for the ceiling, bare SQL).

    Methods return wall-clock seconds measured around the work only (not the setup), and
    raise :class:`UnsupportedError` where a system has nothing comparable.
    """

    name = "system"
    title = "system"
    #: "schema" (golemq-pg, raw SQL) or "database" (peers with fixed object names).
    isolation = "schema"
    #: Far below 1k jobs/s: the scenarios use their smaller sizes.
    slow = False

    def check_available(self) -> None:
        """Raise :class:`UnavailableError` with a reason when the system cannot run here."""

    def variants(self, scenario: str, quick: bool) -> list[Variant]:
        """The configurations to measure in ``scenario`` (the primary one first)."""
        raise NotImplementedError

    def install(self, box: Sandbox) -> None:
        """Create the system's tables in the sandbox."""
        raise NotImplementedError

    def enqueue_setup(self, box: Sandbox, n: int, *, scopes: int = 0,
                      interleaved: bool = False) -> None:
        """Put ``n`` due no-op jobs in the queue the fastest way (not timed). ``scopes``: spread
        them over that many scopes, each scope's jobs in a row, or with ``interleaved`` in
        turn (one job of each scope, then the next round)."""
        raise NotImplementedError

    def bulk_enqueue(self, box: Sandbox, n: int) -> float:
        """Seconds to enqueue ``n`` jobs with the system's bulk API."""
        raise UnsupportedError

    def single_enqueue(self, box: Sandbox, n: int) -> float:
        """Seconds to enqueue ``n`` jobs one at a time, each in its own transaction."""
        raise UnsupportedError

    def drain(self, box: Sandbox, variant: Variant, n: int) -> float:
        """Seconds to process ``n`` already-enqueued jobs until the queue is empty."""
        raise UnsupportedError

    def drain_partial(self, box: Sandbox, variant: Variant, k: int) -> float:
        """Seconds to process ``k`` jobs out of a larger backlog (the scale scenario)."""
        raise UnsupportedError

    def steady(self, box: Sandbox, variant: Variant, seconds: float) -> SteadyResult:
        """One producer (batches of 100) and the consumers together for ``seconds``."""
        raise UnsupportedError

    def latency(self, box: Sandbox, variant: Variant, count: int, interval: float) -> list[float]:
        """Commit -> handler-start latencies of ``count`` jobs sent every ``interval`` s."""
        raise UnsupportedError


def payload_text(index: int) -> str:
    """The JSON text of the no-op payload of job ``index``."""
    return json.dumps({"i": index})
