"""Handlers changed on a running worker: ``worker.handler`` after ``start()`` claims the new
type within one poll, ``remove_handler`` gives buffered jobs back at once (attempt refunded,
no lease) and waits for (or, past its timeout, signals) the running ones, ``set_concurrency``
raises and lowers the parallelism, and the worker registry shows each change. Bad arguments
raise ``QueueConfigError`` and change nothing."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import psycopg
import pytest
from psycopg import sql

from golemq_pg import JobEvent, JobStatus, Queue, QueueConfigError
from tests.support.in_process import add_job, fast_worker
from tests.support.waiting import wait_until


class Gauge:
    """How many handlers run at once: now, and the most seen."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.peak = 0
        self.done = 0

    def enter(self) -> None:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)

    def leave(self) -> None:
        with self.lock:
            self.now -= 1
            self.done += 1

    def reset_peak(self) -> None:
        with self.lock:
            self.peak = self.now


def listed_handlers(queue: Queue, worker_id: str) -> dict[str, int] | None:
    for row in queue.workers():
        if row.worker_id == worker_id:
            return dict(row.handlers)
    return None


def test_a_handler_added_to_a_running_worker_runs_its_jobs(pg_store: Any) -> None:
    queue = Queue(pg_store)
    # A long poll: the new type must be claimed because it was added, not by the next poll.
    worker = fast_worker(pg_store, worker_id="late-add", poll_interval=30)

    @worker.handler("first")
    def first(job: JobEvent[Any]) -> None:
        """Registered before the start."""

    ran: list[str] = []
    worker.start()
    try:
        job_id = add_job(queue, "late.type", {})
        time.sleep(0.3)
        assert queue.get(job_id).status == JobStatus.PENDING  # nobody handles it yet

        @worker.handler("late.type", concurrency=2)
        def late(job: JobEvent[Any]) -> None:
            ran.append(job.id)

        assert "late.type" in worker.handler_types
        wait_until(lambda: queue.get(job_id).status == JobStatus.SUCCEEDED, timeout=3,
                   what="the late handler ran its job")
        assert ran == [job_id]
        second = add_job(queue, "late.type", {})  # NOTIFY reaches the new type too
        wait_until(lambda: queue.get(second).status == JobStatus.SUCCEEDED, timeout=3,
                   what="a job added after the handler ran")
        wait_until(lambda: listed_handlers(queue, "late-add") == {"first": 1, "late.type": 2},
                   timeout=5, what="the registry lists the added handler")
    finally:
        worker.stop()


def test_a_worker_started_without_handlers_claims_a_type_added_later(pg_store: Any) -> None:
    queue = Queue(pg_store)
    worker = fast_worker(pg_store, poll_interval=30)
    done = threading.Event()
    worker.start()
    try:

        @worker.handler("async.late")
        async def late(job: JobEvent[Any]) -> None:
            done.set()

        add_job(queue, "async.late", {})
        assert done.wait(3), "the async handler added to a bare worker never ran"
    finally:
        worker.stop()


def test_a_late_handler_passes_the_start_checks(pg_store: Any) -> None:
    worker = fast_worker(pg_store)

    @worker.handler("a", waits_for=["b"])
    def a(job: JobEvent[Any]) -> None:
        """Waits for b."""

    worker.start()
    try:
        with pytest.raises(QueueConfigError, match="waits_for cycle"):
            worker.handler("b", waits_for=["a"])(lambda job: None)
        with pytest.raises(QueueConfigError, match="already registered"):
            worker.handler("a")(lambda job: None)
        assert worker.handler_types == ("a",)
    finally:
        worker.stop()


