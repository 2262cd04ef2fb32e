"""PrometheusObserver's counts as plain snapshots, and their sum over processes (what the
parent of `golemq-pg worker --processes N --metrics-port` serves)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest
from prometheus_client import CollectorRegistry

from golemq_pg import WorkerError
from golemq_pg.metrics import PrometheusObserver, families, merge


def observer_with(successes: int, duration: float) -> PrometheusObserver:
    """An observer (in no registry) that counted ``successes`` starts and successes."""
    observer = PrometheusObserver(None)
    for _ in range(successes):
        observer.count_transition("t", "started", None, 0.5)
        observer.count_transition("t", "succeeded", duration, None)
    return observer


def test_snapshots_of_several_processes_sum() -> None:
    merged = merge([observer_with(2, 0.001).snapshot(), observer_with(3, 20.0).snapshot()])
    found = {f.name: f for f in families(merged, merged["bounds"])}
    jobs = {tuple(s.labels.values()): s.value for s in found["golemq_jobs"].samples
            if s.name == "golemq_jobs_total"}
    assert jobs == {("t", "started"): 5, ("t", "succeeded"): 5}
    duration = {(s.name, s.labels.get("le")): s.value
                for s in found["golemq_job_duration_seconds"].samples}
    assert duration[("golemq_job_duration_seconds_bucket", "0.001")] == 2
    assert duration[("golemq_job_duration_seconds_bucket", "30.0")] == 5
    assert duration[("golemq_job_duration_seconds_count", None)] == 5
    assert duration[("golemq_job_duration_seconds_sum", None)] == pytest.approx(60.002)
    waits = {s.name: s.value for s in found["golemq_job_wait_seconds"].samples}
    assert waits["golemq_job_wait_seconds_count"] == 5


def test_a_value_on_a_bound_falls_in_that_bucket() -> None:
    observer = observer_with(1, 0.25)
    merged = merge([observer.snapshot()])
    duration = {s.labels.get("le"): s.value for s in families(merged, merged["bounds"])[1].samples
                if s.name.endswith("_bucket")}
    assert (duration["0.1"], duration["0.25"]) == (0, 1)


def test_buckets_are_checked_and_one_registry_keeps_one_set() -> None:
    with pytest.raises(ValueError, match="increasing"):
        PrometheusObserver(None, buckets=(1.0, 0.5))
    registry = CollectorRegistry()
    PrometheusObserver(registry, buckets=(1.0, 2.0))
    with pytest.raises(ValueError, match="same buckets"):
        PrometheusObserver(registry, buckets=(1.0, 3.0))
    with pytest.raises(ValueError, match="different buckets"):
        merge([PrometheusObserver(None, buckets=(1.0,)).snapshot(),
               PrometheusObserver(None, buckets=(2.0,)).snapshot()])


def test_threads_counting_at_once_lose_nothing() -> None:
    observer = PrometheusObserver(None)
    per_thread = 5000

    def count() -> None:
        for _ in range(per_thread):
            observer.count_transition("t", "succeeded", 0.001, None)

    threads = [threading.Thread(target=count) for _ in range(8)]
    for thread in threads:
        thread.start()
    observer.snapshot()  # a snapshot while they count does not fail
    for thread in threads:
        thread.join()
    (job,) = merge([observer.snapshot()])["jobs"]
    assert job[:3] == ["t", "succeeded", 8 * per_thread]
    assert sum(job[3]) == 8 * per_thread


def test_worker_errors_are_counted_by_kind_and_merged_across_processes() -> None:
    registry = CollectorRegistry()
    observer = PrometheusObserver(registry)
    at = datetime.now(UTC)
    for kind in ("claim", "claim", "complete"):
        observer.on_error(WorkerError(kind=kind, error="E: x", worker_id="w", at=at))
    snap = observer.snapshot()
    assert snap["errors"] == [["claim", 2], ["complete", 1]]
    # an older release's snapshot file has no "errors": it merges as none
    older = {k: v for k, v in snap.items() if k != "errors"}
    merged = merge([snap, snap, older])
    assert merged["errors"] == [["claim", 4], ["complete", 2]]
    found = {f.name: f for f in families(merged, merged["bounds"])}
    assert {s.labels["kind"]: s.value for s in found["golemq_worker_errors"].samples
            if s.name == "golemq_worker_errors_total"} == {"claim": 4, "complete": 2}
    assert registry.get_sample_value("golemq_worker_errors_total", {"kind": "claim"}) == 2
