"""Which errors of a fenced batch write are the data's fault: the ones worth splitting the
batch for (:class:`~golemq_pg.store.port.WriteRefused`), told apart from the connection's.

A data error is one that the same items would meet again on any connection: PostgreSQL's
class 22 (``DataError``: an untranslatable character, a character not in the repertoire, a
NUL in a text or JSON value), and what the client raises while it encodes the parameters
before anything is sent (psycopg's refusal of a NUL byte is a ``DataError`` too; a lone
surrogate is a ``UnicodeEncodeError``, a ``ValueError``; a value no dumper adapts is a
``ProgrammingError`` without a SQLSTATE). Everything else (``OperationalError``,
``InterfaceError``, a read-only transaction, a missing function or privilege) says nothing
about one item: splitting on it would dead-letter every job of a healthy batch, so it
propagates and the worker retries the write whole, as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from golemq_pg._errortext import error_text
from golemq_pg.store.port import WriteRefused


def is_data_error(exc: BaseException) -> bool:
    """Whether ``exc``, raised by a batch write, is the fault of the items written."""
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        return False
    if isinstance(exc, psycopg.DataError):
        return True
    if isinstance(exc, psycopg.ProgrammingError):
        return exc.sqlstate is None  # raised by the client's adaptation, before sending
    return isinstance(exc, ValueError | TypeError) and not isinstance(exc, psycopg.Error)


def refusal_text(exc: BaseException) -> str:
    """The error's class and the first line of its message; for an encoding error its
    reason only (its message quotes the character and its position in the item)."""
    if isinstance(exc, UnicodeError):
        reason = getattr(exc, "reason", None)
        if isinstance(reason, str) and reason:
            return error_text(WriteRefused(f"{type(exc).__name__}: {reason}"))
    return error_text(exc, with_type=True)


@contextmanager
def data_refusals() -> Iterator[None]:
    """Raise :class:`WriteRefused` (chained to the error) for a data error of the block."""
    try:
        yield
    except Exception as exc:
        if is_data_error(exc):
            raise WriteRefused(refusal_text(exc)) from exc
        raise


__all__ = ["data_refusals", "is_data_error", "refusal_text"]
