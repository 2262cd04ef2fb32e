"""Running one unit on a handler thread, and turning what the handler did into an outcome.

Outcomes (API.md): returning normally or ``True`` succeeds; ``False`` and any exception are
retried with backoff until ``max_attempts`` (``BaseException`` included: a
``KeyboardInterrupt`` raised by a handler fails its attempt, not the worker);
``TerminalJobError`` fails now; ``RetryableJobError`` retries with its own floor and attempt
rule. After the signal fired, the reason decides: a timed-out attempt fails whatever the
handler returned; a shutdown-aborted one that did not succeed is released (attempt
refunded); a cancelled or lease-lost one was settled when it was aborted, so its result is
dropped here.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from golemq_pg.store.port import FailItem, RetryItem
from golemq_pg.worker.backoff import HandlerReturnedFalse, JobTimeout, describe_error
from golemq_pg.worker.events import SHUTDOWN, TIMEOUT, BatchEvent, JobEvent
from golemq_pg.worker.units import ABANDONED, FINISHED, RUNNING, Unit

if TYPE_CHECKING:
    from golemq_pg.worker.pool import Slot, TypePool
    from golemq_pg.worker.runtime import Runtime

monotonic = time.monotonic


def execute(pool: TypePool, slot: Slot, unit: Unit) -> None:
    """Run ``unit``'s handler on this thread and hand its outcome to the completer."""
    runtime = pool.runtime
    with runtime.lock:
        if unit.settled:  # aborted while buffered: nothing to run, nothing to write
            unit.state = FINISHED
            skipped = True
        else:
            unit.state = RUNNING
            unit.slot = slot
            skipped = False
    if skipped:
        pool.active.pop(unit.key, None)
        return
    spec = pool.spec
    unit.started_at = started = monotonic()
    timeout = spec.timeout
    if timeout is not None:
        unit.deadline = deadline = started + timeout
        supervisor = runtime.supervisor
        if deadline < supervisor.planned:
            supervisor.kick()
    events = [_job_event(runtime, job, unit) for job in unit.jobs]
    hub = runtime.hub
    if hub:
        for job in unit.jobs:
            hub.emit(job.id, job.type, job.scope, "started", job.attempt)
    argument: Any
    if spec.grouped:
        argument = BatchEvent(
            type=pool.type, scope=unit.jobs[0].scope, jobs=events, attempt=unit.attempt,
            signal=unit.signal,
        )
    else:
        argument = events[0]
    error: BaseException | None
    try:
        result = spec.fn(argument)
        error = HandlerReturnedFalse("handler returned False") if result is False else None
    except BaseException as exc:  # noqa: BLE001 - every handler failure is an outcome
        error = exc
    unit.finished_at = finished = monotonic()
    pool.record_duration(finished - started)
    for event in events:
        if event._progress_lock is not None:
            runtime.reporter.finish(event)
    with runtime.lock:
        if unit.state == ABANDONED:  # written off by the supervisor; its outcome is decided
            return
        unit.state = FINISHED
        won = not unit.settled
        unit.settled = True
    if won:
        decide(runtime, unit, error)
    pool.active.pop(unit.key, None)


def _job_event(runtime: Runtime, job: Any, unit: Unit) -> JobEvent[Any]:
    event: JobEvent[Any] = JobEvent(
        id=job.id,
        type=job.type,
        payload=job.payload,
        attempt=job.attempt,
        max_attempts=job.max_attempts,
        scope=job.scope,
        signal=unit.signal,
        priority=job.priority,
        enqueued_at=job.enqueued_at,
    )
    event._reporter = runtime.reporter
    event._token = job.lease_token
    return event


def decide(runtime: Runtime, unit: Unit, error: BaseException | None) -> None:
    """Queue the outcome of a settled unit for the completer."""
    reason = unit.signal.reason
    completer = runtime.completer
    if reason == SHUTDOWN:
        if error is None:
            completer.complete(unit)
        else:
            completer.release(unit, emit=True)
        return
    if reason == TIMEOUT:
        error = JobTimeout(f"attempt exceeded the handler timeout of {unit.pool.spec.timeout}s")
    if error is None:
        completer.complete(unit)
        return
    jobs = unit.jobs
    if len(jobs) == 1:
        job = jobs[0]
        decision = runtime.policy.decide(job.id, job.type, job.attempt, job.max_attempts, error)
        if decision.retry:
            completer.retry(
                unit,
                [RetryItem(job.id, job.lease_token, decision.delay, decision.error,
                           decision.consume_attempt)],
                consumed=decision.consume_attempt,
            )
        else:
            completer.fail(unit, [FailItem(job.id, job.lease_token, decision.error)])
        return
    # A batch shares one decision (so its jobs stay together), taken at the batch's attempt;
    # a job whose own budget is spent is dead-lettered alone.
    first = jobs[0]
    decision = runtime.policy.decide(
        first.id, first.type, unit.attempt, max(job.max_attempts for job in jobs), error
    )
    text = decision.error or describe_error(error)
    if not decision.retry:
        completer.fail(unit, [FailItem(job.id, job.lease_token, text) for job in jobs])
        return
    retries: list[RetryItem] = []
    fails: list[FailItem] = []
    for job in jobs:
        if decision.consume_attempt and job.attempt >= job.max_attempts:
            fails.append(FailItem(job.id, job.lease_token, text))
        else:
            retries.append(
                RetryItem(job.id, job.lease_token, decision.delay, text, decision.consume_attempt)
            )
    if retries:
        completer.retry(unit, retries, consumed=decision.consume_attempt)
    if fails:
        completer.fail(unit, fails)


def abandon(runtime: Runtime, unit: Unit) -> bool:
    """Write off the thread running ``unit`` (it ignored its signal); True when done.

    The slot is replaced so the type keeps its concurrency, and the unit's outcome is
    decided now (a timed-out attempt fails and is retried; a shutdown-aborted one is
    released). The stuck thread exits whenever its handler returns; its result is dropped.
    """
    with runtime.lock:
        if unit.state != RUNNING:
            return False
        unit.state = ABANDONED
        won = not unit.settled
        unit.settled = True
    unit.finished_at = monotonic()
    pool = unit.pool
    slot = unit.slot
    if won:
        decide(runtime, unit, JobTimeout("handler ignored its signal past abandon_grace"))
    pool.active.pop(unit.key, None)
    if slot is not None:
        pool.write_off(slot)
    runtime.wake_claimer()
    return True


__all__ = ["abandon", "decide", "execute"]
