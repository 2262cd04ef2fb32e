"""Per-type slots: a buffer of claimed units and the threads that run them.

Each handler type gets ``concurrency`` long-lived threads (slots) pulling units from one
in-process buffer. There is no fixed executor: when a handler ignores its signal past
``abandon_grace`` the supervisor writes its slot off and starts a replacement thread, so
the type keeps its full concurrency; the stuck thread exits whenever its handler finally
returns (its late result is dropped, the unit having been settled already). A handler that
raises ``BaseException`` fails its attempt and its thread carries on.

Capacity: a type holds at most ``concurrency + prefetch`` units (running plus buffered).
The prefetch adapts to the handler: about twice what the slots finish during one claim
round trip (both measured), so fast handlers never wait for a claim while slow handlers do
not hoard jobs that other workers could run. It is 0 until a handler's duration is known,
then stays between ``concurrency`` and :data:`MAX_ADAPTIVE_PREFETCH` (two claims of
:data:`DEFAULT_CLAIM_CAP`) by default, and is 0 again for a type whose handlers take
:data:`SLOW_HANDLER` or more, or with ``prefetch=False``; with an
explicit ``batch_size`` B it starts at B
and stays between ``min(concurrency, 2B)`` and ``2B``, so the next batch of B can be claimed
while the current one runs. The claim loop refills a type when its buffer drains to
``watermark`` (half the prefetch), not per job.
"""

from __future__ import annotations

import queue
import threading
from typing import TYPE_CHECKING, Protocol

import structlog

from golemq_pg.worker.handlers import HandlerSpec
from golemq_pg.worker.units import Slot, Unit

if TYPE_CHECKING:
    from golemq_pg.worker.execution import Executor
    from golemq_pg.worker.outcomes import Outcomes
    from golemq_pg.worker.runtime import Runtime

log = structlog.get_logger("golemq_pg.worker.pool")

#: Most jobs one claim leases when ``batch_size`` is not given.
DEFAULT_CLAIM_CAP = 500
#: Most jobs an adaptive prefetch buffers per type: two default claims, so that for handlers
#: fast enough to need it the next claim is in flight while the last one's jobs run (with a
#: single claim's worth the buffer ran dry during every claim and the claim connection sat
#: idle while the handlers caught up: a drain measured 0 jobs buffered at each claim).
MAX_ADAPTIVE_PREFETCH = 2 * DEFAULT_CLAIM_CAP
#: A type whose handlers take this long on average (seconds) buffers nothing ahead of its
#: threads: it claims only what free threads start at once.
SLOW_HANDLER = 1.0
#: Weight of the newest handler duration in the running average.
_DURATION_WEIGHT = 0.2


class UnitBuffer(Protocol):
    """A type's buffer of claimed units, as the claim loop and shutdown use it."""

    def put(self, item: Unit | None, /) -> None:
        """Add a claimed unit (None: a sentinel that stops one idle handler thread)."""

    def get_nowait(self) -> Unit | None:
        """Take the oldest entry; raises ``queue.Empty`` when there is none."""

    def qsize(self) -> int:
        """How many entries wait."""


