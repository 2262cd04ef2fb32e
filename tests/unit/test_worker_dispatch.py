"""Claim shaping without a database: batch caps, rotation, adaptive prefetch, blocked
diagnosis (InMemoryStore and the worker's own classes)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import structlog

from golemq_pg import InMemoryStore, JobEvent, JobStatus, Queue, Worker
from golemq_pg.store.port import ClaimBlock, ClaimedJob, ClaimRequest, TypeSlots
from golemq_pg.testing import memory_store
from golemq_pg.worker.blocked import BlockedReporter
from golemq_pg.worker.handlers import build_spec
from golemq_pg.worker.pool import MAX_ADAPTIVE_PREFETCH, TypePool
from tests.support.worker_runtime import bare_pool, bare_runtime


class RecordingStore(InMemoryStore):
    """The in-memory store, remembering every claim request it served."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[ClaimRequest] = []
        self._record_lock = threading.Lock()

    def job_claim(self, request: ClaimRequest) -> list[ClaimedJob]:
        with self._record_lock:
            self.requests.append(request)
        return super().job_claim(request)


def test_claims_never_exceed_batch_size_and_rotate_types() -> None:
    store = RecordingStore()
    queue = Queue(store)
    for job_type in ("a", "b", "c"):
        queue.add_many(job_type, [{"n": n} for n in range(20)])
    worker = Worker(store, poll_interval=0.05, batch_size=2)
    order: list[str] = []
    lock = threading.Lock()

    def handler(job: JobEvent[Any]) -> None:
        with lock:
            order.append(job.type)

    for job_type in ("a", "b", "c"):
        worker.handler(job_type)(handler)
    worker.run_until_empty(timeout=20)
    assert Counter(order) == {"a": 20, "b": 20, "c": 20}
    assert all(sum(s.limit for s in r.types) <= 2 for r in store.requests)
    firsts = Counter(r.types[0].type for r in store.requests if r.types)
    assert set(firsts) == {"a", "b", "c"}  # every type gets to go first
    # Fairness: no type waits for another to drain; every type is asked for early on (the
    # order handlers run in depends on thread scheduling, the claims do not).
    early = {s.type for r in store.requests[:6] for s in r.types if s.limit > 0}
    assert early == {"a", "b", "c"}


def test_claim_requests_carry_leases_and_guards() -> None:
    store = RecordingStore()
    queue = Queue(store)
    queue.add("timed", {})
    queue.add("guarded", {}, scope=("S", "1"))
    worker = Worker(store, poll_interval=0.05, lease_grace=7)
    worker.handler("timed", timeout=3)(lambda job: None)
    worker.handler("guarded", serialize_by_scope=True, not_while_running=["x"],
                   waits_for=["y"])(lambda job: None)
    worker.run_until_empty(timeout=20)
    slots: dict[str, TypeSlots] = {s.type: s for r in store.requests for s in r.types}
    assert slots["timed"].lease_seconds == 10  # timeout + lease_grace
    assert slots["guarded"].lease_seconds == 7  # lease_grace, renewed while running
    assert slots["guarded"].serialize_by_scope
    assert slots["guarded"].not_while_running == ("x",)
    assert slots["guarded"].waits_for == ("y",)
    assert all(r.owner == worker.worker_id for r in store.requests)


def test_lease_duration_applies_to_every_type() -> None:
    store = RecordingStore()
    Queue(store).add("t", {})
    worker = Worker(store, poll_interval=0.05, lease_duration=12)
    worker.handler("t", timeout=100)(lambda job: None)
    worker.run_until_empty(timeout=20)
    assert {s.lease_seconds for r in store.requests for s in r.types} == {12}


def _pool(concurrency: int, batch_size: int | None) -> TypePool:
    runtime = bare_runtime(batch_size=batch_size)
    return bare_pool(runtime, build_spec("t", lambda job: None, concurrency=concurrency),
                     batch_size=batch_size)


def test_prefetch_waits_for_durations_grows_for_fast_handlers_and_is_none_for_slow_ones(
) -> None:
    fast = _pool(4, None)
    assert fast.prefetch == 0  # nothing buffered before a handler's duration is known
    assert fast.capacity == 4
    fast.tune(0.003)  # no duration known yet: unchanged
    assert fast.prefetch == 0
    for _ in range(20):
        fast.record_duration(0.00001)
    fast.tune(0.003)
    assert fast.prefetch == MAX_ADAPTIVE_PREFETCH
    assert fast.capacity == 4 + MAX_ADAPTIVE_PREFETCH
    assert fast.watermark == MAX_ADAPTIVE_PREFETCH // 2
    slow = _pool(4, None)
    for _ in range(20):
        slow.record_duration(2.0)
    slow.tune(0.003)
    assert slow.prefetch == 0  # a slow type is not hoarded
    assert slow.capacity == 4
    # The average follows a change of pace.
    for _ in range(30):
        fast.record_duration(5.0)
    fast.tune(0.003)
    assert fast.prefetch == 0


