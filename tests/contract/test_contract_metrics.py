"""The metrics verb (metrics_type_gauges, read by QueueCollector at scrape time) on both stores.

Its cost on PostgreSQL (index descents, never the kept history) is shown by
tests/integration/test_metrics_collector.py; here: what it returns.
"""

from __future__ import annotations

from datetime import timedelta

from golemq_pg.store.port import FailItem, JobStore, TypeGauges, WorkerBeat
from tests.support.store_port import add, claim, refs, slots
from tests.support.waiting import wait_until


def gauges(store: JobStore, cap: int = 1000) -> dict[str, TypeGauges]:
    """The verb's rows by type (and a check that they come sorted by type)."""
    found = store.metrics_type_gauges(cap)
    assert [g.type for g in found] == sorted(g.type for g in found)
    return {g.type: g for g in found}


def test_an_empty_queue_has_no_types(store: JobStore) -> None:
    assert store.metrics_type_gauges(1000) == []


def test_counts_each_status_per_type_and_the_oldest_due_age(store: JobStore) -> None:
    now = store.now()
    add(store, "a", run_at=now - timedelta(seconds=120))  # due two minutes ago: the oldest
    add(store, "a", run_at=now - timedelta(seconds=30), priority=5)  # another priority
    add(store, "a")
    add(store, "a", delay=3600)  # scheduled
    add(store, "a", delay=7200, priority=-3)  # scheduled, another priority
    for _ in range(3):
        add(store, "b")
    running, failed, succeeded = claim(store, slots("b", limit=3))
    store.job_fail_many("w1", [FailItem(failed.id, failed.lease_token, "Boom: no")])
    store.job_complete_many("w1", refs([succeeded]))
    found = gauges(store)
    assert set(found) == {"a", "b"}
    a, b = found["a"], found["b"]
    assert (a.pending, a.scheduled, a.running, a.failed) == (3, 2, 0, 0)
    assert a.oldest_due_age is not None
    assert 119.0 <= a.oldest_due_age < 180.0
    assert not a.paused
    # succeeded rows are history: no gauge counts them
    assert (b.pending, b.scheduled, b.running, b.failed) == (0, 0, 1, 1)
    assert b.oldest_due_age is None
    assert running.type == "b"


def test_backlog_counts_stop_at_the_cap_and_dead_letters_are_exact(store: JobStore) -> None:
    for priority in (0, 1, 2):  # the cap holds for the type, across its priorities
        for _ in range(3):
            add(store, "a", priority=priority)
    for _ in range(4):
        add(store, "a", delay=3600)
    for job in claim(store, slots("a", limit=4)):
        store.job_fail_many("w1", [FailItem(job.id, job.lease_token, "E")])
    a = gauges(store, cap=3)["a"]
    # dead letters are counted exactly (kept by the million; maintained counts on PostgreSQL)
    assert (a.pending, a.scheduled, a.running, a.failed) == (3, 3, 0, 4)
    a = gauges(store, cap=100)["a"]
    assert (a.pending, a.scheduled, a.running, a.failed) == (5, 4, 0, 4)


def test_paused_and_served_types_are_listed_without_rows(store: JobStore) -> None:
    store.type_pause("idle.paused", "maintenance")
    store.worker_heartbeat(WorkerBeat(
        worker_id="w1", host="h", pid=1, handlers={"idle.served": 2}, heartbeat_seconds=30.0,
    ))
    add(store, "busy")
    store.type_pause("busy", None)
    found = gauges(store)
    assert set(found) == {"busy", "idle.paused", "idle.served"}
    assert found["idle.paused"] == TypeGauges("idle.paused", 0, 0, 0, 0, None, paused=True)
    assert found["idle.served"] == TypeGauges("idle.served", 0, 0, 0, 0, None, paused=False)
    assert found["busy"].paused
    assert found["busy"].pending == 1
    store.type_resume("busy")
    assert not gauges(store)["busy"].paused


def test_a_lost_workers_types_are_not_listed(store: JobStore) -> None:
    store.worker_heartbeat(WorkerBeat(
        worker_id="w1", host="h", pid=1, handlers={"gone": 1}, heartbeat_seconds=0.05,
    ))
    # lost after three missed beats (LOST_AFTER_BEATS x 0.05 s)
    wait_until(lambda: not gauges(store), 10, what="the lost worker's type to disappear")
