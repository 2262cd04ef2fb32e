"""State shared by the worker's threads: what every service may read, and nothing else.

The :class:`Runtime` holds the configuration, the store, the observers, the retry policy,
the lock that decides each unit's fate exactly once, the registry of per-type pools, the
claim loop's wake event and the worker's flags. It holds no service: services get each
other through their constructors (``Worker`` wires them) and report back through
callbacks, so this module imports none of them, not even for type checking. The pools are
seen here through the small protocols below.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Protocol

from golemq_pg.store.port import JobStore
from golemq_pg.worker.backoff import BackoffPolicy
from golemq_pg.worker.config import WorkerConfig
from golemq_pg.worker.handlers import HandlerSpec
from golemq_pg.worker.observers import ObserverHub
from golemq_pg.worker.units import Unit, UnitPool

#: How long room given back under ``max_concurrency`` is kept for the claimants refused
#: room before (the claim loop, transactional threads), in turn (:meth:`Runtime.take_room`).
HANDOFF = 0.05
#: Most job ids listed in one log line; the count is always logged.
LOG_IDS = 20


#: Whether the worker's claims leave a job's start to its handler's (see :mod:`starts`).
#: The benchmark harness turns it off in its own worker processes to measure the drain as it
#: was before (the claim stamps the start, nothing else writes it); nothing else may.
DEFER_START = True

class SharedPool(UnitPool, Protocol):
    """A pool as the shared state sees it: its units, and a way to say work may be due."""

    def hint(self) -> None:
        """Jobs of this pool's type may be due: look for them soon."""


class SelfClaimingPool(SharedPool, Protocol):
    """A transactional pool: its own threads claim, one job per transaction."""

    def look_again(self) -> int:
        """Make the threads claim again now; a mark for :meth:`looked_since`."""

    def looked_since(self, mark: int) -> bool:
        """Nothing running, and a claim begun after :meth:`look_again` returned ``mark``
        found nothing due."""


