"""Retry arithmetic: default backoff, retry_after floor, attempts, custom strategies."""

from __future__ import annotations

import math

import pytest

from golemq_pg import RetryableJobError, RetryContext, TerminalJobError
from golemq_pg.worker.backoff import (
    MAX_ERROR_CHARS,
    BackoffPolicy,
    HandlerReturnedFalse,
    default_backoff,
    describe_error,
)


def no_jitter(low: float, high: float) -> float:
    return low


def full_jitter(low: float, high: float) -> float:
    return high


def test_default_backoff_doubles_per_attempt() -> None:
    assert [default_backoff(a, 2, 300, uniform=no_jitter) for a in (1, 2, 3, 4)] == [2, 4, 8, 16]


def test_jitter_adds_at_most_a_quarter_and_is_capped() -> None:
    assert default_backoff(3, 2, 300, uniform=full_jitter) == 8 * 1.25
    assert default_backoff(3, 2, 9, uniform=full_jitter) == 9
    assert default_backoff(30, 2, 300, uniform=full_jitter) == 300


def test_backoff_never_overflows() -> None:
    assert default_backoff(10**6, 2, 300) == 300
    assert default_backoff(0, 2, 300, uniform=no_jitter) == 2


def test_zero_base_means_immediate_retry() -> None:
    assert default_backoff(5, 0, 0) == 0


def test_real_jitter_stays_in_range() -> None:
    for _ in range(200):
        delay = default_backoff(2, 2, 300)
        assert 4 <= delay <= 5


def policy(**kw: object) -> BackoffPolicy:
    return BackoffPolicy(base=2, cap=300, uniform=no_jitter, **kw)  # type: ignore[arg-type]


def test_ordinary_error_retries_until_the_last_attempt() -> None:
    p = policy()
    first = p.decide("1", "t", 1, 3, ValueError("bad"))
    assert first.retry
    assert first.delay == 2
    assert first.consume_attempt
    assert first.error == "ValueError: bad"
    last = p.decide("1", "t", 3, 3, ValueError("bad"))
    assert not last.retry
    assert last.error == "ValueError: bad"


def test_an_unlimited_budget_never_runs_out_and_its_delay_stays_capped() -> None:
    p = policy()
    for attempt in (1, 3, 64, 10_000, 2**31 - 1):
        decision = p.decide("1", "t", attempt, None, ValueError("x"))
        assert decision.retry
        assert 0 < decision.delay <= 300
    assert p.decide("1", "t", 10_000, None, ValueError("x")).delay == 300
    assert not p.decide("1", "t", 5, None, TerminalJobError("x")).retry


def test_terminal_error_fails_at_once() -> None:
    decision = policy().decide("1", "t", 1, 5, TerminalJobError("gone"))
    assert not decision.retry
    assert decision.error == "TerminalJobError: gone"


def test_retryable_error_floor_wins_above_max_backoff() -> None:
    decision = policy().decide("1", "t", 1, 5, RetryableJobError("later", retry_after=900))
    assert decision.retry
    assert decision.delay == 900


def test_retryable_error_floor_below_backoff_keeps_backoff() -> None:
    decision = policy().decide("1", "t", 3, 5, RetryableJobError("later", retry_after=1))
    assert decision.delay == 8


def test_retry_without_consuming_an_attempt_works_even_at_the_last_attempt() -> None:
    decision = policy().decide(
        "1", "t", 3, 3, RetryableJobError("rate limited", retry_after=5, consumes_attempt=False)
    )
    assert decision.retry
    assert not decision.consume_attempt
    assert decision.delay == 8


def test_retryable_error_that_consumes_fails_when_exhausted() -> None:
    decision = policy().decide("1", "t", 3, 3, RetryableJobError("again"))
    assert not decision.retry


def test_handler_returned_false_is_retried() -> None:
    decision = policy().decide("1", "t", 1, 3, HandlerReturnedFalse("handler returned False"))
    assert decision.retry
    assert decision.error == "HandlerReturnedFalse: handler returned False"


def test_base_exceptions_are_ordinary_failures() -> None:
    decision = policy().decide("1", "t", 1, 3, KeyboardInterrupt())
    assert decision.retry
    assert decision.error == "KeyboardInterrupt"


def test_custom_strategy_replaces_the_default() -> None:
    seen: list[RetryContext] = []

    def strategy(ctx: RetryContext) -> float | None:
        seen.append(ctx)
        return 42.0 if ctx.attempt < 2 else None

    p = policy(strategy=strategy)
    error = ValueError("x")
    first = p.decide("7", "t", 1, 5, error)
    assert first.retry
    assert first.delay == 42.0
    assert seen[0] == RetryContext("7", "t", 1, 5, error)
    assert not p.decide("7", "t", 2, 5, error).retry


def test_strategy_is_not_asked_when_attempts_are_exhausted_or_terminal() -> None:
    calls: list[int] = []

    def strategy(ctx: RetryContext) -> float | None:
        calls.append(ctx.attempt)
        return 1.0

    p = policy(strategy=strategy)
    assert not p.decide("1", "t", 3, 3, ValueError()).retry
    assert not p.decide("1", "t", 1, 3, TerminalJobError()).retry
    assert calls == []


def test_retry_after_is_a_floor_on_a_custom_strategy_too() -> None:
    p = policy(strategy=lambda ctx: 1.0)
    assert p.decide("1", "t", 1, 3, RetryableJobError("x", retry_after=30)).delay == 30


def test_broken_or_silly_strategies_are_tamed() -> None:
    def broken(ctx: RetryContext) -> float | None:
        raise RuntimeError("strategy bug")

    assert policy(strategy=broken).decide("1", "t", 2, 3, ValueError()).delay == 4
    assert policy(strategy=lambda ctx: -5).decide("1", "t", 1, 3, ValueError()).delay == 0
    assert policy(strategy=lambda ctx: math.nan).decide("1", "t", 1, 3, ValueError()).delay == 0
    assert policy(strategy=lambda ctx: math.inf).decide("1", "t", 1, 3, ValueError()).delay > 1e9


def test_describe_error_truncates_and_survives_broken_str() -> None:
    assert describe_error(ValueError("x" * 5000)).startswith("ValueError: xxx")
    assert len(describe_error(ValueError("x" * 5000))) == MAX_ERROR_CHARS
    assert describe_error(RuntimeError()) == "RuntimeError"

    class Weird(Exception):  # noqa: N818 - a test double
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert describe_error(Weird()) == "Weird: <unprintable error>"


@pytest.mark.parametrize("attempt", [1, 2, 3])
def test_delay_is_never_negative(attempt: int) -> None:
    assert policy().decide("1", "t", attempt, 5, ValueError()).delay >= 0
