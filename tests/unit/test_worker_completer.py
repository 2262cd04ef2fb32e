"""The completion flusher without a database: which outcomes skip the accumulation delay,
that a committed write re-arms the claim of the guarded types it may unblock, and that a
completer that cannot write holds the claims back."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from golemq_pg import InMemoryStore, JobEvent, JobStatus, Queue, Resource, Worker
from golemq_pg.store.port import LeaseRef, ResultRef
from golemq_pg.worker.batches import result_chunks
from golemq_pg.worker.completer import BACKLOG_BATCHES
from golemq_pg.worker.handlers import build_spec
from golemq_pg.worker.runtime import Runtime, delete_types, unblocked_by
from tests.support.worker_runtime import bare_completer, bare_runtime


def _runtime(resources: dict[str, Resource] | None, *specs: Any) -> Runtime:
    return bare_runtime(resources=resources, handlers=specs)


def _noop(job: Any) -> None:
    del job


def test_what_each_settled_type_may_unblock() -> None:
    runtime = _runtime(
        {
            "conc": Resource(concurrency=4, types=["pooled", "remote"]),
            "rate": Resource(rate_per_minute=10, types=["rated"]),
        },
        build_spec("pooled", _noop),
        build_spec("rated", _noop),
        build_spec("serial", _noop, serialize_by_scope=True),
        build_spec("digest", _noop, grouped=True),
        build_spec("report", _noop, not_while_running=["etl"], waits_for=["extract"]),
        build_spec("plain", _noop),
    )
    assert unblocked_by(runtime) == {
        # a pool member frees room for every member this worker handles
        "pooled": frozenset({"pooled"}),
        "remote": frozenset({"pooled"}),
        "serial": frozenset({"serial"}),
        "digest": frozenset({"digest"}),
        "etl": frozenset({"report"}),
        "extract": frozenset({"report"}),
    }
    # A rate budget refills with its window, not on completion; unguarded types unblock
    # nothing: both keep the accumulation delay.
    assert "rated" not in unblocked_by(runtime)
    assert "plain" not in unblocked_by(runtime)


def test_nothing_unblocks_without_guards() -> None:
    runtime = _runtime(None, build_spec("plain", _noop))
    assert unblocked_by(runtime) == {}
    assert bare_completer(runtime).unblocks == {}


def test_a_pool_type_drains_without_waiting_for_polls() -> None:
    # Room for two jobs at a time and a poll every minute: each batch of two is claimed when
    # the previous one's completions commit (the flush hints the pool's types), not by a poll.
    store = InMemoryStore()
    Queue(store).add_many("pooled", [{"n": n} for n in range(10)])
    worker = Worker(store, poll_interval=60, notify=False,
                    resources={"api": Resource(concurrency=2, types=["pooled"])})
    done = threading.Event()
    seen: list[int] = []
    lock = threading.Lock()

    @worker.handler("pooled", concurrency=4)
    def pooled(job: JobEvent[Any]) -> None:
        with lock:
            seen.append(job.payload["n"])
            if len(seen) == 10:
                done.set()

    _run_until(worker, done)
    assert sorted(seen) == list(range(10))


def test_a_scoped_type_drains_without_waiting_for_polls() -> None:
    # One scope: every claim after the first is cut short by the scope's own lease.
    store = InMemoryStore()
    Queue(store).add_many("serial", [{"n": n} for n in range(6)], scope=("Doc", "1"))
    worker = Worker(store, poll_interval=60, notify=False)
    done = threading.Event()
    seen: list[int] = []

    @worker.handler("serial", concurrency=4, serialize_by_scope=True)
    def serial(job: JobEvent[Any]) -> None:
        seen.append(job.payload["n"])
        if len(seen) == 6:
            done.set()

    _run_until(worker, done)
    assert seen == list(range(6))


def _run_until(worker: Worker, done: threading.Event) -> None:
    """Run ``worker`` until ``done`` is set (failing after 30 s)."""
    worker.start()
    try:
        assert done.wait(30)
    finally:
        worker.stop()


def test_large_results_are_written_in_statements_of_bounded_size() -> None:
    big = b"1" * (1024 * 1024)
    items: list[Any] = [ResultRef(str(i), 1, big) for i in range(20)]
    chunks = result_chunks(items)
    assert [len(c) for c in chunks] == [8, 8, 4]
    assert [item for chunk in chunks for item in chunk] == items
    plain: list[Any] = [LeaseRef(str(i), 1) for i in range(2500)]
    assert [len(c) for c in result_chunks(plain)] == [1000, 1000, 500]
    # Small results, mixed with plain completions: split by count only.
    mixed: list[Any] = [ResultRef(str(i), 1, b"{}") if i % 2 else LeaseRef(str(i), 1)
                        for i in range(2500)]
    assert [len(c) for c in result_chunks(mixed)] == [1000, 1000, 500]
    # Exactly the byte budget fits one statement.
    assert [len(c) for c in result_chunks(items[:8])] == [8]


def test_delete_on_of_the_handler_wins_over_the_worker() -> None:
    runtime = bare_runtime(
        handlers=(
            build_spec("inherit", _noop),
            build_spec("never", _noop, delete_on="never"),
            build_spec("success", _noop, delete_on="success"),
            build_spec("always", _noop, delete_on="always"),
        )
    )
    assert delete_types(runtime) == (("success", "always"), ("always",))


class _StalledCompletions(InMemoryStore):
    """An in-memory store whose completing writes wait until ``go`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.go = threading.Event()
        self.stalled = threading.Event()

    def job_complete_many(
        self, owner: str, items: Sequence[LeaseRef], *, delete_types: Sequence[str] = (),
        started: Sequence[float | None] | None = None,
    ) -> set[str]:
        self.stalled.set()
        assert self.go.wait(30)
        return super().job_complete_many(owner, items, delete_types=delete_types,
                                         started=started)


def _settled(count: Callable[[], int], quiet: float = 0.5, limit: float = 20.0) -> int:
    """``count()`` once it has not changed for ``quiet`` seconds (at most ``limit``)."""
    deadline = time.monotonic() + limit
    last, since = count(), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = count()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return now
    raise AssertionError("the count kept changing")


def test_claims_hold_off_while_completions_cannot_be_written() -> None:
    # The database stops acknowledging: the worker must not go on claiming (and running)
    # jobs whose outcomes it cannot write, but stop at a bounded backlog, then resume.
    store = _StalledCompletions()
    total = 10 * BACKLOG_BATCHES * 500
    Queue(store).add_many("plain", [{"n": n} for n in range(total)])
    worker = Worker(store, poll_interval=0.05, notify=False)
    runs: list[int] = []
    finished = threading.Event()

    @worker.handler("plain", concurrency=32)
    def plain(job: JobEvent[Any]) -> None:
        runs.append(job.payload["n"])
        if len(runs) == total:
            finished.set()

    worker.start()
    try:
        assert store.stalled.wait(10)
        held = _settled(lambda: len(runs))
        # The backlog (BACKLOG_BATCHES batches of 500 outcomes), plus what was claimed
        # before the loop saw it.
        assert BACKLOG_BATCHES * 500 <= held < 2 * BACKLOG_BATCHES * 500
        store.go.set()
        assert finished.wait(60)
    finally:
        store.go.set()
        worker.stop()
    assert sorted(runs) == list(range(total))
    assert Queue(store).count_by_status()[JobStatus.SUCCEEDED] == total
