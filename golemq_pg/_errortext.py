"""Bounded error text: what a log line, a CLI message or ``last_error`` may say about an error.

One helper for the whole package (store, worker and CLI alike; it imports nothing from the
package, so any module can use it without an import cycle). Three properties hold for
every caller:

* only the first line of the message: a database error's DETAIL and CONTEXT lines may quote
  the row it failed on ("Failing row contains (...)"), payload included;
* a bounded length, the cut marked with ``...``;
* a broken ``__str__`` never breaks the caller (logging, an outcome write, an exit message).
"""

from __future__ import annotations

#: The text used when an exception's ``__str__`` itself raises.
UNPRINTABLE = "<unprintable error>"
#: The default bound: long enough for a database error's primary message.
DEFAULT_LIMIT = 300


def error_text(error: BaseException, *, limit: int = DEFAULT_LIMIT, with_type: bool = False) -> str:
    """The first line of ``error``'s message, at most ``limit`` characters.

    An empty message gives the exception's type name. With ``with_type`` the text is
    ``"<ExceptionType>: <first line>"`` (just the type name when the message is empty), the
    form ``last_error`` uses. Text longer than ``limit`` is cut to ``limit`` characters, the
    last three being ``...``.
    """
    try:
        message = str(error)
    except Exception:  # noqa: BLE001 - a broken __str__ must not break logging
        message = UNPRINTABLE
    # splitlines, not split("\n"): a carriage return or another line break must end the
    # line too, or a log line could carry (or fake) what follows it.
    lines = message.strip().splitlines()
    line = lines[0] if lines else ""
    name = type(error).__name__
    if not line:
        text = name
    elif with_type:
        text = f"{name}: {line}"
    else:
        text = line
    if len(text) > limit:
        text = text[: max(limit - 3, 0)] + "..."
    return text


__all__ = ["DEFAULT_LIMIT", "UNPRINTABLE", "error_text"]
