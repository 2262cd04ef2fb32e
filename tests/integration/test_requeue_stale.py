"""``queue.requeue_stale`` against a real worker: a hung job taken back, its holder's late
completion refused, the observers of the Queue and of the worker told."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from golemq_pg import AsyncQueue, JobEvent, JobStatus, PostgresStore, Queue
from golemq_pg.store.port import LEASE_STALE_ERROR, ClaimRequest
from golemq_pg.store.postgres import AsyncPostgresStore
from tests.support.async_bridge import LoopThread
from tests.support.in_process import add_job, fast_worker
from tests.support.observers import Recorder
from tests.support.store_port import slots
from tests.support.waiting import wait_until


def test_a_hung_job_requeued_runs_again_and_its_holders_late_completion_is_refused(
    pg_store: PostgresStore,
) -> None:
    queued, seen = Recorder(), Recorder()
    queue = Queue(pg_store, observers=[queued])
    # lease_grace 60: renewed every 20 s, so no lease is written again during the test
    worker = fast_worker(pg_store, lease_grace=60, observers=[seen])
    release = {1: threading.Event(), 2: threading.Event()}
    runs: list[int] = []
    returned: list[int] = []

    @worker.handler("sync.report", concurrency=2)
    def report(job: JobEvent[Any]) -> dict[str, int]:
        runs.append(job.attempt)
        release[job.attempt].wait(30)  # deaf to its signal: stuck in a call
        returned.append(job.attempt)
        return {"attempt": job.attempt}

    job_id = add_job(queue, "sync.report", {})
    worker.start()
    try:
        wait_until(lambda: runs == [1], timeout=10)
        time.sleep(0.5)
        # too recent, or not of the types named: left alone
        assert queue.requeue_stale(older_than=600) == 0
        assert queue.requeue_stale(older_than=0, types=["other.type"]) == 0
        running = queue.get(job_id)
        assert running is not None
        assert running.status is JobStatus.RUNNING
        assert queue.requeue_stale(older_than=0.4, types=["sync.report"]) == 1
        (taken,) = queued.wait_for("reclaimed")
        assert (taken.job_id, taken.type, taken.attempts) == (job_id, "sync.report", 1)
        assert taken.error == LEASE_STALE_ERROR
        assert taken.stuck_for is not None
        assert 0.4 <= taken.stuck_for < 30
        # the same worker claims it again (a new lease) and reports the old one lost
        wait_until(lambda: runs == [1, 2], timeout=10)
        seen.wait_for("lease-lost")
        # the first attempt returns its "success" now, while the second holds the job
        release[1].set()
        wait_until(lambda: returned == [1], timeout=10)
        time.sleep(0.5)  # its outcome reaches the completer (accumulation, one write)
        held = queue.get(job_id)
        assert held is not None
        assert (held.status, held.attempts, held.result) == (JobStatus.RUNNING, 2, None)
        release[2].set()
        (done,) = seen.wait_for("succeeded")
        assert (done.job_id, done.attempts, done.result) == (job_id, 2, {"attempt": 2})
    finally:
        for event in release.values():
            event.set()
        worker.stop()
    summary = queue.get(job_id)
    assert summary is not None
    assert (summary.status, summary.attempts, summary.result) == (
        JobStatus.SUCCEEDED, 2, {"attempt": 2})
    assert [e.error for e in summary.errors] == [LEASE_STALE_ERROR]
    assert len(seen.of("succeeded")) == 1


def test_requeue_stale_on_an_async_queue_tells_its_observers(
    pg_store: PostgresStore, async_pg_store: AsyncPostgresStore, loop_thread: LoopThread
) -> None:
    job_id = add_job(Queue(pg_store), "t", {})
    (held,) = pg_store.job_claim(ClaimRequest(owner="lost", types=[slots("t", lease=600)]))
    seen = Recorder()
    queue = AsyncQueue(async_pg_store, observers=[seen])
    assert loop_thread.run(queue.requeue_stale(older_than=0)) == 1
    (taken,) = seen.of("reclaimed")
    assert (taken.job_id, taken.attempts) == (job_id, 1)
    assert taken.stuck_for is not None
    assert pg_store.job_complete_many("lost", [held]) == set()
    summary = Queue(pg_store).get(job_id)
    assert summary is not None
    assert summary.status is JobStatus.PENDING


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"older_than": -1}, "older_than must be >= 0"),
        ({"older_than": float("nan")}, "older_than must be finite"),
        ({"older_than": "600"}, "older_than must be a number of seconds or a timedelta"),
        ({"older_than": True}, "older_than must be a number of seconds or a timedelta"),
        ({"types": "sync.report"}, "types must be an iterable of job types"),
        ({"types": 5}, "types must be an iterable of job types"),
        ({"types": [""]}, "job type must be a non-empty string"),
    ],
)
def test_bad_arguments_are_refused_and_change_nothing(
    pg_store: PostgresStore, kwargs: dict[str, Any], message: str
) -> None:
    queue = Queue(pg_store)
    job_id = add_job(queue, "t", {})
    pg_store.job_claim(ClaimRequest(owner="w", types=[slots("t", lease=600)]))
    with pytest.raises(ValueError, match=message):
        queue.requeue_stale(**kwargs)
    summary = queue.get(job_id)
    assert summary is not None
    assert summary.status is JobStatus.RUNNING
