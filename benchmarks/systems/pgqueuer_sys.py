"""PGQueuer, from PyPI, through its public API with the asyncpg driver.

Its schema is installed with its own installer (``Queries.install()``, what ``pgq install``
runs) in a database the harness creates. Consumers are QueueManagers on their own
connections in one event loop (uvloop when installed), as PGQueuer's own benchmark runs
them. PGQueuer deletes a job when it completes (moving it to its log table).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from benchmarks.sandbox import Sandbox
from benchmarks.systems.base import (
    JOB_TYPE,
    LatencyProbe,
    LoadedResult,
    LoadPlan,
    Pacer,
    SteadyResult,
    System,
    UnavailableError,
    Variant,
    beside_producer,
    paced,
    payload_text,
    run_async,
    stamp,
)

#: How many jobs one bulk ``enqueue`` call carries (PGQueuer takes lists and UNNESTs them).
BULK_CHUNK = 10_000


async def _connect(box: Sandbox) -> Any:
    import asyncpg  # noqa: PLC0415 - optional peer

    return await asyncpg.connect(**box.asyncpg_kwargs())


def _queries(conn: Any) -> Any:
    from pgqueuer import Queries  # noqa: PLC0415 - optional peer

    return Queries.from_asyncpg_connection(conn)


async def _enqueue_many(box: Sandbox, first: int, n: int) -> None:
    conn = await _connect(box)
    try:
        queries = _queries(conn)
        for start in range(first, first + n, BULK_CHUNK):
            k = min(BULK_CHUNK, first + n - start)
            await queries.enqueue([JOB_TYPE] * k,
                                  [payload_text(i).encode() for i in range(start, start + k)],
                                  [0] * k)
    finally:
        await conn.close()


async def _serve(box: Sandbox, variant: Variant, on_job: Callable[[Any], None],
                 ready: threading.Event, finished: Callable[[], bool], budget: float,
                 tick: float) -> None:
    """Run consumers (they LISTEN while idle), set ``ready`` once they wait, and stop them
    when ``finished()`` or ``budget`` seconds later."""
    consumers = _Consumers(on_job)
    await consumers.open(box, variant.options["consumers"])
    running = asyncio.ensure_future(consumers.run(variant.options["batch"], drain=False))
    await asyncio.sleep(0.3)  # let the managers reach their idle LISTEN wait
    ready.set()
    deadline = time.perf_counter() + budget
    while not finished() and time.perf_counter() < deadline:
        await asyncio.sleep(tick)
    consumers.stop()
    await running
    await consumers.close()


class _Consumers:
    """``count`` QueueManagers with a no-op entrypoint, each on its own connection."""

    def __init__(self, on_job: Any = None) -> None:
        self.managers: list[Any] = []
        self.conns: list[Any] = []
        self.processed = 0
        self.on_job = on_job

    async def open(self, box: Sandbox, count: int) -> None:
        from pgqueuer import Job, QueueManager  # noqa: PLC0415 - optional peer

        for _ in range(count):
            conn = await _connect(box)
            manager = QueueManager(_queries(conn))

            @manager.entrypoint(JOB_TYPE)
            async def noop(job: Job) -> None:
                self.processed += 1
                if self.on_job is not None:
                    self.on_job(job)

            self.conns.append(conn)
            self.managers.append(manager)

    def run(self, batch: int, *, drain: bool, poll: float = 30.0) -> Any:
        from pgqueuer.types import QueueExecutionMode  # noqa: PLC0415 - optional peer

        mode = QueueExecutionMode.drain if drain else QueueExecutionMode.continuous
        return asyncio.gather(*(
            m.run(batch_size=batch, mode=mode, dequeue_timeout=timedelta(seconds=poll))
            for m in self.managers
        ))

    def stop(self) -> None:
        for manager in self.managers:
            manager.shutdown.set()

    async def close(self) -> None:
        for conn in self.conns:
            await conn.close()


class PgQueuerSystem(System):
    """PGQueuer 1.x, asyncpg driver."""

    name = "pgqueuer"
    title = "PGQueuer"
    isolation = "database"

    def check_available(self) -> None:
        try:
            import asyncpg  # noqa: F401, PLC0415
            import pgqueuer  # noqa: F401, PLC0415
        except ImportError as exc:
            raise UnavailableError(f"PGQueuer not installed ({exc.name}); "
                              "pip install 'golemq-pg[bench]'") from exc

    def variants(self, scenario: str, quick: bool) -> list[Variant]:
        def v(consumers: int, batch: int, note: str, *, reference: bool = False,
              full_only: bool = False) -> Variant:
            return Variant(self.name, f"{consumers}x{batch}",
                           f"PGQueuer {consumers}x{batch} ({note})",
                           {"consumers": consumers, "batch": batch}, reference, full_only)

        best = v(2, 100, "best", reference=True)
        if scenario == "drain":
            return [best, v(5, 10, "bench-tool default"),
                    v(1, 10, "library default", full_only=True)]
        return [best]

    def install(self, box: Sandbox) -> None:
        async def main() -> None:
            conn = await _connect(box)
            try:
                await _queries(conn).install()
            finally:
                await conn.close()

        run_async(main)

    def enqueue_setup(self, box: Sandbox, n: int, *, scopes: int = 0,
                      interleaved: bool = False) -> None:
        run_async(lambda: _enqueue_many(box, 0, n))

    def bulk_enqueue(self, box: Sandbox, n: int) -> float:
        async def main() -> float:
            conn = await _connect(box)
            try:
                queries = _queries(conn)
                payloads = [payload_text(i).encode() for i in range(n)]
                started = time.perf_counter()
                for start in range(0, n, BULK_CHUNK):
                    k = min(BULK_CHUNK, n - start)
                    await queries.enqueue([JOB_TYPE] * k, payloads[start:start + k], [0] * k)
                return time.perf_counter() - started
            finally:
                await conn.close()

        return run_async(main)

    def single_enqueue(self, box: Sandbox, n: int) -> float:
        async def main() -> float:
            conn = await _connect(box)
            try:
                queries = _queries(conn)
                started = time.perf_counter()
                for i in range(n):
                    await queries.enqueue(JOB_TYPE, payload_text(i).encode())
                return time.perf_counter() - started
            finally:
                await conn.close()

        return run_async(main)

    def drain(self, box: Sandbox, variant: Variant, n: int) -> float:
        async def main() -> float:
            consumers = _Consumers()
            await consumers.open(box, variant.options["consumers"])
            try:
                started = time.perf_counter()
                # drain mode: each manager returns once the queue is empty and its
                # buffered acknowledgements are flushed; a short idle poll keeps the
                # last manager from waiting its 30 s default for a notification.
                await consumers.run(variant.options["batch"], drain=True, poll=0.05)
                return time.perf_counter() - started
            finally:
                await consumers.close()
                if consumers.processed != n:
                    raise RuntimeError(f"PGQueuer processed {consumers.processed} of {n}")

        return run_async(main)

    def steady(self, box: Sandbox, variant: Variant, seconds: float) -> SteadyResult:
        stop = threading.Event()
        enqueued = [0]

        async def produce() -> None:
            conn = await _connect(box)
            try:
                queries = _queries(conn)
                while not stop.is_set():
                    await queries.enqueue([JOB_TYPE] * 100,
                                          [payload_text(i).encode() for i in range(100)],
                                          [0] * 100)
                    enqueued[0] += 100
            finally:
                await conn.close()

        async def main() -> SteadyResult:
            consumers = _Consumers()
            await consumers.open(box, variant.options["consumers"])
            producer = threading.Thread(target=run_async, args=(produce,), daemon=True)
            running = asyncio.ensure_future(consumers.run(variant.options["batch"], drain=False))
            started = time.perf_counter()
            producer.start()
            await asyncio.sleep(seconds)
            result = SteadyResult(enqueued=enqueued[0], processed=consumers.processed,
                                  seconds=time.perf_counter() - started)
            stop.set()
            consumers.stop()
            await running
            await consumers.close()
            producer.join()
            return result

        return run_async(main)

    def loaded(self, box: Sandbox, variant: Variant, plan: LoadPlan) -> LoadedResult:
        probe = LatencyProbe(plan.total)
        ready = threading.Event()
        window: list[float] = []

        async def produce() -> None:
            # produce_paced, awaited: one list enqueue per tick (late: the due jobs).
            conn = await _connect(box)
            try:
                queries = _queries(conn)
                pacer = Pacer(plan)
                while not pacer.finished:
                    await asyncio.sleep(pacer.wait())
                    first, count = pacer.take()
                    if count:
                        stamp(probe, first, count)
                        await queries.enqueue(
                            [JOB_TYPE] * count,
                            [payload_text(i).encode() for i in range(first, first + count)],
                            [0] * count)
                await asyncio.sleep(paced(pacer.started, plan.ticks, plan.tick))
                window.extend((pacer.started, time.perf_counter()))
            finally:
                await conn.close()

        def on_job(job: Any) -> None:
            probe.start(json.loads(job.payload)["i"])

        async def main() -> None:
            await _serve(box, variant, on_job, ready, lambda: bool(window) and probe.done(),
                         plan.seconds + 10, 0.02)

        beside_producer(main, produce, ready)
        if not window:
            raise RuntimeError("PGQueuer's paced producer did not finish")
        return LoadedResult(probe, window[0], window[1])

    def latency(self, box: Sandbox, variant: Variant, count: int, interval: float) -> list[float]:
        probe = LatencyProbe(count)
        ready = threading.Event()

        async def produce() -> None:
            conn = await _connect(box)
            try:
                queries = _queries(conn)
                started = time.perf_counter()
                for i in range(count):
                    await asyncio.sleep(paced(started, i, interval))
                    probe.committed[i] = time.perf_counter()
                    await queries.enqueue(JOB_TYPE, payload_text(i).encode())
            finally:
                await conn.close()

        def on_job(job: Any) -> None:
            probe.start(json.loads(job.payload)["i"])

        async def main() -> None:
            await _serve(box, variant, on_job, ready, probe.done, count * interval + 10, 0.01)

        beside_producer(main, produce, ready)
        return probe.latencies()
