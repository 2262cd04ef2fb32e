"""Leases on real PostgreSQL: renewal, loss (fencing), and the reaper after a SIGKILL."""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

import psycopg
import structlog
from psycopg import sql

from golemq_pg import JobEvent, JobStatus, PostgresStore, Queue, Worker
from golemq_pg.store.port import LEASE_EXPIRED_ERROR, ClaimRequest
from tests.support.ledgers import effects, effects_table, job_rows, record_effect
from tests.support.observers import Recorder
from tests.support.store_port import SHORT_LEASE, slots
from tests.support.waiting import wait_until
from tests.support.workers import spawn_worker


def test_a_job_running_three_leases_long_is_never_taken_twice(
    pg_store: PostgresStore, pg_dsn: str
) -> None:
    effects_table(pg_dsn, pg_store.schema)
    queue = Queue(pg_store)
    workers = []
    for name in ("w-a", "w-b"):
        worker = Worker(pg_store, worker_id=name, poll_interval=0.05, lease_duration=0.6,
                        lease_renew_interval=0.15)

        @worker.handler("long", concurrency=2)
        def long(job: JobEvent[Any], name: str = name) -> None:
            with pg_store.pool.connection() as conn:
                record_effect(conn, pg_store.schema, job.id, job.attempt, name)
            assert not job.signal.wait(1.8), job.signal.reason  # 3 x lease_duration

        workers.append(worker)
    job_id = queue.add("long", {})
    assert job_id
    for worker in workers:
        worker.start()
    try:
        wait_until(lambda: queue.get(job_id).status is JobStatus.SUCCEEDED, timeout=15)  # type: ignore[union-attr]
    finally:
        for worker in workers:
            worker.stop()
    runs = effects(pg_dsn, pg_store.schema)
    assert len(runs) == 1
    summary = queue.get(job_id)
    assert summary is not None
    assert summary.attempts == 1


def test_untimed_jobs_are_renewed_past_lease_grace(pg_store: PostgresStore) -> None:
    queue = Queue(pg_store)
    worker = Worker(pg_store, poll_interval=0.05, lease_grace=0.5)
    reaper = Worker(pg_store, poll_interval=0.05, worker_id="reaper")  # reaps, handles nothing
    runs: list[int] = []

    @worker.handler("untimed")
    def untimed(job: JobEvent[Any]) -> None:
        runs.append(job.attempt)
        assert not job.signal.wait(1.5), job.signal.reason

    job_id = queue.add("untimed", {})
    assert job_id
    reaper.start()
    try:
        worker.run_until_empty(timeout=15)
    finally:
        reaper.stop()
    summary = queue.get(job_id)
    assert summary is not None
    assert summary.status is JobStatus.SUCCEEDED
    assert runs == [1]


def test_failing_renewals_lose_the_lease_and_the_late_completion_writes_nothing(
    pg_dsn: str, schema: str
) -> None:
    # A short lock_timeout makes renewals fail for real while a test transaction holds the
    # job's row lock.
    store = PostgresStore.connect(pg_dsn, schema=schema, max_size=6, lock_timeout=0.1)
    store.migrate()
    try:
        queue = Queue(store)
        rec = Recorder()
        worker = Worker(store, worker_id="w-lost", poll_interval=0.05, lease_duration=0.8,
                        lease_renew_interval=0.2, observers=[rec])
        started = threading.Event()
        reasons: list[str | None] = []

        @worker.handler("fragile")
        def fragile(job: JobEvent[Any]) -> None:
            started.set()
            job.signal.wait(20)
            reasons.append(job.signal.reason)
            # Returns normally: a late "success" that must not be written.

        job_id = queue.add("fragile", {})
        assert job_id
        blocker = psycopg.connect(pg_dsn)
        try:
            with structlog.testing.capture_logs() as logs:
                worker.start()
                assert started.wait(10)
                blocker.execute(
                    sql.SQL("SELECT 1 FROM {}.jobs WHERE id = %s FOR UPDATE")
                    .format(sql.Identifier(schema)), (int(job_id),),
                )
                wait_until(lambda: reasons, timeout=10)
                assert reasons == ["lease-lost"]
                rec.wait_for("lease-lost")
                blocker.rollback()
                # The lease has expired: the worker's own reaper gives the job back, and
                # nothing the aborted handler returned was written.
                wait_until(lambda: rec.of("reclaimed") or rec.of("succeeded"), timeout=10)
                worker.stop(timeout=1)
        finally:
            blocker.close()
        assert any(e["event"] == "lease_lost" for e in logs)
        # The aborted first attempt wrote nothing; the worker may have claimed the job again
        # (a second attempt, which worker.stop's signal ends normally).
        assert all(t.attempts > 1 for t in rec.of("succeeded"))
        rows = job_rows(pg_dsn, schema)
        assert len(rows) == 1
        assert rows[0][1] in ("pending", "running") or rows[0][1:3] == ("succeeded", 2)
    finally:
        store.close()


