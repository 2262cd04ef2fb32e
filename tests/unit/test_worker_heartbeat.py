"""The registry heartbeat's interval, and what one heartbeat writes (in-memory store)."""

from __future__ import annotations

import os
import socket

from golemq_pg import InMemoryStore, Worker
from golemq_pg.worker.maintenance import (
    HEARTBEAT_MAX,
    HEARTBEAT_MIN,
    Maintenance,
    heartbeat_interval,
)
from tests.support.worker_runtime import bare_runtime


def test_the_default_heartbeat_makes_a_dead_worker_lost_within_six_seconds() -> None:
    assert heartbeat_interval(Worker(InMemoryStore()).config) == 2.0


def test_the_heartbeat_follows_the_poll_interval_within_bounds() -> None:
    def interval(poll: float) -> float:
        return heartbeat_interval(Worker(InMemoryStore(), poll_interval=poll).config)

    assert interval(0.01) == HEARTBEAT_MIN == 1.0
    assert interval(1.0) == 4.0
    assert interval(60) == HEARTBEAT_MAX == 10.0


def test_one_heartbeat_writes_this_process_and_its_state() -> None:
    runtime = bare_runtime()
    maintenance = Maintenance(runtime, abort=lambda units, reason: None)
    assert maintenance.tasks[0].name == "heartbeat"
    maintenance.heartbeat()
    [row] = runtime.store.worker_list()
    assert (row.worker_id, row.host, row.pid) == ("w", socket.gethostname(), os.getpid())
    assert (row.state, row.running, row.handlers) == ("running", 0, {})
    maintenance.announce_stopping()
    maintenance.heartbeat()
    assert runtime.store.worker_list()[0].state == "stopping"


def test_a_store_without_registry_verbs_gets_no_heartbeat_task() -> None:
    class NoRegistry(InMemoryStore):
        worker_heartbeat = None  # type: ignore[assignment]

    runtime = bare_runtime()
    runtime.store = NoRegistry()
    maintenance = Maintenance(runtime, abort=lambda units, reason: None)
    assert "heartbeat" not in [task.name for task in maintenance.tasks]
