"""Chancy, from PyPI, through its public API (psycopg 3, asyncio).

Its schema is applied with ``Chancy.migrate()`` (its core tables and its plugins') in a
database the harness creates (its table names and NOTIFY channel are fixed by a prefix).
Jobs run on an ``AsyncExecutor`` queue (the no-op is an ``async def``, run in the worker's
event loop: Chancy's fastest executor for no-op jobs) with concurrency 32 and eager polling
(the queue fetches again as soon as a job completes instead of waiting for its poll
interval); LISTEN/NOTIFY is on (its default), so a push wakes an idle queue. Only the
plugins a scenario needs are enabled: none for plain jobs; Leadership and WorkflowPlugin
for workflows (the workflow scheduler runs on the leader only; leadership is polled every
second so the worker leads before the clock starts). Finished rows are kept (Chancy marks
them succeeded; its Pruner plugin, not enabled, would delete them later).

Chancy writes job outcomes in batches every ``Worker.send_outgoing_interval`` seconds (1 s
by default); a drain is timed until the last outcome is written (``Worker.flush()``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from benchmarks.sandbox import Sandbox
from benchmarks.systems.base import (
    LatencyProbe,
    System,
    UnavailableError,
    Variant,
    beside_producer,
    paced,
    run_async,
)
from benchmarks.systems.workflow import PRODUCERS, WORKFLOW_SHAPE, WorkflowProbe, WorkflowResult

#: The queue every Chancy job of the harness goes to.
QUEUE = "bench"
CONCURRENCY = 32
#: Rows one ``push_many`` transaction carries (Chancy inserts them one statement a job).
BULK_CHUNK = 1_000
#: Seconds between Chancy's batched outcome writes: its default, and a shorter one that
#: lets a workflow's next step start sooner (``Worker.send_outgoing_interval``).
DEFAULT_FLUSH = 1.0
FAST_FLUSH = 0.05

#: Where the module-level no-op reports a call (Chancy runs jobs by import path, so the
#: handler is a module function; the harness points this at its counter or probe).
_SINK: list[Callable[[dict[str, Any]], None]] = []


def _report(kwargs: dict[str, Any]) -> None:
    for sink in _SINK:
        sink(kwargs)


async def noop(i: int) -> None:
    """The no-op job of the drain, latency and enqueue scenarios."""
    _report({"i": i})


async def step(wf: int, node: str) -> None:
    """A no-op workflow step (fetch, extract_k or index of workflow ``wf``)."""
    _report({"wf": wf, "node": node})


NOOP = f"{__name__}.noop"
STEP = f"{__name__}.step"


def _quiet() -> logging.Logger:
    """Chancy logs every pulled job at INFO; keep the terminal for the harness."""
    log = logging.getLogger("golemq_bench.chancy")
    log.setLevel(logging.WARNING)
    log.propagate = False
    if not log.handlers:
        log.addHandler(logging.StreamHandler())
    return log


def _app(box: Sandbox, *, workflows: bool = False, pool: int = 8) -> Any:
    from chancy import Chancy  # noqa: PLC0415 - optional peer

    plugins: list[Any] = []
    if workflows:
        from chancy.plugins.leadership import Leadership  # noqa: PLC0415
        from chancy.plugins.workflow import WorkflowPlugin  # noqa: PLC0415

        plugins = [Leadership(poll_interval=1, timeout=3), WorkflowPlugin()]
    return Chancy(box.conninfo(), plugins=plugins, no_default_plugins=True, log=_quiet(),
                  min_connection_pool_size=1, max_connection_pool_size=pool)


def _job(i: int) -> Any:
    from chancy import Job  # noqa: PLC0415

    return Job(func=NOOP, queue=QUEUE, kwargs={"i": i})


async def _push_many(chancy: Any, first: int, n: int) -> None:
    jobs = [_job(i) for i in range(first, first + n)]
    async for _refs in chancy.push_many(jobs, batch_size=BULK_CHUNK):
        pass


class _Running:
    """A Chancy worker with the harness's queue started (and, for workflows, leading)."""

    def __init__(self, chancy: Any, flush: float, *, lead: bool = False) -> None:
        self.chancy = chancy
        self.flush = flush
        self.lead = lead
        self.worker: Any = None

    async def __aenter__(self) -> Any:
        from chancy import Worker  # noqa: PLC0415

        self.worker = Worker(self.chancy, register_signal_handlers=False,
                             shutdown_timeout=30)
        self.worker.send_outgoing_interval = self.flush
        await self.worker.start()
        deadline = time.perf_counter() + 30
        while QUEUE not in self.worker.executors or (
                self.lead and not self.worker.is_leader.is_set()):
            if time.perf_counter() > deadline:
                raise RuntimeError("Chancy's worker did not start its queue (or lead) in 30 s")
            await asyncio.sleep(0.02)
        return self.worker

    async def __aexit__(self, *exc: object) -> None:
        # Stopping cancels the worker's tasks mid-query; psycopg's pool logs each connection
        # it then discards (a WARNING): expected here, kept off the harness's terminal.
        pool_log = logging.getLogger("psycopg")
        level = pool_log.level
        pool_log.setLevel(logging.ERROR)
        try:
            await self.worker.stop()
        finally:
            pool_log.setLevel(level)