def test_explicit_batch_size_bounds_the_prefetch() -> None:
    pool = _pool(4, 100)
    assert pool.prefetch == 100  # a fixed batch buffers from the first claim
    for _ in range(20):
        pool.record_duration(0.00001)
    pool.tune(0.003)
    assert pool.prefetch == 200
    tiny = _pool(8, 1)
    assert tiny.prefetch == 1
    for _ in range(20):
        tiny.record_duration(10.0)
    tiny.tune(0.003)
    assert tiny.prefetch == 0  # slow handlers: not hoarded, whatever the batch size


def test_blocked_reporter_warns_once_per_streak() -> None:
    runtime = _pool(1, None).runtime
    reporter = BlockedReporter(runtime.owner, streak=3)
    slots = [TypeSlots("report", 1, 30.0, waits_for=("import",))]
    blocked = {"report": ClaimBlock("type", "import")}
    with structlog.testing.capture_logs() as logs:
        for _ in range(10):
            reporter.observe(slots, {}, blocked)
        assert reporter.streaks() == {"report": 10}
        reporter.observe(slots, {"report": 1}, {})  # got a job: the streak ends
        assert reporter.streaks() == {}
        for _ in range(3):
            reporter.observe(slots, {}, {"report": ClaimBlock("pool concurrency", "api")})
    warnings = [e for e in logs if e["event"] == "type_blocked"]
    assert [w["blocked_by"] for w in warnings] == ["type import", "pool concurrency api"]
    assert warnings[0]["polls"] == 3


def test_run_until_empty_again_after_moving_a_fake_clock() -> None:
    store, clock = memory_store()
    queue = Queue(store)
    worker = Worker(store, poll_interval=0.05, base_backoff=60, max_backoff=60)
    calls: list[int] = []

    @worker.handler("later")
    def later(job: JobEvent[Any]) -> None:
        calls.append(job.attempt)
        if job.attempt == 1:
            raise RuntimeError("not yet")

    job_id = queue.add("later", {})
    assert job_id
    worker.run_until_empty(timeout=10)
    summary = queue.get(job_id)
    assert summary is not None
    assert summary.status is JobStatus.PENDING  # parked 60 s in the (fake) future
    clock.advance(61)
    worker.run_until_empty(timeout=10)
    summary = queue.get(job_id)
    assert summary is not None
    assert summary.status is JobStatus.SUCCEEDED
    assert calls == [1, 2]


class EnqueueDuringClaimStore(InMemoryStore):
    """Enqueues a job while the first empty claim is in flight, as a producer in another
    process could: its NOTIFY arrives before the claim's (short) result is processed."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = True

    def job_claim(self, request: ClaimRequest) -> list[ClaimedJob]:
        claimed = super().job_claim(request)
        if self.armed and not claimed and request.types:
            self.armed = False
            Queue(self).add("late", {})
            time.sleep(0.2)  # the listener thread delivers the hint meanwhile
        return claimed


def test_a_hint_during_an_empty_claim_is_not_lost() -> None:
    store = EnqueueDuringClaimStore()
    worker = Worker(store, poll_interval=30)
    ran = threading.Event()
    worker.handler("late")(lambda job: ran.set())
    worker.start()
    try:
        assert ran.wait(5)  # not the 30 s poll
    finally:
        worker.stop()


class ThreadRecordingStore(InMemoryStore):
    """The in-memory store, remembering which thread ran each claim that leased a job; a
    claim run by ``slow_thread`` waits ``slow`` seconds after leasing (a slow round trip)."""

    def __init__(self, slow_thread: str = "", slow: float = 0.0) -> None:
        super().__init__()
        self.claimers: list[str] = []
        self.leased = threading.Event()
        self._slow_thread = slow_thread
        self._slow = slow

    def job_claim(self, request: ClaimRequest) -> list[ClaimedJob]:
        claimed = super().job_claim(request)
        if claimed:
            name = threading.current_thread().name
            self.claimers.append(name)
            self.leased.set()
            if name == self._slow_thread:
                time.sleep(self._slow)
        return claimed


def test_an_idle_worker_claims_a_notified_job_on_the_listener_thread() -> None:
    store = ThreadRecordingStore()
    worker = Worker(store, poll_interval=30)
    ran = threading.Event()
    worker.handler("now")(lambda job: ran.set())
    worker.start()
    try:
        time.sleep(0.2)  # the claim loop's first (empty) pass is over: it waits, idle
        Queue(store).add("now", {})
        assert ran.wait(5)
    finally:
        worker.stop()
    # No wake-up of the claim loop's thread between the notification and the claim.
    assert store.claimers == ["golemq-listener"]


def test_stop_waits_for_a_claim_the_listener_runs_and_releases_its_jobs() -> None:
    store = ThreadRecordingStore(slow_thread="golemq-listener", slow=0.5)
    worker = Worker(store, poll_interval=30)
    worker.handler("now")(lambda job: None)
    worker.start()
    try:
        time.sleep(0.2)
        job_id = Queue(store).add("now", {})
        assert store.leased.wait(5)
    finally:
        worker.stop()  # while the listener's claim is still on its way back
    summary = Queue(store).get(job_id)
    assert summary is not None
    # Given back unstarted by the shutdown, not left leased to a worker that is gone.
    assert summary.status is JobStatus.PENDING
    assert summary.attempts == 0
