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
  it and no lease renewal or reconcile touches it; other sessions still read the row as it
  was before the claim (``pending``) until the transaction commits;
* a timeout or a cancel fires the signal *and* cancels the statement the handler's
  connection is running (``job_interrupt_transactional``), so a handler blocked in a long
  query gets an error and its writes roll back; a timed-out attempt is then retried like any
  other, a cancelled one records nothing (its row is being deleted);
* a handler that ignores its signal in Python code cannot be abandoned (its thread owns the
  transaction); the store's ``idle_in_transaction_session_timeout`` is the backstop (the
  transaction rolls back, claim included, and the job is claimed again later);
* if the worker process dies, the whole transaction rolls back, claim included: the job is
  due again at once, with its attempt *not* counted (see the trade-offs in the README);
* ``job.progress()`` is written in the same transaction, so it appears when it commits;
* the claim's advisory locks live as long as the transaction: guarded transactional types
  run one handler at a time across workers, and ``not_while_running`` checks against them
  wait (see :func:`lock_warnings`, logged at start-up).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, cast

import orjson
import structlog

from golemq_pg import _trace_hook
from golemq_pg._errortext import error_text
from golemq_pg._types import Resource
from golemq_pg.errors import JobAborted
from golemq_pg.store.port import (
    ClaimRequest,
    JobStore,
    LeaseRef,
    ResultRef,
    TransactionalJobStore,
    TypeSlots,
)
from golemq_pg.worker.backoff import HandlerReturnedFalse, JobTimeout, encoded_result
from golemq_pg.worker.events import TIMEOUT, JobEvent
from golemq_pg.worker.handlers import HandlerSpec
from golemq_pg.worker.units import FINISHED, RUNNING, Slot, Unit

if TYPE_CHECKING:
    from golemq_pg.worker.outcomes import Outcomes
    from golemq_pg.worker.runtime import Runtime

log = structlog.get_logger("golemq_pg.worker.transactional")

#: How long a transactional thread waits before looking again while the worker-wide cap
#: (``max_concurrency``) is reached (at most the poll interval).
CAPPED_WAIT = 0.05



def supports_transactional(store: object) -> bool:
    """Whether ``store`` offers the transactional claim (``job_interrupt_transactional``
    is optional: without it a timeout only fires the signal)."""
    return callable(getattr(store, "job_claim_transactional", None)) and callable(
        getattr(store, "with_connection", None)
    )


def lock_warnings(specs: Iterable[HandlerSpec], resources: Mapping[str, Resource]) -> list[str]:
    """What in this worker's configuration a transactional claim's locks will hold up.

    A transactional claim is one transaction with its handler, so the advisory locks the
    claim takes (see ``sql/queries/claim.sql``) are held until the handler finishes: a
    guarded transactional type (serialize_by_scope, not_while_running, waits_for, a
    resource pool) serialises its claims, and those of its pools' other members, across
    every worker; a claim that must check ``not_while_running`` against a transactional
    type waits until no handler of that type runs (and holds up the claim loop meanwhile).
    Correct, but slow for anything but short handlers. Only local handlers are visible here.
    """
    specs = list(specs)
    tx_types = {spec.type for spec in specs if spec.transactional}
    texts: list[str] = []
    for spec in specs:
        pools = sorted(name for name, pool in resources.items() if spec.type in pool.types)
        if spec.transactional and (spec.guarded or pools):
            texts.append(
                f"transactional {spec.type!r} is guarded"
                + (f" (resource pools {pools})" if pools else "")
                + ": its claim's advisory locks are held for the whole handler, so claims of "
                "it (and of its pools' other types) wait while one of its handlers runs"
            )
        waited = sorted(tx_types & set(spec.not_while_running))
        if waited:
            texts.append(
                f"{spec.type!r} has not_while_running={waited}, transactional types: its "
                "claims wait (holding up the claim loop) while one of their handlers runs"
            )
    return texts


class _Rollback(Exception):  # noqa: N818 - a control-flow carrier, not an error
    """Carries a failure out of the claim block so the handler's writes roll back.

    ``owned``: this thread settled the unit and must record the outcome; False when an
    abort (cancellation) settled it first, which records nothing.
    """

    def __init__(self, failure: BaseException, *, owned: bool) -> None:
        super().__init__("handler failed")
        self.failure = failure
        self.owned = owned


