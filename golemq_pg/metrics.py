"""Prometheus metrics: a lifecycle observer for workers and a collector for the queue.

``pip install 'golemq-pg[metrics]'`` (prometheus_client)::

    from golemq_pg.metrics import PrometheusObserver, QueueCollector
    worker = Worker(store, observers=[PrometheusObserver()])
    prometheus_client.REGISTRY.register(QueueCollector(store))

* :class:`PrometheusObserver` counts every transition a worker (or a Queue) reports:
  ``golemq_jobs_total{type,outcome}``, ``golemq_job_duration_seconds{type,outcome}`` (the
  handler's run time, on the outcome of an attempt) and ``golemq_job_wait_seconds{type}``
  (from the job's due time to its handler starting); and, as an ``on_error`` observer,
  ``golemq_worker_errors_total{kind}``: the worker's system errors, once per incident (a
  ``"claim"`` one when the claims are held because outcomes cannot be written).
* :class:`QueueCollector` reads the queue's state from the store at scrape time, with two
  bounded statements: ``golemq_queue_jobs{type,status}``,
  ``golemq_oldest_due_age_seconds{type}``, ``golemq_workers`` and ``golemq_paused{type}``.

Labels are only ``type``, ``outcome``, ``status`` and ``kind``: never a job id, a scope or a
payload, so the number of series is bounded by the number of job types.

Every family name is distinct in both exposition formats: the Prometheus text format
(:class:`MetricsServer`, :func:`exposition`, ``generate_latest``) and OpenMetrics
(``prometheus_client.openmetrics.exposition.generate_latest``, or prometheus_client's
``start_http_server`` asked by a Prometheus server). The queue gauge was once named
``golemq_jobs``: OpenMetrics names the counter ``golemq_jobs_total``'s family ``golemq_jobs``
too, and its parsers refused the clash. ``MetricsServer`` (what ``golemq-pg worker --metrics-port``
runs) answers the text format, and ``/healthz`` (:class:`HealthCheck`).
"""

from __future__ import annotations

import threading
import weakref
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
import structlog
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.utils import floatToGoString

from golemq_pg._types import Transition, WorkerError, WorkerSummary
from golemq_pg.store.port import ClaimedJob, JobStore, TypeGauges

log = structlog.get_logger("golemq_pg.metrics")

#: Histogram buckets (seconds) from a sub-millisecond no-op handler to hour-long jobs, about
#: 2-2.5x apart so that histogram_quantile stays within a factor ~2 anywhere on the range.
BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
)

#: The statuses of ``golemq_queue_jobs`` (succeeded rows are history: count them with the counter).
STATUSES = ("pending", "scheduled", "running", "failed", "waiting")

#: Default cap of every ``golemq_queue_jobs`` count: a count reads at most this many index entries
#: per type and status, so a scrape stays bounded on a backlog or dead-letter pile of millions.
COUNT_CAP = 100_000

#: The exposition's content type (the Prometheus text format, see the module docstring).
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4


