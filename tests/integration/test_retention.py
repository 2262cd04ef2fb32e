"""Retention: the worker's background sweep prunes only old finished rows of the chosen
statuses, in bounded batches that never wait on a locked row, while it keeps processing
other jobs; and ``Queue.prune`` / the store's prune by age and cut-off.

The store's ``job_prune`` calls are counted with a thin subclass of the real PostgresStore.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from golemq_pg import JobEvent, JobStatus, PostgresStore, Queue, Retention, Worker
from golemq_pg.store.port import ClaimRequest, EnqueueManyParams, FailItem, LeaseRef, TypeSlots
from golemq_pg.worker import maintenance
from tests.support.store_port import claim, slots
from tests.support.waiting import wait_until

BATCH = 7


class PruneCountingStore(PostgresStore):
    """The real PostgresStore, recording every ``job_prune`` call and what it deleted."""

    _record_lock = threading.Lock()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.prunes: list[tuple[tuple[str, ...], int | None, int]] = []

    def job_prune(
        self,
        statuses: Any,
        *,
        before: datetime | None,
        age: float | None,
        limit: int | None = None,
    ) -> int:
        deleted = super().job_prune(statuses, before=before, age=age, limit=limit)
        with self._record_lock:
            self.prunes.append((tuple(str(s) for s in statuses), limit, deleted))
        return deleted


@pytest.fixture
def counting_store(pg_dsn: str, schema: str) -> Iterator[PruneCountingStore]:
    made = PruneCountingStore.connect(pg_dsn, schema=schema, max_size=8)
    assert isinstance(made, PruneCountingStore)
    made.migrate()
    yield made
    made.close()


def _backdate(dsn: str, schema: str, ids: list[str]) -> None:
    """Make rows look finished two hours ago (whatever their status): live rows in `jobs`,
    finished ones in the history (where the update may move them to an older day's
    partition, its counts following)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in ("jobs", "jobs_history"):
            conn.execute(
                sql.SQL("UPDATE {}.{} SET finished_at = now() - interval '2 hours', "
                        "created_at = now() - interval '3 hours' WHERE id = ANY(%s::bigint[])")
                .format(sql.Identifier(schema), sql.Identifier(table)),
                ([int(i) for i in ids],),
            )


def _history(store: PostgresStore, queue: Queue, dsn: str) -> dict[str, list[str]]:
    """Old and recent succeeded / failed rows, plus live rows with an old finished_at."""
    made: dict[str, list[str]] = {}
    for label, count, fail in [("old_ok", 25, False), ("old_failed", 10, True),
                               ("new_ok", 5, False), ("new_failed", 4, True)]:
        job_type = "hist-" + label
        queue.add_many(job_type, [{"n": n} for n in range(count)])
        claimed = claim(store, slots(job_type, limit=count, lease=3600), owner="setup")
        refs = [LeaseRef(job.id, job.lease_token) for job in claimed]
        if fail:
            store.job_fail_many("setup", [FailItem(r.id, r.token, "E: x") for r in refs])
        else:
            store.job_complete_many("setup", refs)
        made[label] = [r.id for r in refs]
    queue.add_many("idle-pending", [{"n": n} for n in range(4)])
    made["pending"] = [j.id for j in queue.find(types=["idle-pending"])]
    queue.add_many("idle-running", [{"n": n} for n in range(2)])
    running = claim(store, slots("idle-running", limit=2, lease=3600), owner="setup")
    made["running"] = [job.id for job in running]
    _backdate(dsn, store.schema, made["old_ok"] + made["old_failed"] + made["pending"]
              + made["running"])
    return made


def _existing(queue: Queue, ids: list[str]) -> list[str]:
    return [i for i in ids if queue.get(i) is not None]


