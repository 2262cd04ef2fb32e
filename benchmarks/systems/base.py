"""What every measured system offers the scenarios, and the small helpers they share."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from benchmarks.sandbox import Sandbox
from benchmarks.systems.workflow import WorkflowResult

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


@dataclass(frozen=True, slots=True)
class LoadPlan:
    """A paced producer: ``rate`` jobs/s for ``seconds``, one enqueue call every ``tick`` s.

    By the end of tick ``k`` the producer has sent ``due(k)`` jobs (their payloads' ``i``
    numbered from 0); a call that comes late carries every job due by then, so a producer
    slower than its ticks still offers the rate (in fewer, bigger calls).
    """

    rate: float
    seconds: float
    tick: float

    @property
    def ticks(self) -> int:
        """How many ticks the producer's window has."""
        return max(1, round(self.seconds / self.tick))

    @property
    def total(self) -> int:
        """Jobs the producer enqueues in all."""
        return self.due(self.ticks - 1)

    def due(self, k: int) -> int:
        """Jobs sent by the end of tick ``k`` (rounding carried over, not lost)."""
        return round(self.rate * self.tick * min(k + 1, self.ticks))


class Pacer:
    """The schedule of one :class:`LoadPlan` as its producer walks it: sleep ``wait()``
    seconds, then send the ``take()`` jobs, until ``finished``."""

    def __init__(self, plan: LoadPlan) -> None:
        self.plan = plan
        self.sent = 0
        self._tick = 0
        self.started = time.perf_counter()

    @property
    def finished(self) -> bool:
        """Whether every tick has been served."""
        return self._tick >= self.plan.ticks

    def wait(self) -> float:
        """Seconds until the next tick is due (0 when late)."""
        return paced(self.started, self._tick, self.plan.tick)

    def take(self) -> tuple[int, int]:
        """(first, count): the jobs due now, the late ticks' ones included."""
        late = int((time.perf_counter() - self.started) / self.plan.tick)
        k = min(self.plan.ticks - 1, max(self._tick, late))
        self._tick = k + 1
        first, self.sent = self.sent, self.plan.due(k)
        return first, self.sent - first


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


@dataclass
class LoadedResult:
    """A paced producer and the consumers together: per-job commit/start times and the
    producer's window (``time.perf_counter``)."""

    probe: LatencyProbe
    window_start: float
    window_end: float


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


def beside_producer(main: Callable[[], Coroutine[Any, Any, Any]],
                    produce: Callable[[], Coroutine[Any, Any, Any]],
                    ready: threading.Event) -> None:
    """Run the consumers' ``main`` on this thread's event loop and ``produce`` on a thread of
    its own (its own loop), started once ``main`` sets ``ready``; returns when both ended."""

    def producer_thread() -> None:
        ready.wait()
        run_async(produce)

    producer = threading.Thread(target=producer_thread, daemon=True)
    producer.start()
    run_async(main)
    producer.join()


def paced(start: float, index: int, interval: float) -> float:
    """Seconds to sleep so that job ``index`` is sent at ``start + index * interval``."""
    return max(0.0, start + index * interval - time.perf_counter())


def stamp(probe: LatencyProbe, first: int, count: int) -> None:
    """Mark jobs ``first`` .. ``first + count - 1`` as committed now (just before the enqueue
    call that commits them, as the idle latency scenario does)."""
    probe.committed[first:first + count] = [time.perf_counter()] * count


def produce_paced(plan: LoadPlan, probe: LatencyProbe,
                  send: Callable[[int, int], object]) -> tuple[float, float]:
    """Be the producer of ``plan`` on this thread: ``send(first, count)`` enqueues (and
    commits) the jobs ``first`` .. ``first + count - 1``. Returns the window (start, end):
    from the first tick to the end of the last one, or to the last call's return when the
    producer ran late."""
    pacer = Pacer(plan)
    while not pacer.finished:
        time.sleep(pacer.wait())
        first, count = pacer.take()
        if count:
            stamp(probe, first, count)
            send(first, count)
    time.sleep(paced(pacer.started, plan.ticks, plan.tick))
    return pacer.started, time.perf_counter()


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
    #: Figures the last :meth:`drain` measured beside its time (golemq-pg: the client's CPU
    #: per job; with tracing, one SDK span's CPU), added to the drain scenario's run.
    drain_figures: dict[str, float] = {}  # noqa: RUF012 - replaced, never mutated in place

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
        """Seconds to process ``n`` already-enqueued jobs until the queue is empty; figures
        measured beside the time go to :attr:`drain_figures`."""
        raise UnsupportedError

    def drain_partial(self, box: Sandbox, variant: Variant, k: int) -> float:
        """Seconds to process ``k`` jobs out of a larger backlog (the scale scenario)."""
        raise UnsupportedError

    def drain_twice(self, box: Sandbox, variant: Variant, n: int,
                    between: Callable[[], object]) -> tuple[float, float]:
        """Seconds of two drains of ``n`` already-enqueued jobs each, by one set of consumers
        (the same connections where the system has a pool); ``between()`` runs once the first
        drain has ended, with nothing consuming, and leaves the second backlog of ``n`` due
        jobs (the after-vacuum scenario)."""
        raise UnsupportedError

    def steady(self, box: Sandbox, variant: Variant, seconds: float) -> SteadyResult:
        """One producer (batches of 100) and the consumers together for ``seconds``."""
        raise UnsupportedError

    def latency(self, box: Sandbox, variant: Variant, count: int, interval: float) -> list[float]:
        """Commit -> handler-start latencies of ``count`` jobs sent every ``interval`` s."""
        raise UnsupportedError

    def workflows(self, box: Sandbox, variant: Variant, count: int) -> WorkflowResult:
        """The workflow scenario: ``count`` workflows of ``systems.workflow.WORKFLOW_SHAPE``
        (or, for golemq-pg's plain variants, the same jobs without dependencies), timed from
        the first add to the last job's handler; returns its :class:`WorkflowResult`."""
        raise UnsupportedError

    def loaded(self, box: Sandbox, variant: Variant, plan: LoadPlan) -> LoadedResult:
        """The consumers running while a producer enqueues as ``plan`` says (each call's jobs
        stamped ``committed`` just before the call, as in :meth:`latency`); returns once
        every enqueued job's handler has started (or a timeout passed)."""
        raise UnsupportedError


def payload_text(index: int) -> str:
    """The JSON text of the no-op payload of job ``index``."""
    return json.dumps({"i": index})
