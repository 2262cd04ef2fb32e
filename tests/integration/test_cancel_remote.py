"""Cancellation made elsewhere: from another process (a real canceller subprocess, its own
``Queue`` and store, so the in-process abort registry cannot help) or another store, with
NOTIFY or by the reconcile pass; a transactional handler aborted that way; a cancelled
job's late outcome.

The latency tests measure the time from the cancel's commit to the moment the handler sees
its signal. Both processes read ``time.monotonic()``, which is the system-wide
CLOCK_MONOTONIC on Linux, so the timestamps compare directly. Cancels made in the worker's
own process (and the Queue's cancel API) are in test_cancel.py.
"""

from __future__ import annotations

import queue as queue_mod
import random
import statistics
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from golemq_pg import JobEvent, JobStatus, PostgresStore, Queue, Worker
from golemq_pg.store.port import CancelFilter
from tests.support.ledgers import effects, insert_effect
from tests.support.observers import Recorder
from tests.support.waiting import wait_until
from tests.support.workers import Canceller


@pytest.fixture
def canceller(pg_store: PostgresStore, pg_dsn: str) -> Iterator[Canceller]:
    proc = Canceller(pg_dsn, pg_store.schema)
    yield proc
    proc.close()


def _blocking_worker(store: Any, *, notify: bool, poll: float, rec: Recorder,
                     started: queue_mod.Queue[str],
                     seen: queue_mod.Queue[tuple[str, float, str | None]]) -> Worker:
    """A worker whose "victim" handler blocks on its signal and reports when it fired."""
    worker = Worker(store, poll_interval=poll, notify=notify, observers=[rec])

    @worker.handler("victim", concurrency=2)
    def victim(job: JobEvent[Any]) -> None:
        started.put(job.id)
        fired = job.signal.wait(30)
        seen.put((job.id, time.monotonic(), job.signal.reason if fired else None))
        job.signal.raise_if_cancelled()

    return worker


def _trials(queue: Queue, canceller: Canceller, started: queue_mod.Queue[str],
            seen: queue_mod.Queue[tuple[str, float, str | None]], trials: int,
            dephase: float = 0.0) -> tuple[list[float], list[float]]:
    """Run ``trials`` cancels; returns (commit -> signal, call start -> signal) seconds.

    ``dephase``: wait a random time up to this long before each cancel, so that cancels do
    not always land at the same phase of the worker's polling loops.
    """
    after_commit: list[float] = []
    whole_call: list[float] = []
    rng = random.Random(6)
    for n in range(trials):
        job_id = queue.add("victim", {"n": n}, scope=("Doc", f"d{n}"))
        assert job_id
        assert started.get(timeout=10) == job_id
        if dephase:
            time.sleep(rng.uniform(0, dephase))
        command = f"id {job_id}" if n % 2 == 0 else f"scope Doc d{n}"
        count, before, after = canceller.run(command)
        assert count == 1
        got_id, at, reason = seen.get(timeout=10)
        assert (got_id, reason) == (job_id, "cancelled")
        # The NOTIFY is sent at commit, so the handler can see it a hair before the
        # canceller's call has returned: that counts as zero.
        after_commit.append(max(at - after, 0.0))
        whole_call.append(at - before)
        assert queue.get(job_id) is None
    return after_commit, whole_call


def _report(label: str, after_commit: list[float], whole_call: list[float]) -> str:
    def ms(values: list[float]) -> str:
        return (f"p50 {statistics.median(values) * 1000:.1f} ms, "
                f"max {max(values) * 1000:.1f} ms")

    text = (f"{label}: {len(after_commit)} trials; commit -> handler signalled {ms(after_commit)}"
            f"; cancel call start -> signalled {ms(whole_call)}")
    print(text)
    return text


