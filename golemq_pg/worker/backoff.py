"""Retry arithmetic: the default exponential backoff, custom strategies, and error text.

Pure functions (the random source is injectable), so they are unit-tested without threads.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from golemq_pg._errortext import error_text
from golemq_pg._types import RetryContext, RetryStrategy
from golemq_pg._validation import encode_result
from golemq_pg.errors import RetryableJobError, TerminalJobError

log = structlog.get_logger("golemq_pg.worker.backoff")

#: ``last_error`` is "<ExceptionType>: <first line of the message>", cut to this many characters.
MAX_ERROR_CHARS = 2000
#: Jitter adds up to this fraction of the exponential delay, so retries spread out.
JITTER_FRACTION = 0.25


class HandlerReturnedFalse(Exception):  # noqa: N818 - named after what happened
    """Stands for a handler that returned ``False`` (retried like an exception)."""


class JobTimeout(Exception):  # noqa: N818 - named after what happened
    """Stands for an attempt that ran past its handler's ``timeout``."""


class ResultRejected(TerminalJobError):  # noqa: N818 - named after what happened
    """Stands for a handler whose return value cannot be stored as the job's result (not
    JSON-safe, or over 1 MiB encoded): the job fails now. The message names the problem,
    never the value."""


def encoded_result(value: object) -> bytes | ResultRejected:
    """A handler's return value (not None, True or False) as the job's encoded result, or
    the :class:`ResultRejected` that fails the job. Runs on the handler thread."""
    try:
        return encode_result(value)
    except ValueError as exc:
        return ResultRejected(str(exc))


def describe_error(error: BaseException) -> str:
    """``"<ExceptionType>: <first line of the message>"`` cut to :data:`MAX_ERROR_CHARS` (no
    traceback): the ``last_error`` text, which observers get as a transition's ``error`` too."""
    return error_text(error, limit=MAX_ERROR_CHARS, with_type=True)


def default_backoff(
    attempt: int,
    base: float,
    cap: float,
    *,
    uniform: Callable[[float, float], float] = random.uniform,
) -> float:
    """``base * 2**(attempt-1)`` plus up to 25% jitter, capped at ``cap`` seconds."""
    if base <= 0:
        return 0.0
    exponent = min(max(attempt - 1, 0), 62)
    delay = base * math.ldexp(1.0, exponent)
    if delay >= cap:
        return cap
    delay += uniform(0.0, delay * JITTER_FRACTION)
    return min(delay, cap)


@dataclass(frozen=True, slots=True)
class RetryDecision:
    """What to do with a failed attempt: retry after ``delay`` seconds, or fail now."""

    retry: bool
    delay: float = 0.0
    consume_attempt: bool = True
    error: str | None = None


@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    """The worker's retry rule: default exponential backoff, or a custom strategy."""

    base: float
    cap: float
    strategy: RetryStrategy | None = None
    uniform: Callable[[float, float], float] = random.uniform

    def decide(
        self,
        job_id: str,
        job_type: str,
        attempt: int,
        max_attempts: int | None,
        error: BaseException,
    ) -> RetryDecision:
        """Decide the fate of attempt ``attempt`` (1-based) that ended with ``error``;
        ``max_attempts`` None is unlimited: never exhausted, each delay still capped at
        ``cap`` (``max_backoff``).

        * ``TerminalJobError`` fails now.
        * ``RetryableJobError(consumes_attempt=False)`` retries even at the last attempt,
          since it spends none; ``retry_after`` is a floor that wins above ``max_backoff``.
        * Anything else retries while attempts remain, then fails (dead letter).
        * A custom ``retry_strategy`` returns the delay, or ``None`` to fail now.
        """
        text = describe_error(error)
        if isinstance(error, TerminalJobError):
            return RetryDecision(retry=False, error=text)
        consume = True
        floor = 0.0
        if isinstance(error, RetryableJobError):
            consume = bool(error.consumes_attempt)
            floor = _finite_nonnegative(error.retry_after)
        if consume and max_attempts is not None and attempt >= max_attempts:
            return RetryDecision(retry=False, error=text)
        delay: float | None = None
        if self.strategy is not None:
            try:
                chosen = self.strategy(
                    RetryContext(job_id, job_type, attempt, max_attempts, error)
                )
            except Exception as exc:  # noqa: BLE001 - a broken strategy falls back to the default
                log.warning(
                    "retry_strategy_failed", job_id=job_id, type=job_type, attempt=attempt,
                    error_type=type(exc).__name__,
                )
            else:
                if chosen is None:
                    return RetryDecision(retry=False, error=text)
                delay = _finite_nonnegative(chosen)
        if delay is None:
            delay = default_backoff(attempt, self.base, self.cap, uniform=self.uniform)
        return RetryDecision(
            retry=True, delay=max(delay, floor), consume_attempt=consume, error=text
        )


def _finite_nonnegative(value: object) -> float:
    """A delay from user code: numbers only, NaN and negatives become 0, inf a century."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    seconds = float(value)
    if math.isnan(seconds) or seconds < 0:
        return 0.0
    return min(seconds, 100 * 365 * 86400.0)


__all__ = [
    "MAX_ERROR_CHARS",
    "BackoffPolicy",
    "HandlerReturnedFalse",
    "JobTimeout",
    "ResultRejected",
    "RetryDecision",
    "default_backoff",
    "describe_error",
    "encoded_result",
]
