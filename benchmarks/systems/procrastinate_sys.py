"""Procrastinate, from PyPI, through its public API with its psycopg connector.

Its schema is applied with ``app.schema_manager.apply_schema_async()`` in a database the
harness creates. The worker runs with concurrency 4 (async no-op task) and keeps finished
rows (``delete_jobs="never"``, its default), like golemq-pg.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from typing import Any

from benchmarks.sandbox import Sandbox
from benchmarks.systems.base import (
    JOB_TYPE,
    LatencyProbe,
    SteadyResult,
    System,
    UnavailableError,
    Variant,
    beside_producer,
    paced,
    run_async,
)

BULK_CHUNK = 5_000
CONCURRENCY = 4


class _App:
    """A Procrastinate app with the no-op task, opened on the sandbox."""

    def __init__(self, box: Sandbox, on_job: Any = None, pool_size: int = CONCURRENCY + 2) -> None:
        import procrastinate  # noqa: PLC0415 - optional peer

        # Procrastinate logs every job at INFO; keep the terminal for the harness.
        logging.getLogger("procrastinate").setLevel(logging.WARNING)
        self.processed = 0
        self.app = procrastinate.App(connector=procrastinate.PsycopgConnector(
            conninfo=box.conninfo(), min_size=1, max_size=pool_size))

        @self.app.task(name=JOB_TYPE)
        async def noop(i: int) -> None:
            self.processed += 1
            if on_job is not None:
                on_job(i)

        self.task = noop

    async def __aenter__(self) -> _App:
        await self.app.open_async()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.app.close_async()

    def worker(self, *, wait: bool, poll: float = 5.0) -> Any:
        return self.app.run_worker_async(
            concurrency=CONCURRENCY, wait=wait, install_signal_handlers=False,
            listen_notify=wait, fetch_job_polling_interval=poll, delete_jobs="never")

    async def defer_many(self, first: int, n: int) -> None:
        for start in range(first, first + n, BULK_CHUNK):
            k = min(BULK_CHUNK, first + n - start)
            kwargs: list[Any] = [{"i": i} for i in range(start, start + k)]
            await self.task.batch_defer_async(*kwargs)


async def _stop(task: asyncio.Task[Any]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


class ProcrastinateSystem(System):
    """Procrastinate 3.x, psycopg connector, concurrency 4."""

    name = "procrastinate"
    title = "Procrastinate"
    isolation = "database"
    slow = True

    def check_available(self) -> None:
        try:
            import procrastinate  # noqa: F401, PLC0415
        except ImportError as exc:
            raise UnavailableError(
                "Procrastinate not installed; pip install 'golemq-pg[bench]'") from exc

    def variants(self, scenario: str, quick: bool) -> list[Variant]:
        return [Variant(self.name, f"c{CONCURRENCY}", f"Procrastinate concurrency {CONCURRENCY}",
                        {"concurrency": CONCURRENCY}, reference=True)]

    def install(self, box: Sandbox) -> None:
        async def main() -> None:
            async with _App(box) as app:
                await app.app.schema_manager.apply_schema_async()

        run_async(main)

    def enqueue_setup(self, box: Sandbox, n: int, *, scopes: int = 0,
                      interleaved: bool = False) -> None:
        async def main() -> None:
            async with _App(box) as app:
                await app.defer_many(0, n)

        run_async(main)

    def bulk_enqueue(self, box: Sandbox, n: int) -> float:
        async def main() -> float:
            async with _App(box) as app:
                started = time.perf_counter()
                await app.defer_many(0, n)
                return time.perf_counter() - started

        return run_async(main)

    def single_enqueue(self, box: Sandbox, n: int) -> float:
        async def main() -> float:
            async with _App(box) as app:
                started = time.perf_counter()
                for i in range(n):
                    await app.task.defer_async(i=i)
                return time.perf_counter() - started

        return run_async(main)

    def drain(self, box: Sandbox, variant: Variant, n: int) -> float:
        async def main() -> float:
            async with _App(box) as app:
                started = time.perf_counter()
                await app.worker(wait=False)  # returns once it has caught up with the queue
                elapsed = time.perf_counter() - started
                if app.processed != n:
                    raise RuntimeError(f"Procrastinate processed {app.processed} of {n}")
                return elapsed

        return run_async(main)

    def steady(self, box: Sandbox, variant: Variant, seconds: float) -> SteadyResult:
        stop = threading.Event()
        enqueued = [0]

        async def produce() -> None:
            async with _App(box, pool_size=2) as app:
                while not stop.is_set():
                    await app.defer_many(enqueued[0], 100)
                    enqueued[0] += 100

        async def main() -> SteadyResult:
            async with _App(box) as app:
                worker = asyncio.ensure_future(app.worker(wait=True))
                producer = threading.Thread(target=run_async, args=(produce,), daemon=True)
                started = time.perf_counter()
                producer.start()
                await asyncio.sleep(seconds)
                result = SteadyResult(enqueued=enqueued[0], processed=app.processed,
                                      seconds=time.perf_counter() - started)
                stop.set()
                await _stop(worker)
                producer.join()
                return result

        return run_async(main)

    def latency(self, box: Sandbox, variant: Variant, count: int, interval: float) -> list[float]:
        probe = LatencyProbe(count)
        ready = threading.Event()

        async def produce() -> None:
            async with _App(box, pool_size=2) as app:
                started = time.perf_counter()
                for i in range(count):
                    await asyncio.sleep(paced(started, i, interval))
                    probe.committed[i] = time.perf_counter()
                    await app.task.defer_async(i=i)

        async def main() -> None:
            async with _App(box, on_job=probe.start) as app:
                worker = asyncio.ensure_future(app.worker(wait=True))
                await asyncio.sleep(0.5)  # let the worker reach its idle LISTEN wait
                ready.set()
                deadline = time.perf_counter() + count * interval + 10
                while not probe.done() and time.perf_counter() < deadline:
                    await asyncio.sleep(0.01)
                await _stop(worker)

        beside_producer(main, produce, ready)
        return probe.latencies()
