"""Enqueue on real PostgreSQL: dedupe races, replace, caller transactions, COPY."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import orjson
import psycopg
from psycopg import sql

from golemq_pg._types import JobStatus, Scope
from golemq_pg.store.port import (
    ClaimRequest,
    EnqueueManyParams,
    EnqueueParams,
    EnqueueResult,
    FindParams,
    LeaseRef,
    TypeSlots,
)
from golemq_pg.store.postgres import PostgresStore

T = TypeVar("T")


def _params(job_type: str = "a", payload: Any = None, **kwargs: Any) -> EnqueueParams:
    return EnqueueParams(type=job_type, payload=orjson.dumps(payload or {}), **kwargs)


def _race(n: int, fn: Callable[[int], T]) -> list[T]:
    """Run fn(i) in n threads released together by a barrier."""
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait(timeout=10)
            results[i] = fn(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    return results


def _rows(pg_dsn: str, schema: str, where: str = "true") -> list[tuple[Any, ...]]:
    with psycopg.connect(pg_dsn) as conn:
        query = sql.SQL(
            "SELECT id, status, payload, dedupe_key FROM {}.jobs_all WHERE " + where
            + " ORDER BY id"
        ).format(sql.Identifier(schema))
        return conn.execute(query).fetchall()


def test_racing_rejects_on_one_key_insert_exactly_one(
    pg_store: PostgresStore, pg_dsn: str, schema: str
) -> None:
    def add_held_open(i: int) -> EnqueueResult:
        # Each racer inserts inside its own open transaction that commits a bit later, so the
        # unique-index arbitration between uncommitted inserts is exercised.
        with psycopg.connect(pg_dsn) as conn:
            result = pg_store.job_enqueue(
                _params(payload={"i": i}, dedupe_key="k"), connection=conn
            )
            conn.commit()
            return result

    results = _race(6, add_held_open)
    inserted = [r for r in results if r.inserted]
    assert len(inserted) == 1
    assert all(r.id is None for r in results if not r.inserted)
    assert len(_rows(pg_dsn, schema, "dedupe_key = 'k'")) == 1


def test_racing_replaces_on_one_key_leave_one_pending_job(
    pg_store: PostgresStore, pg_dsn: str, schema: str
) -> None:
    results = _race(
        6, lambda i: pg_store.job_enqueue(
            _params(payload={"i": i}, dedupe_key="k", on_duplicate="replace")
        )
    )
    assert sum(r.inserted for r in results) == 1
    assert len({r.id for r in results}) == 1  # the replacers got the one pending job's id
    assert sum(r.replaced for r in results) == 5
    assert len(_rows(pg_dsn, schema, "dedupe_key = 'k'")) == 1


def test_reject_while_pending_and_while_running_then_free_again(pg_store: PostgresStore) -> None:
    first = pg_store.job_enqueue(_params(dedupe_key="k"))
    assert first.inserted
    assert pg_store.job_enqueue(_params(dedupe_key="k")) == EnqueueResult(None, False)
    (job,) = pg_store.job_claim(ClaimRequest("w", [TypeSlots("a", 5, 30)]))
    assert pg_store.job_enqueue(_params(dedupe_key="k")) == EnqueueResult(None, False)
    # Other types and other keys are independent.
    assert pg_store.job_enqueue(_params("b", dedupe_key="k")).inserted
    assert pg_store.job_enqueue(_params(dedupe_key="k2")).inserted
    assert pg_store.job_complete_many("w", [LeaseRef(job.id, job.lease_token)]) == {job.id}
    assert pg_store.job_enqueue(_params(dedupe_key="k")).inserted


def test_replace_while_pending_keeps_id_and_place_in_line(
    pg_store: PostgresStore, pg_dsn: str, schema: str
) -> None:
    first = pg_store.job_enqueue(_params(payload={"v": 1}, dedupe_key="k", delay=0))
    other = pg_store.job_enqueue(_params(payload={"v": "other"}))
    before = pg_store.job_get(first.id or "")
    replaced = pg_store.job_enqueue(
        _params(payload={"v": 2}, dedupe_key="k", on_duplicate="replace",
                scope=Scope("S", "1"), priority=0, delay=60)
    )
    assert replaced == EnqueueResult(first.id, inserted=False, replaced=True)
    after = pg_store.job_get(first.id or "")
    assert before is not None
    assert after is not None
    assert (after.run_at, after.created_at) == (before.run_at, before.created_at)
    assert after.scope == Scope("S", "1")
    claimed = pg_store.job_claim(ClaimRequest("w", [TypeSlots("a", 5, 30)]))
    assert [(j.id, j.payload) for j in claimed] == [(first.id, {"v": 2}),
                                                    (other.id, {"v": "other"})]


def test_replace_while_running_enqueues_a_new_pending_job(pg_store: PostgresStore) -> None:
    first = pg_store.job_enqueue(_params(payload={"v": 1}, dedupe_key="k"))
    (running,) = pg_store.job_claim(ClaimRequest("w", [TypeSlots("a", 5, 30)]))
    second = pg_store.job_enqueue(
        _params(payload={"v": 2}, dedupe_key="k", on_duplicate="replace")
    )
    assert second.inserted
    assert not second.replaced
    assert second.id != first.id
    # The pending one does not run beside the running holder of its key.
    assert pg_store.job_claim(ClaimRequest("w", [TypeSlots("a", 5, 30)])) == []
    third = pg_store.job_enqueue(
        _params(payload={"v": 3}, dedupe_key="k", on_duplicate="replace")
    )
    assert third == EnqueueResult(second.id, inserted=False, replaced=True)
    pg_store.job_complete_many("w", [LeaseRef(running.id, running.lease_token)])
    (nxt,) = pg_store.job_claim(ClaimRequest("w", [TypeSlots("a", 5, 30)]))
    assert (nxt.id, nxt.payload) == (second.id, {"v": 3})


def test_rolled_back_caller_transaction_leaves_no_job(
    pg_store: PostgresStore, pg_dsn: str, schema: str
) -> None:
    with psycopg.connect(pg_dsn) as conn:
        conn.execute("SELECT 1")  # the caller's transaction is already open
        result = pg_store.job_enqueue(_params(), connection=conn)
        assert result.inserted
        many = pg_store.job_enqueue_many(
            EnqueueManyParams(type="a", payloads=[b"{}"] * 10), connection=conn
        )
        assert many == 10
        # Not visible outside the caller's transaction: the store did not commit it.
        assert pg_store.job_stats()["pending"] == 0
        conn.rollback()
    assert _rows(pg_dsn, schema) == []


def test_committed_caller_transaction_keeps_the_job(
    pg_store: PostgresStore, pg_dsn: str, schema: str
) -> None:
    with psycopg.connect(pg_dsn) as conn:
        result = pg_store.job_enqueue(_params(), connection=conn)
        bound = pg_store.with_connection(conn)
        assert bound.job_get(result.id or "") is not None  # visible inside
        assert pg_store.job_get(result.id or "") is None  # not yet outside
        conn.commit()
    assert pg_store.job_get(result.id or "") is not None


def test_delay_and_run_at_use_the_database_clock(pg_store: PostgresStore) -> None:
    now = pg_store.now()
    later = pg_store.job_enqueue(_params(delay=3600))
    at = pg_store.job_enqueue(_params(run_at=datetime(2000, 1, 1, tzinfo=UTC)))
    summary = pg_store.job_get(later.id or "")
    assert summary is not None
    assert timedelta(minutes=59) < summary.run_at - now < timedelta(minutes=61)
    assert pg_store.job_stats() == {
        "pending": 1, "scheduled": 1, "running": 0, "succeeded": 0, "failed": 0, "waiting": 0,
    }
    (due,) = pg_store.job_claim(ClaimRequest("w", [TypeSlots("a", 5, 30)]))
    assert due.id == at.id


def test_add_many_copies_100k_rows(pg_store: PostgresStore, pg_dsn: str, schema: str) -> None:
    payloads = [orjson.dumps({"n": i, "s": "tab\there \\ back"}) for i in range(100_000)]
    count = pg_store.job_enqueue_many(
        EnqueueManyParams(type="bulk", payloads=payloads, scope=Scope("S", "x"), priority=3,
                          max_attempts=7)
    )
    assert count == 100_000
    with psycopg.connect(pg_dsn) as conn:
        row = conn.execute(
            sql.SQL(
                "SELECT count(*), count(DISTINCT payload->>'n'), min(priority), max(max_attempts),"
                " bool_and(payload->>'s' = E'tab\\there \\\\ back'),"
                " bool_and(scope_type = 'S' AND scope_id = 'x' AND status = 'pending')"
                " FROM {}.jobs"
            ).format(sql.Identifier(schema))
        ).fetchone()
    assert row == (100_000, 100_000, 3, 7, True, True)


def test_add_many_with_hostile_names_and_delay(pg_store: PostgresStore) -> None:
    hostile = "t\t\n\\N';--\r"
    assert pg_store.job_enqueue_many(
        EnqueueManyParams(type=hostile, payloads=[b'{"a": "\\n"}', b"{}"],
                          scope=Scope("\\N", "x\ty"), delay=3600)
    ) == 2
    found = pg_store.job_find(FindParams(types=[hostile]))
    assert len(found) == 2
    assert {j.scope for j in found} == {Scope("\\N", "x\ty")}
    assert all(j.status is JobStatus.PENDING for j in found)
    assert pg_store.job_stats()["scheduled"] == 2


def test_add_many_sends_one_notification(pg_store: PostgresStore) -> None:
    listener = pg_store.open_listener()
    assert listener is not None
    try:
        pg_store.job_enqueue_many(EnqueueManyParams(type="bulk", payloads=[b"{}"] * 5000))
        pg_store.job_enqueue_many(EnqueueManyParams(type="later", payloads=[b"{}"] * 10,
                                                    delay=60))
        got = listener.wait(2.0)
        got += listener.wait(0.3)
        assert [(n.kind, n.items) for n in got] == [("jobs", ("bulk",))]
    finally:
        listener.close()
