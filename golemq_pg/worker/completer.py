"""The batched completion flusher: one thread acknowledges finished jobs in groups.

Handler threads append outcomes to a deque (no lock, no round trip); the flusher wakes on
the first one, lets a few milliseconds' worth accumulate (or ``max_items``), then writes
them with one fenced statement per outcome kind (``job_complete_many``,
``job_retry_many``, ``job_fail_many``, ``job_release_many``). Ids the store did not write
were fenced out: the lease was lost (observers get ``"lease-lost"``) or the row was
cancelled (nothing to report: it was reported when cancelled). A write that fails is
retried with backoff, never dropped, until the worker's final flush gives up (then the
leases simply expire and the reaper recovers the jobs: at-least-once). Failing writes are
reported to observers' ``on_error`` (kind ``"complete"``) once per incident; while they keep
failing, the unwritten outcomes' leases are renewed (:meth:`Completer.unwritten`, read by the
renewer) and, past a bound, the claim loop holds off (:meth:`Completer.backlogged`; kind
``"claim"`` to ``on_error``). A write the store refuses for its data (``WriteRefused``) is
split until the refused item stands alone; that item is dead-lettered with a minimal write
(``OutcomeUnwritable``) and every other item is written (:mod:`~golemq_pg.worker.batches`).

An outcome whose commit may let a guarded claim proceed (a job of a resource pool with a
concurrency cap, of a serialize_by_scope or grouped type, or of a type another handler must
not overlap or waits for) is written at once, without the accumulation delay: such capacity
only frees when the write commits. Once it has, the types it may unblock are hinted to the
claim loop, which re-claims at once (a claim the pool's room or the busy scopes cut short
would otherwise wait for the next poll). Outcomes arriving while a write is in flight
still form the next batch.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import structlog

from golemq_pg._errortext import error_text
from golemq_pg.store.port import FailItem, JobStore, LeaseRef, ResultRef, RetryItem, WriteRefused
from golemq_pg.worker.batches import (
    SplitWrite,
    WriteStall,
    chunks,
    handler_starts,
    result_chunks,
    stored_result,
    unwritable_fail,
)
from golemq_pg.worker.observers import ObserverHub
from golemq_pg.worker.runtime import LOG_IDS
from golemq_pg.worker.service import Service

if TYPE_CHECKING:
    from golemq_pg.worker.poolclaim import ClaimingPool, CompletionClaims
    from golemq_pg.worker.units import Unit

log = structlog.get_logger("golemq_pg.worker.completer")

COMPLETE = 0
RETRY = 1
FAIL = 2
RELEASE = 3
_NAMES = ("complete", "retry", "fail", "release")
_OUTCOMES = ("succeeded", "retry-scheduled", "failed-terminal", "retry-scheduled")
#: At most this many unwritten ids are looked up to tell a cancel from a lost lease.
_LOOKUP_LIMIT = 50
#: Retries due within this many seconds wake the claim loop instead of waiting for a poll.
SOON = 0.05
#: The claim loop holds off while this many times ``max_items`` outcomes wait to be written
#: (queued or in the write in flight): a completer the database slows down then slows the
#: claims with it. Unbounded, finished but unacknowledged jobs piled up (40,000 measured in
#: a drain beside a retention sweep): their leases ran out, the reaper gave them to be run
#: again, and shutdown spent its whole budget writing them.
BACKLOG_BATCHES = 8

Entry = tuple[int, "Unit", Sequence[Any], bool]


class Completer(Service):
    """Buffers outcomes and writes them in batches from one thread.

    It reports upward through two callbacks: ``wake`` after every flush (capacity may have
    freed) and ``hint`` with the types whose jobs may now be claimable (see the module
    docstring), both the runtime's.
    """

    def __init__(
        self,
        store: JobStore,
        owner: str,
        hub: ObserverHub,
        *,
        unblocks: Mapping[str, frozenset[str]],
        hint: Callable[[tuple[str, ...]], object],
        wake: Callable[[], None],
        delay: float = 0.003,
        max_items: int = 500,
        deletes: tuple[tuple[str, ...], tuple[str, ...]] = ((), ()),
        starts: bool = False,
    ) -> None:
        super().__init__("golemq-completer", owner)
        self.store = store
        self.hub = hub
        self.delay = delay
        self.max_items = max(max_items, 1)
        self._hint = hint
        self._wake = wake
        self._entries: deque[Entry] = deque()
        self._pending = threading.Event()
        self._full = threading.Event()
        self._busy = False
        #: Outcomes taken by the write in flight (see :meth:`backlogged`).
        self._writing = 0
        #: The entries of the flush in flight, by kind (see :meth:`unwritten`).
        self._in_flight: list[list[Entry]] = []
        #: Items refused for their data by the writes of this flush, not yet dead-lettered.
        self._refused: list[tuple[Any, WriteRefused]] = []
        #: How long writes have been failing; past ``stall.after`` (set by the Worker to the
        #: renewal interval) the claim loop holds off.
        self.stall = WriteStall(5.0)
        self._backlog_limit = BACKLOG_BATCHES * self.max_items
        #: Per type whose settled leases may let a guarded claim proceed: the handler types
        #: of this worker that may then claim (see :func:`unblocked_by`). Its outcomes are
        #: written without the accumulation delay.
        self.unblocks: Mapping[str, frozenset[str]] = unblocks
        #: Once set, a failing write is abandoned instead of retried (end of shutdown).
        self.give_up_at: float | None = None
        #: The types whose succeeded / dead-lettered rows are deleted (``delete_on``), in
        #: the completing statement itself (see :func:`delete_types`).
        self.delete_succeeded, self.delete_failed = deletes
        #: Claims on completion for resource pools with a concurrency cap (attached by the
        #: Worker once the claim loop exists; see :mod:`golemq_pg.worker.poolclaim`).
        self.claims: CompletionClaims | None = None
        #: Whether outcomes carry their handlers' starts (the claims deferred them: see
        #: :mod:`~golemq_pg.worker.starts`).
        self.starts = starts

    # -- producers (handler threads, supervisor, shutdown) ---------------------------------
    def complete(self, unit: Unit) -> None:
        """The unit's handler succeeded (with the encoded result it returned, if any)."""
        result = unit.result
        if result is None:
            self._push((COMPLETE, unit, unit.refs, True))
        else:
            job = unit.jobs[0]
            self._push((COMPLETE, unit, (ResultRef(job.id, job.lease_token, result),), True))

    def retry(self, unit: Unit, items: Sequence[RetryItem], *, consumed: bool) -> None:
        """Retry these jobs of the unit after their delay."""
        self._push((RETRY, unit, items, consumed))

    def fail(self, unit: Unit, items: Sequence[FailItem]) -> None:
        """Dead-letter these jobs of the unit."""
        self._push((FAIL, unit, items, True))

    def release(self, unit: Unit, *, emit: bool) -> None:
        """Give the unit's jobs back, due now, attempt refunded."""
        self._push((RELEASE, unit, unit.refs, emit))

    def _push(self, entry: Entry) -> None:
        entries = self._entries
        entries.append(entry)
        if not self._pending.is_set():
            self._pending.set()
        if (
            len(entries) >= self.max_items or entry[1].pool.type in self.unblocks
        ) and not self._full.is_set():
            self._full.set()

    def idle(self) -> bool:
        """Nothing queued and nothing being written."""
        return not self._entries and not self._busy

    def backlogged(self) -> bool:
        """Too many outcomes wait to be written, or the writes have failed for longer than
        ``stall.after``: the claim loop holds off until a flush (which wakes it) brings the
        backlog down (see ``BACKLOG_BATCHES``) or a write succeeds again."""
        return len(self._entries) + self._writing >= self._backlog_limit or self.stall.stalled()

    def unwritten(self) -> list[Unit]:
        """The units whose outcome waits to be written (queued, or in the flush in flight):
        their handlers are done but their leases still matter, so the renewer renews them."""
        # list() of a deque is one C call: no flusher thread can change it meanwhile.
        entries = list(self._entries)
        for group in list(self._in_flight):
            entries.extend(group)
        return list({id(entry[1]): entry[1] for entry in entries}.values())

    # -- the loop (hooks of Service) ----------------------------------------------------------
    def pause(self, wait: float | None) -> None:
        """Wait for the first outcome, then let more accumulate for ``delay`` (or until
        ``max_items`` are queued, or an outcome that must not wait arrives)."""
        del wait
        if not self.stop_event.is_set():
            self._pending.wait()
            if not self.stop_event.is_set() and len(self._entries) < self.max_items:
                self._full.wait(self.delay)

    def step(self) -> None:
        """Write everything queued, then wake the claim loop (freed capacity)."""
        self._pending.clear()
        self._full.clear()
        if self._entries:
            self._busy = True
            try:
                self.flush()
            finally:
                self._busy = False
                self._writing = 0
                self._wake()

    def kick(self) -> None:
        """End the accumulation delay: write what is queued now."""
        self._pending.set()
        self._full.set()

    def running(self) -> bool:
        """Until stopped and everything queued has been written."""
        return not self.stop_event.is_set() or bool(self._entries)

    def failed(self, exc: BaseException, failures: int) -> None:
        """A flush failed outside the per-write retries (a bug): log it, go on."""
        del failures
        log.exception("completer_internal_error", error_type=type(exc).__name__)

    # -- writing ----------------------------------------------------------------------------
    def flush(self) -> None:
        """Write everything queued now (called by the flusher thread)."""
        entries = self._entries
        batch: list[list[Entry]] = [[], [], [], []]
        while entries:
            entry = entries.popleft()
            batch[entry[0]].append(entry)
        self._writing = sum(map(len, batch))
        self._in_flight = batch
        try:
            for kind in (COMPLETE, RETRY, FAIL, RELEASE):
                if batch[kind]:
                    self._write(kind, batch[kind])
        finally:
            self._in_flight = []
        unblocks = self.unblocks
        if unblocks:
            hinted: set[str] = set()
            for group in batch:
                for entry in group:
                    hinted.update(unblocks.get(entry[1].pool.type, ()))
            if self.claims is not None:
                served = self.claims.served()
                if not (batch[RETRY] or batch[FAIL] or batch[RELEASE]):
                    # Claimed in the completing write, after which nothing else freed room.
                    hinted.difference_update(served)
            if hinted:
                # After the writes committed: the claim sees the freed capacity.
                self._hint(tuple(hinted))

    def _write(self, kind: int, group: list[Entry]) -> None:
        items = [item for entry in group for item in entry[2]]
        written = self._send(kind, group, items)
        if written is None:  # gave up (end of shutdown): the leases will expire
            return
        if self._refused:
            group = self._dead_letter(kind, group)
        if len(written) < len(items) or self.hub.active:
            # Someone to tell, or an item the store refused: per item. A drain without
            # observers whose every lease held skips the walk.
            self._report(kind, group, written)
        if kind == FAIL and written:
            self._log_dead_letters(group, written)
        if kind == RETRY and written:
            # A retry due (almost) now has no NOTIFY (it is an UPDATE): tell the claim loop.
            soon = {entry[1].pool.type for entry in group
                    if any(item.delay < SOON for item in entry[2])}
            if soon:
                self._hint(tuple(soon))

    def _send(self, kind: int, group: list[Entry], items: list[Any]) -> set[str] | None:
        """Write ``items`` in chunks; the ids written, or None once the writes gave up."""
        # Each item's handler start, seconds before now (the write's database now, a round
        # trip away): written where the row has none yet. A release never started.
        started = handler_starts(group) if self.starts and kind != RELEASE else None
        written: set[str] = set()
        parts = result_chunks(items) if kind == COMPLETE else chunks(items)
        claims = self.claims
        # The last chunk of completions also claims the room they free (poolclaim).
        target = claims.target(e[1].pool.type for e in group) if claims and kind == COMPLETE \
            else None
        offset = 0
        for number, chunk in enumerate(parts, 1):
            starts = None if started is None else started[offset:offset + len(chunk)]
            offset += len(chunk)
            done = self._call(kind, chunk, target if number == len(parts) else None, starts)
            if done is None:
                return None
            written |= done
        return written

    def _log_dead_letters(self, group: list[Entry], written: set[str]) -> None:
        """One warning for the jobs of ``group`` this write dead-lettered."""
        dead = [(item, unit) for _, unit, items, _ in group for item in items
                if item.id in written]
        log.warning(
            "jobs_dead_lettered", worker_id=self.owner, count=len(dead),
            job_ids=[item.id for item, _ in dead[:LOG_IDS]],
            types=sorted({unit.pool.type for _, unit in dead}),
            attempts=[_job(unit, item.id).attempt for item, unit in dead[:LOG_IDS]],
            # The exception type only: a message may quote whatever the handler saw.
            errors=sorted({(item.error or "").split(":", 1)[0] for item, _ in dead}),
        )

    def _call(
        self, kind: int, chunk: list[Any], target: ClaimingPool | None = None,
        started: list[float | None] | None = None,
    ) -> set[str] | None:
        """Write ``chunk``: split on a refusal of its data (the refused items are left in
        ``_refused``), retried with backoff on any other error; None once it gave up."""
        failures = 0
        split = SplitWrite(len(chunk))

        def part(lo: int, hi: int) -> set[str]:
            # The claim on completion only with the whole chunk's first try.
            return self._call_once(
                kind, chunk[lo:hi], target if split.whole(lo, hi) else None,
                None if started is None else started[lo:hi],
            )

        while True:
            try:
                split.run(part)
            except Exception as exc:  # noqa: BLE001 - retried with backoff, never dropped
                target = None  # a failed attempt is retried without the claim on completion
                failures += 1
                self.hub.errors.failed("complete", exc)
                if self.stall.failed():
                    self._stalled(exc)
                give_up = self.give_up_at is not None and time.monotonic() >= self.give_up_at
                if failures == 1 or failures % 20 == 0 or give_up:
                    log.warning(
                        "completion_write_failed", worker_id=self.owner, outcome=_NAMES[kind],
                        jobs=len(chunk), failures=failures, error_type=type(exc).__name__,
                        error=error_text(exc), giving_up=give_up,
                    )
                if give_up:
                    return None
                time.sleep(min(0.02 * 2 ** min(failures, 8), 2.0))
                continue
            if failures:
                self.hub.errors.recovered("complete")
            if self.stall.since is not None and self.stall.succeeded():
                log.info("claims_resumed", worker_id=self.owner)
                self.hub.errors.recovered("claim", "completer")
            self._refused.extend((chunk[index], refusal) for index, refusal in split.refused)
            return split.written

    def _stalled(self, exc: BaseException) -> None:
        """The writes have failed for longer than ``stall.after``: the claims hold off."""
        log.warning(
            "claims_held_outcomes_unwritten", worker_id=self.owner,
            seconds=round(self.stall.seconds(), 1), outcomes=len(self.unwritten()),
            error_type=type(exc).__name__, error=error_text(exc),
        )
        self.hub.errors.failed(
            "claim", f"claims held: outcomes unwritten for {self.stall.seconds():.0f}s "
            f"({error_text(exc, with_type=True)})", "completer",
        )

    def _dead_letter(self, kind: int, group: list[Entry]) -> list[Entry]:
        """Dead-letter the items the store refused for their data (each alone, with a text
        of golemq-pg's own) and return ``group`` without them."""
        refused, self._refused = self._refused, []
        fails = [unwritable_fail(item, refusal) for item, refusal in refused]
        dead = self._call(FAIL, fails) or set()
        dropped, self._refused = self._refused, []
        units = {item.id: unit for _, unit, items, _ in group for item in items}
        hub = self.hub
        for fail in fails:
            job = _job(units[fail.id], fail.id)
            if fail.id in dead:
                log.warning("outcome_unwritable", worker_id=self.owner, outcome=_NAMES[kind],
                            job_id=job.id, type=job.type, attempt=job.attempt,
                            error=fail.error)
                if hub:  # counters too: emit, not emit_transition
                    hub.emit(job.id, job.type, job.scope, "failed-terminal", job.attempt,
                             error=fail.error)
        if dropped:  # even the minimal write was refused: the lease will expire
            log.error("outcome_unwritable_dropped", worker_id=self.owner,
                      job_ids=[item.id for item, _ in dropped[:LOG_IDS]])
        gone = {item.id for item, _ in refused}
        return [(k, unit, [i for i in items if i.id not in gone], flag)
                for k, unit, items, flag in group]

    def _call_once(
        self, kind: int, chunk: list[Any], target: ClaimingPool | None,
        started: list[float | None] | None = None,
    ) -> set[str]:
        """One write of ``chunk`` (with the claim on completion for ``target``), carrying
        each job's handler start (``started``: seconds before now, None where the start
        marker wrote it already) so fast jobs need no start write of their own."""
        store = self.store
        owner = self.owner
        if target is not None and self.claims is not None:
            return self.claims.complete(store, owner, chunk, self.delete_succeeded,
                                        target, started)
        if kind == COMPLETE:
            if self.delete_succeeded:
                return store.job_complete_many(
                    owner, chunk, delete_types=self.delete_succeeded, started=started
                )
            if started is None:
                return store.job_complete_many(owner, chunk)
            return store.job_complete_many(owner, chunk, started=started)
        if kind == RETRY:
            if started is None:
                return store.job_retry_many(owner, chunk)
            return store.job_retry_many(owner, chunk, started=started)
        if kind == FAIL:
            if self.delete_failed:
                return store.job_fail_many(owner, chunk, delete_types=self.delete_failed,
                                           started=started)
            if started is None:
                return store.job_fail_many(owner, chunk)
            return store.job_fail_many(owner, chunk, started=started)
        return store.job_release_many(owner, chunk)

    def _report(self, kind: int, group: list[Entry], written: set[str]) -> None:
        hub = self.hub
        unwritten: list[tuple[Any, Unit]] = []
        outcome = _OUTCOMES[kind]
        # Counters get the group's transitions in one call; other observers one each.
        counted: list[tuple[str, float | None]] | None = [] if hub.counts else None
        each = hub.each
        for _, unit, items, flag in group:
            for item in items:
                if item.id not in written:
                    unwritten.append((item, unit))
                elif kind == RELEASE and not flag:
                    continue
                elif counted is not None and not each:
                    counted.append((unit.pool.type, unit.finished_at - unit.started_at
                                    if unit.started_at else None))
                elif hub.active:
                    job = _job(unit, item.id)
                    attempts = job.attempt
                    error = None
                    result = None
                    if kind == COMPLETE:
                        result = stored_result(item)
                    elif kind in (RETRY, FAIL):
                        error = item.error
                        if kind == RETRY and not flag:
                            attempts -= 1
                    elif kind == RELEASE:
                        attempts -= 1
                    duration = unit.finished_at - unit.started_at if unit.started_at else None
                    if counted is not None:
                        counted.append((job.type, duration))
                    hub.emit_transition(job.id, job.type, job.scope, outcome, attempts,
                                        error=error, duration=duration, result=result)
        if counted:
            hub.count(outcome, counted)
        if unwritten:
            self._fenced_out(kind, unwritten)

    def _fenced_out(self, kind: int, unwritten: list[tuple[Any, Unit]]) -> None:
        """Ids the store refused: cancelled rows (silent) or lost leases (reported)."""
        store = self.store
        lost: list[tuple[Any, Unit]] = []
        for item, unit in unwritten:
            if len(unwritten) <= _LOOKUP_LIMIT:
                try:
                    if store.job_get(item.id) is None:
                        continue  # cancelled while it ran: reported by the cancel
                except Exception:  # noqa: BLE001 - diagnosis only; assume the lease was lost
                    log.debug("fenced_lookup_failed", job_id=item.id)
            lost.append((item, unit))
        if not lost:
            return
        jobs = [_job(unit, item.id) for item, unit in lost]
        log.warning(
            "lease_lost", worker_id=self.owner, outcome=_NAMES[kind], count=len(jobs),
            job_ids=[job.id for job in jobs[:LOG_IDS]],
            types=sorted({job.type for job in jobs}),
            attempts=[job.attempt for job in jobs[:LOG_IDS]],
        )
        hub = self.hub
        if hub:
            for job in jobs:
                hub.emit(job.id, job.type, job.scope, "lease-lost", job.attempt)


def _job(unit: Unit, job_id: str) -> Any:
    for job in unit.jobs:
        if job.id == job_id:
            return job
    return unit.jobs[0]  # pragma: no cover - items always come from the unit's jobs


__all__ = ["COMPLETE", "FAIL", "RELEASE", "RETRY", "Completer", "LeaseRef"]