def test_removed_handlers_buffered_jobs_are_claimable_by_another_worker_at_once(
    pg_store: Any, pg_dsn: str, schema: str,
) -> None:
    queue = Queue(pg_store)
    first = fast_worker(pg_store, worker_id="remover")
    release = threading.Event()
    started = threading.Event()
    running_ids: list[str] = []

    @first.handler("slow")
    def slow(job: JobEvent[Any]) -> None:
        if job.payload.get("warm"):
            return  # a quick first job: the type's handlers are fast, so it is prefetched
        running_ids.append(job.id)
        started.set()
        release.wait(30)

    warm = add_job(queue, "slow", {"warm": True})
    first.start()
    second = fast_worker(pg_store, worker_id="taker")
    ran_by_second: list[str] = []
    try:
        wait_until(lambda: queue.get(warm).status == JobStatus.SUCCEEDED, timeout=5,
                   what="the warm-up job done")
        ids = [add_job(queue, "slow", {"i": i}) for i in range(4)]
        assert started.wait(5)
        # One runs; others are in first's buffer (prefetched): leased to it, shown pending.
        wait_until(lambda: len(leased(pg_dsn, schema, ids)) >= 2, timeout=5,
                   what="jobs prefetched")
        [running] = running_ids
        buffered = [i for i in leased(pg_dsn, schema, ids) if i != running]
        assert buffered
        assert all(queue.get(i).status == JobStatus.PENDING for i in buffered)
        first.remove_handler("slow", wait=False)
        left = [i for i in ids if i != running]

        @second.handler("slow")
        def taken(job: JobEvent[Any]) -> None:
            ran_by_second.append(job.id)

        removed_at = time.monotonic()
        second.start()
        wait_until(lambda: sorted(ran_by_second) == sorted(left), timeout=1.0,
                   what="the second worker ran the released jobs within a second")
        assert time.monotonic() - removed_at < 1.0
        for job_id in left:
            summary = wait_until(
                lambda j=job_id: (s := queue.get(j)) and s.status == JobStatus.SUCCEEDED and s,
                timeout=2, what="the completion written",
            )
            assert summary.attempts == 1  # the release refunded first's claim
        assert queue.get(running).status == JobStatus.RUNNING  # in flight: left to finish
        release.set()
        wait_until(lambda: queue.get(running).status == JobStatus.SUCCEEDED, timeout=5,
                   what="the in-flight job finished on the first worker")
        assert ran_by_second.count(running) == 0
        wait_until(lambda: listed_handlers(queue, "remover") == {}, timeout=5,
                   what="the registry no longer lists the removed handler")
    finally:
        release.set()
        second.stop()
        first.stop()


def leased(pg_dsn: str, schema: str, ids: list[str]) -> list[str]:
    """Those of ``ids`` whose row holds a lease (running, or claimed into a buffer)."""
    return [i for i in ids if lease_of(pg_dsn, schema, i)[0] is not None]


def lease_of(pg_dsn: str, schema: str, job_id: str) -> tuple[Any, Any]:
    """The row's (lease_owner, lease_expires_at)."""
    with psycopg.connect(pg_dsn) as conn:
        row = conn.execute(
            sql.SQL("SELECT lease_owner, lease_expires_at FROM {}.jobs WHERE id = %s").format(
                sql.Identifier(schema)),
            (int(job_id),),
        ).fetchone()
    assert row is not None
    return row[0], row[1]


def test_remove_handler_returns_released_jobs_to_pending_with_no_lease(
    pg_store: Any, pg_dsn: str, schema: str,
) -> None:
    queue = Queue(pg_store)
    worker = fast_worker(pg_store)
    release = threading.Event()

    @worker.handler("held")
    def held(job: JobEvent[Any]) -> None:
        if not job.payload.get("warm"):  # a quick first job makes the type prefetched
            release.wait(30)

    warm = add_job(queue, "held", {"warm": True})
    worker.start()
    try:
        wait_until(lambda: queue.get(warm).status == JobStatus.SUCCEEDED, timeout=5,
                   what="the warm-up job done")
        ids = [add_job(queue, "held", {"i": i}) for i in range(3)]
        wait_until(lambda: len(leased(pg_dsn, schema, ids)) >= 2, timeout=5,
                   what="one running, others buffered")
        held_now = len(leased(pg_dsn, schema, ids))
        worker.remove_handler("held", wait=False)
        wait_until(lambda: len(leased(pg_dsn, schema, ids)) == 1, timeout=1,
                   what="the buffered jobs back to pending at once")
        assert held_now >= 2
        [running] = leased(pg_dsn, schema, ids)
        for job_id in ids:
            if job_id != running:
                summary = queue.get(job_id)
                assert summary.status == JobStatus.PENDING
                assert summary.attempts == 0
        time.sleep(0.3)  # nothing claims them again here
        assert leased(pg_dsn, schema, ids) == [running]
    finally:
        release.set()
        worker.stop()


