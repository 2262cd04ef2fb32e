"""The completer's batches without a database: a batch split on a refusal until each refused
item stands alone (and resumed where a connection error cut it), the stall that holds the
claims, and which errors of a write are the data's fault."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import errors as pg_errors

from golemq_pg.store.port import WriteRefused
from golemq_pg.store.postgres._refusals import data_refusals, is_data_error, refusal_text
from golemq_pg.worker.batches import SplitWrite, WriteStall, unwritable_fail


class _Store:
    """A write of ids ``0..size-1`` that refuses any part holding a bad one and, once, fails
    a given part for the connection."""

    def __init__(self, bad: set[int], drop_at: tuple[int, int] | None = None) -> None:
        self.bad = bad
        self.drop_at = drop_at
        self.calls: list[tuple[int, int]] = []
        self.stored: set[str] = set()

    def write(self, lo: int, hi: int) -> set[str]:
        self.calls.append((lo, hi))
        if (lo, hi) == self.drop_at:
            self.drop_at = None
            raise psycopg.OperationalError("connection lost")
        if any(lo <= b < hi for b in self.bad):
            raise WriteRefused("DataError: refused")
        done = {str(i) for i in range(lo, hi)}
        assert not done & self.stored, "an item was written twice"
        self.stored |= done
        return done


@pytest.mark.parametrize("bad", [set(), {0}, {999}, {3, 4}, {10, 500, 998}])
def test_every_item_but_the_refused_ones_is_written(bad: set[int]) -> None:
    store = _Store(bad)
    split = SplitWrite(1000)
    split.run(store.write)
    assert split.written == {str(i) for i in range(1000)} - {str(b) for b in bad}
    assert sorted(index for index, _ in split.refused) == sorted(bad)
    # log2(1000) ~ 10 halvings per refused item, not a write per item.
    assert len(store.calls) <= 1 + 2 * 10 * len(bad)


def test_a_connection_error_resumes_with_the_part_it_cut() -> None:
    store = _Store({7}, drop_at=(8, 16))
    split = SplitWrite(16)
    with pytest.raises(psycopg.OperationalError):
        split.run(store.write)
    written_before = set(split.written)
    split.run(store.write)  # the caller's retry: the parts written stay written
    assert written_before < split.written
    assert split.written == {str(i) for i in range(16)} - {"7"}
    assert [index for index, _ in split.refused] == [7]


def test_only_the_whole_unsplit_batch_is_whole() -> None:
    split = SplitWrite(4)
    assert split.whole(0, 4)
    assert not split.whole(0, 2)
    assert not SplitWrite(0).todo


def test_the_dead_letter_write_carries_only_golemqs_own_text() -> None:
    class Item:
        id = "5"
        token = 9
        error = "secret \x00 payload text"

    fail = unwritable_fail(Item(), WriteRefused("DataError: PostgreSQL text fields cannot "
                                                "contain NUL (0x00) bytes"))
    assert (fail.id, fail.token, fail.traceback) == ("5", 9, None)
    assert fail.error == ("OutcomeUnwritable: DataError: PostgreSQL text fields cannot "
                          "contain NUL (0x00) bytes")


def test_a_stall_is_reported_once_after_the_bound_and_ends_with_a_success() -> None:
    now = [0.0]
    stall = WriteStall(2.0, clock=lambda: now[0])
    assert not stall.stalled()
    assert not stall.failed()
    now[0] = 1.0
    assert not stall.failed()
    assert not stall.stalled()
    now[0] = 2.5
    assert stall.stalled()
    assert stall.failed()  # the report
    assert not stall.failed()  # once
    assert stall.seconds() == 2.5
    assert stall.succeeded()  # ends a reported stall
    assert not stall.stalled()
    assert not stall.succeeded()


@pytest.mark.parametrize(("error", "data"), [
    (pg_errors.UntranslatableCharacter("unsupported Unicode escape sequence"), True),
    (pg_errors.CharacterNotInRepertoire("invalid byte sequence"), True),
    (psycopg.DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes"), True),
    (UnicodeEncodeError("utf-8", "a\udcff", 1, 2, "surrogates not allowed"), True),
    (psycopg.ProgrammingError("cannot adapt type 'object'"), True),
    (psycopg.OperationalError("connection lost"), False),
    (pg_errors.AdminShutdown("terminating connection"), False),
    (pg_errors.ReadOnlySqlTransaction("read-only"), False),
    (pg_errors.UndefinedFunction("function does not exist"), False),
    (pg_errors.InsufficientPrivilege("permission denied"), False),
    (pg_errors.DeadlockDetected("deadlock"), False),
    (psycopg.InterfaceError("the connection is closed"), False),
    (RuntimeError("a bug"), False),
])
def test_only_errors_of_the_items_data_refuse_a_write(error: Exception, data: bool) -> None:
    assert is_data_error(error) is data
    if data:
        with pytest.raises(WriteRefused) as refused, data_refusals():
            raise error
        assert refused.value.__cause__ is error
    else:
        with pytest.raises(type(error)), data_refusals():
            raise error


def test_an_encoding_refusal_never_quotes_the_item() -> None:
    error = UnicodeEncodeError("utf-8", "secret\udcff", 6, 7, "surrogates not allowed")
    assert refusal_text(error) == "UnicodeEncodeError: surrogates not allowed"