def test_retention_sweeps_delete_only_what_they_should_in_batches(
    counting_store: PruneCountingStore, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = counting_store
    monkeypatch.setattr(maintenance, "PRUNE_LIMIT", BATCH)
    queue = Queue(store)
    made = _history(store, queue, pg_dsn)
    busy_done: list[str] = []

    def busy(job: JobEvent[Any]) -> None:
        job.signal.wait(0.005)
        busy_done.append(job.id)

    # One old succeeded row stays locked by another transaction for a while: the sweep
    # must skip it instead of waiting, and get it on a later sweep.
    locked_id = made["old_ok"][0]
    holder = psycopg.connect(pg_dsn)
    holder.execute(sql.SQL("SELECT 1 FROM {}.jobs_history WHERE id = %s FOR UPDATE")
                   .format(sql.Identifier(store.schema)), (int(locked_id),))

    worker = Worker(store, poll_interval=0.05, retention=Retention(
        older_than=3600, sweep_interval=0.1, statuses=(JobStatus.SUCCEEDED,)))
    worker.handler("busy", concurrency=2)(busy)
    queue.add_many("busy", [{"n": n} for n in range(40)])
    worker.start()
    try:
        wait_until(lambda: _existing(queue, made["old_ok"]) == [locked_id], timeout=20)
        for n in range(40, 60):  # the worker keeps processing while it sweeps
            queue.add("busy", {"n": n})
        sweeps_before_unlock = len(store.prunes)
        holder.rollback()
        wait_until(lambda: not _existing(queue, made["old_ok"]), timeout=20)
        wait_until(lambda: len(busy_done) == 60, timeout=30)
    finally:
        holder.close()
        worker.stop()
    assert sweeps_before_unlock >= 4
    deleted = [count for _, _, count in store.prunes]
    assert sum(deleted) == 25
    assert {limit for _, limit, _ in store.prunes} == {BATCH}
    assert max(deleted) <= BATCH
    assert len([count for count in deleted if count]) >= 5  # 25 rows: several batches
    assert {statuses for statuses, _, _ in store.prunes} == {("succeeded",)}
    # Kept: old failed (not in statuses), recent rows, live rows, the busy jobs just done.
    for label in ("old_failed", "new_ok", "new_failed", "pending", "running"):
        assert _existing(queue, made[label]) == made[label], label
    assert queue.count_by_status()[JobStatus.SUCCEEDED] == 5 + 60

    # A second worker with the default statuses takes the old dead letters too.
    store.prunes.clear()
    worker = Worker(store, poll_interval=0.05,
                    retention=Retention(older_than=3600, sweep_interval=0.1))
    worker.handler("busy")(busy)
    worker.start()
    try:
        wait_until(lambda: not _existing(queue, made["old_failed"]), timeout=20)
    finally:
        worker.stop()
    assert sum(count for _, _, count in store.prunes) == 10
    assert max(count for _, _, count in store.prunes) <= BATCH
    for label in ("new_ok", "new_failed", "pending", "running"):
        assert _existing(queue, made[label]) == made[label], label


def test_retention_prunes_old_finished_rows(store: Any) -> None:
    queue = Queue(store)
    ids = [queue.add("short-lived", {"n": n}) for n in range(5)]
    first = Worker(store, poll_interval=0.05)
    first.handler("short-lived")(lambda job: None)
    first.run_until_empty(timeout=20)
    assert all(queue.get(i) is not None for i in ids)  # type: ignore[arg-type]
    time.sleep(0.3)
    keeper = queue.add("pending-one", {})
    worker = Worker(store, poll_interval=0.05,
                    retention=Retention(older_than=0.2, sweep_interval=0.05))
    worker.start()
    try:
        wait_until(lambda: all(queue.get(i) is None for i in ids), timeout=10)  # type: ignore[arg-type]
    finally:
        worker.stop()
    assert keeper is not None
    assert queue.get(keeper) is not None  # live work is never pruned


def test_prune_by_age_and_cutoff(store: Any) -> None:
    queue = Queue(store)
    queue.add_many("t", [{} for _ in range(5)])
    claimed = claim(store, "t")
    store.job_complete_many("w1", [LeaseRef(j.id, j.lease_token) for j in claimed[:3]])
    assert queue.prune(older_than=3600) == 0
    assert queue.prune(older_than=datetime.now(UTC) + timedelta(minutes=1)) == 3
    assert queue.count_by_status()[JobStatus.RUNNING] == 2
    with pytest.raises(ValueError, match="finished"):
        queue.prune(older_than=0, statuses=[JobStatus.PENDING])
    with pytest.raises(ValueError, match="older_than"):
        queue.prune(older_than=-5)


def test_prune_by_age_and_cut_off_in_bounded_batches(pg_store: PostgresStore) -> None:
    pg_store.job_enqueue_many(EnqueueManyParams(type="a", payloads=[b"{}"] * 10))
    jobs = pg_store.job_claim(ClaimRequest("w", [TypeSlots("a", 10, 30)]))
    pg_store.job_complete_many("w", [LeaseRef(j.id, j.lease_token) for j in jobs[:6]])
    pg_store.job_fail_many("w", [FailItem(j.id, j.lease_token, "E") for j in jobs[6:8]])
    statuses = (JobStatus.SUCCEEDED, JobStatus.FAILED)
    assert pg_store.job_prune(statuses, before=None, age=3600) == 0
    later = pg_store.now() + timedelta(seconds=1)
    assert pg_store.job_prune(statuses, before=later, age=None, limit=3) == 3
    assert pg_store.job_prune((JobStatus.FAILED,), before=later, age=None) == 2
    assert pg_store.job_prune(statuses, before=later, age=None) == 3
    assert pg_store.job_count_by_status() == {
        JobStatus.PENDING: 0, JobStatus.RUNNING: 2, JobStatus.SUCCEEDED: 0, JobStatus.FAILED: 0,
        JobStatus.WAITING: 0,
    }
    with pytest.raises(ValueError, match="before or age"):
        pg_store.job_prune(statuses, before=None, age=None)