def test_cancel_from_another_process_aborts_by_notify_and_latency(
    pg_store: PostgresStore, canceller: Canceller
) -> None:
    rec = Recorder()
    started: queue_mod.Queue[str] = queue_mod.Queue()
    seen: queue_mod.Queue[tuple[str, float, str | None]] = queue_mod.Queue()
    # Polling and the reconcile pass run every 30 s: only the NOTIFY can be this fast.
    worker = _blocking_worker(pg_store, notify=True, poll=30, rec=rec, started=started,
                              seen=seen)
    queue = Queue(pg_store)
    worker.start()
    try:
        after_commit, whole_call = _trials(queue, canceller, started, seen, trials=20)
    finally:
        worker.stop(timeout=2)
    _report("cross-process cancel via NOTIFY", after_commit, whole_call)
    assert statistics.median(after_commit) < 0.1
    assert max(after_commit) < 1.0
    cancelled = rec.of("cancelled")
    assert len(cancelled) == 20
    assert {t.error for t in cancelled} == {None}  # the reason is not sent across processes
    assert "succeeded" not in rec.outcomes()
    assert "lease-lost" not in rec.outcomes()
    assert queue.count_by_status() == dict.fromkeys(JobStatus, 0)


def test_without_notify_the_reconcile_pass_aborts_within_one_poll_interval(
    pg_store: PostgresStore, canceller: Canceller
) -> None:
    poll = 0.25
    rec = Recorder()
    started: queue_mod.Queue[str] = queue_mod.Queue()
    seen: queue_mod.Queue[tuple[str, float, str | None]] = queue_mod.Queue()
    worker = _blocking_worker(pg_store, notify=False, poll=poll, rec=rec, started=started,
                              seen=seen)
    queue = Queue(pg_store)
    worker.start()
    try:
        after_commit, whole_call = _trials(queue, canceller, started, seen, trials=8,
                                           dephase=poll)
    finally:
        worker.stop(timeout=2)
    _report(f"cross-process cancel, reconcile only (poll {poll}s)", after_commit, whole_call)
    # One reconcile interval, plus the pass itself on a busy 2-core machine.
    assert max(after_commit) < poll + 0.35
    assert len(rec.of("cancelled")) == 8
    assert "lease-lost" not in rec.outcomes()


@pytest.mark.parametrize("outcome", ["returns", "raises"])
def test_a_cancelled_jobs_late_outcome_writes_nothing(
    pg_store: PostgresStore, canceller: Canceller, outcome: str
) -> None:
    rec = Recorder()
    queue = Queue(pg_store)
    # The handler ignores its signal; abandon_grace is long, so its thread returns late on
    # its own, well after the row was deleted by the other process.
    worker = Worker(pg_store, poll_interval=0.05, abandon_grace=30, observers=[rec],
                    base_backoff=0, max_backoff=0)
    started = threading.Event()
    gate = threading.Event()
    returned = threading.Event()

    @worker.handler("stubborn")
    def stubborn(job: JobEvent[Any]) -> None:
        started.set()
        gate.wait(30)
        job.progress(1.0)  # fenced: nothing to write on a deleted row
        returned.set()
        if outcome == "raises":
            raise RuntimeError("late failure")

    job_id = queue.add("stubborn", {}, dedupe_key="k1", scope=("Doc", "late"))
    assert job_id
    worker.start()
    try:
        assert started.wait(10)
        count, _, _ = canceller.run("scope Doc late")
        assert count == 1
        rec.wait_for("cancelled")
        gate.set()
        assert returned.wait(10)
        # Give the worker time to (not) write the outcome: the completer flushes in ms.
        time.sleep(0.3)
        assert queue.get(job_id) is None
        assert queue.count_by_status() == dict.fromkeys(JobStatus, 0)
    finally:
        gate.set()
        worker.stop(timeout=2)
    assert rec.outcomes(job_id) == ["started", "cancelled"]
    assert queue.get(job_id) is None  # never resurrected
    again = queue.add("stubborn", {}, dedupe_key="k1")
    assert again is not None
    assert again != job_id


