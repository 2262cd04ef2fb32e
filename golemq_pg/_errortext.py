"""Bounded error text: what a log line, a CLI message or ``last_error`` may say about an error.

One helper for the whole package (store, worker and CLI alike; it imports nothing from the
package, so any module can use it without an import cycle). Three properties hold for
every caller:

* only the first line of the message: a database error's DETAIL and CONTEXT lines may quote
  the row it failed on ("Failing row contains (...)"), payload included;
* a bounded length, the cut marked with ``...``;
* a broken ``__str__`` never breaks the caller (logging, an outcome write, an exit message);
* storable text: :func:`storable_text` is the one place where a text from user code (an
  error's message or type name, a traceback) is made something PostgreSQL's ``text`` can
  hold, before any SQL sees it.

A failed attempt's traceback (:func:`traceback_text`) is the one longer text: stored with the
attempt for the operator (``AttemptError.traceback``), bounded at its end, and never logged.
"""

from __future__ import annotations

import traceback as _traceback

#: The text used when an exception's ``__str__`` itself raises.
UNPRINTABLE = "<unprintable error>"
#: The default bound: long enough for a database error's primary message.
DEFAULT_LIMIT = 300


def storable_text(text: str) -> str:
    """``text`` as PostgreSQL's ``text`` (and UTF-8) can hold it: each NUL character becomes
    the four characters ``\\x00`` and each lone surrogate its escape (``\\udcff``), so the
    text stays readable and says what was there. Any other text comes back unchanged (the
    usual ASCII text without a NUL costs two C-speed scans). Idempotent.

    Every text the worker or the stores write from user code goes through it: error texts
    (:func:`error_text`, hence ``last_error``), tracebacks (:func:`bounded_traceback`). Texts
    a caller passes to the public API (step names, progress, cancel and pause reasons) are
    refused instead (``_validation.check_text``): bad input gets a clear error.
    """
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    if text.isascii():
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def stored_error(text: str | None) -> str | None:
    """An error text as a store writes it (``last_error``, an attempt's error):
    :func:`storable_text`, applied by both stores to what a port caller gives them, so no
    caller can hand the database a text it refuses."""
    return None if text is None else storable_text(text)


def error_text(error: BaseException, *, limit: int = DEFAULT_LIMIT, with_type: bool = False) -> str:
    """The first line of ``error``'s message, at most ``limit`` characters, storable.

    An empty message gives the exception's type name. With ``with_type`` the text is
    ``"<ExceptionType>: <first line>"`` (just the type name when the message is empty), the
    form ``last_error`` uses. Text longer than ``limit`` is cut to ``limit`` characters, the
    last three being ``...``. NUL characters and lone surrogates, in the message or in the
    type's name, are escaped (:func:`storable_text`). A ``__str__`` that raises or returns
    something other than a string gives :data:`UNPRINTABLE`.
    """
    line = _first_line(error)
    name = _type_name(error)
    if not line:
        text = name
    elif with_type:
        text = f"{name}: {line}"
    else:
        text = line
    text = storable_text(text)
    if len(text) > limit:
        text = text[: max(limit - 3, 0)] + "..."
    return text


def _first_line(error: BaseException) -> str:
    """The first line of ``str(error)``; :data:`UNPRINTABLE` when that cannot be had."""
    try:
        message = str(error)
        # A str subclass may override strip() or splitlines(): work on a plain copy.
        if type(message) is not str:
            message = str.__str__(message)
        # splitlines, not split("\n"): a carriage return or another line break must end
        # the line too, or a log line could carry (or fake) what follows it.
        lines = message.strip().splitlines()
    except Exception:  # noqa: BLE001 - a broken __str__ must not break logging or a write
        return UNPRINTABLE
    return lines[0] if lines else ""


def _type_name(error: BaseException) -> str:
    """The exception class's name as a plain string (a metaclass could make ``__name__``
    anything, or raise)."""
    try:
        name = type(error).__name__
        if type(name) is not str:
            name = str.__str__(name) if isinstance(name, str) else "<unnamed exception>"
    except Exception:  # noqa: BLE001 - the name is only a label
        return "<unnamed exception>"
    return name or "<unnamed exception>"


#: How much of a failed attempt's traceback is kept: its last 16 KiB (UTF-8 bytes).
TRACEBACK_LIMIT = 16 * 1024
#: The first line of a traceback cut to :data:`TRACEBACK_LIMIT` (counted within the limit).
TRACEBACK_CUT = "[traceback cut to its last 16 KiB]\n"


def traceback_text(error: BaseException) -> str | None:
    """The traceback of a failed attempt as the standard library formats it (no locals:
    ``capture_locals`` stays off, so no payload reaches it through a frame's variables),
    bounded by :func:`bounded_traceback`; None for an error that was never raised (a handler
    that returned False, a timeout, an unstorable result: no frame to show).

    Never for logs: the text holds the whole message and source lines, which may say what a
    handler's exception says about its payload. It is stored with the attempt, for the
    operator, and shown where the payload may be (the job page, ``golemq-pg show``).
    """
    if error.__traceback__ is None:
        return None
    try:
        text = "".join(_traceback.format_exception(error))
    except Exception:  # noqa: BLE001 - formatting must never break the outcome write
        try:
            text = "".join(
                _traceback.format_exception(error.__class__, None, error.__traceback__)
            )
        except Exception:  # noqa: BLE001 - the class itself cannot be formatted
            text = f"{_type_name(error)}: {UNPRINTABLE}\n"
    return bounded_traceback(text)


def bounded_traceback(text: str | None) -> str | None:
    """``text`` as a store keeps it: at most :data:`TRACEBACK_LIMIT` UTF-8 bytes, the end kept
    (the innermost frames and the error), after a :data:`TRACEBACK_CUT` line when cut; NUL
    characters and lone surrogates (PostgreSQL's text refuses both) escaped as ``\\x00`` and
    ``\\udxxx``. Both stores apply it, so a port caller cannot store more."""
    if text is None:
        return None
    data = storable_text(text).encode("utf-8")
    if len(data) <= TRACEBACK_LIMIT:
        return data.decode("utf-8")
    room = TRACEBACK_LIMIT - len(TRACEBACK_CUT.encode("utf-8"))
    # "ignore" drops the bytes of a character cut in two at the start of the tail.
    return TRACEBACK_CUT + data[-room:].decode("utf-8", "ignore")


__all__ = [
    "DEFAULT_LIMIT",
    "TRACEBACK_CUT",
    "TRACEBACK_LIMIT",
    "UNPRINTABLE",
    "bounded_traceback",
    "error_text",
    "storable_text",
    "stored_error",
    "traceback_text",
]
