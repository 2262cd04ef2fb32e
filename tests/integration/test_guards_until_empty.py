"""run_until_empty does not return while due work is only blocked by another holder's lease."""

from __future__ import annotations

import threading
from typing import Any

from golemq_pg import Queue, Worker
from golemq_pg.store.port import ClaimRequest, LeaseRef, TypeSlots


def test_run_until_empty_waits_for_work_blocked_by_another_holder(pg_store: Any) -> None:
    queue = Queue(pg_store)
    first = queue.add("sync", {"n": 1}, scope=("Account", "a1"))
    second = queue.add("sync", {"n": 2}, scope=("Account", "a1"))
    # Another "process" holds a live lease on the scope.
    held = pg_store.job_claim(ClaimRequest(owner="elsewhere", types=[
        TypeSlots(type="sync", limit=1, lease_seconds=60, serialize_by_scope=True)]))
    assert [j.id for j in held] == [first]

    seen: list[str] = []
    worker = Worker(pg_store, poll_interval=0.05, notify=False)

    @worker.handler("sync", serialize_by_scope=True)
    def sync(job: Any) -> None:
        seen.append(job.id)

    done = threading.Event()

    def run() -> None:
        worker.run_until_empty(timeout=30)
        done.set()

    thread = threading.Thread(target=run)
    thread.start()
    try:
        # While the scope is held elsewhere the worker must keep waiting, not return.
        assert not done.wait(1.0)
        assert seen == []
        pg_store.job_complete_many("elsewhere", [LeaseRef(held[0].id, held[0].lease_token)])
        assert done.wait(20)
    finally:
        worker.stop()
        thread.join(10)
    assert seen == [second]
