"""Queue.retry(id) and Queue.run_now(id) with real workers: the revived or advanced job runs
at once (woken by a notification), and bad input changes nothing."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest
from psycopg import sql

from golemq_pg import (
    InMemoryStore,
    JobEvent,
    JobStatus,
    PostgresStore,
    Queue,
    TerminalJobError,
    Worker,
)
from golemq_pg.store.port import FailItem
from tests.support.store_port import claim
from tests.support.waiting import wait_until


def test_a_retried_dead_letter_runs_again_at_once_with_its_history_kept(
    pg_store: PostgresStore, pg_dsn: str
) -> None:
    queue = Queue(pg_store)
    worker = Worker(pg_store, poll_interval=5)
    runs: list[int] = []
    second = threading.Event()

    @worker.handler("report")
    def report(job: JobEvent[Any]) -> None:
        runs.append(job.attempt)
        if len(runs) == 1:
            raise TerminalJobError("bad input")
        second.set()

    job_id = queue.add("report", {})
    worker.start()
    try:
        wait_until(lambda: (s := queue.get(job_id)) and s.status is JobStatus.FAILED,
                   what="the job failed")
        history = '[{"attempt": 1, "at": "2026-01-01T00:00:00+00:00", "error": "x", ' \
                  '"worker_id": "w"}]'
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            # a dead letter lives in the history (migration 0008)
            conn.execute(sql.SQL("UPDATE {}.jobs_history SET errors = %s::jsonb WHERE id = %s")
                         .format(sql.Identifier(pg_store.schema)), (history, int(job_id)))
        time.sleep(0.3)  # idle: the next poll is seconds away
        began = time.monotonic()
        assert queue.retry(job_id) is True
        assert second.wait(10)
        assert time.monotonic() - began < 2.5  # the notification, not the 5 s poll
    finally:
        worker.stop()
    assert runs == [1, 1]  # attempts were reset
    summary = queue.get(job_id)
    assert summary is not None
    assert summary.status is JobStatus.SUCCEEDED
    assert [e.error for e in summary.errors] == ["x"]  # the history is kept
    assert queue.retry(job_id) is False


def test_run_now_starts_a_scheduled_job_on_an_idle_worker_at_once(
    pg_store: PostgresStore,
) -> None:
    queue = Queue(pg_store)
    worker = Worker(pg_store, poll_interval=5)
    started = threading.Event()

    @worker.handler("later")
    def later(job: JobEvent[Any]) -> None:
        started.set()

    job_id = queue.add("later", {}, delay=3600)
    worker.start()
    try:
        time.sleep(0.3)
        assert not started.is_set()
        began = time.monotonic()
        assert queue.run_now(job_id) is True
        assert started.wait(10)
        assert time.monotonic() - began < 2.5
    finally:
        worker.stop()
    assert queue.run_now(job_id) is False


@pytest.mark.parametrize("kind", ["memory", "postgres"])
def test_bad_input_raises_before_the_store_and_changes_nothing(
    pg_store: PostgresStore, kind: str
) -> None:
    store: Any = pg_store if kind == "postgres" else InMemoryStore()
    queue = Queue(store)
    job_id = queue.add("t", {}, delay=60)
    for bad in ("", "abc", "1.5", "-3", "1" * 20, None, 1.5, True, ["1"]):
        with pytest.raises(ValueError, match="job_id"):
            queue.retry(bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="job_id"):
            queue.run_now(bad)  # type: ignore[arg-type]
    for bad_type in ("", " ", "x" * 256, None, 3, "a\x00b"):
        with pytest.raises(ValueError, match="job type"):
            queue.pause(bad_type)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="job type"):
            queue.resume(bad_type)  # type: ignore[arg-type]
    for bad_reason in ("r" * 1001, 5, b"bytes", "a\x00b"):
        with pytest.raises(ValueError, match="reason"):
            queue.pause("t", reason=bad_reason)  # type: ignore[arg-type]
    assert queue.paused() == {}
    queue.pause("t", reason="r" * 1000)  # the bound itself is fine
    assert queue.paused()["t"].reason == "r" * 1000
    assert queue.get(job_id).status is JobStatus.PENDING  # type: ignore[union-attr]
    assert queue.retry("999999") is False
    assert queue.run_now(999999) is False  # an int id is accepted, like the other by-id verbs


def test_retry_and_run_now_inside_a_callers_transaction_commit_with_it(
    pg_store: PostgresStore, pg_dsn: str
) -> None:
    queue = Queue(pg_store)
    dead = queue.add("t", {}, max_attempts=1)
    (job,) = claim(pg_store, "t")
    pg_store.job_fail_many("w1", [FailItem(job.id, job.lease_token, "boom")])
    later = queue.add("t", {}, delay=3600)
    with psycopg.connect(pg_dsn) as conn:
        bound = pg_store.with_connection(conn)
        assert bound.job_retry(dead) is True
        assert bound.job_run_now(later) is True
        conn.rollback()
    assert queue.get(dead).status is JobStatus.FAILED  # type: ignore[union-attr]
    assert queue.run_now(later) is True  # it was still parked
    with psycopg.connect(pg_dsn) as conn:
        assert pg_store.with_connection(conn).job_retry(dead) is True
    assert queue.get(dead).status is JobStatus.PENDING  # type: ignore[union-attr]


# -- Queue.delete --------------------------------------------------------------------------


class _Transitions:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def on_transition(self, transition: Any) -> None:
        self.seen.append((transition.job_id, transition.outcome))


@pytest.mark.parametrize("kind", ["postgres", "memory"])
def test_delete_removes_finished_jobs_cancels_live_ones_and_keeps_counts_exact(
    pg_store: PostgresStore, kind: str
) -> None:
    store: Any = pg_store if kind == "postgres" else InMemoryStore()
    observer = _Transitions()
    queue = Queue(store, observers=[observer])
    done_id, failed_id = queue.add("t", {"n": 1}), queue.add("t", {"n": 2})
    pending_id = queue.add("t", {"n": 3}, delay=60)
    jobs = {job.id: job for job in claim(store, "t")}
    store.job_complete_many("w1", [jobs[done_id]])
    store.job_fail_many("w1", [FailItem(failed_id, jobs[failed_id].lease_token, "E")])
    store.history_upkeep()  # counts folded: a delete must still leave them exact
    assert queue.delete(done_id) is True
    assert queue.delete(failed_id) is True
    assert queue.delete(pending_id) is True  # live: cancelled
    assert (pending_id, "cancelled") in observer.seen
    assert [queue.get(i) for i in (done_id, failed_id, pending_id)] == [None, None, None]
    assert queue.delete(done_id) is False
    assert queue.delete("987654321") is False
    counts = queue.count_by_status()
    assert set(counts.values()) == {0}
    store.history_upkeep()
    assert set(queue.count_by_status().values()) == {0}
    stats = queue.stats()
    assert (stats["succeeded"], stats["failed"]) == (0, 0)
    for bad in ("", "abc", None, 1.5):
        with pytest.raises(ValueError, match="job_id"):
            queue.delete(bad)  # type: ignore[arg-type]


def test_delete_of_a_running_job_aborts_its_handler(pg_store: PostgresStore) -> None:
    queue = Queue(pg_store)
    worker = Worker(pg_store, poll_interval=0.05)
    started, aborted = threading.Event(), threading.Event()

    @worker.handler("slow")
    def slow(job: JobEvent[Any]) -> None:
        started.set()
        if job.signal.wait(20):
            aborted.set()

    job_id = queue.add("slow", {})
    worker.start()
    try:
        assert started.wait(10)
        assert queue.delete(job_id) is True
        assert aborted.wait(10)
        assert queue.get(job_id) is None
    finally:
        worker.stop()
