"""Pause / resume of a type end to end: worker processes, the wake-up on resume, the
transactional claim, and ``run_until_empty`` (paused types are not due; ``with_scheduled``)."""

from __future__ import annotations

import threading
import time
from collections import Counter
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
    RetryableJobError,
    Worker,
)
from golemq_pg.store.port import ClaimRequest, FindParams
from tests.support.ledgers import effects, effects_table, job_rows
from tests.support.store_port import add, slots
from tests.support.waiting import wait_until
from tests.support.workers import kill_leftovers, spawn, stop_gracefully, worker_config


def _effects_of(dsn: str, schema: str, job_ids: set[str]) -> list[Any]:
    """(job_id, at) of the ledger rows of the given jobs, oldest first."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            sql.SQL("SELECT job_id, at FROM {}.effects ORDER BY at").format(
                sql.Identifier(schema))
        ).fetchall()
    return [row for row in rows if row[0] in job_ids]


def _spawn_two(dsn: str, schema: str, poll: float) -> list[Any]:
    procs = []
    for n in range(2):
        procs.append(spawn(worker_config(
            dsn, schema, f"proc-{n}", mode="run", logs="stderr", store={"max_size": 8},
            worker={"poll_interval": poll, "lease_grace": 30},
            handlers=[{"type": t, "options": {"concurrency": 4}, "ledger": "effects"}
                      for t in ("held", "other")],
        )))
    return procs


def test_pause_holds_in_two_worker_processes_and_resume_wakes_them_within_a_second(
    pg_store: PostgresStore, pg_dsn: str
) -> None:
    schema = pg_store.schema
    effects_table(pg_dsn, schema)
    queue = Queue(pg_store)
    queue.pause("held", reason="provider outage")
    procs = _spawn_two(pg_dsn, schema, poll=5.0)
    try:
        assert queue.add_many("held", [{"n": n} for n in range(1000)]) == 1000
        assert queue.add_many("other", [{"n": n} for n in range(1000)]) == 1000
        # Enqueue keeps working while paused; the other type drains meanwhile.
        wait_until(lambda: pg_store.job_stats_by_type().get("other", {}).get("succeeded")
                   == 1000, timeout=120, what="the other type drained")
        time.sleep(1.0)  # both workers idle now, their next poll up to 5 s away
        ledger = effects(pg_dsn, schema)
        assert len(ledger) == 1000
        held_ids = {s.id for s in pg_store.job_find(FindParams(types=["held"], limit=None))}
        assert len(held_ids) == 1000
        assert not held_ids & {row[0] for row in ledger}  # none of the paused jobs started
        assert pg_store.job_stats_by_type()["held"]["pending"] == 1000

        resumed_at = pg_store.now()
        assert queue.resume("held") is True
        first = wait_until(lambda: _effects_of(pg_dsn, schema, held_ids), timeout=30,
                           what="a held job started after resume")
        latency = (first[0][1] - resumed_at).total_seconds()
        print(f"first held job started {latency * 1000:.0f} ms after resume")
        assert latency < 1.0  # the notification, not the 5 s poll
        wait_until(lambda: pg_store.job_stats_by_type()["held"]["succeeded"] == 1000,
                   timeout=120, what="the held type drained")
    finally:
        try:
            stop_gracefully(procs)
        finally:
            kill_leftovers(procs)
    per_job = Counter(row[0] for row in effects(pg_dsn, schema))
    assert len(per_job) == 2000
    assert set(per_job.values()) == {1}
    assert Counter(r[1] for r in job_rows(pg_dsn, schema)) == {"succeeded": 2000}


def test_a_paused_transactional_type_claims_nothing_until_resumed(
    pg_store: PostgresStore,
) -> None:
    queue = Queue(pg_store)
    worker = Worker(pg_store, poll_interval=5)
    ran: list[str] = []
    started = threading.Event()

    @worker.handler("tx", transactional=True)
    def tx(job: JobEvent[Any]) -> None:
        ran.append(job.id)
        started.set()

    queue.pause("tx")
    job_id = queue.add("tx", {})
    worker.start()
    try:
        time.sleep(1.0)
        assert ran == []
        assert pg_store.job_get(job_id).status is JobStatus.PENDING  # type: ignore[union-attr]
        began = time.monotonic()
        queue.resume("tx")
        assert started.wait(10)
        assert time.monotonic() - began < 2.5  # woken by the resume, not the 5 s poll
    finally:
        worker.stop()
    assert ran == [job_id]


@pytest.mark.parametrize(("kind", "guards"), [
    ("memory", {}), ("memory", {"serialize_by_scope": True}), ("memory", {"grouped": True}),
    ("postgres", {}), ("postgres", {"serialize_by_scope": True}), ("postgres", {"grouped": True}),
    ("postgres", {"transactional": True}),
])
def test_run_until_empty_returns_leaving_a_paused_types_jobs_pending(
    pg_store: PostgresStore, kind: str, guards: dict[str, Any]
) -> None:
    store: Any = pg_store if kind == "postgres" else InMemoryStore()
    queue = Queue(store)
    worker = Worker(store, poll_interval=0.05)
    ran: list[str] = []

    @worker.handler("held", **guards)
    def held(job: Any) -> None:
        ran.append("held")

    @worker.handler("free")
    def free(job: JobEvent[Any]) -> None:
        ran.append(job.type)

    queue.pause("held")
    held_ids = [queue.add("held", {"n": n}, scope=("s", str(n))) for n in range(3)]
    queue.add("free", {})
    began = time.monotonic()
    worker.run_until_empty(timeout=60)
    assert time.monotonic() - began < 30  # returned on its own, not at the timeout
    assert ran == ["free"]
    assert all(store.job_get(i).status is JobStatus.PENDING for i in held_ids)


@pytest.mark.parametrize("kind", ["memory", "postgres"])
def test_run_until_empty_with_scheduled_runs_delayed_and_backoff_jobs(
    pg_store: PostgresStore, kind: str
) -> None:
    store: Any = pg_store if kind == "postgres" else InMemoryStore()
    queue = Queue(store)
    # A long backoff: only with_scheduled can bring the retried attempts forward.
    worker = Worker(store, poll_interval=0.05, base_backoff=3600, max_backoff=3600)
    runs: list[tuple[str, int]] = []

    @worker.handler("later")
    def later(job: JobEvent[Any]) -> None:
        runs.append((job.id, job.attempt))
        if job.payload.get("fail_until", 0) >= job.attempt:
            raise RetryableJobError("not yet")

    delayed = queue.add("later", {}, delay=3600)
    flaky = queue.add("later", {"fail_until": 2}, max_attempts=5)
    queue.pause("parked")
    parked = queue.add("parked", {}, delay=3600)  # a paused type stays parked

    @worker.handler("parked")
    def parked_handler(job: JobEvent[Any]) -> None:
        runs.append((job.id, job.attempt))

    worker.run_until_empty(timeout=60, with_scheduled=True)
    assert sorted(runs) == sorted([(delayed, 1), (flaky, 1), (flaky, 2), (flaky, 3)])
    assert store.job_get(delayed).status is JobStatus.SUCCEEDED
    assert store.job_get(flaky).status is JobStatus.SUCCEEDED
    assert store.job_get(parked).status is JobStatus.PENDING
    # Without it, a parked job is left alone.
    again = queue.add("later", {}, delay=3600)
    worker.run_until_empty(timeout=60)
    assert store.job_get(again).status is JobStatus.PENDING


def test_run_until_empty_with_scheduled_runs_a_transactional_types_parked_jobs(
    pg_store: PostgresStore,
) -> None:
    queue = Queue(pg_store)
    worker = Worker(pg_store, poll_interval=0.05)
    ran: list[str] = []

    @worker.handler("tx.later", transactional=True)
    def later(job: JobEvent[Any]) -> None:
        ran.append(job.id)

    job_ids = [queue.add("tx.later", {"n": n}, delay=3600) for n in range(3)]
    worker.run_until_empty(timeout=60, with_scheduled=True)
    assert sorted(ran) == sorted(job_ids)
    assert all(pg_store.job_get(i).status is JobStatus.SUCCEEDED for i in job_ids)  # type: ignore[union-attr]


@pytest.mark.parametrize("guards", [{}, {"serialize_by_scope": True},
                                    {"not_while_running": ("other",)}],
                         ids=["fast", "serialize_by_scope", "not_while_running"])
def test_a_paused_type_gets_no_transactional_claim(
    pg_store: PostgresStore, guards: dict[str, Any]
) -> None:
    """Transactional claims are PostgreSQL's only (InMemoryStore refuses them)."""
    store = pg_store
    job_id = add(store, "a", scope=("s", "1"))
    request = ClaimRequest("w1", [slots("a", limit=1, **guards)])
    store.type_pause("a", None)
    with store.job_claim_transactional(request) as got:
        assert got is None
    store.type_resume("a")
    with store.job_claim_transactional(request) as got:
        assert got is not None
        assert got[0].id == job_id