class PrometheusObserver:
    """A :class:`~golemq_pg.LifecycleObserver` exporting ``golemq_jobs_total``,
    ``golemq_job_duration_seconds`` and ``golemq_job_wait_seconds``, registered in
    ``registry`` (default: the global one; None: in no registry, see :meth:`collect`).

    Observers built on one registry share its series, so a second one (a second worker in
    the process, or the CLI's) adds to the same counts instead of failing to register.

    It runs on the worker's threads for every transition, so it only counts: the worker
    calls ``count_transitions`` with a whole batch (the jobs of a unit that started, the
    outcomes of one completion write; no :class:`Transition` is built for it), which adds
    them, without a lock, to the calling thread's own counts: one count and one histogram
    bucket per transition, the series looked up once per run of one job type. The
    Prometheus families are built from those counts at scrape time.
    """

    __slots__ = ("_tally", "count_started_later", "count_transition", "count_transitions",
                 "registry")

    def __init__(
        self,
        registry: CollectorRegistry | None = REGISTRY,
        *,
        buckets: Sequence[float] = BUCKETS,
    ) -> None:
        bounds = tuple(float(b) for b in buckets)
        if not bounds or list(bounds) != sorted(set(bounds)) or bounds[0] <= 0:
            raise ValueError("buckets must be increasing positive numbers of seconds")
        self.registry = registry
        self._tally = _tally_in(registry, bounds)
        #: ``count_transition(type, outcome, duration, wait)``: count one transition (the
        #: handler's run time on an attempt's outcome, the due-to-start wait on "started").
        #: The tally's own method, so that the worker's call is the only Python frame.
        self.count_transition: Callable[[str, str, float | None, float | None], None] = (
            self._tally.count)
        #: ``count_transitions(outcome, counted)``: count one transition to ``outcome`` per
        #: ``(type, seconds)`` pair, ``seconds`` being the due-to-start wait on "started",
        #: the handler's run time on an attempt's outcome (None: neither). What the worker
        #: calls; the tally's own method too.
        self.count_transitions: Callable[[str, Sequence[tuple[str, float | None]]], None] = (
            self._tally.count_many)
        #: ``count_started_later((jobs, buffered))``: the jobs of a unit started, each
        #: ``job.waited + buffered`` seconds after its due time; counted by the next
        #: ``count_transitions`` call or snapshot (a deque's append: no Python frame on the
        #: handler thread).
        self.count_started_later: Callable[[tuple[Sequence[ClaimedJob], float]], None] = (
            self._tally.later)

    def on_transition(self, t: Transition) -> None:
        """Count ``t`` (a Queue's ``enqueued``, or any caller with a Transition)."""
        self._tally.count(t.type, t.outcome, t.duration, t.wait)

    def on_error(self, e: WorkerError) -> None:
        """Count a worker's system error (reported once per incident) by its ``kind``."""
        self._tally.count_error(e.kind)

    def collect(self) -> list[Metric]:
        """The three families, read now (what the registry serves)."""
        return families(self._tally.snapshot(), self._tally.bounds)

    def snapshot(self) -> dict[str, Any]:
        """The counts as plain data (JSON-safe), for another process to merge and serve."""
        return self._tally.snapshot()


class _Series:
    """One series' counts: transitions, and the histogram's buckets (not cumulative) and
    sum."""

    __slots__ = ("buckets", "count", "total")

    def __init__(self, size: int) -> None:
        self.count = 0
        self.buckets = [0] * size
        self.total = 0.0


#: A placeholder series, replaced before the first count of a batch.
_UNUSED = _Series(0)


class _Part:
    """One thread's share of a tally: only that thread writes it, so it needs no lock."""

    __slots__ = ("jobs", "waits")

    def __init__(self) -> None:
        self.jobs: dict[str, dict[str, _Series]] = {}  # outcome -> type -> series
        self.waits: dict[str, _Series] = {}  # type -> series


