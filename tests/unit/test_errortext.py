"""The one bounded-error-text helper: first line only, bounded, safe on a broken __str__;
and a failed attempt's traceback: standard formatting without locals, its last 16 KiB."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from golemq_pg._errortext import (
    DEFAULT_LIMIT,
    TRACEBACK_CUT,
    TRACEBACK_LIMIT,
    UNPRINTABLE,
    bounded_traceback,
    error_text,
    storable_text,
    stored_error,
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


# -- storable text: NUL and lone surrogates escaped, once, visibly ---------------------------

_ANY_TEXT = st.text(st.one_of(st.characters(), st.sampled_from(["\x00", "\udcff", "\ud800"]),
                              st.integers(0xD800, 0xDFFF).map(chr)))


def _storable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


@given(_ANY_TEXT)
def test_any_text_is_made_storable_and_stays_so(text: str) -> None:
    stored = storable_text(text)
    assert _storable(stored)
    assert storable_text(stored) == stored  # idempotent
    if _storable(text) and "\x00" not in text:
        assert stored == text  # what could be stored is left alone


def test_nul_and_lone_surrogates_are_escaped_visibly() -> None:
    assert storable_text("a\x00b\udcffc\ud800é") == "a\\x00b\\udcffc\\ud800é"
    assert stored_error(None) is None
    assert stored_error("x\x00") == "x\\x00"


@given(_ANY_TEXT)
def test_any_error_message_gives_storable_error_text(message: str) -> None:
    text = error_text(ValueError(message), with_type=True, limit=2000)
    assert _storable(text)
    assert text.startswith("ValueError")


class _StrNotAStringError(Exception):
    def __str__(self) -> Any:
        return 42  # noqa: PLE0307 - the point: str() of it raises TypeError


class _FancyText(str):
    __slots__ = ()

    def splitlines(self, keepends: bool = False) -> Any:
        raise RuntimeError("no")


class _FancyTextError(Exception):
    def __str__(self) -> str:
        return _FancyText("fine text")


class _NamelessMeta(type):
    @property
    def __name__(cls) -> str:  # type: ignore[override]
        raise RuntimeError("no name")


class _NamelessError(Exception, metaclass=_NamelessMeta):
    pass


class _ReprRaises:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def test_broken_exceptions_give_readable_text() -> None:
    assert error_text(_StrNotAStringError(), with_type=True) == (
        f"_StrNotAStringError: {UNPRINTABLE}")
    # A str subclass whose methods misbehave is read as a plain string.
    assert error_text(_FancyTextError()) == "fine text"
    assert error_text(_NamelessError("boom"), with_type=True) == "<unnamed exception>: boom"
    assert error_text(KeyError(_ReprRaises()), with_type=True) == f"KeyError: {UNPRINTABLE}"


class _OddError(Exception):
    pass


_OddError.__qualname__ = "Odd\x00\udcff"  # a qualname may hold both; a name may not


def _raise_odd() -> None:
    raise _OddError("message \x00 \udcff")


def test_a_traceback_is_storable_whatever_the_exception_says() -> None:
    try:
        _raise_odd()
    except _OddError as exc:
        trace = traceback_text(exc)
    assert trace is not None
    assert _storable(trace)
    assert trace.endswith("Odd\\x00\\udcff: message \\x00 \\udcff\n")
