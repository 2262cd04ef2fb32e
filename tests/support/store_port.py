"""Calling the JobStore port directly: build its parameters, enqueue, claim, race threads.

The contract tests talk only to the JobStore port, so the same test runs on both stores.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from golemq_pg._types import Resource, Scope
from golemq_pg._validation import encode_payload
from golemq_pg.store.port import (
    ClaimedJob,
    ClaimRequest,
    EnqueueParams,
    EnqueueResult,
    JobStore,
    LeaseRef,
    TypeSlots,
)

T = TypeVar("T")

#: A lease that expires quickly, for cases that only need it to expire.
SHORT_LEASE = 0.2
#: A lease that expires soon but outlives a few calls even on a loaded 2-core machine, for
#: cases that first check that the live lease blocks, then that the expired one does not.
BRIEF_LEASE = 1.5


def is_memory(store: JobStore) -> bool:
    """Whether this is the in-memory store (for the few memory-only, fake-clock checks)."""
    return type(store).__name__ == "InMemoryStore"


def put(
    store: JobStore,
    job_type: str,
    payload: Mapping[str, Any] | None = None,
    *,
    scope: tuple[str, str] | None = None,
    dedupe_key: str | None = None,
    on_duplicate: str = "reject",
    run_at: datetime | None = None,
    delay: float = 0.0,
    max_attempts: int | None = 3,
    priority: int = 0,
    grouped: bool = False,
) -> EnqueueResult:
    """Enqueue one job through the port (``grouped``: as an add naming a grouped JobType)."""
    return store.job_enqueue(
        EnqueueParams(
            type=job_type,
            payload=encode_payload(job_type, payload if payload is not None else {}),
            scope=None if scope is None else Scope(*scope),
            dedupe_key=dedupe_key,
            on_duplicate=on_duplicate,  # type: ignore[arg-type]
            run_at=run_at,
            delay=delay,
            max_attempts=max_attempts,
            priority=priority,
            grouped=grouped,
        )
    )


def add(
    store: JobStore, job_type: str, payload: Mapping[str, Any] | None = None, **kwargs: Any
) -> str:
    """Enqueue one job that must be inserted; returns its id."""
    result = put(store, job_type, payload, **kwargs)
    assert result.inserted, result
    assert result.id is not None
    return result.id


def slots(job_type: str, limit: int = 10, lease: float = 30.0, **guards: Any) -> TypeSlots:
    """A TypeSlots with defaults suited to tests."""
    return TypeSlots(type=job_type, limit=limit, lease_seconds=lease, **guards)


def claim(
    store: JobStore,
    *types: TypeSlots | str,
    owner: str = "w1",
    resources: Mapping[str, Resource] | None = None,
) -> list[ClaimedJob]:
    """Claim for ``owner``; plain strings become ``slots(name)``."""
    wanted = [slots(t) if isinstance(t, str) else t for t in types]
    return store.job_claim(ClaimRequest(owner=owner, types=wanted, resources=resources or {}))


def refs(jobs: Sequence[ClaimedJob]) -> list[LeaseRef]:
    """The lease references of claimed jobs."""
    return [LeaseRef(id=job.id, token=job.lease_token) for job in jobs]


def ids(jobs: Sequence[ClaimedJob]) -> list[str]:
    """The ids of claimed jobs, in the order returned."""
    return [job.id for job in jobs]


def concurrently(n: int, fn: Callable[[int], T]) -> list[T]:
    """Run ``fn(i)`` in ``n`` threads released at the same instant; return results in order."""
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait(timeout=10)
            results[i] = fn(i)
        except BaseException as exc:  # reported below, in the test thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    if errors:
        raise errors[0]
    return results


def count_rows(store: JobStore) -> int:
    """How many jobs the store holds, whatever their status."""
    return sum(store.job_count_by_status().values())
