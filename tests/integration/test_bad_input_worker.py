"""docs/RELIABILITY.md, bad input: Worker options out of range, unknown resource member types,
waits_for cycles.

Out-of-range options raise ``QueueConfigError`` naming the option when the worker (or the
handler) is built; a ``waits_for`` cycle among one process's handlers raises at start, before
any thread runs or any job is touched. A resource pool may name member types this process has
no handler for (other processes may serve them): that is accepted, and the pool still counts
their running jobs.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from golemq_pg import (
    JobEvent,
    JobStatus,
    PostgresStore,
    Queue,
    QueueConfigError,
    Resource,
    Retention,
    Worker,
)
from golemq_pg.store.port import ClaimRequest, LeaseRef, TypeSlots

BAD_OPTIONS: list[tuple[str, Any, str]] = [
    ("batch_size", 0, "batch_size"),
    ("batch_size", -5, "batch_size"),
    ("batch_size", 10_001, "batch_size"),
    ("batch_size", 2.5, "batch_size"),
    ("batch_size", True, "batch_size"),
    ("default_max_attempts", 0, "default_max_attempts"),
    ("default_max_attempts", 2**31, "default_max_attempts"),
    ("default_max_attempts", "3", "default_max_attempts"),
    ("worker_id", "", "worker_id"),
    ("worker_id", "   ", "worker_id"),
    ("worker_id", "w" * 256, "worker_id"),
    ("worker_id", 42, "worker_id"),
    ("notify", "yes", "notify"),
    ("notify", 1, "notify"),
    ("lease_renew_interval", 5, "lease_renew_interval"),  # without lease_duration
    ("observers", [object()], "on_transition"),
    ("observers", "not a list", "observers"),
    ("retry_strategy", 5, "retry_strategy"),
    ("resources", ["api"], "resources"),
    ("resources", {"api": {"concurrency": 1}}, "Resource"),
    ("retention", {"older_than": 60}, "retention"),
    ("retention", Retention(older_than=60, statuses=("pending",)), "finished"),
    ("retention", Retention(older_than=60, statuses=()), "at least one"),
]


@pytest.mark.parametrize(("option", "value", "fragment"), BAD_OPTIONS,
                         ids=[f"{o}={v!r}"[:40] for o, v, _ in BAD_OPTIONS])
def test_worker_options_out_of_range(mem_store: Any, option: str, value: Any,
                                     fragment: str) -> None:
    with pytest.raises(QueueConfigError, match=fragment):
        Worker(mem_store, **{option: value})


def test_inconsistent_lease_and_backoff_options(mem_store: Any) -> None:
    with pytest.raises(QueueConfigError, match="lease_renew_interval"):
        Worker(mem_store, lease_duration=1, lease_renew_interval=1)
    with pytest.raises(QueueConfigError, match="lease_renew_interval"):
        Worker(mem_store, lease_duration=1, lease_renew_interval=2)
    with pytest.raises(QueueConfigError, match="max_backoff"):
        Worker(mem_store, base_backoff=10, max_backoff=5)
    worker = Worker(mem_store, lease_grace=0)
    worker.handler("untimed")(lambda job: None)
    with pytest.raises(QueueConfigError, match="lease_grace"):
        worker.start()  # an untimed handler's lease would be 0 s
    assert not worker.running


BAD_HANDLER_OPTIONS: list[tuple[dict[str, Any], str]] = [
    ({"concurrency": 0}, "concurrency"),
    ({"concurrency": -1}, "concurrency"),
    ({"concurrency": 4097}, "concurrency"),
    ({"concurrency": 1.0}, "concurrency"),
    ({"concurrency": True}, "concurrency"),
    ({"max_batch": 5}, "grouped"),
    ({"grouped": True, "max_batch": 0}, "max_batch"),
    ({"grouped": "yes"}, "grouped"),
    ({"serialize_by_scope": 1}, "serialize_by_scope"),
    ({"transactional": True, "grouped": True}, "grouped and transactional"),
    ({"waits_for": ["t"]}, "itself"),
    ({"waits_for": [1]}, "waits_for"),
    ({"not_while_running": 5}, "not_while_running"),
    ({"transaction_warning": 5}, "only applies to transactional handlers"),
    ({"transactional": True, "transaction_warning": 0}, "transaction_warning .* > 0"),
    ({"transactional": True, "transaction_warning": -1}, "transaction_warning .* > 0"),
    ({"transactional": True, "transaction_warning": "5"}, "transaction_warning"),
    ({"transactional": True, "transaction_warning": float("nan")}, "transaction_warning"),
    ({"transactional": True, "transaction_warning": True}, "transaction_warning"),
]


@pytest.mark.parametrize(("options", "fragment"), BAD_HANDLER_OPTIONS,
                         ids=[str(o)[:40] for o, _ in BAD_HANDLER_OPTIONS])
def test_handler_options_out_of_range(pg_store: PostgresStore, options: dict[str, Any],
                                      fragment: str) -> None:
    worker = Worker(pg_store)
    with pytest.raises(QueueConfigError, match=fragment):
        worker.handler("t", **options)(lambda job: None)
    assert worker.handler_types == ()


BAD_RESOURCES: list[tuple[Resource, str]] = [
    (Resource(types=["a"]), "concurrency, rate_per_minute"),
    (Resource(concurrency=0, types=["a"]), "concurrency"),
    (Resource(concurrency=-2, types=["a"]), "concurrency"),
    (Resource(rate_per_minute=0, types=["a"]), "rate_per_minute"),
    (Resource(concurrency=1.5, types=["a"]), "concurrency"),  # type: ignore[arg-type]
    (Resource(concurrency=1, types=[]), "at least one"),
    (Resource(concurrency=1, types="a"), "list"),  # type: ignore[arg-type]
    (Resource(concurrency=2, types=["a"], costs={"b": 1}), "not a member"),
    (Resource(concurrency=2, types=["a"], costs={"a": 0}), "costs"),
    (Resource(concurrency=2, types=["a"], costs={"a": 3}), "exceeds"),
    (Resource(rate_per_minute=10, types=["a"], rate_costs={"a": 11}), "exceeds"),
]


@pytest.mark.parametrize(("pool", "fragment"), BAD_RESOURCES,
                         ids=[f for _, f in BAD_RESOURCES])
def test_resource_limits_out_of_range(mem_store: Any, pool: Resource, fragment: str) -> None:
    with pytest.raises(QueueConfigError, match=fragment):
        Worker(mem_store, resources={"api": pool})


def test_unknown_resource_member_types_are_accepted_and_still_counted(
    pg_store: PostgresStore,
) -> None:
    # "remote" has no handler here: another process serves it. The pool is accepted, and a
    # live "remote" lease still uses the pool's only slot, so "local" waits for it.
    pools = {"api": Resource(concurrency=1, types=["local", "remote"])}
    queue = Queue(pg_store)
    queue.add("remote", {})
    remote = pg_store.job_claim(ClaimRequest("elsewhere", [TypeSlots("remote", 1, 30.0)],
                                             resources=pools))
    assert len(remote) == 1
    local_id = queue.add("local", {})
    worker = Worker(pg_store, poll_interval=0.05, resources=pools)
    ran = threading.Event()

    @worker.handler("local")
    def local(job: JobEvent[Any]) -> None:
        ran.set()

    worker.start()
    try:
        time.sleep(0.5)
        assert not ran.is_set()  # blocked by the remote job's lease in the shared pool
        pg_store.job_complete_many("elsewhere", [_ref(remote[0])])
        assert ran.wait(10)
    finally:
        worker.stop()
    assert queue.get(local_id).status is JobStatus.SUCCEEDED  # type: ignore[arg-type,union-attr]


def _ref(job: Any) -> LeaseRef:
    return LeaseRef(job.id, job.lease_token)


@pytest.mark.parametrize("cycle", [["a", "b"], ["a", "b", "c"], ["a", "b", "c", "d"]])
def test_waits_for_cycles_fail_at_start_and_touch_nothing(store: Any, cycle: list[str]) -> None:
    queue = Queue(store)
    ids = [queue.add(t, {}) for t in cycle]
    worker = Worker(store, poll_interval=0.05)
    for n, job_type in enumerate(cycle):
        worker.handler(job_type, waits_for=[cycle[(n + 1) % len(cycle)]])(lambda job: None)
    with pytest.raises(QueueConfigError, match="cycle") as info:
        worker.start()
    assert all(t in str(info.value) for t in cycle)
    assert not worker.running
    with pytest.raises(QueueConfigError, match="cycle"):
        worker.run_until_empty(timeout=1)
    for job_id in ids:
        summary = queue.get(job_id)  # type: ignore[arg-type]
        assert summary is not None
        assert (summary.status, summary.attempts) == (JobStatus.PENDING, 0)


def test_a_waits_for_chain_without_a_cycle_is_fine(store: Any) -> None:
    queue = Queue(store)
    for job_type in ("a", "b", "c"):
        queue.add(job_type, {})
    order: list[str] = []
    worker = Worker(store, poll_interval=0.05)
    worker.handler("a", waits_for=["b"])(lambda job: order.append(job.type))
    worker.handler("b", waits_for=["c"])(lambda job: order.append(job.type))
    worker.handler("c")(lambda job: order.append(job.type))
    worker.run_until_empty(timeout=20)
    assert order == ["c", "b", "a"]
