"""Claiming on completion without a database: which completions claim for which types, the
room the claims reserve, and that a failing combined write falls back to the plain one."""

from __future__ import annotations

import threading
from typing import Any

from golemq_pg import InMemoryStore, JobEvent, Queue, Resource, Worker
from golemq_pg.store.port import CompleteAndClaimParams, CompleteAndClaimResult
from golemq_pg.worker.handlers import build_spec
from golemq_pg.worker.pool import TypePool
from golemq_pg.worker.poolclaim import claim_targets
from tests.support.worker_runtime import bare_pool, bare_runtime


def _noop(job: Any) -> None:
    del job


def _pools(*names: str) -> dict[str, TypePool]:
    runtime = bare_runtime()
    return {name: bare_pool(runtime, build_spec(name, _noop), batch_size=None) for name in names}


def test_a_capped_pools_completions_claim_for_its_local_members() -> None:
    runtime = bare_runtime(resources={
        "conc": Resource(concurrency=4, types=["pooled", "remote", "other"]),
        "rate": Resource(rate_per_minute=10, types=["rated"]),
    })
    pools = _pools("pooled", "other", "rated", "plain")
    assert claim_targets(runtime, pools) == {
        # a member handled elsewhere frees room for this worker's members too
        "pooled": ("pooled", "other"),
        "remote": ("pooled", "other"),
        "other": ("pooled", "other"),
    }


def test_reserved_room_is_not_free_until_given_back() -> None:
    (pool,) = _pools("pooled").values()
    capacity = pool.free()
    assert pool.reserve(capacity + 10) == capacity  # never more than the room
    assert pool.free() == 0
    assert pool.reserve(1) == 0
    pool.unreserve(capacity)
    assert pool.free() == capacity


class FlakyStore(InMemoryStore):
    """Its first two claims on completion fail before writing anything."""

    def __init__(self) -> None:
        super().__init__()
        self.failures = 2
        self.calls = 0

    def job_complete_and_claim(self, params: CompleteAndClaimParams) -> CompleteAndClaimResult:
        self.calls += 1
        if self.failures:
            self.failures -= 1
            raise ConnectionError("lost the connection")
        return super().job_complete_and_claim(params)


def test_a_failed_claim_on_completion_is_retried_as_the_plain_completion() -> None:
    store = FlakyStore()
    Queue(store).add_many("pooled", [{"n": n} for n in range(12)])
    worker = Worker(store, poll_interval=0.2, notify=False,
                    resources={"api": Resource(concurrency=2, types=["pooled"])})
    seen: list[int] = []
    lock = threading.Lock()

    @worker.handler("pooled", concurrency=2)
    def pooled(job: JobEvent[Any]) -> None:
        with lock:
            seen.append(job.payload["n"])

    worker.run_until_empty(timeout=30)
    assert sorted(seen) == list(range(12))  # each exactly once: nothing lost, nothing twice
    assert store.calls > 2  # later flushes went on claiming on completion
    assert store.job_stats()["succeeded"] == 12
