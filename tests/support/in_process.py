"""In-process workers and queue calls for integration tests: a quick Worker, one job run
to completion, an add that must insert."""

from __future__ import annotations

from typing import Any

from golemq_pg import JobSummary, Queue, Worker


def fast_worker(store: Any, **options: Any) -> Worker:
    """A Worker that polls every 50 ms and retries without backoff (``options`` override)."""
    defaults: dict[str, Any] = {"poll_interval": 0.05, "base_backoff": 0, "max_backoff": 0}
    defaults.update(options)
    return Worker(store, **defaults)


def drain_one(queue: Queue, worker: Worker, job_type: str, payload: dict[str, Any],
              **options: Any) -> JobSummary:
    """Add one job, run ``worker`` until the queue is empty, and return the job's row."""
    job_id = queue.add(job_type, payload, **options)
    assert job_id
    worker.run_until_empty(timeout=20)
    summary = queue.get(job_id)
    assert summary is not None
    return summary


def add_job(queue: Queue, job_type: str, payload: dict[str, Any], **options: Any) -> str:
    """``queue.add`` that must insert; returns the job id."""
    job_id = queue.add(job_type, payload, **options)
    assert job_id is not None
    return job_id
