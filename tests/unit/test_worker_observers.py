"""ObserverHub: counting observers (count_transition, or count_transitions for a batch) get
the counts without a Transition; the others get a Transition; a failing observer of either
kind is contained; the Prometheus observer's deferred starts are counted by the next scrape;
system errors reach the observers defining on_error once per incident (ErrorReports)."""

from __future__ import annotations

from typing import Any

import structlog

from golemq_pg import Scope, Transition, WorkerError
from golemq_pg.metrics import PrometheusObserver
from golemq_pg.worker.observers import RELAPSE_WINDOW, ErrorReports, ObserverHub


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


class Batching:
    def __init__(self) -> None:
        self.batches: list[tuple[str, list[tuple[str, float | None]]]] = []

    def on_transition(self, t: Transition) -> None:
        raise AssertionError("a batch counter gets count_transitions, not on_transition")

    def count_transitions(self, outcome: str, counted: Any) -> None:
        self.batches.append((outcome, list(counted)))


class _Job:
    def __init__(self, job_id: str, job_type: str, waited: float) -> None:
        self.id, self.type, self.scope, self.attempt, self.waited = (
            job_id, job_type, None, 1, waited)


def test_a_batch_counter_gets_a_whole_batch_in_one_call_and_plain_ones_a_transition_each(
) -> None:
    batching, plain = Batching(), Plain()
    hub = ObserverHub([batching, plain], "w1")
    assert hub.counts
    assert hub.each
    hub.count("succeeded", [("t", 0.5), ("t", 0.25)])
    hub.started(((_Job("1", "t", 1.0), _Job("2", "t", 2.0)), 0.5))  # type: ignore[arg-type]
    assert batching.batches == [("succeeded", [("t", 0.5), ("t", 0.25)]),
                                ("started", [("t", 1.5), ("t", 2.5)])]
    assert [(t.job_id, t.outcome, t.wait) for t in plain.seen] \
        == [("1", "started", 1.5), ("2", "started", 2.5)]


def test_prometheus_starts_deferred_by_the_hub_are_counted_by_the_next_scrape() -> None:
    observer = PrometheusObserver(None)
    hub = ObserverHub([observer], "w1")
    # The only observer defers starts: the hub's started is its append, no Python frame.
    assert hub.started == observer.count_started_later
    hub.started(((_Job("1", "t", 0.2),), 0.1))  # type: ignore[arg-type]
    hub.started(((_Job("2", "t", 0.3),), 0.1))  # type: ignore[arg-type]
    snap = observer.snapshot()
    assert [row[:3] for row in snap["jobs"]] == [["t", "started", 2]]
    assert [row[:2] for row in snap["waits"]] == [["t", 2]]
    assert round(snap["waits"][0][3], 6) == 0.7
    hub.started(((_Job("3", "t", 0.0),), 0.0))  # type: ignore[arg-type]
    hub.count("succeeded", [("t", 0.0001)])  # the next batch counts the deferred start too
    counts = {(t, o): n for t, o, n, *_ in observer._tally.snapshot()["jobs"]}
    assert counts == {("t", "started"): 3, ("t", "succeeded"): 1}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Errors(Plain):
    def __init__(self) -> None:
        super().__init__()
        self.errors: list[WorkerError] = []

    def on_error(self, e: WorkerError) -> None:
        self.errors.append(e)


def test_a_failing_service_is_reported_once_per_incident() -> None:
    clock, observer = Clock(), Errors()
    reports = ErrorReports([observer, Plain()], "w1", clock=clock)
    for _ in range(50):  # an outage: every retry fails
        reports.failed("claim", ConnectionError("server closed the connection\nDETAIL: x"))
        clock.now += 0.1
    assert [(e.kind, e.error, e.worker_id) for e in observer.errors] == [
        ("claim", "ConnectionError: server closed the connection", "w1")]
    assert observer.errors[0].at.tzinfo is not None
    reports.recovered("claim")
    clock.now += RELAPSE_WINDOW / 2
    reports.failed("claim", ConnectionError("again"))  # a relapse: the same incident
    assert len(observer.errors) == 1
    reports.recovered("claim")
    clock.now += RELAPSE_WINDOW
    reports.failed("claim", ConnectionError("a new outage"))
    reports.failed("complete", TimeoutError())  # another kind: its own incident
    assert [(e.kind, e.error) for e in observer.errors[1:]] == [
        ("claim", "ConnectionError: a new outage"), ("complete", "TimeoutError")]


def test_an_incident_of_several_sources_ends_when_every_one_recovered() -> None:
    clock, observer = Clock(), Errors()
    reports = ErrorReports([observer], "w1", clock=clock)
    reports.failed("maintenance", OSError("down"), "reaper")
    reports.failed("maintenance", OSError("down"), "heartbeat")
    reports.recovered("maintenance", "reaper")
    clock.now += 10
    reports.failed("maintenance", OSError("down"), "reaper")  # heartbeat still fails
    assert len(observer.errors) == 1
    reports.recovered("maintenance", "reaper")
    reports.recovered("maintenance", "heartbeat")
    clock.now += 10
    reports.failed("maintenance", OSError("down"), "history")
    assert len(observer.errors) == 2


def test_an_on_error_that_raises_is_logged_and_contained_and_others_still_get_it() -> None:
    class Broken(Plain):
        def on_error(self, e: WorkerError) -> None:
            raise RuntimeError("secret payload in here")

    observer = Errors()
    reports = ErrorReports([Broken(), observer], "w1")
    with structlog.testing.capture_logs() as logs:
        reports.failed("listen", "OperationalError: connection lost")
    assert [e.error for e in observer.errors] == ["OperationalError: connection lost"]
    assert [(e["event"], e["observer"], e["kind"], e["error_type"]) for e in logs] == [
        ("observer_failed", "Broken", "listen", "RuntimeError")]
    assert "secret" not in repr(logs)


def test_without_an_on_error_observer_nothing_is_tracked() -> None:
    reports = ObserverHub([Plain()], "w1").errors
    assert not reports.active
    reports.failed("claim", ConnectionError("down"))
    reports.recovered("claim")
