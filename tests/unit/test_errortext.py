"""The one bounded-error-text helper: first line only, bounded, safe on a broken __str__;
and a failed attempt's traceback: standard formatting without locals, its last 16 KiB."""

from __future__ import annotations

from golemq_pg._errortext import (
    DEFAULT_LIMIT,
    TRACEBACK_CUT,
    TRACEBACK_LIMIT,
    UNPRINTABLE,
    bounded_traceback,
    error_text,
    traceback_text,
)


class _BrokenStrError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no")


def test_only_the_first_line_is_kept() -> None:
    # A database error's DETAIL line can quote the failing row, payload included.
    exc = ValueError('new row violates check constraint "rule"\n'
                     "DETAIL:  Failing row contains (1, {\"secret\": 1}).")
    assert error_text(exc) == 'new row violates check constraint "rule"'
    assert error_text(exc, with_type=True) == (
        'ValueError: new row violates check constraint "rule"'
    )
    # Any line break ends the line, not only "\n".
    assert error_text(ValueError("first\rsecond")) == "first"


def test_the_text_is_bounded_and_the_cut_marked() -> None:
    text = error_text(ValueError("x" * 5000))
    assert len(text) == DEFAULT_LIMIT
    assert text.endswith("...")
    assert len(error_text(ValueError("x" * 5000), limit=50, with_type=True)) == 50
    assert error_text(ValueError("short"), limit=50) == "short"


def test_an_empty_message_gives_the_type_name() -> None:
    assert error_text(RuntimeError()) == "RuntimeError"
    assert error_text(RuntimeError("  \n  ")) == "RuntimeError"
    assert error_text(RuntimeError(), with_type=True) == "RuntimeError"


def test_a_broken_str_never_raises() -> None:
    assert error_text(_BrokenStrError()) == UNPRINTABLE
    assert error_text(_BrokenStrError(), with_type=True) == f"_BrokenStrError: {UNPRINTABLE}"


def _raise_with_a_secret_local() -> None:
    value = "hunter2-local"
    raise KeyError(value[:3])


def test_a_traceback_is_the_standard_formatting_without_locals() -> None:
    try:
        try:
            _raise_with_a_secret_local()
        except KeyError as cause:
            raise RuntimeError("lookup failed\nsecond line") from cause
    except RuntimeError as exc:
        text = traceback_text(exc)
    assert text is not None
    assert text.startswith("Traceback (most recent call last):\n")
    assert ", in _raise_with_a_secret_local\n" in text
    assert "KeyError: 'hun'" in text  # the cause, as the standard formatting chains it
    assert "direct cause of the following exception" in text
    assert text.endswith("RuntimeError: lookup failed\nsecond line\n")
    assert "hunter2-local" not in text  # the source line names the local, not its value


def test_an_error_never_raised_has_no_traceback() -> None:
    assert traceback_text(ValueError("made, not raised")) is None


def _raise_broken() -> None:
    raise _BrokenStrError


def test_a_broken_str_still_gives_a_traceback() -> None:
    try:
        _raise_broken()
    except _BrokenStrError as exc:
        text = traceback_text(exc)
    assert text is not None
    assert "_BrokenStrError" in text


def test_a_traceback_is_bounded_at_its_end() -> None:
    assert bounded_traceback(None) is None
    assert bounded_traceback("short\n") == "short\n"
    long = "x" * TRACEBACK_LIMIT + "the end\n"
    kept = bounded_traceback(long)
    assert kept is not None
    assert len(kept.encode()) == TRACEBACK_LIMIT
    assert kept.startswith(TRACEBACK_CUT)
    assert kept.endswith("xthe end\n")
    exact = "y" * TRACEBACK_LIMIT
    assert bounded_traceback(exact) == exact
    # a character cut in two at the start of the tail is dropped, never half-decoded
    euros = bounded_traceback("\u20ac" * TRACEBACK_LIMIT)
    assert euros is not None
    assert set(euros[len(TRACEBACK_CUT):]) == {"\u20ac"}
    assert len(euros.encode()) <= TRACEBACK_LIMIT
