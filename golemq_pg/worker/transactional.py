"""Transactional handlers: the handler runs inside the claim's transaction.

``@worker.handler(..., transactional=True)`` needs a store with
``job_claim_transactional(request)`` (PostgreSQL has it). Each of the type's ``concurrency``
threads claims one job at a time inside an open transaction and passes that transaction to
the handler as ``JobEvent.connection``: the handler's writes, the job's completion and the
claim commit together, exactly once. If the handler fails, its writes are rolled back to a
savepoint, the claim commits (the attempt counts) and the retry or failure is then written
with the ordinary fenced verbs.

What differs from ordinary handlers, by construction:

* the row stays locked by the open transaction while the handler runs, so other workers skip
  it, a cancel waits for the transaction, and no lease renewal or reconcile touches it;
* a timeout fires the signal, but a handler that ignores it cannot be abandoned (its thread
  owns the transaction); the store's ``idle_in_transaction_session_timeout`` is the backstop
  (the transaction rolls back and the job is claimed again later);
* ``job.progress()`` is written in the same transaction, so it appears when it commits.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, Protocol, cast

import structlog

from golemq_pg.store.port import ClaimRequest, JobStore, TransactionalClaim, TypeSlots
from golemq_pg.worker.backoff import HandlerReturnedFalse, JobTimeout
from golemq_pg.worker.events import TIMEOUT, JobEvent
from golemq_pg.worker.execution import decide
from golemq_pg.worker.handlers import HandlerSpec
from golemq_pg.worker.runtime import _short
from golemq_pg.worker.units import FINISHED, RUNNING, Unit

if TYPE_CHECKING:
    from golemq_pg.worker.pool import Slot
    from golemq_pg.worker.runtime import Runtime

log = structlog.get_logger("golemq_pg.worker.transactional")


class TransactionalStore(Protocol):
    """The store verbs transactional handlers need beyond the port."""

    def job_claim_transactional(self, request: ClaimRequest) -> TransactionalClaim:
        """Claim one job inside an open transaction; yields (job, connection) or None."""

    def with_connection(self, conn: Any) -> JobStore:
        """A store whose verbs run on ``conn`` without committing it."""


def supports_transactional(store: object) -> bool:
    """Whether ``store`` offers the transactional claim."""
    return callable(getattr(store, "job_claim_transactional", None)) and callable(
        getattr(store, "with_connection", None)
    )


class _Rollback(Exception):  # noqa: N818 - a control-flow carrier, not an error
    """Carries a handler's failure out of the claim block so its writes roll back."""

    def __init__(self, failure: BaseException) -> None:
        super().__init__("handler failed")
        self.failure = failure