def test_remove_handler_waits_for_the_running_jobs(pg_store: Any) -> None:
    queue = Queue(pg_store)
    worker = fast_worker(pg_store)
    started = threading.Event()

    @worker.handler("work")
    def work(job: JobEvent[Any]) -> None:
        started.set()
        time.sleep(0.5)

    job_id = add_job(queue, "work", {})
    worker.start()
    try:
        assert started.wait(5)
        began = time.monotonic()
        worker.remove_handler("work")  # wait=True
        assert time.monotonic() - began >= 0.3
        wait_until(lambda: queue.get(job_id).status == JobStatus.SUCCEEDED, timeout=2,
                   what="the running job completed")
        assert worker.handler_types == ()
        # No longer handled: a new job stays pending.
        later = add_job(queue, "work", {})
        time.sleep(0.3)
        assert queue.get(later).status == JobStatus.PENDING
    finally:
        worker.stop()


def test_remove_handler_past_its_timeout_signals_the_running_jobs(pg_store: Any) -> None:
    queue = Queue(pg_store)
    worker = fast_worker(pg_store, abandon_grace=5)
    started = threading.Event()
    reasons: list[str | None] = []

    @worker.handler("stubborn")
    def stubborn(job: JobEvent[Any]) -> None:
        started.set()
        job.signal.wait(30)
        reasons.append(job.signal.reason)
        raise RuntimeError("stopped early")

    job_id = add_job(queue, "stubborn", {})
    worker.start()
    try:
        assert started.wait(5)
        began = time.monotonic()
        worker.remove_handler("stubborn", timeout=0.2)
        took = time.monotonic() - began
        assert 0.2 <= took < 3
        assert reasons == ["shutdown"]
        # Aborted as at shutdown: released, the attempt refunded.
        summary = wait_until(
            lambda: (s := queue.get(job_id)) and s.status == JobStatus.PENDING and s,
            timeout=3, what="the aborted job released",
        )
        assert summary.attempts == 0
    finally:
        worker.stop()


def test_remove_handler_without_wait_returns_at_once(pg_store: Any) -> None:
    queue = Queue(pg_store)
    worker = fast_worker(pg_store)
    started = threading.Event()
    release = threading.Event()

    @worker.handler("long")
    def long(job: JobEvent[Any]) -> None:
        started.set()
        release.wait(30)

    job_id = add_job(queue, "long", {})
    worker.start()
    try:
        assert started.wait(5)
        # running once its start is written (within the start marker's 50 ms)
        wait_until(lambda: queue.get(job_id).status == JobStatus.RUNNING, timeout=2,
                   what="the job shown running")
        began = time.monotonic()
        worker.remove_handler("long", wait=False)
        assert time.monotonic() - began < 0.2
        assert queue.get(job_id).status == JobStatus.RUNNING
        release.set()
        wait_until(lambda: queue.get(job_id).status == JobStatus.SUCCEEDED, timeout=5,
                   what="the job finished behind")
    finally:
        release.set()
        worker.stop()


def test_a_removed_type_can_be_registered_again(pg_store: Any) -> None:
    queue = Queue(pg_store)
    worker = fast_worker(pg_store)
    ran: list[str] = []

    @worker.handler("again")
    def old(job: JobEvent[Any]) -> None:
        ran.append("old")

    worker.start()
    try:
        worker.remove_handler("again")

        @worker.handler("again")
        def new(job: JobEvent[Any]) -> None:
            ran.append("new")

        job_id = add_job(queue, "again", {})
        wait_until(lambda: queue.get(job_id).status == JobStatus.SUCCEEDED, timeout=3,
                   what="the re-registered handler ran")
        assert ran == ["new"]
    finally:
        worker.stop()


