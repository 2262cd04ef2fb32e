"""Claiming on completion: the capacity a completion frees in a resource pool is claimed
again in the completion's own transaction.

A resource pool with a concurrency cap admits a new lease only once a member's completion
has committed, so with the cap at the handler's concurrency nothing can be prefetched, and
each job would otherwise wait for the completion write, then for the claim loop to be woken
and claim, then for the handoff. Here, when the completer writes the completions of a
pool's member, it writes them with ``job_complete_and_claim``: one transaction (one round
trip on PostgreSQL) that completes them and claims for a local handler type of that pool,
whose claimed units go straight into the claim loop's buffers (``ClaimLoop.take``).

The room claimed is reserved on the type's pool (``TypePool.reserve``) until the units are
in it, as the claim loop reserves its own, so the two never claim the same capacity. Once
the claim comes back short (the pool is full again, or nothing is due) the claim loop is not
asked to claim the type again on the flush's wake-up: the next completion claims it, a
notification of new jobs or the poll interval does. During shutdown nothing is claimed;
units claimed while it began are given back at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from golemq_pg.store.port import (
    ClaimedJob,
    CompleteAndClaimParams,
    JobStore,
    LeaseRef,
    TypeSlots,
)
from golemq_pg.worker.handlers import HandlerSpec
from golemq_pg.worker.units import Unit

if TYPE_CHECKING:
    from golemq_pg.worker.runtime import Runtime

#: Puts claimed jobs into their types' buffers (``ClaimLoop.take``).
Distribute = Callable[[list[ClaimedJob], float], Mapping[str, int]]


class ClaimingPool(Protocol):
    """What claiming on completion needs from a buffered pool (``TypePool``)."""

    type: str
    spec: HandlerSpec
    lease_seconds: float
    hints: int
    maybe_more: bool

    def free(self) -> int:
        """How many more units the type may hold now."""

    def reserve(self, wanted: int) -> int:
        """Promise up to ``wanted`` units of room to a claim; returns how many."""

    def unreserve(self, count: int) -> None:
        """Give promised room back."""

    def drain_buffer(self) -> list[Unit]:
        """Take every buffered unit out."""

    def release_unstarted(self, unit: Unit) -> None:
        """Give a buffered unit back (attempt refunded)."""


class CompletionClaims:
    """What the completer needs to claim on completion (see the module docstring).

    ``pools``: the claim loop's buffered pools; ``distribute``: how claimed jobs reach their
    buffers; ``batch_cap``: the most one claim asks for (the claim loop's).
    """

    def __init__(
        self,
        runtime: Runtime,
        pools: Mapping[str, ClaimingPool],
        distribute: Distribute,
        *,
        batch_cap: int,
    ) -> None:
        self.runtime = runtime
        self.pools = pools
        self._distribute = distribute
        self.batch_cap = max(batch_cap, 1)
        #: Completed type -> the local buffered types its completions may free room for.
        self.targets = claim_targets(runtime, pools)
        #: Types whose claim on completion came back short since the last :meth:`served`:
        #: the claim loop need not be hinted for them.
        self._served: set[str] = set()

    def __bool__(self) -> bool:
        return bool(self.targets)

    def target(self, completed: Iterable[str]) -> ClaimingPool | None:
        """The pool to claim for after completing jobs of the ``completed`` types: the
        candidate with the most free room (None: none, or the worker is stopping)."""
        if self.runtime.stopping:
            return None
        targets = self.targets
        best: ClaimingPool | None = None
        room = 0
        for job_type in set(completed):
            for name in targets.get(job_type, ()):
                pool = self.pools.get(name)
                if pool is None:  # removed meanwhile (Worker.remove_handler)
                    continue
                free = pool.free()
                if free > room:
                    best, room = pool, free
        return best

    def complete(
        self,
        store: JobStore,
        owner: str,
        items: Sequence[LeaseRef],
        delete_types: Sequence[str],
        pool: ClaimingPool,
        started: Sequence[float | None] | None = None,
    ) -> set[str]:
        """Complete ``items`` and claim the room of ``pool`` in one store call; the claimed
        units go to the buffers. Returns the ids written (an error propagates: nothing was
        written and nothing claimed, and the caller retries the plain completion)."""
        hints = pool.hints
        runtime = self.runtime
        # Within the worker-wide room (max_concurrency) too, promised like the pool's own.
        room = runtime.take_room(min(pool.free(), self.batch_cap))
        limit = pool.reserve(room)
        runtime.give_room(room - limit, wake=False)
        try:
            began = time.monotonic()
            result = store.job_complete_and_claim(
                CompleteAndClaimParams(
                    owner=owner,
                    items=items,
                    claim=type_slots(pool, limit),
                    resources=self.runtime.config.resources,
                    delete_types=delete_types,
                    started=started,
                    defer_start=self.runtime.defer_start,
                )
            )
            claimed = list(result.claimed)
            if claimed:
                self._distribute(claimed, began)
        finally:
            pool.unreserve(limit)
            runtime.give_room(limit, wake=False)
        if limit > 0 and len(claimed) < limit:
            self._served.add(pool.type)
            if pool.hints == hints:
                # Claimed just now: a flush's wake-up need not make the claim loop ask again
                # (a hint that arrived meanwhile keeps its claim).
                pool.maybe_more = False
        if claimed and self.runtime.stopping:
            # Shutdown began while the claim was in flight and may have drained the buffers
            # already: give back what is buffered now (releasing a unit twice is harmless).
            for unit in pool.drain_buffer():
                pool.release_unstarted(unit)
        return result.written

    def served(self) -> set[str]:
        """The types claimed short since the last call (then forgotten)."""
        found, self._served = self._served, set()
        return found


def type_slots(pool: ClaimingPool, limit: int) -> TypeSlots:
    """A claim of ``limit`` units of ``pool``'s type, with its lease and guards."""
    spec = pool.spec
    return TypeSlots(
        type=pool.type,
        limit=limit,
        lease_seconds=pool.lease_seconds,
        serialize_by_scope=spec.serialize_by_scope,
        not_while_running=spec.not_while_running,
        waits_for=spec.waits_for,
        grouped=spec.grouped,
        max_batch=spec.max_batch,
    )


def claim_targets(
    runtime: Runtime, pools: Mapping[str, ClaimingPool]
) -> dict[str, tuple[str, ...]]:
    """For each member of a resource pool with a concurrency cap, the buffered handler
    types of this worker in that pool (a rate budget does not free on completion)."""
    found: dict[str, dict[str, None]] = {}
    for res in runtime.config.resources.values():
        if res.concurrency is None:
            continue
        local = [name for name in dict.fromkeys(res.types) if name in pools]
        if not local:
            continue
        for member in res.types:
            found.setdefault(member, {}).update(dict.fromkeys(local))
    return {member: tuple(names) for member, names in found.items()}


__all__ = ["ClaimingPool", "CompletionClaims", "claim_targets", "type_slots"]
