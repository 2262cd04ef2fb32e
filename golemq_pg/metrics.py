"""Prometheus metrics: a lifecycle observer for workers and a collector for the queue.

``pip install 'golemq-pg[metrics]'`` (prometheus_client)::

    from golemq_pg.metrics import PrometheusObserver, QueueCollector
    worker = Worker(store, observers=[PrometheusObserver()])
    prometheus_client.REGISTRY.register(QueueCollector(store))

* :class:`PrometheusObserver` counts every transition a worker (or a Queue) reports:
  ``golemq_jobs_total{type,outcome}``, ``golemq_job_duration_seconds{type,outcome}`` (the
  handler's run time, on the outcome of an attempt) and ``golemq_job_wait_seconds{type}``
  (from the job's due time to its handler starting).
* :class:`QueueCollector` reads the queue's state from the store at scrape time, with two
  bounded statements: ``golemq_jobs{type,status}``, ``golemq_oldest_due_age_seconds{type}``,
  ``golemq_workers`` and ``golemq_paused{type}``.

Labels are only ``type``, ``outcome`` and ``status``: never a job id, a scope or a payload,
so the number of series is bounded by the number of job types.

Serve them in the Prometheus text format (:func:`exposition`, or ``generate_latest``), not
OpenMetrics: the contract's counter ``golemq_jobs_total`` and gauge ``golemq_jobs`` are
distinct names in the text format but one family name (``golemq_jobs``) in OpenMetrics.
``golemq-pg worker --metrics-port`` and the web dashboard's ``/metrics`` do that.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable, Sequence
from typing import Any

import structlog
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest

from golemq_pg._types import Transition
from golemq_pg.store.port import JobStore

log = structlog.get_logger("golemq_pg.metrics")

#: Histogram buckets (seconds) from a sub-millisecond no-op handler to hour-long jobs, about
#: 2-2.5x apart so that histogram_quantile stays within a factor ~2 anywhere on the range.
BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
)

#: The statuses of ``golemq_jobs`` (succeeded rows are history: count them with the counter).
STATUSES = ("pending", "scheduled", "running", "failed")

#: Default cap of every ``golemq_jobs`` count: a count reads at most this many index entries
#: per type and status, so a scrape stays bounded on a backlog or dead-letter pile of millions.
COUNT_CAP = 100_000

#: The exposition's content type (the Prometheus text format, see the module docstring).
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4


class PrometheusObserver:
    """A :class:`~golemq_pg.LifecycleObserver` that turns transitions into Prometheus
    counters and histograms, registered in ``registry`` (default: the global one; None: in
    no registry). Observers built on one registry share its metrics, so a second one (a
    second worker in the process, or the CLI's) adds to the same series instead of failing.

    ``on_transition`` runs on the worker's threads for every transition, so it does the
    least it can: two dictionary lookups find the label children bound once per
    (type, outcome), then one counter increment and at most one histogram observation.
    """

    __slots__ = ("_bound", "_duration", "_jobs", "_wait", "_waits", "registry")

    def __init__(
        self,
        registry: CollectorRegistry | None = REGISTRY,
        *,
        buckets: Sequence[float] = BUCKETS,
    ) -> None:
        self.registry = registry
        self._jobs, self._duration, self._wait = _metrics_in(registry, tuple(buckets))
        # outcome -> type -> (counter increment, duration observation)
        self._bound: dict[str, dict[str, tuple[Any, Any]]] = {}
        self._waits: dict[str, Any] = {}  # type -> wait observation

    def on_transition(self, t: Transition) -> None:
        """Count ``t``; observe its duration (an attempt's outcome) or wait (``started``)."""
        by_type = self._bound.get(t.outcome)
        bound = None if by_type is None else by_type.get(t.type)
        if bound is None:
            bound = self._bind(t.type, t.outcome)
        bound[0]()
        if t.duration is not None:
            bound[1](t.duration)
        if t.wait is not None:
            observe = self._waits.get(t.type)
            if observe is None:
                observe = self._waits[t.type] = self._wait.labels(t.type).observe
            observe(t.wait)

    def _bind(self, job_type: str, outcome: str) -> tuple[Any, Any]:
        # A race between two threads binding the same pair is harmless: labels() returns
        # the same child to both, and the last write of the cache entry wins.
        bound = (
            self._jobs.labels(job_type, outcome).inc,
            self._duration.labels(job_type, outcome).observe,
        )
        self._bound.setdefault(outcome, {})[job_type] = bound
        return bound


_SHARED: weakref.WeakKeyDictionary[CollectorRegistry, tuple[Counter, Histogram, Histogram]] = (
    weakref.WeakKeyDictionary()
)
_SHARED_LOCK = threading.Lock()


def _metrics_in(
    registry: CollectorRegistry | None, buckets: tuple[float, ...]
) -> tuple[Counter, Histogram, Histogram]:
    """The observer's three metrics in ``registry``, created and registered the first time."""
    with _SHARED_LOCK:
        found = None if registry is None else _SHARED.get(registry)
        if found is not None:
            return found
        found = (
            Counter(
                "golemq_jobs_total", "Job lifecycle transitions, by job type and outcome.",
                ("type", "outcome"), registry=registry,
            ),
            Histogram(
                "golemq_job_duration_seconds",
                "Handler run time of an attempt, by job type and the attempt's outcome.",
                ("type", "outcome"), registry=registry, buckets=buckets,
            ),
            Histogram(
                "golemq_job_wait_seconds",
                "Seconds from a job's due time to its handler starting, by job type.",
                ("type",), registry=registry, buckets=buckets,
            ),
        )
        if registry is not None:
            _SHARED[registry] = found
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
        """Nothing: registering the collector then costs no statement, and the registry does
        not refuse ``golemq_jobs`` next to the counter ``golemq_jobs_total`` (which claims
        that family name too)."""
        return []

    def collect(self) -> Iterable[Metric]:
        """The gauges, read now (nothing when the store fails)."""
        try:
            types = self.store.metrics_type_gauges(self.count_cap)
            workers = self.store.worker_list()
        except Exception as exc:  # noqa: BLE001 - a failed read must not fail the scrape
            log.warning("metrics_collect_failed", error_type=type(exc).__name__)
            return
        jobs = GaugeMetricFamily(
            "golemq_jobs",
            f"Jobs by type and status (pending: due now; scheduled: due later; each count "
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
        for g in types:
            for status, count in zip(
                STATUSES, (g.pending, g.scheduled, g.running, g.failed), strict=True
            ):
                jobs.add_metric((g.type, status), count)
            oldest.add_metric((g.type,), g.oldest_due_age or 0.0)
            paused.add_metric((g.type,), 1.0 if g.paused else 0.0)
        yield jobs
        yield oldest
        yield GaugeMetricFamily(
            "golemq_workers", "Registered workers whose heartbeat is fresh (not lost).",
            value=sum(1 for w in workers if w.state != "lost"),
        )
        yield paused


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


def exposition(source: Any) -> tuple[bytes, str]:
    """``source``'s metrics in the Prometheus text format, with its content type."""
    return generate_latest(source), CONTENT_TYPE


__all__ = [
    "BUCKETS",
    "CONTENT_TYPE",
    "COUNT_CAP",
    "STATUSES",
    "Exposition",
    "PrometheusObserver",
    "QueueCollector",
    "exposition",
]
