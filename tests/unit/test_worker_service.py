"""The background-thread base of the worker's loops: stopping, and a stop that times out."""

from __future__ import annotations

import threading

import structlog

from golemq_pg.worker.service import Service


class _Stuck(Service):
    """A loop whose step blocks until ``release`` is set (a call stuck on the database)."""

    def __init__(self) -> None:
        super().__init__("golemq-stuck", "w-1")
        self.entered = threading.Event()
        self.release = threading.Event()

    def step(self) -> float | None:
        self.entered.set()
        self.release.wait(30)
        return None


def test_a_stop_that_outlives_its_join_is_logged_and_the_thread_still_ends() -> None:
    service = _Stuck()
    service.start()
    assert service.entered.wait(5)
    with structlog.testing.capture_logs() as logs:
        service.stop(0.05)
    assert [e for e in logs if e["event"] == "worker_thread_still_running"] == [{
        "event": "worker_thread_still_running", "log_level": "warning", "worker_id": "w-1",
        "thread": "golemq-stuck", "waited": 0.05,
    }]
    service.release.set()
    with structlog.testing.capture_logs() as logs:
        service.stop(5)
    assert not [e for e in logs if e["event"] == "worker_thread_still_running"]
