"""ObserverHub: counting observers (count_transition) get the counts without a Transition;
the others get a Transition; a failing observer of either kind is contained."""

from __future__ import annotations

from typing import Any

import structlog

from golemq_pg import Scope, Transition
from golemq_pg.worker.observers import ObserverHub


class Counting:
    def __init__(self) -> None:
        self.counted: list[tuple[Any, ...]] = []

    def on_transition(self, t: Transition) -> None:
        raise AssertionError("a counting observer gets count_transition, not on_transition")

    def count_transition(self, job_type: str, outcome: str, duration: float | None,
                         wait: float | None) -> None:
        self.counted.append((job_type, outcome, duration, wait))


class Plain:
    def __init__(self) -> None:
        self.seen: list[Transition] = []

    def on_transition(self, t: Transition) -> None:
        self.seen.append(t)


class BrokenCounter:
    def on_transition(self, t: Transition) -> None:
        raise AssertionError("not called")

    def count_transition(self, *args: Any) -> None:
        raise RuntimeError("counter exploded")


def test_counting_and_plain_observers_each_get_their_call() -> None:
    counting, plain = Counting(), Plain()
    hub = ObserverHub([counting, plain], "w1")
    hub.emit("7", "t", Scope("A", "1"), "started", 1, wait=0.25)
    hub.emit("7", "t", Scope("A", "1"), "succeeded", 1, duration=0.5)
    assert counting.counted == [("t", "started", None, 0.25), ("t", "succeeded", 0.5, None)]
    assert plain.seen == [
        Transition("7", "t", Scope("A", "1"), "started", 1, worker_id="w1", wait=0.25),
        Transition("7", "t", Scope("A", "1"), "succeeded", 1, duration=0.5, worker_id="w1"),
    ]


def test_a_failing_counting_observer_is_logged_and_contained() -> None:
    counting, plain = Counting(), Plain()
    hub = ObserverHub([BrokenCounter(), counting, plain], "w1")
    with structlog.testing.capture_logs() as logs:
        hub.emit("7", "t", None, "started", 1, wait=0.0)
    assert len(counting.counted) == 1
    assert len(plain.seen) == 1
    failures = [e for e in logs if e["event"] == "observer_failed"]
    assert [(e["observer"], e["error_type"], e["job_id"]) for e in failures] \
        == [("BrokenCounter", "RuntimeError", "7")]


def test_a_hub_of_counting_observers_counts_every_outcome() -> None:
    counting = Counting()
    hub = ObserverHub([counting], "w1")
    assert hub
    hub.emit("7", "t", None, "reclaimed", 2, error="LeaseExpired: x")
    assert counting.counted == [("t", "reclaimed", None, None)]
    assert not ObserverHub([], "w1")
