"""What a settled unit's result becomes: complete, retry, fail or release, for the completer.

Outcomes (README.md, "Consuming jobs"): returning normally or ``True`` succeeds (another
JSON-safe value is stored as the result); ``False`` and any exception are retried with
backoff until ``max_attempts`` (``BaseException`` included: a ``KeyboardInterrupt`` raised
by a handler fails its attempt, not the worker);
``TerminalJobError`` fails now; ``RetryableJobError`` retries with its own floor and attempt
rule. After the signal fired, the reason decides: a timed-out attempt fails whatever the
handler returned; a shutdown-aborted one that did not succeed is released (attempt
refunded); a cancelled or lease-lost one was settled when it was aborted, so its result is
dropped before it gets here.
Each failed attempt carries its traceback (``_errortext.traceback_text``: the standard
formatting without locals, the last 16 KiB; None when nothing was raised) into the store's
attempt history.

Whoever settles a unit (its handler thread, the supervisor abandoning it, a transactional
thread, shutdown) hands the result to :class:`Outcomes`; it never looks at who did.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from golemq_pg._errortext import traceback_text
from golemq_pg.store.port import FailItem, RetryItem
from golemq_pg.worker.backoff import JobTimeout, describe_error
from golemq_pg.worker.events import SHUTDOWN, TIMEOUT
from golemq_pg.worker.units import FINISHED, Unit

if TYPE_CHECKING:
    from golemq_pg.worker.completer import Completer
    from golemq_pg.worker.runtime import Runtime


class Outcomes:
    """Decides the outcome of settled units and queues it on the completer."""

    def __init__(self, runtime: Runtime, completer: Completer) -> None:
        self.lock = runtime.lock
        self.policy = runtime.policy
        self.completer = completer

    def decide(self, unit: Unit, error: BaseException | None) -> None:
        """Queue the outcome of a settled unit for the completer."""
        reason = unit.signal.reason
        completer = self.completer
        if reason == SHUTDOWN:
            if error is None:
                completer.complete(unit)
            else:
                completer.release(unit, emit=True)
            return
        if reason == TIMEOUT:
            error = JobTimeout(
                f"attempt exceeded the handler timeout of {unit.pool.spec.timeout}s"
            )
        if error is None:
            completer.complete(unit)
            return
        jobs = unit.jobs
        policy = self.policy
        # Formatted once per attempt (a batch's jobs share it), on the thread that settles it.
        # Only for the attempt's history: never logged (it holds the whole message).
        trace = traceback_text(error)
        if len(jobs) == 1:
            job = jobs[0]
            decision = policy.decide(job.id, job.type, job.attempt, job.max_attempts, error)
            if decision.retry:
                completer.retry(
                    unit,
                    [RetryItem(job.id, job.lease_token, decision.delay, decision.error,
                               decision.consume_attempt, trace)],
                    consumed=decision.consume_attempt,
                )
            else:
                completer.fail(unit, [FailItem(job.id, job.lease_token, decision.error, trace)])
            return
        # A batch shares one decision (so its jobs stay together), taken at the batch's
        # attempt; a job whose own budget is spent is dead-lettered alone.
        first = jobs[0]
        budgets = [job.max_attempts for job in jobs]
        decision = policy.decide(
            first.id, first.type, unit.attempt,
            None if None in budgets else max(b for b in budgets if b is not None), error,
        )
        text = decision.error or describe_error(error)
        if not decision.retry:
            completer.fail(unit, [FailItem(job.id, job.lease_token, text, trace) for job in jobs])
            return
        retries: list[RetryItem] = []
        fails: list[FailItem] = []
        for job in jobs:
            budget = job.max_attempts  # None: unlimited, never spent
            if decision.consume_attempt and budget is not None and job.attempt >= budget:
                fails.append(FailItem(job.id, job.lease_token, text, trace))
            else:
                retries.append(
                    RetryItem(job.id, job.lease_token, decision.delay, text,
                              decision.consume_attempt, trace)
                )
        if retries:
            completer.retry(unit, retries, consumed=decision.consume_attempt)
        if fails:
            completer.fail(unit, fails)

    def release_unstarted(self, unit: Unit) -> None:
        """Settle a unit no handler started and give its jobs back (due now, attempt
        refunded): the shutdown path. Nothing is written if an abort settled it first."""
        with self.lock:
            won = not unit.settled
            unit.settled = True
            unit.state = FINISHED
        if won:
            self.completer.release(unit, emit=False)


__all__ = ["Outcomes"]
