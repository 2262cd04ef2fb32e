"""``golemq-pg worker --metrics-port``: serve ``/metrics`` around one worker process or N.

* One process: the CLI attaches a :class:`~golemq_pg.metrics.PrometheusObserver` to the
  imported Worker unless it already has one (on the global registry; the application's own
  observer and registry are kept and served), and serves that registry (and the global
  one) plus a :class:`~golemq_pg.metrics.QueueCollector` on the worker's store.
* ``--processes N``: the parent aggregates. It makes a temporary directory for the run and
  starts its children with ``--metrics-child`` and ``PROMETHEUS_MULTIPROC_DIR`` pointing
  there. Each child attaches the observer and, every second (and when it stops), writes
  the observer's counts to ``golemq_observer_<pid>.json`` there (atomically: a temporary
  file renamed); the parent sums every child's file at scrape time, so no child needs a
  port and a scrape sees every child, including one that has exited (counters never go
  back). The application's own prometheus_client metrics in the children use
  prometheus_client's multiprocess mode in the same directory, which the parent serves
  too (``MultiProcessCollector``; ``mark_process_dead`` for each child that exits). The
  parent imports the target too, only for its store (the collector's), and never runs it.

The server is bound before the target is imported, so a port in use fails at once with one
line and exit code 1. It serves the Prometheus text format (see :mod:`golemq_pg.metrics`),
and ``/healthz`` (:class:`~golemq_pg.metrics.HealthCheck`: 200 while the database answers
the worker's store, or the parent's with ``--processes N``; 503 otherwise, and while the
target is still loading). ``--metrics-host`` defaults to ``127.0.0.1``: a scraper on another
machine (or in another container) needs ``--metrics-host 0.0.0.0`` or the address to bind.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import threading
from collections.abc import Callable
from typing import Any

import orjson

from golemq_pg.cli.processes import load_worker, run_processes, run_worker
from golemq_pg.metrics import MetricsServeError, MetricsServer

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: How often a child writes its counts for the parent (the most a scrape lags behind).
SNAPSHOT_INTERVAL = 1.0
_SNAPSHOT_PREFIX = "golemq_observer_"
#: The hidden flag the parent passes to its children (see the module docstring).
CHILD_FLAG = "--metrics-child"


def serve(
    target: str, processes: int, port: int | None, host: str, announce: Callable[[str], None]
) -> int:
    """``golemq-pg worker`` with ``--metrics-port`` (``port`` None: ``--metrics-child``);
    the exit code."""
    if port is None:
        run_child(target, announce)
    elif processes > 1:
        return run_processes_serving(target, processes, host, port, announce)
    else:
        run_worker_serving(target, host, port, announce)
    return 0


def attach_observer(worker: Any) -> Any:
    """The Worker's PrometheusObserver, or a new one (global registry) added to it.

    The Worker builds its runtime from ``worker.config`` when it starts, so an observer added
    to the config before ``run()`` sees every transition.
    """
    from golemq_pg.metrics import PrometheusObserver  # noqa: PLC0415 - loaded with the extra

    for observer in worker.config.observers:
        if isinstance(observer, PrometheusObserver):
            return observer
    observer = PrometheusObserver()
    worker.config = dataclasses.replace(
        worker.config, observers=(*worker.config.observers, observer)
    )
    return observer


def run_worker_serving(target: str, host: str, port: int, announce: Callable[[str], None]) -> None:
    """One process: serve ``/metrics`` while the worker runs."""
    from prometheus_client import REGISTRY  # noqa: PLC0415 - loaded with the extra

    from golemq_pg.metrics import Exposition, HealthCheck, QueueCollector  # noqa: PLC0415

    source = Exposition()
    health = HealthCheck()  # 503 "starting" until the worker (and its store) is loaded
    server = MetricsServer(host, port, source, health)

    def prepare(worker: Any) -> None:
        observer = attach_observer(worker)
        # the observer's registry (or the observer itself when it has none), then the
        # global registry (process metrics, the application's own)
        mine = observer if observer.registry is None else observer.registry
        source.sources = tuple(dict.fromkeys((mine, REGISTRY)))
        source.extra = (QueueCollector(worker.store),)
        health.store = worker.store
        announce(f"serving metrics on {server.url}")

    try:
        run_worker(target, announce, prepare)
    finally:
        server.stop()


def run_processes_serving(
    target: str,
    count: int,
    host: str,
    port: int,
    announce: Callable[[str], None],
) -> int:
    """N processes, the parent aggregating (see the module docstring); the worst exit code."""
    from prometheus_client import CollectorRegistry  # noqa: PLC0415 - loaded with the extra
    from prometheus_client.multiprocess import (  # noqa: PLC0415
        MultiProcessCollector,
        mark_process_dead,
    )

    from golemq_pg.metrics import Exposition, HealthCheck, QueueCollector  # noqa: PLC0415

    source = Exposition()
    health = HealthCheck()
    server = MetricsServer(host, port, source, health)
    try:
        with tempfile.TemporaryDirectory(prefix="golemq-metrics-") as path:
            worker = load_worker(target)  # for its store only: the parent runs no handler
            try:
                registry = CollectorRegistry(auto_describe=False)
                MultiProcessCollector(registry, path=path)  # type: ignore[no-untyped-call]
                source.sources = (ChildSnapshots(path), registry)
                source.extra = (QueueCollector(worker.store),)
                health.store = worker.store  # the parent's store: one check for N processes
                announce(f"serving metrics on {server.url} (children's counts in {path})")

                def dead(pid: int) -> None:
                    mark_process_dead(pid, path)  # type: ignore[no-untyped-call]

                return run_processes(
                    target, count, announce, child_args=[CHILD_FLAG],
                    env={**os.environ, MULTIPROC_ENV: path}, on_exit=dead,
                )
            finally:
                worker.store.close()
    finally:
        server.stop()


def run_child(target: str, announce: Callable[[str], None]) -> None:
    """A child of :func:`run_processes_serving`: the worker with the observer, its counts
    written for the parent every second and once more when the worker stops."""
    directory = os.environ.get(MULTIPROC_ENV)
    if not directory or not os.path.isdir(directory):
        raise MetricsServeError(f"{CHILD_FLAG} is set by --processes N for its children only")
    writer: SnapshotWriter | None = None

    def prepare(worker: Any) -> None:
        nonlocal writer
        writer = SnapshotWriter(attach_observer(worker), directory)

    try:
        run_worker(target, announce, prepare)
    finally:
        if writer is not None:
            writer.close()


class SnapshotWriter:
    """Writes an observer's counts to ``<directory>/golemq_observer_<pid>.json`` every
    :data:`SNAPSHOT_INTERVAL` seconds when they changed, and on :meth:`close`."""

    def __init__(self, observer: Any, directory: str) -> None:
        self._observer = observer
        self._path = os.path.join(directory, f"{_SNAPSHOT_PREFIX}{os.getpid()}.json")
        self._last: dict[str, Any] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="golemq-metrics-snapshots",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(SNAPSHOT_INTERVAL):
            self.write()

    def write(self) -> None:
        """Write the counts now if they changed since the last write."""
        snapshot = self._observer.snapshot()
        if snapshot == self._last:
            return
        temporary = f"{self._path}.tmp"
        with open(temporary, "wb") as out:
            out.write(orjson.dumps(snapshot))
        os.replace(temporary, self._path)  # a reader sees the old file or the new one
        self._last = snapshot

    def close(self) -> None:
        """Stop the timer and write the final counts."""
        self._stop.set()
        self._thread.join()
        self.write()


class ChildSnapshots:
    """A collector summing the children's snapshot files (see :class:`SnapshotWriter`)."""

    def __init__(self, directory: str) -> None:
        self._directory = directory

    def collect(self) -> list[Any]:
        """The observer's families, summed over every child's latest counts."""
        from golemq_pg.metrics import BUCKETS, families, merge  # noqa: PLC0415

        snapshots = []
        for name in sorted(os.listdir(self._directory)):
            if name.startswith(_SNAPSHOT_PREFIX) and name.endswith(".json"):
                with open(os.path.join(self._directory, name), "rb") as found:
                    snapshots.append(orjson.loads(found.read()))
        merged = merge(snapshots)
        return families(merged, merged["bounds"] if snapshots else BUCKETS)


__all__ = [
    "CHILD_FLAG",
    "ChildSnapshots",
    "SnapshotWriter",
    "attach_observer",
    "run_child",
    "run_processes_serving",
    "run_worker_serving",
    "serve",
]
