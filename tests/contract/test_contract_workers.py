"""The worker registry verbs (worker_heartbeat, worker_remove, worker_list) on both stores.

"Lost" uses short real heartbeat intervals here (both stores read their own clock); the
exact boundaries and the hour-long sweep on the in-memory store use its FakeClock (the
PostgreSQL sweep, with a row aged by hand: tests/integration/test_worker_registry.py).
"""

from __future__ import annotations

import time
from datetime import timedelta

from golemq_pg.store.port import LOST_SWEEP_SECONDS, JobStore, WorkerBeat
from golemq_pg.testing import memory_store
from tests.support.waiting import wait_until


def beat(worker_id: str, **fields: object) -> WorkerBeat:
    """A heartbeat of ``worker_id`` with the given fields over plain defaults."""
    values: dict[str, object] = {
        "host": "h1", "pid": 4242, "handlers": {"email.send": 4, "report": 1},
        "heartbeat_seconds": 30.0, "running": 0, "state": "running",
    }
    values.update(fields)
    return WorkerBeat(worker_id=worker_id, **values)  # type: ignore[arg-type]


def test_a_first_heartbeat_registers_the_worker(store: JobStore) -> None:
    before = store.now()
    assert store.worker_heartbeat(beat("w1", running=3)) == 0
    [found] = store.worker_list()
    assert found.worker_id == "w1"
    assert (found.host, found.pid) == ("h1", 4242)
    assert found.handlers == {"email.send": 4, "report": 1}
    assert found.running == 3
    assert found.state == "running"
    assert found.started_at >= before - timedelta(seconds=1)
    assert found.last_seen_at >= found.started_at


def test_a_heartbeat_refreshes_last_seen_running_and_state(store: JobStore) -> None:
    store.worker_heartbeat(beat("w1"))
    [first] = store.worker_list()
    time.sleep(0.02)
    store.worker_heartbeat(beat("w1", running=7, state="stopping"))
    [second] = store.worker_list()
    assert second.started_at == first.started_at
    assert second.last_seen_at > first.last_seen_at
    assert (second.running, second.state) == (7, "stopping")


def test_workers_are_listed_by_id_and_removed_one_by_one(store: JobStore) -> None:
    for worker_id in ("w3", "w1", "w2"):
        store.worker_heartbeat(beat(worker_id))
    assert [w.worker_id for w in store.worker_list()] == ["w1", "w2", "w3"]
    assert store.worker_remove("w2") is True
    assert store.worker_remove("w2") is False
    assert [w.worker_id for w in store.worker_list()] == ["w1", "w3"]


def test_a_worker_without_a_heartbeat_for_three_intervals_reads_as_lost(
    store: JobStore,
) -> None:
    store.worker_heartbeat(beat("quiet", heartbeat_seconds=0.05, state="stopping"))
    store.worker_heartbeat(beat("steady", heartbeat_seconds=60.0))
    wait_until(lambda: {w.worker_id: w.state for w in store.worker_list()}
               == {"quiet": "lost", "steady": "running"}, timeout=10, what="quiet is lost")
    # A lost worker that beats again is back (the row was kept).
    store.worker_heartbeat(beat("quiet", heartbeat_seconds=60.0))
    assert {w.worker_id: w.state for w in store.worker_list()}["quiet"] == "running"


def test_a_lost_row_is_kept_for_an_hour(store: JobStore) -> None:
    store.worker_heartbeat(beat("quiet", heartbeat_seconds=0.01))
    time.sleep(0.1)
    assert store.worker_heartbeat(beat("other")) == 0
    assert {w.worker_id: w.state for w in store.worker_list()} == {
        "quiet": "lost", "other": "running"}


def test_any_heartbeat_sweeps_rows_lost_for_over_an_hour_in_memory() -> None:
    store, clock = memory_store()
    store.worker_heartbeat(beat("gone", heartbeat_seconds=2.0))
    clock.advance(LOST_SWEEP_SECONDS - 10)
    store.worker_heartbeat(beat("alive"))
    assert store.worker_heartbeat(beat("alive")) == 0  # lost, not yet for an hour
    assert {w.worker_id: w.state for w in store.worker_list()} == {
        "gone": "lost", "alive": "running"}
    clock.advance(11)
    assert store.worker_heartbeat(beat("alive")) == 1
    assert [w.worker_id for w in store.worker_list()] == ["alive"]


def test_lost_is_exactly_three_heartbeat_intervals_in_memory() -> None:
    store, clock = memory_store()
    store.worker_heartbeat(beat("w", heartbeat_seconds=2.0))
    clock.advance(6.0)
    assert store.worker_list()[0].state == "running"
    clock.advance(0.001)
    assert store.worker_list()[0].state == "lost"