class TransactionalPool:
    """Threads that claim-and-run one job per transaction for one handler type.

    ``outcomes`` records a failed attempt after its rollback; ``kick_supervisor`` arms a
    timeout as the handler starts (the supervisor's ``kick``).
    """

    #: Its thread owns the claim's transaction: never written off (see the module docstring).
    abandonable = False

    def __init__(
        self,
        runtime: Runtime,
        spec: HandlerSpec,
        outcomes: Outcomes,
        *,
        kick_supervisor: Callable[[], None],
    ) -> None:
        self.runtime = runtime
        self.spec = spec
        self.outcomes = outcomes
        self._kick_supervisor = kick_supervisor
        self.type = spec.type
        self.lease_seconds = runtime.config.lease_seconds(spec.timeout)
        #: delete_on "success" or "always": the completion deletes the row (same statement).
        self._delete_succeeded = (spec.delete_on or runtime.config.delete_on) != "never"
        self.active: dict[tuple[str, int], Unit] = {}
        #: Set when a claim found nothing due; cleared when one found a job, or by a hint.
        self.empty = threading.Event()
        #: The hint count seen when the claim that set :attr:`empty` began.
        self._looked = 0
        self._cond = threading.Condition()
        #: Bumped by every hint, so one that arrives during a claim is not slept through.
        self._hints = 0
        self._threads: list[threading.Thread] = []
        #: Threads wanted (``Worker.set_concurrency`` changes it) and threads running.
        self.concurrency = spec.concurrency
        self._live = 0
        self._numbers = 0
        self._threads_lock = threading.Lock()
        #: Set by ``Worker.remove_handler``: the threads end once their job is done.
        self.closed = False
        #: Unit key -> the claim connection, while the handler itself runs (interruptible).
        self._connections: dict[tuple[str, int], Any] = {}
        self._connections_lock = threading.Lock()

    # -- the interface the rest of the worker uses ------------------------------------------
    def hint(self) -> None:
        """Jobs of this type may be due: wake the idle threads."""
        with self._cond:
            self.empty.clear()  # not idle until a claim has looked again
            self._hints += 1
            self._cond.notify_all()

    def start(self) -> None:
        """Start ``concurrency`` threads."""
        self._spawn(self.concurrency)

    def _spawn(self, count: int) -> None:
        for _ in range(count):
            with self._threads_lock:
                self._numbers += 1
                self._live += 1
                number = self._numbers
            thread = threading.Thread(target=self._loop, daemon=True,
                                      name=f"golemq-tx-{self.type[:40]}-{number}")
            self._threads.append(thread)
            thread.start()

    def set_concurrency(self, concurrency: int) -> None:
        """Run ``concurrency`` threads from now on: more start at once, surplus ones end
        after their current job."""
        with self._threads_lock:
            self.concurrency = concurrency
            missing = concurrency - self._live
        if missing > 0 and not self.closed and not self.runtime.stopping:
            self._spawn(missing)
        elif missing < 0:
            self.hint()  # idle threads look at the new number now

    def close(self) -> None:
        """Claim no more (``Worker.remove_handler``): every thread ends after its job."""
        self.closed = True
        self.hint()

    def busy(self) -> bool:
        """Whether a job runs or a thread may still claim one (after :meth:`close`: until
        every thread has ended)."""
        return bool(self.active) or any(thread.is_alive() for thread in self._threads)

    def _retire(self) -> bool:
        """Whether this thread must end now (the type was removed, or it is surplus);
        counted as ended when True."""
        with self._threads_lock:
            if self.closed or self._live > self.concurrency:
                self._live -= 1
                return True
            return False

    def stop_threads(self) -> None:
        """Wake every thread so it sees the stop flag."""
        self.hint()

    def write_off(self, slot: Slot) -> None:
        """Transactional threads own their transaction: they are never replaced."""

    def look_again(self) -> int:
        """Make the threads claim again now (a hint); the mark :meth:`looked_since` takes.

        run_until_empty asks this of every transactional type once the worker looks idle:
        an empty claim from before then proves nothing about the jobs this worker's own
        completions released or its handlers added since (their notifications may still be
        on the way)."""
        with self._cond:
            self.hint()
            return self._hints

    def looked_since(self, mark: int) -> bool:
        """Nothing running, and a claim begun after :meth:`look_again` returned ``mark``
        found nothing due (a later hint asks for a later claim still)."""
        with self._cond:
            return not self.active and self.empty.is_set() and self._looked >= mark

    def interrupt(self, unit: Unit) -> bool:
        """Cancel the statement ``unit``'s handler is running (timeout, cancel, shutdown).

        Only while the handler itself runs (never the completion writes). The request is
        sent from a short-lived thread, so the caller (the supervisor, the listener, a
        cancelling thread) never waits on the network; that thread holds the connections
        lock while it sends, and the handler's thread takes that lock before it moves on, so
        the request can never reach the connection once it is back in the pool serving
        something else (a cancel that arrives between two statements is ignored by the
        server). Returns whether a request is being sent.
        """
        interrupt = getattr(self.runtime.store, "job_interrupt_transactional", None)
        if interrupt is None:
            return False
        with self._connections_lock:
            conn = self._connections.get(unit.key)
        if conn is None:
            return False
        job = unit.jobs[0]
        log.info("transactional_statement_interrupted", worker_id=self.runtime.owner,
                 job_id=job.id, type=job.type, attempt=job.attempt, reason=unit.signal.reason)
        threading.Thread(target=self._send_interrupt, args=(interrupt, unit.key, conn),
                         daemon=True, name="golemq-tx-interrupt").start()
        return True

    def _send_interrupt(self, interrupt: Any, key: tuple[str, int], conn: Any) -> None:
        with self._connections_lock:
            if self._connections.get(key) is not conn:  # the handler has finished meanwhile
                return
            try:
                interrupt(conn)
            except Exception as exc:  # noqa: BLE001 - best effort: the signal has fired anyway
                log.warning("transactional_interrupt_failed", worker_id=self.runtime.owner,
                            type=self.type, error_type=type(exc).__name__)

    # -- the loop ---------------------------------------------------------------------------
    def _loop(self) -> None:
        runtime = self.runtime
        failures = 0
        # This thread's part in a "claim" incident reported to observers' on_error.
        source = threading.current_thread().name
        capped = runtime.config.max_concurrency is not None
        while not runtime.stopping and not self._retire():
            hints = self._hints
            if capped and not runtime.take_room(1, self.type):
                # The worker-wide cap (max_concurrency) is reached: look again shortly.
                with self._cond:
                    self._cond.wait(min(runtime.config.poll_interval, CAPPED_WAIT))
                continue
            try:
                ran = self.run_once(hints)
                if failures:
                    runtime.hub.errors.recovered("claim", source)
                failures = 0
            except Exception as exc:  # noqa: BLE001 - a store error backs off, never kills
                failures += 1
                ran = False
                runtime.hub.errors.failed("claim", exc, source)
                if failures == 1 or failures % 20 == 0:
                    log.warning("transactional_claim_failed", type=self.type,
                                worker_id=runtime.owner, failures=failures,
                                error_type=type(exc).__name__, error=error_text(exc))
                time.sleep(min(0.05 * 2 ** min(failures, 7), 5.0))
            finally:
                if capped:
                    runtime.give_room(1)
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
        store = cast(TransactionalJobStore, runtime.store)
        unit: Unit | None = None
        failure: BaseException | None = None
        owned = True
        written: set[str] = set()
        opened = time.monotonic()  # the claim's transaction begins
        try:
            with store.job_claim_transactional(self.request()) as claimed:
                if claimed is None:
                    with self._cond:
                        if hints is None or hints == self._hints:
                            self._looked = self._hints
                            self.empty.set()
                    return False
                runtime.touch()  # before the unit shows as active: see Runtime.activity
                self.empty.clear()
                job, conn = claimed
                unit = Unit(self, (job,), time.monotonic() + self.lease_seconds)
                if self.spec.transaction_warning is not None:
                    # The supervisor reports the transaction if it is still open then.
                    unit.warn_at = opened + self.spec.transaction_warning
                written = self._run(unit, store, conn)
        except _Rollback as rollback:
            failure = rollback.failure
            owned = rollback.owned
        finally:
            if unit is not None:
                self.active.pop(unit.key, None)
        assert unit is not None  # noqa: S101 - set whenever a job was claimed
        with runtime.lock:
            unit.state = FINISHED
            unit.settled = True
        try:
            return self._report(unit, failure, owned=owned, written=written)
        finally:
            # The unit left ``active`` before a failure's outcome reached the completer: a
            # drain check in between must not count that moment as idle.
            runtime.touch()

    def _report(self, unit: Unit, failure: BaseException | None, *, owned: bool,
                written: set[str]) -> bool:
        """Hand a finished attempt's outcome on: a failure to be written, a success (or a
        lost lease) to the observers. True (a job ran)."""
        runtime = self.runtime
        if not owned:  # aborted (cancelled): reported by the abort, nothing to write
            return True
        if failure is not None:
            self.outcomes.decide(unit, failure)
        elif runtime.hub:
            job = unit.jobs[0]
            outcome = "succeeded" if job.id in written else "lease-lost"
            stored = None
            if outcome == "succeeded" and unit.result is not None and runtime.hub.each:
                stored = orjson.loads(unit.result)
            runtime.hub.emit(job.id, job.type, job.scope, outcome, job.attempt,
                             duration=unit.finished_at - unit.started_at, result=stored)
        return True

    def _own(self, unit: Unit) -> bool:
        """Settle ``unit`` for this thread; False when an abort settled it first."""
        with self.runtime.lock:
            if unit.settled:
                return False
            unit.settled = True
            return True

    def _run(self, unit: Unit, store: TransactionalJobStore, conn: Any) -> set[str]:
        runtime = self.runtime
        job = unit.jobs[0]
        unit.state = RUNNING
        self.active[unit.key] = unit
        unit.started_at = time.monotonic()
        if self.spec.timeout is not None:
            unit.deadline = unit.started_at + self.spec.timeout
            self._kick_supervisor()
        elif unit.warn_at is not None:
            self._kick_supervisor()
        if runtime.hub:
            # claimed just now, in this thread: the wait is the claim's
            runtime.hub.emit(job.id, job.type, job.scope, "started", job.attempt,
                             wait=job.waited)
        event: JobEvent[Any] = JobEvent(
            id=job.id, type=job.type, payload=job.payload, attempt=job.attempt,
            max_attempts=job.max_attempts, scope=job.scope, signal=unit.signal,
            priority=job.priority, enqueued_at=job.enqueued_at, connection=conn,
        )
        # job.parents / job.workflow_id read on the claim's own transaction
        event._reader = store.with_connection(conn)
        # Durable steps go through the claim's transaction: see BoundSteps.
        event._token = job.token
        event._stepper = BoundSteps(store.with_connection(conn), runtime.owner)
        tracer = _trace_hook.tracer  # golemq_pg.tracing: the attempt's CONSUMER span
        span = None if tracer is None else tracer.attempt(unit.jobs, job.attempt)
        failure = self._call_handler(unit, event, conn)
        unit.finished_at = time.monotonic()
        if span is not None:
            span.end(failure, unit.signal.reason)
        if not self._own(unit):  # cancelled meanwhile: roll back, record nothing
            raise _Rollback(JobAborted(unit.signal.reason or "cancelled"), owned=False)
        if failure is None and unit.signal.reason == TIMEOUT:
            failure = self._timeout()
        if failure is not None:
            raise _Rollback(failure, owned=True)
        return self._complete(unit, store, conn, event)

    def _call_handler(
        self, unit: Unit, event: JobEvent[Any], conn: Any
    ) -> BaseException | None:
        """Run the handler on the claim's connection (interruptible while it runs); what
        it raised or returned that fails the attempt, else None (a result kept on unit)."""
        with self._connections_lock:
            self._connections[unit.key] = conn
        try:
            result = self.spec.fn(event)
        except BaseException as exc:  # noqa: BLE001 - every handler failure is an outcome
            return exc
        finally:
            with self._connections_lock:  # from here on nothing interrupts the connection
                self._connections.pop(unit.key, None)
        if result is None or result is True:
            return None
        if result is False:
            return HandlerReturnedFalse("handler returned False")
        # a rejected result rolls the handler's writes back and fails the job
        try:
            found = encoded_result(result)
        except Exception as exc:  # noqa: BLE001 - a result that cannot be encoded fails it
            return exc
        if isinstance(found, bytes):
            unit.result = found
            return None
        return found

    def _complete(
        self, unit: Unit, store: TransactionalJobStore, conn: Any, event: JobEvent[Any]
    ) -> set[str]:
        """The success's writes in the claim's transaction (progress, result, completion)."""
        runtime = self.runtime
        job = unit.jobs[0]
        try:
            bound = store.with_connection(conn)
            progress = event._progress_pending
            if progress is not None:
                bound.job_progress(runtime.owner, unit.refs[0], progress)
            refs: list[LeaseRef] = list(unit.refs)
            if unit.result is not None:
                refs = [ResultRef(job.id, job.lease_token, unit.result)]
            if self._delete_succeeded:
                return bound.job_complete_many(runtime.owner, refs, delete_types=[job.type])
            return bound.job_complete_many(runtime.owner, refs)
        except Exception as exc:  # noqa: BLE001 - roll the handler's writes back, then retry
            # An interrupt sent just as the handler returned can land on these writes.
            failure = self._timeout() if unit.signal.reason == TIMEOUT else exc
            raise _Rollback(failure, owned=True) from None

    def _timeout(self) -> JobTimeout:
        return JobTimeout(f"attempt exceeded the handler timeout of {self.spec.timeout}s")


class BoundSteps:
    """A transactional handler's durable steps: read and written on the claim's own
    connection (a separate connection would see the claim uncommitted, so the lease not
    held, and wait on its row lock). A step therefore commits with the handler's writes and
    rolls back with them: after a failed attempt it runs again, like those writes."""

    __slots__ = ("owner", "store")

    def __init__(self, store: JobStore, owner: str) -> None:
        self.store = store
        self.owner = owner

    def step_load(self, event: JobEvent[Any]) -> dict[str, Any]:
        """The job's stored steps, read in the claim's transaction."""
        return self.store.job_step_get(event.id)

    def step_save(self, event: JobEvent[Any], name: str, value: bytes) -> bool:
        """One step written in the claim's transaction, fenced by its lease."""
        return self.store.job_step_save(self.owner, LeaseRef(event.id, event._token), name, value)


__all__ = ["BoundSteps", "TransactionalPool", "lock_warnings", "supports_transactional"]