class TransactionalPool:
    """Threads that claim-and-run one job per transaction for one handler type."""

    transactional = True

    def __init__(self, runtime: Runtime, spec: HandlerSpec) -> None:
        self.runtime = runtime
        self.spec = spec
        self.type = spec.type
        cfg = runtime.config
        if cfg.lease_duration is not None:
            self.lease_seconds = cfg.lease_duration
        elif spec.timeout is not None:
            self.lease_seconds = spec.timeout + cfg.lease_grace
        else:
            self.lease_seconds = cfg.lease_grace
        self.active: dict[str, Unit] = {}
        #: Set when a claim found nothing due; cleared when one found a job.
        self.empty = threading.Event()
        self._cond = threading.Condition()
        #: Bumped by every hint, so one that arrives during a claim is not slept through.
        self._hints = 0
        self._threads: list[threading.Thread] = []

    # -- the interface the rest of the worker uses ------------------------------------------
    def hint(self) -> None:
        """Jobs of this type may be due: wake the idle threads."""
        with self._cond:
            self.empty.clear()  # not idle until a claim has looked again
            self._hints += 1
            self._cond.notify_all()

    def start(self) -> None:
        """Start ``concurrency`` threads."""
        for number in range(1, self.spec.concurrency + 1):
            thread = threading.Thread(target=self._loop, daemon=True,
                                      name=f"golemq-tx-{self.type[:40]}-{number}")
            self._threads.append(thread)
            thread.start()

    def stop_threads(self) -> None:
        """Wake every thread so it sees the stop flag."""
        self.hint()

    def write_off(self, slot: Slot) -> None:
        """Transactional threads own their transaction: they are never replaced."""

    def idle(self) -> bool:
        """Nothing running and the last claim found nothing due."""
        return not self.active and self.empty.is_set()

    # -- the loop ---------------------------------------------------------------------------
    def _loop(self) -> None:
        runtime = self.runtime
        failures = 0
        while not runtime.stopping:
            hints = self._hints
            try:
                ran = self.run_once(hints)
                failures = 0
            except Exception as exc:  # noqa: BLE001 - a store error backs off, never kills
                failures += 1
                ran = False
                if failures == 1 or failures % 20 == 0:
                    log.warning("transactional_claim_failed", type=self.type,
                                worker_id=runtime.owner, failures=failures,
                                error_type=type(exc).__name__, error=_short(exc))
                time.sleep(min(0.05 * 2 ** min(failures, 7), 5.0))
            if not ran and not runtime.stopping:
                runtime.wake_claimer()  # lets run_until_empty notice an idle type
                with self._cond:
                    if self._hints == hints:
                        self._cond.wait(runtime.config.poll_interval)

    def request(self) -> ClaimRequest:
        """A one-job claim of this type with its guards."""
        spec = self.spec
        slots = TypeSlots(
            type=self.type, limit=1, lease_seconds=self.lease_seconds,
            serialize_by_scope=spec.serialize_by_scope,
            not_while_running=spec.not_while_running, waits_for=spec.waits_for,
        )
        return ClaimRequest(owner=self.runtime.owner, types=[slots],
                            resources=self.runtime.config.resources)

    def run_once(self, hints: int | None = None) -> bool:
        """Claim and run one job; False when nothing was due.

        ``hints`` is the hint count seen before claiming: an empty claim marks the type idle
        only if no hint arrived meanwhile.
        """
        runtime = self.runtime
        store = cast(TransactionalStore, runtime.store)
        unit: Unit | None = None
        failure: BaseException | None = None
        written: set[str] = set()
        try:
            with store.job_claim_transactional(self.request()) as claimed:
                if claimed is None:
                    with self._cond:
                        if hints is None or hints == self._hints:
                            self.empty.set()
                    return False
                self.empty.clear()
                job, conn = claimed
                unit = Unit(self, (job,), time.monotonic() + self.lease_seconds)
                failure, written = self._run(unit, store, conn)
        except _Rollback as rollback:
            failure = rollback.failure
        finally:
            if unit is not None:
                self.active.pop(unit.key, None)
        assert unit is not None  # noqa: S101 - set whenever a job was claimed
        with runtime.lock:
            unit.state = FINISHED
            unit.settled = True
        if failure is not None:
            decide(runtime, unit, failure)
        elif runtime.hub:
            job = unit.jobs[0]
            outcome = "succeeded" if job.id in written else "lease-lost"
            runtime.hub.emit(job.id, job.type, job.scope, outcome, job.attempt,
                             duration=unit.finished_at - unit.started_at)
        return True

    def _run(self, unit: Unit, store: TransactionalStore, conn: Any) -> tuple[None, set[str]]:
        runtime = self.runtime
        job = unit.jobs[0]
        unit.state = RUNNING
        self.active[unit.key] = unit
        unit.started_at = time.monotonic()
        if self.spec.timeout is not None:
            unit.deadline = unit.started_at + self.spec.timeout
            runtime.supervisor.kick()
        if runtime.hub:
            runtime.hub.emit(job.id, job.type, job.scope, "started", job.attempt)
        event: JobEvent[Any] = JobEvent(
            id=job.id, type=job.type, payload=job.payload, attempt=job.attempt,
            max_attempts=job.max_attempts, scope=job.scope, signal=unit.signal,
            priority=job.priority, enqueued_at=job.enqueued_at, connection=conn,
        )
        failure: BaseException | None
        try:
            result = self.spec.fn(event)
            failure = HandlerReturnedFalse("handler returned False") if result is False else None
        except BaseException as exc:  # noqa: BLE001 - every handler failure is an outcome
            failure = exc
        unit.finished_at = time.monotonic()
        if failure is None and unit.signal.reason == TIMEOUT:
            failure = JobTimeout(f"attempt exceeded the handler timeout of {self.spec.timeout}s")
        if failure is not None:
            raise _Rollback(failure)
        bound = store.with_connection(conn)
        progress = event._progress_pending
        if progress is not None:
            bound.job_progress(runtime.owner, unit.refs[0], progress)
        return None, bound.job_complete_many(runtime.owner, list(unit.refs))


__all__ = ["TransactionalPool", "TransactionalStore", "supports_transactional"]