class TypePool:
    """The slots, buffer and bookkeeping of one handler type.

    ``executor`` runs the units its slots take; ``outcomes`` settles the ones given back
    unstarted at shutdown.
    """

    #: A handler that ignores its signal is written off and its slot replaced.
    abandonable = True

    def __init__(
        self,
        runtime: Runtime,
        spec: HandlerSpec,
        executor: Executor,
        outcomes: Outcomes,
        *,
        batch_size: int | None,
    ) -> None:
        self.runtime = runtime
        self.spec = spec
        self.executor = executor
        self.outcomes = outcomes
        self.type = spec.type
        concurrency = spec.concurrency
        if not spec.prefetch:
            # prefetch=False: only what free threads start at once is claimed.
            self.max_prefetch = self.prefetch = 0
        elif batch_size is None:
            self.max_prefetch = max(MAX_ADAPTIVE_PREFETCH, concurrency)
            # Nothing buffered until a handler's duration is known: a type whose first jobs
            # take seconds must not hoard them while other workers are free.
            self.prefetch = 0
        else:
            self.max_prefetch = 2 * batch_size
            self.prefetch = batch_size
        self.min_prefetch = min(concurrency, self.max_prefetch)
        self.capacity = concurrency + self.prefetch
        self.watermark = self.prefetch // 2
        #: Running average of handler durations (seconds); None until one finished.
        self.avg_duration: float | None = None
        self.lease_seconds = runtime.config.lease_seconds(spec.timeout)
        #: Units held: buffered, running, or finished but not yet let go. Keyed by unit key.
        #: Plain dict operations are atomic under the GIL, so the hot path takes no lock.
        self.active: dict[tuple[str, int], Unit] = {}
        self._queue: queue.SimpleQueue[Unit | None] = queue.SimpleQueue()
        #: Where the claim loop puts this type's units (the handler threads' queue here).
        self.buffer: UnitBuffer = self._queue
        #: Whether the last claim filled this type's request (more may be due), or a
        #: notification named it. Cleared when a claim comes back short.
        self.maybe_more = True
        #: Bumped by every hint, so a hint that arrives while a claim is in flight is not
        #: lost when that claim comes back short.
        self.hints = 0
        self._slots: set[Slot] = set()
        self._slots_lock = threading.Lock()
        self._numbers = 0
        #: Capacity promised to claims in flight (the claim loop's, and the completer's
        #: claim on completion, see :mod:`poolclaim`), so the two never claim the same room.
        self.reserved = 0
        self._reserve_lock = threading.Lock()
        #: Set by ``Worker.remove_handler``: nothing more is claimed or started for this
        #: type; what is buffered goes back (see :meth:`close`). Read without a lock.
        self.closed = False
        #: Held while claimed units are put into the buffer, and by :meth:`close`: a unit is
        #: either buffered before the close drains the buffer, or given back by the claim.
        self.gate = threading.Lock()

    # -- capacity ---------------------------------------------------------------------------
    def free(self) -> int:
        """How many more units this type may hold now (claims in flight counted)."""
        if self.closed:
            return 0
        return self.capacity - len(self.active) - self.reserved

    def reserve(self, wanted: int) -> int:
        """Promise up to ``wanted`` units of free capacity to a claim about to be sent;
        returns how many were granted. Give them back with :meth:`unreserve` once the
        claimed units are in :attr:`active` (or the claim failed)."""
        with self._reserve_lock:
            room = 0 if self.closed else self.capacity - len(self.active) - self.reserved
            granted = max(min(wanted, room), 0)
            self.reserved += granted
        return granted

    def unreserve(self, count: int) -> None:
        """Give back capacity promised by :meth:`reserve`."""
        if count:
            with self._reserve_lock:
                self.reserved -= count

    def wants_claim(self) -> bool:
        """Free capacity, and the buffer has drained to the watermark."""
        return (
            not self.closed
            and len(self.active) < self.capacity
            and self.buffer.qsize() <= self.watermark
        )

    def hint(self) -> None:
        """Jobs of this type may be due: ask for it at the claim loop's next pass."""
        self.hints += 1
        self.maybe_more = True

    def record_duration(self, seconds: float) -> None:
        """Fold one handler duration into the running average (races are harmless)."""
        avg = self.avg_duration
        self.avg_duration = seconds if avg is None else avg + (seconds - avg) * _DURATION_WEIGHT

    def tune(self, claim_seconds: float) -> None:
        """Adapt the prefetch to the handler speed and the claim round trip."""
        avg = self.avg_duration
        if avg is None:
            return
        concurrency = self.spec.concurrency
        finished_per_claim = concurrency * claim_seconds / max(avg, 1e-6)
        prefetch = int(min(max(2 * finished_per_claim, self.min_prefetch), self.max_prefetch))
        if avg >= SLOW_HANDLER:
            # A slow type is not hoarded: a buffered job would wait seconds for a thread of
            # this worker while another worker's threads may be free.
            prefetch = 0
        if prefetch != self.prefetch:
            self.prefetch = prefetch
            self.capacity = concurrency + prefetch
            self.watermark = prefetch // 2

    def set_concurrency(self, spec: HandlerSpec) -> None:
        """Run ``spec.concurrency`` handlers from now on (``Worker.set_concurrency``): the
        capacity follows at once; more threads start now, surplus ones end after their
        current job."""
        concurrency = spec.concurrency
        with self._reserve_lock:
            self.spec = spec
            self.min_prefetch = min(concurrency, self.max_prefetch)
            # A type buffering nothing (prefetch=False, a slow type, or one whose duration is
            # not known yet) goes on buffering nothing; tune() decides once it is known.
            if 0 < self.prefetch < self.min_prefetch:
                self.prefetch = self.min_prefetch
                self.watermark = self.prefetch // 2
            self.capacity = concurrency + self.prefetch
        self.resize()

    def resize(self) -> None:
        """Start or end threads to match ``spec.concurrency``."""
        with self._slots_lock:
            missing = self.spec.concurrency - len(self._slots)
        if self.runtime.stopping or self.closed:
            return
        for _ in range(missing):
            self.spawn()
        for _ in range(-missing):
            self.buffer.put(None)  # wakes an idle thread, which sees it is surplus

    def close(self) -> list[Unit]:
        """Claim and start nothing more of this type (``Worker.remove_handler``); returns
        the buffered units taken out (the caller gives them back), and wakes idle threads
        so they end."""
        with self.gate:
            self.closed = True
            taken = self.drain_buffer()
        self.stop_threads()
        return taken

    def busy(self) -> bool:
        """Whether any unit is still held (buffered, running or finishing)."""
        return bool(self.active)

    def _surplus(self, slot: Slot) -> bool:
        """Whether ``slot`` must end now (the type was removed or has too many threads);
        forgotten when True."""
        if not self.closed and len(self._slots) <= self.spec.concurrency:
            return False  # the hot path: no lock
        with self._slots_lock:
            if self.closed or len(self._slots) > self.spec.concurrency:
                self._slots.discard(slot)
                return True
        return False

    # -- threads ----------------------------------------------------------------------------
    def start(self) -> None:
        """Start ``concurrency`` handler threads."""
        for _ in range(self.spec.concurrency):
            self.spawn()

    def spawn(self) -> Slot:
        """Start one more handler thread (initially, or replacing an abandoned one)."""
        with self._slots_lock:
            self._numbers += 1
            slot = Slot(self._numbers)
            self._slots.add(slot)
        thread = threading.Thread(
            target=self._slot_loop, args=(slot,), daemon=True,
            name=f"golemq-{self.type[:40]}-{slot.number}",
        )
        slot.thread = thread
        thread.start()
        return slot

    def interrupt(self, unit: Unit) -> bool:
        """Only transactional handlers have a statement to cancel; here, nothing to do
        (an ignored signal is handled by abandoning the slot instead)."""
        del unit
        return False

    def write_off(self, slot: Slot) -> None:
        """Forget an abandoned slot and start a replacement (unless shutting down)."""
        slot.abandoned = True
        with self._slots_lock:
            self._slots.discard(slot)
        if not self.runtime.stopping:
            self.spawn()

    def live_slots(self) -> list[Slot]:
        """Slots not written off."""
        with self._slots_lock:
            return list(self._slots)

    def drain_buffer(self) -> list[Unit]:
        """Take every buffered unit out (shutdown)."""
        taken: list[Unit] = []
        while True:
            try:
                unit = self.buffer.get_nowait()
            except queue.Empty:
                return taken
            if unit is not None:
                taken.append(unit)

    def stop_threads(self) -> None:
        """Wake every idle thread with a sentinel so it exits."""
        for _ in self.live_slots():
            self.buffer.put(None)

    # -- the loop ---------------------------------------------------------------------------
    def _slot_loop(self, slot: Slot) -> None:
        runtime = self.runtime
        get = self._queue.get
        qsize = self._queue.qsize
        wake = runtime.wake
        execute = self.executor.execute
        while True:
            if self._surplus(slot):
                return
            unit = get()
            if unit is None:
                if runtime.stopping:
                    with self._slots_lock:
                        self._slots.discard(slot)
                    return
                continue  # a resize or a close: the check above decides
            try:
                if runtime.stopping or self.closed:
                    self.release_unstarted(unit)
                else:
                    execute(self, slot, unit)
            except BaseException as exc:
                log.exception(
                    "slot_internal_error", type=self.type, job_id=unit.key[0],
                    error_type=type(exc).__name__,
                )
            if slot.abandoned:
                return
            if qsize() <= self.watermark and not wake.is_set():
                wake.set()

    def release_unstarted(self, unit: Unit) -> None:
        """Give a buffered unit back to the queue (attempt refunded): shutdown path."""
        self.outcomes.release_unstarted(unit)
        self.active.pop(unit.key, None)


__all__ = ["DEFAULT_CLAIM_CAP", "MAX_ADAPTIVE_PREFETCH", "TypePool", "UnitBuffer"]