def _observed_peak(queue: Queue, gauge: Gauge, job_type: str, count: int) -> int:
    gauge.reset_peak()
    target = gauge.done + count
    for i in range(count):
        add_job(queue, job_type, {"i": i})
    wait_until(lambda: gauge.done >= target, timeout=15, what=f"{count} jobs of {job_type}")
    return gauge.peak


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_set_concurrency_raises_and_lowers_the_parallelism(pg_store: Any, kind: str) -> None:
    queue = Queue(pg_store)
    worker = fast_worker(pg_store, worker_id=f"resize-{kind}")
    gauge = Gauge()
    if kind == "sync":

        @worker.handler("par", concurrency=1)
        def par(job: JobEvent[Any]) -> None:
            gauge.enter()
            time.sleep(0.1)
            gauge.leave()

    else:

        @worker.handler("par", concurrency=1)
        async def apar(job: JobEvent[Any]) -> None:
            gauge.enter()
            await asyncio.sleep(0.1)
            gauge.leave()

    worker.start()
    try:
        assert _observed_peak(queue, gauge, "par", 4) == 1
        worker.set_concurrency("par", 4)
        assert _observed_peak(queue, gauge, "par", 12) == 4
        wait_until(lambda: listed_handlers(queue, f"resize-{kind}") == {"par": 4}, timeout=5,
                   what="the registry shows the new concurrency")
        worker.set_concurrency("par", 2)
        wait_until(lambda: gauge.now == 0, timeout=5, what="the type idle")
        assert _observed_peak(queue, gauge, "par", 8) == 2
    finally:
        worker.stop()


def test_set_concurrency_of_a_transactional_handler(pg_store: Any) -> None:
    queue = Queue(pg_store)
    worker = fast_worker(pg_store)
    gauge = Gauge()

    @worker.handler("tx", transactional=True)
    def tx(job: JobEvent[Any]) -> None:
        gauge.enter()
        time.sleep(0.1)
        gauge.leave()

    worker.start()
    try:
        assert _observed_peak(queue, gauge, "tx", 3) == 1
        worker.set_concurrency("tx", 3)
        assert _observed_peak(queue, gauge, "tx", 9) == 3
        worker.set_concurrency("tx", 1)
        wait_until(lambda: gauge.now == 0, timeout=5, what="the type idle")
        assert _observed_peak(queue, gauge, "tx", 3) == 1
        worker.remove_handler("tx")
        assert worker.handler_types == ()
    finally:
        worker.stop()


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda w: w.set_concurrency("known", 0), "positive integer"),
        (lambda w: w.set_concurrency("known", True), "positive integer"),
        (lambda w: w.set_concurrency("known", "2"), "positive integer"),
        (lambda w: w.set_concurrency("known", 10**6), "at most"),
        (lambda w: w.set_concurrency("unknown", 2), "no handler for 'unknown'"),
        (lambda w: w.set_concurrency(42, 2), "job type must be"),
        (lambda w: w.remove_handler("unknown"), "no handler for 'unknown'"),
        (lambda w: w.remove_handler("known", wait="yes"), "wait must be True or False"),
        (lambda w: w.remove_handler("known", timeout=-1), "timeout"),
        (lambda w: w.remove_handler("", wait=True), "job type"),
    ],
)
def test_bad_arguments_raise_and_change_nothing(pg_store: Any, call: Any, match: str) -> None:
    worker = fast_worker(pg_store, worker_id="bad-args")

    @worker.handler("known", concurrency=2)
    def known(job: JobEvent[Any]) -> None:
        """Never runs."""

    for running in (False, True):
        if running:
            worker.start()
        try:
            with pytest.raises(QueueConfigError, match=match):
                call(worker)
            assert worker.handler_types == ("known",)
        finally:
            if running:
                worker.stop()
    queue = Queue(pg_store)
    worker.start()
    try:
        wait_until(lambda: listed_handlers(queue, "bad-args") == {"known": 2}, timeout=5,
                   what="the registry unchanged")
    finally:
        worker.stop()