def test_cancel_from_another_process_arrives_by_notify(pg_store: PostgresStore,
                                                       pg_dsn: str) -> None:
    # A second store object stands for another process: different identity is not needed,
    # so use a fresh connection pool to the same schema and keep the worker's store apart.
    other = PostgresStore.connect(pg_dsn, schema=pg_store.schema, max_size=2)
    try:
        queue = Queue(other)
        worker = Worker(pg_store, poll_interval=30)  # polling and reconcile far away
        started = threading.Event()
        reasons: list[str | None] = []

        @worker.handler("remote")
        def remote(job: JobEvent[Any]) -> None:
            started.set()
            job.signal.wait(30)
            reasons.append(job.signal.reason)

        job_id = Queue(pg_store).add("remote", {})
        assert job_id
        worker.start()
        try:
            assert started.wait(10)
            t0 = time.monotonic()
            # Bypass the in-process registry: cancel through the other store only.
            cancelled = other.job_cancel(CancelFilter(job_ids=[job_id]), "elsewhere")
            assert [c.id for c in cancelled] == [job_id]
            wait_until(lambda: reasons, timeout=5)
            assert time.monotonic() - t0 < 2  # far below the 30 s poll: the NOTIFY did it
            assert reasons == ["cancelled"]
        finally:
            worker.stop(timeout=1)
        assert queue.get(job_id) is None
    finally:
        other.close()


def test_reconcile_catches_cancels_without_notify(pg_store: PostgresStore, pg_dsn: str) -> None:
    other = PostgresStore.connect(pg_dsn, schema=pg_store.schema, max_size=2)
    try:
        worker = Worker(pg_store, poll_interval=0.2, notify=False)
        started = threading.Event()
        reasons: list[str | None] = []

        @worker.handler("quiet")
        def quiet(job: JobEvent[Any]) -> None:
            started.set()
            job.signal.wait(30)
            reasons.append(job.signal.reason)

        job_id = Queue(pg_store).add("quiet", {})
        assert job_id
        worker.start()
        try:
            assert started.wait(10)
            other.job_cancel(CancelFilter(job_ids=[job_id]), None)
            wait_until(lambda: reasons, timeout=5)
            assert reasons == ["cancelled"]
        finally:
            worker.stop(timeout=1)
    finally:
        other.close()


@pytest.mark.parametrize("blocked_in", ["statement", "signal"])
def test_cancel_from_another_process_aborts_a_transactional_handler(
    pg_store: PostgresStore, pg_dsn: str, effects_schema: str, blocked_in: str
) -> None:
    schema = effects_schema
    rec = Recorder()
    queue = Queue(pg_store)
    worker = Worker(pg_store, poll_interval=30, observers=[rec])  # only the NOTIFY is fast
    started = threading.Event()
    endings: list[str] = []

    @worker.handler("tx-long", transactional=True)
    def long_one(event: JobEvent[Any]) -> None:
        insert_effect(event, schema, "w")
        started.set()
        try:
            if blocked_in == "statement":
                event.connection.execute("SELECT pg_sleep(25)")
            else:
                event.signal.wait(25)
        except psycopg.Error as exc:
            endings.append(type(exc).__name__)
            raise
        endings.append(f"returned ({event.signal.reason})")

    job_id = queue.add("tx-long", {}, scope=("Doc", "tx"))
    assert job_id
    canceller = Canceller(pg_dsn, schema)
    worker.start()
    try:
        assert started.wait(10)
        count, before, after = canceller.run("id " + job_id)
        assert count == 1
        # Without the early announcement the DELETE would wait on the row lock until the
        # handler ends (or lock_timeout, 10 s).
        assert after - before < 3.0
        rec.wait_for("cancelled")
        wait_until(lambda: endings, timeout=10)
    finally:
        worker.stop(timeout=2)
        canceller.close()
    expected = "QueryCanceled" if blocked_in == "statement" else "returned (cancelled)"
    assert endings == [expected]
    assert queue.get(job_id) is None
    assert effects(pg_dsn, schema) == []
    assert rec.outcomes(job_id) == ["started", "cancelled"]
