"""A unit of claimed work: one job, or one group of jobs for a grouped handler.

A unit lives from the claim until its handler thread lets go of it. Two things about it are
decided exactly once, under the runtime's lock:

* its *state*: BUFFERED -> RUNNING -> FINISHED (the handler returned) or ABANDONED (the
  handler ignored its signal past ``abandon_grace``; its thread is written off);
* whether it is *settled*: the first party to settle a unit decides its outcome (the handler
  thread with its result, the supervisor on abandon, or an abort for cancellation and lease
  loss). Everyone else's result is dropped, which is how a late completion is discarded.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Protocol

from golemq_pg.store.port import ClaimedJob, LeaseRef
from golemq_pg.worker.events import CancelSignal, LinkReader

if TYPE_CHECKING:
    from golemq_pg.worker.handlers import HandlerSpec

BUFFERED = 0
RUNNING = 1
FINISHED = 2
ABANDONED = 3


#: A unit's key among those its worker holds: the first job's id and its lease token.
UnitKey = tuple[str, int]


class Slot:
    """One handler thread. ``abandoned`` is set when the supervisor writes it off."""

    __slots__ = ("abandoned", "number", "thread")

    def __init__(self, number: int) -> None:
        self.number = number
        self.abandoned = False
        self.thread: threading.Thread | None = None


class UnitPool(Protocol):
    """What a unit, and every service handling it, needs from the pool that owns it.

    Both kinds of pool provide it: the buffered pools the claim loop fills and the
    transactional ones whose threads claim for themselves. Callers use it instead of
    asking which kind a pool is.
    """

    @property
    def type(self) -> str:
        """The handler type."""

    @property
    def spec(self) -> HandlerSpec:
        """The handler and its options."""

    @property
    def lease_seconds(self) -> float:
        """The lease a claim of this type asks for."""

    @property
    def active(self) -> dict[UnitKey, Unit]:
        """The units held, by unit key (a unit leaves it when its thread lets go)."""

    @property
    def abandonable(self) -> bool:
        """Whether a handler ignoring its signal may be written off (its thread replaced).

        False for transactional handlers: their thread owns the claim's transaction.
        """

    def interrupt(self, unit: Unit) -> bool:
        """Cut short what ``unit``'s handler is blocked in, if the pool can; True if sent."""

    def write_off(self, slot: Slot) -> None:
        """Forget an abandoned handler thread (and replace it, if the pool does)."""


class Unit:
    """Claimed work waiting in a buffer, running, or just finished."""

    __slots__ = (
        "abandon_at",
        "claimed_at",
        "deadline",
        "finished_at",
        "jobs",
        "key",
        "lease_deadline",
        "links",
        "pool",
        "result",
        "settled",
        "signal",
        "slot",
        "started_at",
        "state",
        "warn_at",
    )

    def __init__(
        self,
        pool: UnitPool,
        jobs: tuple[ClaimedJob, ...],
        lease_deadline: float,
        claimed_at: float = 0.0,
    ) -> None:
        self.pool = pool
        self.jobs = jobs
        #: Unique among the units a worker holds, even when it holds one job twice (taken
        #: back by requeue_stale or the reaper, then claimed here again): id and lease token.
        self.key = (jobs[0].id, jobs[0].lease_token)
        self.signal = CancelSignal()
        self.state = BUFFERED
        self.settled = False
        self.slot: Slot | None = None
        self.started_at = 0.0
        self.finished_at = 0.0
        #: Monotonic time by which the timeout fires (None: no timeout).
        self.deadline: float | None = None
        #: Monotonic time after which an aborted handler is abandoned.
        self.abandon_at: float | None = None
        #: A conservative local estimate of when the lease expires (monotonic clock).
        self.lease_deadline = lease_deadline
        #: Monotonic time the claim returned it (0: unknown); the buffered part of the wait.
        self.claimed_at = claimed_at
        #: The handler's return value, encoded, to store as the job's result (None: none).
        self.result: bytes | None = None
        #: Where its handler's ``job.parents`` are read: its claim batch's ClaimLinks (None:
        #: one read of its own).
        self.links: LinkReader | None = None
        #: Transactional units: monotonic time past which their open transaction is
        #: reported as slow (``transaction_warning``; None: not watched, or reported).
        self.warn_at: float | None = None

    @property
    def refs(self) -> tuple[LeaseRef, ...]:
        """The unit's leases (job id and fencing token): its jobs, each its own LeaseRef."""
        return self.jobs

    @property
    def attempt(self) -> int:
        """The highest attempt among the unit's jobs (1-based)."""
        return max(job.attempt for job in self.jobs)

    def holds(self, job_ids: set[str]) -> bool:
        """Whether any of ``job_ids`` belongs to this unit."""
        return any(job.id in job_ids for job in self.jobs)

    def __repr__(self) -> str:
        return f"Unit(key={self.key!r}, jobs={len(self.jobs)}, state={self.state})"


__all__ = ["ABANDONED", "BUFFERED", "FINISHED", "RUNNING", "Slot", "Unit", "UnitPool"]
