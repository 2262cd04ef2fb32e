"""The one bounded-error-text helper: first line only, bounded, safe on a broken __str__."""

from __future__ import annotations

from golemq_pg._errortext import DEFAULT_LIMIT, UNPRINTABLE, error_text


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