async def _declare(chancy: Any) -> None:
    from chancy import Chancy, Queue  # noqa: PLC0415

    # Chancy's Worker.start() declares a "default" queue (process-pool executor) unless one
    # exists: declared first with no tags, no worker runs it (nor starts a process pool).
    await chancy.declare(Queue("default", tags=set(), executor=Chancy.Executor.Async))
    await chancy.declare(Queue(QUEUE, concurrency=CONCURRENCY, executor=Chancy.Executor.Async,
                               polling_interval=1, eager_polling=True), upsert=True)


async def _count(chancy: Any, state: str) -> int:
    from psycopg import sql  # noqa: PLC0415

    async with chancy.pool.connection() as conn:
        cur = await conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE state = %s").format(
            sql.Identifier(f"{chancy.prefix}jobs")), [state])
        row = await cur.fetchone()
    return int(row[0]) if row else 0


class ChancySystem(System):
    """Chancy 0.x, AsyncExecutor queue, concurrency 32, eager polling."""

    name = "chancy"
    title = "Chancy"
    isolation = "database"

    def check_available(self) -> None:
        try:
            import chancy  # noqa: F401, PLC0415
        except ImportError as exc:
            raise UnavailableError("Chancy not installed; pip install 'golemq-pg[bench]'") from exc

    def variants(self, scenario: str, quick: bool) -> list[Variant]:
        default = Variant(self.name, f"c{CONCURRENCY}",
                          f"Chancy async executor, concurrency {CONCURRENCY}",
                          {"flush": DEFAULT_FLUSH}, reference=True)
        if scenario == "workflow":
            return [Variant(self.name, "workflow", "Chancy workflows (WorkflowPlugin, "
                            f"outcomes written every {DEFAULT_FLUSH:g} s: its default)",
                            {"flush": DEFAULT_FLUSH, "workflow": True}),
                    Variant(self.name, "workflow-fast", "Chancy workflows (WorkflowPlugin, "
                            f"outcomes written every {FAST_FLUSH:g} s)",
                            {"flush": FAST_FLUSH, "workflow": True}, full_only=True)]
        return [default]

    def install(self, box: Sandbox) -> None:
        async def main() -> None:
            async with _app(box, workflows=True) as chancy:
                await chancy.migrate()
                await _declare(chancy)

        run_async(main)

    def enqueue_setup(self, box: Sandbox, n: int, *, scopes: int = 0,
                      interleaved: bool = False) -> None:
        async def main() -> None:
            async with _app(box) as chancy:
                await _push_many(chancy, 0, n)

        run_async(main)

    def bulk_enqueue(self, box: Sandbox, n: int) -> float:
        async def main() -> float:
            async with _app(box) as chancy:
                await chancy.pool.wait()
                started = time.perf_counter()
                await _push_many(chancy, 0, n)
                return time.perf_counter() - started

        return run_async(main)

    def single_enqueue(self, box: Sandbox, n: int) -> float:
        async def main() -> float:
            async with _app(box) as chancy:
                await chancy.pool.wait()
                started = time.perf_counter()
                for i in range(n):
                    await chancy.push(_job(i))
                return time.perf_counter() - started

        return run_async(main)

    def drain(self, box: Sandbox, variant: Variant, n: int) -> float:
        processed = [0]

        def count(_kwargs: dict[str, Any]) -> None:
            processed[0] += 1

        async def main() -> float:
            async with _app(box) as chancy:
                await chancy.pool.wait()
                # Timed from the worker's start, as the other systems' drains are: the
                # queue starts on the backlog.
                started = time.perf_counter()
                async with _Running(chancy, variant.options["flush"]) as worker:
                    deadline = started + 900
                    while processed[0] < n and time.perf_counter() < deadline:
                        await asyncio.sleep(0.005)
                    await worker.flush()  # every outcome written
                    elapsed = time.perf_counter() - started
                succeeded = await _count(chancy, "succeeded")
            if processed[0] != n or succeeded != n:
                raise RuntimeError(f"Chancy ran {processed[0]} and recorded {succeeded} "
                                   f"succeeded of {n} jobs")
            return elapsed

        _SINK.append(count)
        try:
            return run_async(main)
        finally:
            _SINK.clear()

    def latency(self, box: Sandbox, variant: Variant, count: int, interval: float) -> list[float]:
        probe = LatencyProbe(count)
        ready = threading.Event()

        async def produce() -> None:
            async with _app(box, pool=2) as chancy:
                await chancy.pool.wait()
                started = time.perf_counter()
                for i in range(count):
                    await asyncio.sleep(paced(started, i, interval))
                    probe.committed[i] = time.perf_counter()
                    await chancy.push(_job(i))

        async def main() -> None:
            async with _app(box) as chancy, _Running(chancy, variant.options["flush"]):
                await asyncio.sleep(0.3)  # let the queue reach its idle wait
                ready.set()
                deadline = time.perf_counter() + count * interval + 10
                while not probe.done() and time.perf_counter() < deadline:
                    await asyncio.sleep(0.01)

        _SINK.append(lambda kwargs: probe.start(kwargs["i"]))
        try:
            beside_producer(main, produce, ready)
        finally:
            _SINK.clear()
        return probe.latencies()

    def workflows(self, box: Sandbox, variant: Variant, count: int) -> WorkflowResult:
        from chancy import Job  # noqa: PLC0415
        from chancy.plugins.workflow import Workflow, WorkflowPlugin  # noqa: PLC0415

        probe = WorkflowProbe(count)

        def build(w: int) -> Any:
            wf = Workflow(f"bench {w}")
            for node, parents in WORKFLOW_SHAPE:
                wf.add(node, Job(func=STEP, queue=QUEUE, kwargs={"wf": w, "node": node}),
                       list(parents))
            return wf

        async def main() -> tuple[float, float, int, int]:
            async with _app(box, workflows=True) as chancy:
                await chancy.pool.wait()
                async with _Running(chancy, variant.options["flush"], lead=True) as worker:
                    graphs = [build(w) for w in range(count)]  # built before the clock
                    started = time.perf_counter()

                    async def produce(part: list[Any]) -> None:
                        for wf in part:
                            await WorkflowPlugin.push(chancy, wf)

                    # PRODUCERS at once, as golemq-pg's threads
                    await asyncio.gather(*(produce(graphs[k::PRODUCERS])
                                           for k in range(PRODUCERS)))
                    added = time.perf_counter() - started
                    deadline = time.perf_counter() + 900
                    while not probe.done() and time.perf_counter() < deadline:
                        await asyncio.sleep(0.005)
                    elapsed = time.perf_counter() - started
                    await worker.flush()
                succeeded = await _count(chancy, "succeeded")
                finished = await _finished_workflows(chancy)
            return elapsed, added, succeeded, finished

        _SINK.append(probe.record)
        try:
            elapsed, added, succeeded, finished = run_async(main)
        finally:
            _SINK.clear()
        jobs = count * len(WORKFLOW_SHAPE)
        if not probe.done() or succeeded != jobs:
            raise RuntimeError(f"Chancy ran {probe.calls} and recorded {succeeded} succeeded "
                               f"of {jobs} workflow jobs")
        return WorkflowResult(elapsed, probe, add_seconds=added,
                              note=f"{finished} workflows completed")


async def _finished_workflows(chancy: Any) -> int:
    """Workflows Chancy's scheduler has seen through (state completed) so far."""
    from psycopg import sql  # noqa: PLC0415

    async with chancy.pool.connection() as conn:
        cur = await conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE state = 'completed'")
                                 .format(sql.Identifier(f"{chancy.prefix}workflows")))
        row = await cur.fetchone()
    return int(row[0]) if row else 0


__all__ = ["ChancySystem", "noop", "step"]
