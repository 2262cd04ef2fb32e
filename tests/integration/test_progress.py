"""Progress: ``job.progress(value)`` is persisted fenced on the lease, visible in
``JobSummary.progress``, coalesced so calling it very often costs few writes, and validated.
(The plain "last value wins" outcome checks stay with the other outcomes in
test_worker_outcomes.py, one of them sharing a name with a test here.)

Store writes are counted with thin subclasses of the real stores (every call still reaches
the real store).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from golemq_pg import InMemoryStore, JobEvent, JobStatus, PostgresStore, Queue, Worker
from golemq_pg.store.port import ClaimRequest, LeaseRef, TypeSlots
from tests.support.waiting import wait_until

#: The reporter's coalescing interval (golemq_pg.worker.progress.ProgressReporter).
INTERVAL = 0.2


class CountingPostgresStore(PostgresStore):
    """The real PostgresStore, counting ``job_progress`` calls."""

    progress_calls = 0
    _count_lock = threading.Lock()

    def job_progress(self, owner: str, item: LeaseRef, progress: float | dict[str, Any]) -> bool:
        with self._count_lock:
            self.progress_calls += 1
        return super().job_progress(owner, item, progress)


class CountingMemoryStore(InMemoryStore):
    """The real InMemoryStore, counting ``job_progress`` calls."""

    progress_calls = 0
    _count_lock = threading.Lock()

    def job_progress(self, owner: str, item: LeaseRef, progress: float | dict[str, Any]) -> bool:
        with self._count_lock:
            self.progress_calls += 1
        return super().job_progress(owner, item, progress)


Counting = CountingPostgresStore | CountingMemoryStore


@pytest.fixture(params=["memory", "postgres"])
def counting(request: pytest.FixtureRequest, pg_dsn: str, schema: str) -> Iterator[Counting]:
    if request.param == "memory":
        yield CountingMemoryStore()
        return
    store = CountingPostgresStore.connect(pg_dsn, schema=schema, max_size=6)
    assert isinstance(store, CountingPostgresStore)  # connect() builds the subclass
    store.migrate()
    yield store
    store.close()


def _progress(queue: Queue, job_id: str) -> Any:
    summary = queue.get(job_id)
    assert summary is not None
    return summary.progress


def test_ten_thousand_progress_calls_cost_a_few_writes(counting: Counting) -> None:
    queue = Queue(counting)
    worker = Worker(counting, poll_interval=0.05)
    spent: list[float] = []

    @worker.handler("crunch")
    def crunch(job: JobEvent[Any]) -> None:
        began = time.perf_counter()
        for step in range(1, 10_001):
            job.progress(step / 10_000)
        spent.append(time.perf_counter() - began)

    job_id = queue.add("crunch", {})
    assert job_id
    worker.run_until_empty(timeout=30)
    summary = queue.get(job_id)
    assert summary is not None
    assert summary.status is JobStatus.SUCCEEDED
    assert summary.progress == 1.0  # the last value always lands, before the outcome
    # One write at once, at most one per coalescing interval, and the final one.
    bound = 2 + math.ceil(spent[0] / INTERVAL)
    print(f"10,000 progress calls: {spent[0] * 1000:.1f} ms in the handler, "
          f"{counting.progress_calls} store writes (bound {bound})")
    assert 1 <= counting.progress_calls <= bound
    assert spent[0] / 10_000 < 100e-6  # well under 0.1 ms a call


def test_progress_is_visible_while_the_job_runs(counting: Counting) -> None:
    queue = Queue(counting)
    worker = Worker(counting, poll_interval=0.05)
    step = threading.Event()
    gate = threading.Event()

    @worker.handler("steps")
    def steps(job: JobEvent[Any]) -> None:
        job.progress({"stage": "download", "done": 3, "of": 10})
        assert step.wait(10)
        job.progress(7)  # coalesced: written by a deferred write within the interval
        assert gate.wait(10)

    job_id = queue.add("steps", {})
    assert job_id
    worker.start()
    try:
        wait_until(lambda: _progress(queue, job_id) is not None, timeout=10)
        assert _progress(queue, job_id) == {"stage": "download", "done": 3, "of": 10}
        # Running once its handler's start is written (within ~50 ms of it).
        wait_until(lambda: queue.get(job_id).status is JobStatus.RUNNING, timeout=5)  # type: ignore[union-attr]
        step.set()
        wait_until(lambda: _progress(queue, job_id) == 7.0, timeout=5)
        gate.set()
        wait_until(lambda: queue.get(job_id).status is JobStatus.SUCCEEDED, timeout=10)  # type: ignore[union-attr]
    finally:
        step.set()
        gate.set()
        worker.stop()
    assert _progress(queue, job_id) == 7.0
    assert counting.progress_calls == 2


def test_progress_writes_are_fenced_on_the_lease(counting: Counting) -> None:
    queue = Queue(counting)
    job_id = queue.add("fenced", {})
    assert job_id
    claimed = counting.job_claim(
        ClaimRequest(owner="w1", types=[TypeSlots(type="fenced", limit=1, lease_seconds=30)])
    )
    assert [job.id for job in claimed] == [job_id]
    token = claimed[0].lease_token
    assert counting.job_progress("w1", LeaseRef(job_id, token), 0.25) is True
    assert counting.job_progress("w2", LeaseRef(job_id, token), 0.5) is False  # not the owner
    assert counting.job_progress("w1", LeaseRef(job_id, token + 1), 0.5) is False  # old claim
    assert _progress(queue, job_id) == 0.25
    assert counting.job_complete_many("w1", [LeaseRef(job_id, token)]) == {job_id}
    assert counting.job_progress("w1", LeaseRef(job_id, token), 0.9) is False  # finished
    assert _progress(queue, job_id) == 0.25
    gone = queue.add("fenced", {})
    assert gone
    claimed = counting.job_claim(
        ClaimRequest(owner="w1", types=[TypeSlots(type="fenced", limit=1, lease_seconds=30)])
    )
    assert queue.cancel(gone) is True
    assert counting.job_progress("w1", LeaseRef(gone, claimed[0].lease_token), 0.5) is False
    assert queue.get(gone) is None  # a late progress write never resurrects a cancelled job


CANARY = "CANARY-progress-secret-7f3a"


class _Opaque:
    pass


def _circular() -> dict[str, Any]:
    loop: dict[str, Any] = {"secret": CANARY}
    loop["self"] = loop
    return loop


BAD_VALUES: list[Any] = [
    float("nan"),
    float("inf"),
    -float("inf"),
    True,
    None,
    "half",
    [0.5],
    {"secret": CANARY, "bad": {1, 2}},
    {"secret": CANARY, 1: "non-str key"},
    {"secret": CANARY, "bytes": b"x"},
    {"secret": CANARY, "nan": float("nan")},
    {"secret": CANARY, "object": _Opaque()},
    _circular(),
]


def test_bad_progress_values_raise_in_the_handler_and_write_nothing(counting: Counting) -> None:
    queue = Queue(counting)
    worker = Worker(counting, poll_interval=0.05)
    errors: list[str] = []
    accepted: list[Any] = []

    @worker.handler("picky")
    def picky(job: JobEvent[Any]) -> None:
        for value in BAD_VALUES:
            try:
                job.progress(value)
            except ValueError as exc:
                errors.append(str(exc))
            else:
                accepted.append(value)

    job_id = queue.add("picky", {})
    assert job_id
    worker.run_until_empty(timeout=30)
    assert accepted == []
    assert len(errors) == len(BAD_VALUES)
    assert not [text for text in errors if CANARY in text]  # never echoes the value
    assert counting.progress_calls == 0
    summary = queue.get(job_id)
    assert summary is not None
    assert summary.status is JobStatus.SUCCEEDED  # the handler caught them: not a failure
    assert summary.progress is None