class _Tally:
    """The counts of every observer on one registry: one part per counting thread.

    A transition is counted in the calling thread's own part, with no lock (a lock taken
    by every handler thread and the completer for every transition was, in a profile of a
    fast drain, most of the observer's cost: threads preempted while holding it). A
    snapshot sums the parts; it copies each dict in one C call, which the GIL makes atomic
    with respect to the owner's writes, and reads each int as it is, so a scrape may miss a
    transition being counted at that instant, never count one twice.
    """

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self._size = len(bounds) + 1
        self._local = threading.local()
        self._parts: list[_Part] = []
        self._lock = threading.Lock()  # guards _parts (a thread's first count, snapshots)
        #: Units started and not counted yet, as (jobs, seconds from the claim to the start):
        #: a handler thread only appends (one C call, no Python frame, while the job is
        #: about to run); they are counted in bulk by the next batch (the completer's, a few
        #: milliseconds later) or snapshot, whichever comes first, so a scrape never misses
        #: one. Every popleft is atomic: each is counted once, by one thread.
        self._later: deque[tuple[Sequence[ClaimedJob], float]] = deque()
        self.later = self._later.append
        #: System errors by kind (rare: counted under the lock).
        self._errors: dict[str, int] = {}

    def count_error(self, kind: str) -> None:
        with self._lock:
            self._errors[kind] = self._errors.get(kind, 0) + 1

    def count(
        self, job_type: str, outcome: str, duration: float | None, wait: float | None
    ) -> None:
        if self._later:  # the rare paths (a Queue's "enqueued", aborts) count deferred starts
            self._fold()
        try:
            part: _Part = self._local.part
        except AttributeError:
            part = self._join()
        try:
            series = part.jobs[outcome][job_type]
        except KeyError:
            series = part.jobs.setdefault(outcome, {})[job_type] = _Series(self._size)
        series.count += 1
        bounds = self.bounds
        if duration is not None:
            series.buckets[0 if duration <= bounds[0] else bisect_left(bounds, duration)] += 1
            series.total += duration
        if wait is not None:
            waits = part.waits.get(job_type)
            if waits is None:
                waits = part.waits[job_type] = _Series(self._size)
            waits.count += 1
            waits.buckets[0 if wait <= bounds[0] else bisect_left(bounds, wait)] += 1
            waits.total += wait

    def count_many(self, outcome: str, counted: Sequence[tuple[str, float | None]]) -> None:
        """``count`` for each ``(type, seconds)`` of ``counted``: seconds are the wait of a
        "started", the duration of any other outcome. One call for a whole batch: the
        thread's part and each type's series are found once per run of one type (a batch
        is nearly always of one type), not once per transition. Counts the units started
        since the last call first (:attr:`later`)."""
        if self._later:
            self._fold()
        self._add(outcome, counted)

    def _fold(self) -> None:
        """Count the units started and not counted yet (into this thread's part)."""
        pop = self._later.popleft
        counted: list[tuple[str, float | None]] = []
        try:
            while True:
                jobs, buffered = pop()
                for job in jobs:
                    counted.append((job.type, job.waited + buffered))
        except IndexError:  # emptied (another thread may be folding too: each item once)
            pass
        if counted:
            self._add("started", counted)

    def _add(self, outcome: str, counted: Sequence[tuple[str, float | None]]) -> None:
        try:
            part: _Part = self._local.part
        except AttributeError:
            part = self._join()
        jobs = part.jobs.get(outcome)
        if jobs is None:
            jobs = part.jobs.setdefault(outcome, {})
        waits = part.waits if outcome == "started" else None
        bounds = self.bounds
        first = bounds[0]
        current: str | None = None
        series = timed = _UNUSED
        for job_type, seconds in counted:
            if job_type != current:
                current = job_type
                try:
                    series = jobs[job_type]
                except KeyError:
                    series = jobs[job_type] = _Series(self._size)
                if waits is None:
                    timed = series
                else:
                    try:
                        timed = waits[job_type]
                    except KeyError:
                        timed = waits[job_type] = _Series(self._size)
            series.count += 1
            if seconds is not None:
                # The first bucket tested inline: a no-op handler's run time is below it,
                # and bisect_left costs more than the rest of the count.
                timed.buckets[0 if seconds <= first else bisect_left(bounds, seconds)] += 1
                timed.total += seconds
                if waits is not None:
                    timed.count += 1

    def _join(self) -> _Part:
        part = self._local.part = _Part()
        with self._lock:
            self._parts.append(part)  # kept after the thread ends: its counts stay
        return part

    def snapshot(self) -> dict[str, Any]:
        if self._later:
            self._fold()
        jobs: dict[tuple[str, str], list[Any]] = {}
        waits: dict[str, list[Any]] = {}
        with self._lock:
            parts = list(self._parts)
            errors = sorted(self._errors.items())
        for part in parts:
            for outcome, by_type in part.jobs.copy().items():
                for job_type, s in by_type.copy().items():
                    _add(jobs.setdefault((job_type, outcome), [0, [0] * self._size, 0.0]),
                         s.count, list(s.buckets), s.total)
            for job_type, s in part.waits.copy().items():
                _add(waits.setdefault(job_type, [0, [0] * self._size, 0.0]),
                     s.count, list(s.buckets), s.total)
        return {
            "bounds": list(self.bounds),
            "jobs": [[t, o, *v] for (t, o), v in jobs.items()],
            "waits": [[t, *v] for t, v in waits.items()],
            "errors": [list(e) for e in errors],
        }


_SHARED: weakref.WeakKeyDictionary[CollectorRegistry, _Tally] = weakref.WeakKeyDictionary()
_SHARED_LOCK = threading.Lock()