def test_a_renewal_blocked_past_the_lease_aborts_the_handler_before_it_returns(
    pg_dsn: str, schema: str
) -> None:
    # A long lock_timeout: the renewal blocks on the row lock (as on a dead connection in a
    # network partition) instead of failing; the supervisor must not wait for it.
    store = PostgresStore.connect(pg_dsn, schema=schema, max_size=6, lock_timeout=30)
    store.migrate()
    try:
        queue = Queue(store)
        worker = Worker(store, worker_id="w-blocked", poll_interval=0.05, lease_duration=0.8,
                        lease_renew_interval=0.2)
        started = threading.Event()
        aborted: list[tuple[str | None, float]] = []

        @worker.handler("fragile")
        def fragile(job: JobEvent[Any]) -> None:
            started.set()
            job.signal.wait(20)
            aborted.append((job.signal.reason, time.monotonic()))

        job_id = queue.add("fragile", {})
        assert job_id
        blocker = psycopg.connect(pg_dsn)
        try:
            worker.start()
            assert started.wait(10)
            blocker.execute(
                sql.SQL("SELECT 1 FROM {}.jobs WHERE id = %s FOR UPDATE")
                .format(sql.Identifier(schema)), (int(job_id),),
            )
            locked = time.monotonic()
            wait_until(lambda: aborted, timeout=10, what="the handler was aborted")
            reason, at = aborted[0]
            assert reason == "lease-lost"
            assert at - locked < 0.8 + 0.5  # within the lease (plus slack), not at 30 s
            waiting = blocker.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND application_name = 'golemq-pg' AND datname = current_database()"
            ).fetchone()
            assert waiting is not None
            assert waiting[0] >= 1  # the renewal is still blocked
            blocker.rollback()
            worker.stop(timeout=2)
        finally:
            blocker.close()
    finally:
        store.close()


def test_a_stolen_lease_aborts_the_handler_and_fences_its_completion(
    pg_store: PostgresStore, pg_dsn: str
) -> None:
    effects_table(pg_dsn, pg_store.schema)
    queue = Queue(pg_store)
    rec = Recorder()
    # Polls rarely, so it does not claim the job back itself once it is reaped.
    slow = Worker(pg_store, worker_id="w-slow", poll_interval=30, notify=False,
                  lease_duration=0.6, lease_renew_interval=0.15, observers=[rec])
    started = threading.Event()
    finish = threading.Event()
    reasons: list[str | None] = []

    @slow.handler("stolen")
    def stolen(job: JobEvent[Any]) -> None:
        with pg_store.pool.connection() as conn:
            record_effect(conn, pg_store.schema, job.id, job.attempt, "w-slow")
        started.set()
        finish.wait(20)  # ignores its signal on purpose
        reasons.append(job.signal.reason)

    job_id = queue.add("stolen", {})
    assert job_id
    slow.start()
    try:
        assert started.wait(10)
        # Another worker's reaper takes the lease once it has expired (forced here).
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("UPDATE {}.jobs SET lease_expires_at = now() - interval '1 s'"
                                 " WHERE id = %s").format(sql.Identifier(pg_store.schema)),
                         (int(job_id),))
        fast = Worker(pg_store, worker_id="w-fast", poll_interval=0.05)

        @fast.handler("stolen")
        def again(job: JobEvent[Any]) -> None:
            with pg_store.pool.connection() as conn:
                record_effect(conn, pg_store.schema, job.id, job.attempt, "w-fast")

        fast.run_until_empty(timeout=10)
        rec.wait_for("lease-lost")
        finish.set()
        wait_until(lambda: reasons, timeout=10)
    finally:
        finish.set()
        slow.stop()
    assert reasons == ["lease-lost"]
    summary = queue.get(job_id)
    assert summary is not None
    assert summary.status is JobStatus.SUCCEEDED
    assert summary.attempts == 2
    assert [(r[1], r[2]) for r in effects(pg_dsn, pg_store.schema)] == [
        (1, "w-slow"), (2, "w-fast")]
    assert not [t for t in rec.transitions if t.outcome == "succeeded"]


