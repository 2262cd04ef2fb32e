"""The claim loop: one thread that leases due jobs for every handler type with room.

One ``job_claim`` call covers every type with free capacity (per-type limits, lease and
guard flags, in a rotating order so no type starves the others when ``batch_size`` caps
the total). Claimed work goes to each type's buffer; the loop claims again when a buffer
drains to its watermark, when a notification names a type it serves, or when the poll
interval elapses, and never spins on an empty queue: after a short claim a type is only
asked for again on a notification or at the next poll. Store errors back off (capped at a
few seconds) and are logged at a bounded rate, and reported to observers' ``on_error`` (kind
``"claim"``) once per incident; the loop never dies.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import structlog

from golemq_pg._errortext import error_text
from golemq_pg.store.port import (
    ClaimBlock,
    ClaimedJob,
    ClaimRequest,
    LeaseRef,
    TypeSlots,
    claim_blocked,
)
from golemq_pg.worker.events import ClaimLinks
from golemq_pg.worker.pool import DEFAULT_CLAIM_CAP
from golemq_pg.worker.poolclaim import type_slots
from golemq_pg.worker.runtime import LOG_IDS
from golemq_pg.worker.service import Service
from golemq_pg.worker.units import Unit

if TYPE_CHECKING:
    from datetime import datetime

    from golemq_pg.worker.blocked import BlockedReporter
    from golemq_pg.worker.pool import TypePool
    from golemq_pg.worker.runtime import Runtime, SelfClaimingPool

log = structlog.get_logger("golemq_pg.worker.dispatcher")

#: Default most jobs per claim when ``batch_size`` is not given.
DEFAULT_BATCH_CAP = DEFAULT_CLAIM_CAP
#: Weight of the newest claim round trip in the running average.
_LATENCY_WEIGHT = 0.2
#: Longest pause between claim retries while the store fails.
MAX_ERROR_BACKOFF = 5.0
#: A claim round trip counted by the adaptive prefetch is capped at this (seconds): a longer
#: one waited for a pool connection or a lock (an outage, a stall), and would otherwise make
#: every type prefetch its maximum, hoarding jobs other workers could run.
MAX_TUNE_SAMPLE = 0.5
#: While the store keeps failing, repeat the warning at most this often (seconds).
ERROR_LOG_EVERY = 30.0
#: The listener runs an idle loop's claim pass itself only while claims average less than
#: this (seconds): a slow database would keep it from reading cancel notices meanwhile.
LISTENER_CLAIM_MAX = 0.05


class EmptyQueueWatch:
    """What ``run_until_empty()`` waits for (``drained``): a stretch in which this worker
    held, wrote and ran nothing, and every type it handles was asked for due work, by the
    claim loop for the buffered types and by their own threads for the transactional ones,
    with claims begun after the stretch did, and none found any.

    A stretch begins on a pass that finds the worker idle and ends when anything is leased
    or a transactional handler finishes (``Runtime.activity`` moves): the jobs this
    worker's own completions released from WAITING, and those its handlers added, were
    committed before the stretch began, so its claims see them, notification or not.
    """

    def __init__(self) -> None:
        self.drained = threading.Event()
        #: Types asked by the empty claims of the current stretch.
        self._asked: set[str] = set()
        #: ``Runtime.activity`` when the current stretch began (None: no stretch).
        self._since: int | None = None
        #: Per transactional type, the mark of the claim the stretch asked it for.
        self._marks: dict[str, int] = {}

    def reset(self) -> None:
        """Look again (parked jobs were made due)."""
        self._asked.clear()
        self._since = None
        self.drained.clear()

    def begin(self, activity: int, tx_pools: Mapping[str, SelfClaimingPool]) -> None:
        """The worker is idle and nothing happened since ``activity`` was read (before the
        idle check): go on with the stretch begun then, or begin one, asking every
        transactional type to claim again."""
        marks = self._marks
        if self._since != activity:
            self._since = activity
            self._asked.clear()
            marks.clear()
        for name, pool in tx_pools.items():
            if name not in marks:  # also a type added while the stretch went on
                marks[name] = pool.look_again()

    def settled(self, activity: int, tx_pools: Mapping[str, SelfClaimingPool]) -> bool:
        """Whether the stretch still holds (nothing leased or finished since it began) and
        every transactional type has looked since, found nothing and runs nothing."""
        if self._since is None or self._since != activity:
            return False
        marks = self._marks
        return all(name in marks and pool.looked_since(marks[name])
                   for name, pool in tx_pools.items())

    def asked(self, types: Sequence[str], open_types: Sequence[str]) -> bool:
        """Note an empty claim of ``types`` in the stretch; whether the stretch's empty
        claims have now asked for every type in ``open_types`` (batch_size may leave some
        out of one claim)."""
        self._asked.update(types)
        return self._asked.issuperset(open_types)


class ClaimLoop(Service):
    """Leases jobs into the per-type buffers. See the module docstring.

    ``pools`` are the buffered pools it fills (the runtime's registry, seen whole);
    ``writes_idle`` says whether the completer has nothing left to write (``run_until_empty``
    waits for it); ``writes_backlogged`` whether it has so much that claiming must wait for
    its next flush (which wakes the loop); ``blocked`` diagnoses types a guard keeps getting
    nothing for. It pauses on the runtime's wake event, which a finishing handler, a flush,
    a hint or a stop sets.
    """

    def __init__(
        self,
        runtime: Runtime,
        pools: Mapping[str, TypePool],
        *,
        writes_idle: Callable[[], bool],
        writes_backlogged: Callable[[], bool],
        blocked: BlockedReporter,
        batch_size: int | None,
    ) -> None:
        super().__init__("golemq-claim", runtime.owner, kick_event=runtime.wake)
        self.runtime = runtime
        self.pools = pools
        self._writes_idle = writes_idle
        self._writes_backlogged = writes_backlogged
        self.batch_size = batch_size or DEFAULT_BATCH_CAP
        #: Running average of the claim round trip (seconds), for adaptive prefetch.
        self.claim_seconds: float | None = None
        self.poll_interval = runtime.config.poll_interval
        #: Set when a claim made with nothing held and nothing to write came back empty.
        #: run_until_empty's watch of the claims: when the queue is drained.
        self.empty = EmptyQueueWatch()
        self._next_poll = 0.0
        self._rotation = 0
        #: Types asked by the empty claims of an idle run_until_empty stretch.
        self._failures = 0
        self._failing_since = 0.0
        self._last_error_log = 0.0
        self._blocked = blocked
        #: Held by the thread running a claim pass: this loop's, or the listener's (see
        #: :meth:`hint`); the loop's state is only ever touched under it.
        self._turn = threading.Lock()
        #: Set when a stop stopped waiting for the claim in flight (see :meth:`stop`).
        self._given_up = False
        #: Types whose jobs a job.parents read found with parents: a claim holding one has
        #: its links read ahead (ClaimLinks.prefetch) on a helper thread made on first use.
        self._parent_types: set[str] = set()
        self._prefetcher: ThreadPoolExecutor | None = None

    # -- lifecycle --------------------------------------------------------------------------
    def stop(self, timeout: float | None = None) -> None:
        """Stop claiming; waits for a claim in flight (this loop's or one the listener runs)
        to be distributed."""
        super().stop(timeout)
        if self._turn.acquire(timeout=-1 if timeout is None else timeout):
            self._turn.release()
            if self._prefetcher is not None:  # no claim can submit to it any more
                self._prefetcher.shutdown(wait=True, cancel_futures=True)
        else:
            # The claim is stuck (a database that is down: the pool's connection timeout);
            # shutdown moves on, and whatever it leases after all is given back at once.
            self._given_up = True

    # -- hints ------------------------------------------------------------------------------
    def hint(self, types: Iterable[str]) -> None:
        """Jobs of ``types`` became due (empty: any type): claim them now.

        When the loop is idle (waiting, not claiming, not recovering from store errors, its
        claims quick) the calling thread, the listener, runs the claim pass itself, the way
        a bare LISTEN loop claims on the thread the notification woke: waking this loop's
        thread first cost a thread wake-up on the path from enqueue to handler (and under
        load its GIL hand-off, milliseconds at the tail). Otherwise it wakes the loop, as
        before. Cancel notices wait for such a pass (one quick claim) to end.
        """
        if not self.runtime.hint(tuple(types), wake=False):
            return
        if not self._claim_here():
            self.runtime.wake_claimer()

    def _claim_here(self) -> bool:
        """Run one claim pass on the calling thread if the loop is idle; False when the loop
        must be woken (it is busy, failing, or the pass wants another one at once)."""
        slow = self.claim_seconds is not None and self.claim_seconds > LISTENER_CLAIM_MAX
        if slow or self._failures or not self._turn.acquire(blocking=False):
            return False
        try:
            if self.stop_event.is_set() or self.runtime.stopping:
                return True  # stopped: nothing is claimed any more
            again = self._iteration()
        except Exception as exc:  # noqa: BLE001 - the loop's own pass retries and reports
            log.warning("claim_pass_failed", worker_id=self.runtime.owner,
                        error_type=type(exc).__name__, error=error_text(exc))
            return False
        finally:
            self._turn.release()
        # The loop's own pause covers a later poll (it recomputes when it wakes); only a pass
        # that asks for another right away needs its thread.
        return again is None or again > 0

    def take(self, jobs: list[ClaimedJob], claimed_at: float) -> dict[str, int]:
        """Put jobs leased elsewhere (the completer's claim on completion, see
        :mod:`~golemq_pg.worker.poolclaim`) into their types' buffers, as a claim of this
        loop would; ``claimed_at``: monotonic time the claim was sent. Units per type."""
        return self._distribute(jobs, claimed_at)

    def poll_now(self) -> None:
        """Forget the poll schedule and claim at once (e.g. after the listener reconnected)."""
        for pool in self.pools.values():
            pool.hint()
        for tx_pool in self.runtime.tx_pools.values():
            tx_pool.hint()
        self._next_poll = 0.0
        self.runtime.wake.set()

    # -- run_until_empty ----------------------------------------------------------------------
    def wait_drained(self, limit: float | None, *, with_scheduled: bool = False) -> bool:
        """Wait up to ``limit`` seconds (None: no bound) for :attr:`drained`; False on timeout.

        With ``with_scheduled``, each time the queue looks drained the store makes every job
        of the handled types parked in the future (scheduled, retry backoff) due now
        (``job_run_now_types``; paused types stay parked), and the wait goes on until a drain
        finds none left. The claim itself is untouched: the parked jobs simply become due.
        """
        deadline = None if limit is None else time.monotonic() + limit
        types = sorted({*self.pools, *self.runtime.tx_pools})
        while True:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            if not self.empty.drained.wait(left):
                return False
            if not with_scheduled or not self.runtime.store.job_run_now_types(types):
                return True
            # Nothing runs and nothing is held (that is what drained means): claim again.
            # The reset ends the stretch, so the next one asks every type again, the
            # transactional ones included.
            self.poll_now()
            self.empty.reset()
            self.runtime.wake.set()

    # -- the loop (hooks of Service) ----------------------------------------------------------
    def step(self) -> float | None:
        """Claim once if anything calls for it; return how long to pause (None: until woken,
        0: not at all)."""
        with self._turn:
            self.runtime.wake.clear()
            return self._iteration()

    def failed(self, exc: BaseException, failures: int) -> float:
        """A claim pass failed outside the store call (a bug): log it, pause a second (only
        a stop cuts that short)."""
        del failures
        log.exception("claim_loop_internal_error", error_type=type(exc).__name__,
                      error=error_text(exc))
        self.stop_event.wait(1.0)
        return 0.0

    def _busy(self) -> bool:
        """Whether any unit is held or any outcome waits to be written."""
        return self.runtime.holds_units() or not self._writes_idle()

    def _iteration(self) -> float | None:
        """One pass: claim if anything calls for it; the pause to take after it."""
        pools = list(self.pools.values())
        now = time.monotonic()
        idle = self._idle_stretch()
        if not pools:
            # Only transactional types (or none): they claim by themselves.
            if idle:
                self._check_drained()
            return None
        if self._writes_backlogged():
            return None  # the completer is behind: its next flush wakes us
        open_pools = self._open_pools(pools)
        if not open_pools:
            return None  # every type is full: a finishing handler wakes us
        poll_due = now >= self._next_poll or idle
        if not poll_due and not any(p.maybe_more and p.wants_claim() for p, _ in open_pools):
            return max(self._next_poll - now, 0.0)
        slots = self._slots(open_pools)
        if not slots:
            return None  # the room is promised to claims in flight: their end wakes us
        claimed = self._claim_round(slots, open_pools, now)
        if claimed is None:
            return 0.0  # backed off inside _claim
        jobs, blocked, hinted = claimed
        if idle and not jobs and not hinted:
            if not self.empty.asked([slot.type for slot in slots],
                                    [pool.type for pool, _ in open_pools]):
                # batch_size left some types out of the empty claims so far: ask them
                # before calling the queue empty (the rotation puts them first next time).
                return 0.0
            if blocked:
                # Due work held back by a guard (another process's lease, a pool's budget)
                # is still due: run_until_empty keeps polling until it runs or the timeout.
                return self.poll_interval
            if not self._check_drained():
                # A transactional type still looking wakes us when its claim comes back
                # empty; the first reaper pass, when it is done.
                return max(self._next_poll - time.monotonic(), 0.0)
            return None
        return self._pause_after(bool(jobs), bool(blocked), idle)

    def _idle_stretch(self) -> bool:
        """Whether this pass is part of run_until_empty's idle stretch (beginning one if
        the worker just became idle): nothing held, nothing to write, nothing running."""
        runtime = self.runtime
        if not runtime.until_empty or self.empty.drained.is_set():
            return False
        # Read before the idle check: anything leased or finished after it ends the stretch.
        activity = runtime.activity
        if self._busy():
            return False
        self.empty.begin(activity, runtime.tx_pools)
        return True

    def _check_drained(self) -> bool:
        """Set :attr:`EmptyQueueWatch.drained` if the stretch settled it (the buffered
        types' empty claims already counted); whether it did."""
        runtime = self.runtime
        if not runtime.maintained.is_set():
            # The first reaper pass may still return a crashed worker's jobs; it wakes the
            # loop when done.
            return False
        if self._busy() or not self.empty.settled(runtime.activity, runtime.tx_pools):
            return False
        self.empty.drained.set()
        return True

    def _pause_after(self, got_jobs: bool, held_back: bool, idle: bool) -> float:
        """The pause after a claim that did not settle run_until_empty's question."""
        until_poll = max(self._next_poll - time.monotonic(), 0.0)
        if not got_jobs and held_back:
            # Sleep until woken (a flush, a finishing handler, a hint) or the next poll.
            return until_poll
        if not idle and not any(pool.maybe_more for pool in self.pools.values()):
            # Every type came back short and no hint arrived meanwhile: the next pass would
            # only compute this pause, so take it now (that pass held the GIL just as a
            # handler thread woke for the jobs this one buffered).
            return until_poll
        return 0.0

    def _open_pools(self, pools: list[TypePool]) -> list[tuple[TypePool, int]]:
        """The pools with free room and that room, in this pass's rotation order. The
        rotation advances only when a claim is sent (_claim_round): advancing it on every
        pass could lock its phase to the loop's rhythm and always put the same type first."""
        start = self._rotation % len(pools)
        ordered = pools[start:] + pools[:start]
        return [(pool, free) for pool, free in ((p, p.free()) for p in ordered) if free > 0]

    def _claim_round(
        self, slots: list[TypeSlots], open_pools: Sequence[tuple[TypePool, int]], now: float
    ) -> tuple[list[ClaimedJob], Mapping[str, ClaimBlock], bool] | None:
        """Send the claim of ``slots``, buffer what it leased and note per type whether more
        may be due; returns the jobs, what blocked types that got nothing, and whether a
        hint arrived meanwhile (None: the claim failed and backed off)."""
        self._rotation += 1
        hints = {pool.type: pool.hints for pool, _ in open_pools}
        began = time.monotonic()
        recovering = self._failures > 0
        jobs = self._claim(slots)
        if jobs is None:
            self._unreserve(slots)
            return None
        if not recovering:
            # The claim that ends an outage waited for the database, not for the claim.
            self._tune(min(time.monotonic() - began, MAX_TUNE_SAMPLE))
        self._next_poll = now + self.poll_interval
        counts = self._distribute(jobs, now)
        self._unreserve(slots)
        blocked = claim_blocked(jobs)
        for slot in slots:
            pool = self.pools.get(slot.type)
            if pool is None:  # removed meanwhile (Worker.remove_handler)
                continue
            block = blocked.get(slot.type)
            # A type held back by leases (its scopes, a pool's concurrency, a type it must not
            # overlap) may claim again as soon as something is acknowledged: the completer's
            # flush wakes this loop, so it is not left waiting for the next poll. A spent
            # rate budget only refills with its window: that waits for the poll.
            pool.maybe_more = (
                counts.get(slot.type, 0) >= slot.limit
                or pool.hints != hints[slot.type]
                or (block is not None and block.kind != "pool rate")
            )
        self._blocked.observe(slots, counts, blocked)
        hinted = any(pool.hints != hints[pool.type] for pool, _ in open_pools)
        return jobs, blocked, hinted

    def _tune(self, seconds: float) -> None:
        avg = self.claim_seconds
        avg = seconds if avg is None else avg + (seconds - avg) * _LATENCY_WEIGHT
        self.claim_seconds = avg
        for pool in self.pools.values():
            pool.tune(avg)

    def _slots(self, open_pools: Sequence[tuple[TypePool, int]]) -> list[TypeSlots]:
        runtime = self.runtime
        if runtime.config.max_concurrency is not None:
            return self._capped_slots(open_pools)
        remaining = self.batch_size
        slots: list[TypeSlots] = []
        for pool, free in open_pools:
            if remaining <= 0:
                break
            # Reserved until distributed: a claim on completion (poolclaim) may run meanwhile.
            limit = pool.reserve(min(free, remaining))
            if limit <= 0:
                continue
            remaining -= limit
            slots.append(type_slots(pool, limit))
        return slots

    def _capped_slots(self, open_pools: Sequence[tuple[TypePool, int]]) -> list[TypeSlots]:
        """The claim under ``max_concurrency``: the worker-wide room is dealt out one job at
        a time, round robin from this pass's rotation start, to the types that may have
        work first (then to the others), so the types share the room fairly."""
        runtime = self.runtime
        room = runtime.take_room(min(sum(free for _, free in open_pools), self.batch_size))
        if room <= 0:
            return []
        order = [item for item in open_pools if item[0].maybe_more]
        order += [item for item in open_pools if not item[0].maybe_more]
        dealt = [0] * len(order)
        while room > 0:
            moved = False
            for index, (_, free) in enumerate(order):
                if room > 0 and dealt[index] < free:
                    dealt[index] += 1
                    room -= 1
                    moved = True
            if not moved:
                break
        slots: list[TypeSlots] = []
        for (pool, _), wanted in zip(order, dealt, strict=True):
            limit = pool.reserve(wanted) if wanted else 0
            room += wanted - limit
            if limit > 0:
                slots.append(type_slots(pool, limit))
        runtime.give_room(room, wake=False)
        return slots

    def _unreserve(self, slots: Sequence[TypeSlots]) -> None:
        pools = self.pools
        for slot in slots:
            pool = pools.get(slot.type)
            if pool is not None:
                pool.unreserve(slot.limit)
        self.runtime.give_room(sum(slot.limit for slot in slots), wake=False)

    def _claim(self, slots: list[TypeSlots]) -> list[ClaimedJob] | None:
        runtime = self.runtime
        request = ClaimRequest(
            owner=runtime.owner, types=slots, resources=runtime.config.resources,
            defer_start=runtime.defer_start,
        )
        try:
            jobs = runtime.store.job_claim(request)
        except Exception as exc:  # noqa: BLE001 - any store error backs off, never kills
            self._failed(exc)
            return None
        if self._given_up:
            # The shutdown stopped waiting for this claim and has drained the buffers
            # already: nothing will run what it leased, so it goes back now.
            if jobs:
                self._release_strays(jobs, late=True)
            return None
        if self._failures:
            log.info("claim_recovered", worker_id=runtime.owner, failures=self._failures,
                     outage=round(time.monotonic() - self._failing_since, 3))
            self._failures = 0
            runtime.hub.errors.recovered("claim")
        return jobs

    def _failed(self, exc: Exception) -> None:
        now = time.monotonic()
        if not self._failures:
            self._failing_since = now
        self._failures += 1
        # Observers' on_error: once per incident (the first failure after a success).
        self.runtime.hub.errors.failed("claim", exc)
        # The first retry is immediate: a single dead pooled connection (discarded by the
        # pool on return) is the most common failure and the next one is usually fine.
        backoff = 0.0 if self._failures == 1 else min(
            0.05 * 2 ** min(self._failures - 2, 10), MAX_ERROR_BACKOFF
        )
        if self._failures == 1 or now - self._last_error_log >= ERROR_LOG_EVERY:
            self._last_error_log = now
            log.warning(
                "claim_failed", worker_id=self.runtime.owner, failures=self._failures,
                error_type=type(exc).__name__, error=error_text(exc), retry_in=round(backoff, 3),
            )
        self.stop_event.wait(backoff)

    def _distribute(self, jobs: list[ClaimedJob], claimed_at: float) -> dict[str, int]:
        """Put claimed jobs into their types' buffers; returns units per type."""
        if jobs:
            self.runtime.touch()  # before any unit is held: see Runtime.activity
        pools = self.pools
        received = time.monotonic()  # when the jobs started waiting in a buffer
        counts: dict[str, int] = {}
        groups: dict[tuple[str, Any], list[ClaimedJob]] = {}
        strays: list[ClaimedJob] = []
        # Split by type first, then make the units of each type in a tight loop: per job,
        # only the unit, its registration and the buffer put (each type has its own
        # buffer, so the claim order within a type is kept).
        by_type: dict[str, list[ClaimedJob]] = {}
        for job in jobs:
            typed = by_type.get(job.type)
            if typed is None:
                by_type[job.type] = [job]
            else:
                typed.append(job)
        removed: list[ClaimedJob] = []
        # One reader of job.parents for the whole claim: the first read fetches every job's.
        links = ClaimLinks(self.runtime.store, jobs, self._parent_types)
        for job_type, typed in by_type.items():
            pool = pools.get(job_type)
            if pool is None:
                strays.extend(typed)
                continue
            if pool.spec.grouped:
                for job in typed:
                    groups.setdefault((job_type, job.scope), []).append(job)
                continue
            deadline = claimed_at + pool.lease_seconds
            active = pool.active
            put = pool.buffer.put
            with pool.gate:  # a remove_handler in between: given back, never stranded
                if pool.closed:
                    removed.extend(typed)
                    continue
                for job in typed:
                    unit = Unit(pool, (job,), deadline, received)
                    unit.links = links
                    active[unit.key] = unit
                    put(unit)
            counts[job_type] = len(typed)
        for (job_type, _), members in groups.items():
            pool = pools[job_type]
            # Arrival order: the store returns claim order (priority, run_at, id). A job
            # arrived when it was added (created_at; a grouped replace moves it to the end
            # of its group by making the replacing add its arrival); ids, assigned at
            # insertion, order the jobs of one instant (one transaction) as they arrived.
            members.sort(key=_arrival)
            unit = Unit(pool, tuple(members), claimed_at + pool.lease_seconds, received)
            with pool.gate:
                if pool.closed:
                    removed.extend(members)
                    continue
                pool.active[unit.key] = unit
                pool.buffer.put(unit)
            counts[job_type] = counts.get(job_type, 0) + 1
        if self._parent_types and not self._parent_types.isdisjoint(by_type):
            self._read_ahead(links)
        if strays:
            self._release_strays(strays)
        if removed:
            self._release_strays(removed, late=True)
        return counts

    def _read_ahead(self, links: ClaimLinks) -> None:
        """Read a claim's links on the helper thread while its jobs wait in the buffers:
        their handlers then find them read (off the handlers' path: measured, the read
        at the first handler stalled every slot of the batch for its round trip)."""
        prefetcher = self._prefetcher
        if prefetcher is None:
            prefetcher = self._prefetcher = ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="golemq-parents")
        try:
            prefetcher.submit(links.prefetch)
        except RuntimeError:  # shut down by a stop meanwhile: the handlers read themselves
            return

    def _release_strays(self, strays: list[ClaimedJob], *, late: bool = False) -> None:
        """Give back jobs nobody will run: types nobody asked for (a store bug), or
        (``late``) a claim that returned after the shutdown stopped waiting for it, or after
        its type's handler was removed."""
        runtime = self.runtime
        if late:
            log.info("late_claim_released", worker_id=runtime.owner, count=len(strays))
        else:
            log.error(
                "claim_returned_unrequested_types", worker_id=runtime.owner,
                count=len(strays), job_ids=[job.id for job in strays[:LOG_IDS]],
                types=sorted({job.type for job in strays}),
            )
        try:
            runtime.store.job_release_many(
                runtime.owner, [LeaseRef(job.id, job.lease_token) for job in strays]
            )
        except Exception as exc:  # noqa: BLE001 - the leases expire and the reaper recovers them
            log.warning("release_failed", error_type=type(exc).__name__, error=error_text(exc))


def _arrival(job: ClaimedJob) -> tuple[datetime, int, int, str]:
    """Sort key of a job by arrival: when it was added (``enqueued_at``), then numeric ids
    by value (both stores' ids are decimal strings of increasing integers); any other id
    after them, as text."""
    job_id = job.id
    if job_id.isascii() and job_id.isdigit():
        return (job.enqueued_at, 0, int(job_id), "")
    return (job.enqueued_at, 1, 0, job_id)


__all__ = ["ClaimLoop"]