class Runtime:
    """Everything the worker's threads share. Built by ``Worker.start``; no service is
    attached to it later (its flags change, and so does its handler registry).

    ``pools`` and ``tx_pools`` are the registry of the worker's pools, keyed by type. The
    ``Worker`` passes the mappings in and fills them before any thread starts (a pool is
    built with the services it needs, and those read this runtime). A handler added or
    removed while the worker runs replaces ``handlers``, ``pools`` and ``tx_pools`` with
    new objects (copy on write, see ``Worker.handler``): they are never changed in place
    once threads run, so any thread may iterate the ones it read.
    """

    def __init__(
        self,
        config: WorkerConfig,
        store: JobStore,
        *,
        handlers: Sequence[HandlerSpec] = (),
        pools: Mapping[str, SharedPool],
        tx_pools: Mapping[str, SelfClaimingPool],
        until_empty: bool = False,
    ) -> None:
        self.config = config
        self.store = store
        self.owner = config.worker_id
        self.hub = ObserverHub(config.observers, config.worker_id)
        self.policy = BackoffPolicy(
            config.base_backoff, config.max_backoff, config.retry_strategy
        )
        #: Decides unit state transitions and settlement (see :mod:`units`).
        self.lock = threading.Lock()
        #: Every registered handler, transactional ones included (and removed ones whose
        #: jobs still run).
        self.handlers = tuple(handlers)
        #: Types of ``handlers`` removed while the worker runs (``Worker.remove_handler``)
        #: whose jobs are still finishing: not listed in the worker registry.
        self.retiring: frozenset[str] = frozenset()
        #: Buffered handler types: the claim loop leases their jobs into their buffers.
        self.pools = pools
        #: Transactional handler types: claimed by their own threads, one job per
        #: transaction, never renewed or reconciled (see :mod:`transactional`).
        self.tx_pools = tx_pools
        #: Wakes the claim loop: capacity freed, a notification, a flush, a stop.
        self.wake = threading.Event()
        #: Set once shutdown begins: nothing new starts.
        self.stopping = False
        #: Set by ``run_until_empty``: the claim loop reports when the queue is drained.
        self.until_empty = until_empty
        #: Changes (never back to an earlier value) whenever this worker leases a job and
        #: whenever a transactional handler has finished: run_until_empty's drain check
        #: tells by it whether anything ran since it began to look (see :meth:`touch`).
        self.activity = 0
        self._ticks = itertools.count(1)
        #: Set after the first maintenance pass (expired leases reaped once), so that
        #: ``run_until_empty`` also runs the jobs of a crashed worker.
        self.maintained = threading.Event()
        #: Worker-wide room (``max_concurrency``) promised to claims in flight and to
        #: transactional threads' jobs; guarded by ``_room_lock``.
        self.promised = 0
        self._room_lock = threading.Lock()
        #: Claimants refused room, and since when (see :meth:`take_room`).
        self._refused: dict[str, float] = {}
        self._freed_at = 0.0
        #: Whether the claims leave the start to the handler's (see :mod:`starts`).
        self.defer_start = DEFER_START

    # -- the worker-wide cap (max_concurrency) ------------------------------------------------
    def take_room(self, wanted: int, claimant: str = "") -> int:
        """Promise up to ``wanted`` jobs of the worker-wide room (``max_concurrency``) to a
        claim about to be sent; returns how many were granted (``wanted`` without a cap).
        Held units of buffered types count against it, and so does what is promised.

        ``claimant`` ("": the claim loop, else a transactional type): room freed less than
        :data:`HANDOFF` ago goes first to the claimants refused room before this one, in the
        order they were refused, so a thread that frees room cannot take it straight back."""
        cap = self.config.max_concurrency
        if cap is None or wanted <= 0:
            return max(wanted, 0)
        now = time.monotonic()
        with self._room_lock:
            used = self.promised + sum(len(pool.active) for pool in self.pools.values())
            room = cap - used
            if now - self._freed_at < HANDOFF:
                mine = self._refused.get(claimant, now)
                room -= sum(1 for who, since in self._refused.items()
                            if who != claimant and since < mine)
            granted = max(min(wanted, room), 0)
            self.promised += granted
            if granted:
                self._refused.pop(claimant, None)
            else:
                self._refused.setdefault(claimant, now)
        return granted

    def give_room(self, count: int, *, wake: bool = True) -> None:
        """Give back room promised by :meth:`take_room` (the claimed units are held now, or
        the claim failed, or a transactional job ended); ``wake``: wake the claim loop, which
        may claim with it (the loop itself passes False)."""
        if self.config.max_concurrency is None or count <= 0:
            return
        with self._room_lock:
            self.promised -= count
            self._freed_at = time.monotonic()
        if wake:
            self.wake_claimer()

    # -- views ------------------------------------------------------------------------------
    def units(self) -> list[Unit]:
        """A snapshot of every unit the worker holds (buffered, running or finishing)."""
        out: list[Unit] = []
        for pool in self.pools.values():
            out.extend(pool.active.copy().values())
        return out

    def tx_units(self) -> list[Unit]:
        """Units running in transactional handlers."""
        out: list[Unit] = []
        for pool in self.tx_pools.values():
            out.extend(pool.active.copy().values())
        return out

    def touch(self) -> None:
        """Note that work was leased or done (see :attr:`activity`). Every call stores a
        value never stored before (``next`` on the counter is atomic), so a reader that
        compares two reads sees any call between them, even among racing threads."""
        self.activity = next(self._ticks)

    def held_units(self) -> list[Unit]:
        """Units whose outcome is still open (their leases matter)."""
        return [u for u in self.units() if not u.settled]

    def holds_units(self) -> bool:
        """Whether any unit is held (buffered, running or finishing), transactional or not."""
        return any(pool.active for pool in self.pools.values()) or any(
            pool.active for pool in self.tx_pools.values()
        )

    # -- wake-ups ---------------------------------------------------------------------------
    def wake_claimer(self) -> None:
        """Wake the claim loop (cheap when it is already awake)."""
        if not self.wake.is_set():
            self.wake.set()

    def hint(self, types: tuple[str, ...], *, wake: bool = True) -> bool:
        """Jobs of ``types`` (empty: any type) may be due; True if any buffered pool handles
        one. ``wake=False`` marks the pools without waking the claim loop (the caller runs
        the claim pass itself, or wakes the loop when it cannot)."""
        hit = False
        for name, pool in self.pools.items():
            if not types or name in types:
                pool.hint()
                hit = True
        for name, tx_pool in self.tx_pools.items():
            if not types or name in types:
                tx_pool.hint()
        if hit and wake:
            self.wake_claimer()
        return hit


def unblocked_by(runtime: Runtime) -> dict[str, frozenset[str]]:
    """For each type whose settled leases may let a guarded claim proceed, the handler types
    of this worker that may then claim: the members of a resource pool with a concurrency cap
    (a rate budget does not free on completion), a serialize_by_scope or grouped type itself,
    and the types whose ``not_while_running`` or ``waits_for`` names it."""
    specs = runtime.handlers
    local = {spec.type for spec in specs}
    found: dict[str, set[str]] = {}
    for res in runtime.config.resources.values():
        if res.concurrency is None:
            continue
        members = set(res.types)
        for member in members:
            found.setdefault(member, set()).update(members & local)
    for spec in specs:
        if spec.serialize_by_scope or spec.grouped:
            found.setdefault(spec.type, set()).add(spec.type)
        for other in (*spec.not_while_running, *spec.waits_for):
            found.setdefault(other, set()).add(spec.type)
    return {name: frozenset(types) for name, types in found.items()}


def delete_types(runtime: Runtime) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The handler types whose rows ``delete_on`` deletes: (on success, on dead letter). A
    handler's own ``delete_on`` wins over the Worker's."""
    default = runtime.config.delete_on
    on_success: list[str] = []
    on_failure: list[str] = []
    for spec in runtime.handlers:
        rule = spec.delete_on or default
        if rule != "never":
            on_success.append(spec.type)
        if rule == "always":
            on_failure.append(spec.type)
    return tuple(on_success), tuple(on_failure)


__all__ = [
    "HANDOFF",
    "LOG_IDS",
    "Runtime",
    "SelfClaimingPool",
    "SharedPool",
    "delete_types",
    "unblocked_by",
]