class _TallyCollector:
    """What a registry holds for its observers."""

    def __init__(self, tally: _Tally) -> None:
        self._tally = tally

    def describe(self) -> list[Metric]:
        """The families without samples: the registry refuses a second registration."""
        return families({"jobs": [], "waits": [], "errors": []}, self._tally.bounds)

    def collect(self) -> list[Metric]:
        """The families with the counts now."""
        return families(self._tally.snapshot(), self._tally.bounds)


def _tally_in(registry: CollectorRegistry | None, bounds: tuple[float, ...]) -> _Tally:
    """The counts of ``registry``'s observers, created and registered the first time."""
    with _SHARED_LOCK:
        tally = None if registry is None else _SHARED.get(registry)
        if tally is not None:
            if tally.bounds != bounds:
                raise ValueError("observers on one registry must use the same buckets")
            return tally
        tally = _Tally(bounds)
        if registry is not None:
            registry.register(_TallyCollector(tally))
            _SHARED[registry] = tally
        return tally


def merge(snapshots: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Sum observer snapshots (one per process) into one; their buckets must match."""
    jobs: dict[tuple[str, str], list[Any]] = {}
    waits: dict[str, list[Any]] = {}
    errors: dict[str, int] = {}
    bounds: list[float] | None = None
    for snap in snapshots:
        if bounds is None:
            bounds = snap["bounds"]
        elif snap["bounds"] != bounds:
            raise ValueError("snapshots with different buckets cannot be merged")
        for job_type, outcome, count, buckets, total in snap["jobs"]:
            _add(jobs.setdefault((job_type, outcome), [0, [0] * len(buckets), 0.0]),
                 count, buckets, total)
        for job_type, count, buckets, total in snap["waits"]:
            _add(waits.setdefault(job_type, [0, [0] * len(buckets), 0.0]), count, buckets, total)
        for kind, count in snap.get("errors", ()):  # absent from an older release's files
            errors[kind] = errors.get(kind, 0) + count
    return {
        "bounds": bounds or list(BUCKETS),
        "jobs": [[t, o, *v] for (t, o), v in jobs.items()],
        "waits": [[t, *v] for t, v in waits.items()],
        "errors": [[k, n] for k, n in sorted(errors.items())],
    }


def _add(into: list[Any], count: int, buckets: list[int], total: float) -> None:
    into[0] += count
    into[1] = [a + b for a, b in zip(into[1], buckets, strict=True)]
    into[2] += total


def families(snapshot: dict[str, Any], bounds: Sequence[float]) -> list[Metric]:
    """The observer's four families from a snapshot (sorted, so scrapes read alike)."""
    les = [floatToGoString(b) for b in bounds] + ["+Inf"]  # type: ignore[no-untyped-call]
    jobs = CounterMetricFamily(
        "golemq_jobs", "Job lifecycle transitions, by job type and outcome.",
        labels=("type", "outcome"),
    )
    duration = HistogramMetricFamily(
        "golemq_job_duration_seconds",
        "Handler run time of an attempt, by job type and the attempt's outcome.",
        labels=("type", "outcome"),
    )
    wait = HistogramMetricFamily(
        "golemq_job_wait_seconds",
        "Seconds from a job's due time to its handler starting, by job type.",
        labels=("type",),
    )
    for job_type, outcome, count, buckets, total in sorted(snapshot["jobs"]):
        jobs.add_metric((job_type, outcome), count)
        if any(buckets):  # outcomes that carry no run time ("started", "enqueued"...)
            duration.add_metric((job_type, outcome), _cumulative(les, buckets), total)
    for job_type, _count, buckets, total in sorted(snapshot["waits"]):
        wait.add_metric((job_type,), _cumulative(les, buckets), total)
    errors = CounterMetricFamily(
        "golemq_worker_errors",
        "Worker system errors (a claim, a write, a maintenance task...), once per incident, "
        "by kind.",
        labels=("kind",),
    )
    for kind, count in sorted(snapshot.get("errors", ())):
        errors.add_metric((kind,), count)
    return [jobs, duration, wait, errors]


def _cumulative(les: list[str], buckets: list[int]) -> list[tuple[str, float]]:
    found: list[tuple[str, float]] = []
    running = 0
    for le, n in zip(les, buckets, strict=True):
        running += n
        found.append((le, running))
    return found


class QueueCollector:
    """A prometheus_client collector reading the queue's state from ``store`` at scrape time.

    Each scrape runs two statements: ``metrics_type_gauges`` (per type: backlog, running and
    failed counts, each at most ``count_cap``, the oldest due age, paused; it reads indexes
    by descents and capped ranges, never the kept history) and ``worker_list`` (the small
    registry table). A store error is logged and the scrape goes on without these gauges,
    so a worker's own counters are still exported while the database is away.
    """

    def __init__(self, store: JobStore, *, count_cap: int = COUNT_CAP) -> None:
        if isinstance(count_cap, bool) or not isinstance(count_cap, int) or count_cap < 1:
            raise ValueError("count_cap must be a positive int")
        self.store = store
        self.count_cap = count_cap

    def describe(self) -> list[Metric]:
        """Nothing: registering the collector then costs no statement (a registry calls
        ``describe`` at registration; without it, ``collect``, which reads the database)."""
        return []

    def collect(self) -> Iterable[Metric]:
        """The gauges, read now (nothing when the store fails)."""
        try:
            types = self.store.metrics_type_gauges(self.count_cap)
            workers = self.store.worker_list()
        except Exception as exc:  # noqa: BLE001 - a failed read must not fail the scrape
            log.warning("metrics_collect_failed", error_type=type(exc).__name__)
            return []
        return GaugeSnapshot(types, workers, self.count_cap).collect()


class GaugeSnapshot:
    """The queue's gauges from values already read (``metrics_type_gauges`` and
    ``worker_list``): what :class:`QueueCollector` exports, for a caller that read them
    itself (the dashboard's ``/metrics`` over an ``AsyncPostgresStore`` awaits them)."""

    def __init__(
        self, types: Sequence[TypeGauges], workers: Sequence[WorkerSummary], count_cap: int
    ) -> None:
        self.types = tuple(types)
        self.workers = tuple(workers)
        self.count_cap = count_cap

    def describe(self) -> list[Metric]:
        """Nothing (as :meth:`QueueCollector.describe`)."""
        return []

    def collect(self) -> list[Metric]:
        """The four gauge families."""
        jobs = GaugeMetricFamily(
            "golemq_queue_jobs",
            f"Jobs by type and status (pending: due now; scheduled: due later; waiting: for "
            f"its parents; each count "
            f"capped at {self.count_cap}).",
            labels=("type", "status"),
        )
        oldest = GaugeMetricFamily(
            "golemq_oldest_due_age_seconds",
            "Seconds the oldest due pending job of the type has waited (0: none due).",
            labels=("type",),
        )
        paused = GaugeMetricFamily(
            "golemq_paused", "1 while the job type is paused, else 0.", labels=("type",),
        )
        for g in self.types:
            for status, count in zip(
                STATUSES, (g.pending, g.scheduled, g.running, g.failed, g.waiting), strict=True
            ):
                jobs.add_metric((g.type, status), count)
            oldest.add_metric((g.type,), g.oldest_due_age or 0.0)
            paused.add_metric((g.type,), 1.0 if g.paused else 0.0)
        workers = GaugeMetricFamily(
            "golemq_workers", "Registered workers whose heartbeat is fresh (not lost).",
            value=sum(1 for w in self.workers if w.state != "lost"),
        )
        return [jobs, oldest, workers, paused]


class Exposition:
    """What one ``/metrics`` endpoint serves: the metrics of ``sources`` (registries or
    collectors), then those of ``extra``; a family already served (same name and type) is
    not served twice, so a QueueCollector the application registered itself is harmless."""

    def __init__(self, sources: Sequence[Any] = (), extra: Sequence[Any] = ()) -> None:
        self.sources = tuple(sources)
        self.extra = tuple(extra)

    def collect(self) -> Iterable[Metric]:
        """Every family of every source, each (name, type) once."""
        seen: set[tuple[str, str]] = set()
        for source in (*self.sources, *self.extra):
            for family in source.collect():
                key = (family.name, family.type)
                if key not in seen:
                    seen.add(key)
                    yield family


class MetricsServeError(RuntimeError):
    """The metrics endpoint could not be served (the port is in use, the host is bad)."""


#: Seconds ``/healthz`` waits for the database before answering 503 (as the dashboard's).
HEALTH_TIMEOUT = 3.0


class HealthCheck:
    """What ``/healthz`` answers: 200 ``{"status": "ok", "database_time": ...}`` when
    ``store.now()`` returns within ``timeout`` seconds, else 503 ``{"status": "unavailable",
    "error": ...}`` (the error's type name or ``timeout``; ``starting`` while no store is set
    yet). The same body as the dashboard's ``/healthz``.

    The statement runs on a thread of its own, so a database that hangs costs a probe
    ``timeout`` seconds, never more; probes that come while one statement is still waiting
    wait on that one instead of starting another.
    """

    def __init__(self, store: JobStore | None = None, *, timeout: float = HEALTH_TIMEOUT) -> None:
        #: The store asked (None: not known yet, e.g. before the worker is loaded).
        self.store = store
        self.timeout = timeout
        self._lock = threading.Lock()
        self._pending: Future[str] | None = None

    def answer(self) -> tuple[int, dict[str, str]]:
        """The status code and the JSON body, read now."""
        store = self.store
        if store is None:
            return 503, {"status": "unavailable", "error": "starting"}
        with self._lock:
            pending = self._pending
            if pending is None or pending.done():
                pending = self._pending = Future()
                threading.Thread(target=_ask, args=(store, pending),
                                 name="golemq-metrics-health", daemon=True).start()
        try:
            now = pending.result(self.timeout)
        except Exception as exc:  # noqa: BLE001 - any failure to answer is "unavailable"
            reason = "timeout" if isinstance(exc, TimeoutError) else type(exc).__name__
            return 503, {"status": "unavailable", "error": reason}
        return 200, {"status": "ok", "database_time": now}


def _ask(store: JobStore, into: Future[str]) -> None:
    """The database's time, or the failure reading it, into ``into``."""
    try:
        into.set_result(store.now().isoformat())
    except Exception as exc:  # noqa: BLE001 - reported by HealthCheck.answer
        into.set_exception(exc)


class _Handler(BaseHTTPRequestHandler):
    server: _MetricsHTTPServer

    def do_GET(self) -> None:
        """``/metrics``: the exposition; ``/healthz``: the database check; else 404."""
        route = self.path.split("?", 1)[0]
        if route == "/metrics":
            body, content_type = exposition(self.server.source)
            self._send(200, body, content_type)
        elif route == "/healthz" and self.server.health is not None:
            status, answer = self.server.health.answer()
            self._send(status, orjson.dumps(answer), "application/json")
        else:
            self.send_error(404)

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a scrape every few seconds is not worth a log line."""


class _MetricsHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    source: Any
    health: HealthCheck | None


class MetricsServer:
    """``/metrics`` on ``host:port`` in a daemon thread, serving ``source.collect()`` (a
    registry, or any collector) in the Prometheus text format, whatever the scraper's
    Accept header asks, and ``/healthz`` when given a :class:`HealthCheck` (404 without
    one). ``port=0``: any free port (``url``).
    """

    def __init__(
        self, host: str, port: int, source: Any = REGISTRY, health: HealthCheck | None = None,
    ) -> None:
        try:
            self._http = _MetricsHTTPServer((host, port), _Handler)
        except OSError as exc:
            raise MetricsServeError(
                f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}"
            ) from None
        self._http.source = source
        self._http.health = health
        self._thread = threading.Thread(
            target=self._http.serve_forever, name="golemq-metrics", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        """Where the endpoint listens (the real port when 0 was asked for)."""
        host, port = self._http.server_address[:2]
        return f"http://{host!s}:{port}/metrics"

    def stop(self) -> None:
        """Stop serving and release the port."""
        self._http.shutdown()
        self._http.server_close()


def exposition(source: Any) -> tuple[bytes, str]:
    """``source``'s metrics in the Prometheus text format, with its content type."""
    return generate_latest(source), CONTENT_TYPE


__all__ = [
    "BUCKETS",
    "CONTENT_TYPE",
    "COUNT_CAP",
    "HEALTH_TIMEOUT",
    "STATUSES",
    "Exposition",
    "GaugeSnapshot",
    "HealthCheck",
    "MetricsServeError",
    "MetricsServer",
    "PrometheusObserver",
    "QueueCollector",
    "exposition",
    "families",
    "merge",
]