def test_reaper_recovers_the_jobs_of_a_killed_worker(pg_store: PostgresStore,
                                                     pg_dsn: str) -> None:
    schema = pg_store.schema
    effects_table(pg_dsn, schema)
    queue = Queue(pg_store)
    ids = [queue.add("work", {"n": n}) for n in range(6)]
    victim = spawn_worker(pg_dsn, schema, "victim", sleep=60, lease_grace=1.0, concurrency=3)
    try:
        wait_until(lambda: len(effects(pg_dsn, schema)) >= 3, timeout=15)
        running = [r for r in job_rows(pg_dsn, schema) if r[1] == "running"]
        assert running
        assert all(r[3] == "victim" for r in running)
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
    finally:
        if victim.poll() is None:
            victim.kill()
    killed_at = time.monotonic()
    rec = Recorder()
    rescuer = Worker(pg_store, worker_id="rescuer", poll_interval=0.05, observers=[rec])

    @rescuer.handler("work", concurrency=3)
    def work(job: JobEvent[Any]) -> None:
        with pg_store.pool.connection() as conn:
            record_effect(conn, schema, job.id, job.attempt, "rescuer")

    rescuer.start()
    try:
        wait_until(lambda: all(queue.get(i).status is JobStatus.SUCCEEDED for i in ids),  # type: ignore[arg-type,union-attr]
                   timeout=20)
    finally:
        rescuer.stop()
    # Within the victim's lease (1 s) plus a reaper interval, with slack for a busy machine.
    assert time.monotonic() - killed_at < 8
    reclaimed = {t.job_id for t in rec.of("reclaimed")}
    victim_jobs = {row[0] for row in effects(pg_dsn, schema) if row[2] == "victim"}
    assert victim_jobs <= reclaimed
    for job_id in victim_jobs:
        summary = queue.get(job_id)
        assert summary is not None
        assert summary.attempts == 2  # the killed attempt counts
    rescued = [row for row in effects(pg_dsn, schema) if row[2] == "rescuer"]
    assert sorted(row[0] for row in rescued) == sorted(ids)  # type: ignore[type-var]


def test_a_workers_observers_see_its_reapers_reclaims_with_how_long_they_were_stuck(
    pg_store: PostgresStore,
) -> None:
    queue = Queue(pg_store)
    job_id = queue.add("lost.type", {})
    assert job_id
    # a worker that died holding the job (a lease written once, never renewed)
    pg_store.job_claim(ClaimRequest(owner="gone", types=[slots("lost.type", lease=0.5)]))
    seen = Recorder()
    reaper = Worker(pg_store, poll_interval=0.05, worker_id="reaper", observers=[seen])
    reaper.start()  # handles nothing: it only reaps
    try:
        (taken,) = seen.wait_for("reclaimed")
    finally:
        reaper.stop()
    assert (taken.job_id, taken.type, taken.attempts, taken.worker_id) == (
        job_id, "lost.type", 1, "reaper")
    assert taken.error == LEASE_EXPIRED_ERROR
    assert taken.stuck_for is not None
    assert 0.5 <= taken.stuck_for < 15
    assert taken.result is None


def test_the_reaper_never_exhausts_a_job_without_an_attempt_budget(
    pg_store: PostgresStore, pg_dsn: str
) -> None:
    # max_attempts NULL is an unlimited budget (UNLIMITED); the column is made nullable here
    # as the migration that brings UNLIMITED makes it
    queue = Queue(pg_store)
    job_id = queue.add("forever", {}, max_attempts=1)
    assert job_id
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        jobs = sql.Identifier(pg_store.schema, "jobs")
        conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN max_attempts DROP NOT NULL")
                     .format(jobs))
        conn.execute(sql.SQL("UPDATE {} SET max_attempts = NULL WHERE id = %s").format(jobs),
                     (int(job_id),))
    for attempt in (1, 2, 3):
        (held,) = pg_store.job_claim(
            ClaimRequest(owner="gone", types=[slots("forever", lease=SHORT_LEASE)]))
        assert held.attempt == attempt
        (taken,) = wait_until(pg_store.lease_recover_expired, timeout=10)
        assert (taken.id, taken.outcome, taken.attempts) == (job_id, "reclaimed", attempt)
    summary = queue.get(job_id)
    assert summary is not None
    assert (summary.status, summary.attempts) == (JobStatus.PENDING, 3)
    assert summary.last_error == LEASE_EXPIRED_ERROR
