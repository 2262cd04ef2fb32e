"""Honest running on PostgreSQL with real workers: a job claimed ahead of a free handler
thread is PENDING (no start) until its handler starts; slow types are not hoarded in one
worker's buffer while another worker has free threads; ``prefetch=False`` buffers nothing."""

from __future__ import annotations

import threading
import time
from typing import Any

from golemq_pg import JobEvent, JobStatus, JobSummary, Queue
from tests.support.in_process import fast_worker
from tests.support.waiting import wait_until


def _in_status(queue: Queue, job_id: str, status: JobStatus) -> JobSummary | None:
    """The job's row once it has ``status`` (None before)."""
    summary = queue.get(job_id)
    return summary if summary is not None and summary.status is status else None


def test_slow_jobs_are_shared_by_two_workers_and_never_shown_running_ahead(store: Any) -> None:
    queue = Queue(store)
    lock = threading.Lock()
    running = [0]
    ran_by: dict[str, str] = {}

    def make(name: str) -> Any:
        worker = fast_worker(store, worker_id=name)

        @worker.handler("slow", concurrency=2)
        def slow(job: JobEvent[Any]) -> None:
            with lock:
                running[0] += 1
                ran_by[job.id] = name
            try:
                time.sleep(3.0)
            finally:
                with lock:
                    running[0] -= 1

        return worker

    first, second = make("w-first"), make("w-second")
    first.start()
    try:
        job_ids = [queue.add("slow", {"i": i}) for i in range(4)]
        wait_until(lambda: running[0] == 2, timeout=10, what="the first worker runs two")
        second.start()
        deadline = time.monotonic() + 12.0
        samples = 0
        # Sampled until every job has run (two rounds of 3 s on one worker, one on two).
        while time.monotonic() < deadline and (len(ran_by) < 4 or running[0]):
            finished = queue.stats()["succeeded"]
            shown = queue.stats()["running"]
            with lock:
                begun = len(ran_by)
            # stats never counts more running than handlers started and not finished
            assert shown <= begun - finished, (shown, begun, finished)
            samples += 1
            time.sleep(0.05)
        assert samples > 10
        assert len(ran_by) == 4
        by_worker = sorted(ran_by[job_id] for job_id in job_ids)
        assert by_worker == ["w-first", "w-first", "w-second", "w-second"]
    finally:
        first.stop()
        second.stop()


def test_a_job_waiting_behind_a_busy_thread_is_pending_until_its_handler_starts(
    store: Any,
) -> None:
    queue = Queue(store)
    gates = {"first": threading.Event(), "second": threading.Event()}
    started: dict[str, float] = {}
    worker = fast_worker(store, worker_id="w-buffer")

    @worker.handler("quick", concurrency=1)
    def quick(job: JobEvent[Any]) -> None:
        gate = job.payload.get("gate")
        if gate:
            started[gate] = time.time()
            assert gates[gate].wait(20)

    worker.start()
    try:
        # Quick jobs first: their durations make the type buffer jobs ahead of its thread.
        warm = [queue.add("quick", {"i": i}) for i in range(5)]
        wait_until(lambda: all(queue.get(j).status is JobStatus.SUCCEEDED for j in warm),
                   timeout=10, what="warm-up done")
        first_id = queue.add("quick", {"gate": "first"})
        second_id = queue.add("quick", {"gate": "second"})
        wait_until(lambda: "first" in started, timeout=10, what="first handler started")
        # The second is leased into the buffer (attempt counted) but not started.
        wait_until(lambda: queue.get(second_id).attempts == 1, timeout=10,
                   what="second job claimed into the buffer")
        waiting = queue.get(second_id)
        assert (waiting.status, waiting.started_at) == (JobStatus.PENDING, None)
        wait_until(lambda: queue.get(first_id).status is JobStatus.RUNNING, timeout=5,
                   what="the first shows running")
        stats = queue.stats()
        assert (stats["running"], stats["pending"]) == (1, 1)
        assert wait_until(lambda: queue.workers()[0].running == 1, timeout=5,
                          what="the registry counts one running")
        release = time.time()
        gates["first"].set()
        wait_until(lambda: "second" in started, timeout=10, what="second handler started")
        running = wait_until(lambda: _in_status(queue, second_id, JobStatus.RUNNING),
                             timeout=5, what="the second shows running")
        assert running.started_at is not None
        assert running.started_at.timestamp() >= release - 0.5
        gates["second"].set()
        done = wait_until(lambda: _in_status(queue, second_id, JobStatus.SUCCEEDED),
                          timeout=10, what="second done")
        assert done.started_at == running.started_at
    finally:
        for gate in gates.values():
            gate.set()
        worker.stop()


def test_prefetch_false_leaves_waiting_jobs_to_another_worker(store: Any) -> None:
    queue = Queue(store)
    gate = threading.Event()
    ran_by: dict[str, str] = {}

    def make(name: str) -> Any:
        worker = fast_worker(store, worker_id=name)

        @worker.handler("quick", concurrency=1, prefetch=False)
        def quick(job: JobEvent[Any]) -> None:
            ran_by[job.id] = name
            if job.payload.get("block"):
                assert gate.wait(20)

        return worker

    first = make("w-first")
    first.start()
    second = make("w-second")
    try:
        warm = [queue.add("quick", {"i": i}) for i in range(5)]
        wait_until(lambda: all(queue.get(j).status is JobStatus.SUCCEEDED for j in warm),
                   timeout=10, what="warm-up done")
        blocker = queue.add("quick", {"block": True})
        waiting = queue.add("quick", {"after": True})
        wait_until(lambda: blocker in ran_by, timeout=10, what="blocker started")
        time.sleep(0.3)  # a buffering worker would have leased the second job by now
        assert queue.get(waiting).attempts == 0
        second.start()
        wait_until(lambda: waiting in ran_by, timeout=10, what="second worker ran it")
        assert ran_by[waiting] == "w-second"
    finally:
        gate.set()
        first.stop()
        second.stop()
