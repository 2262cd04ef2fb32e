"""A fenced write's batch goes to PostgreSQL in job id order, each paired value (the
handler's start) moved with its job: the rows are then locked in the one order every
settling statement uses (migration 0020), whatever the write's plan."""

from __future__ import annotations

from golemq_pg.store.port import FailItem, LeaseRef
from golemq_pg.store.postgres._rows import in_id_order


def test_a_batch_out_of_order_is_sorted_by_numeric_id_with_its_starts() -> None:
    items = [LeaseRef("100", 1), LeaseRef("9", 2), LeaseRef("99", 3)]
    ordered, started = in_id_order(items, [1.0, 2.0, None])
    assert [(i.id, i.token) for i in ordered] == [("9", 2), ("99", 3), ("100", 1)]
    assert started == [2.0, None, 1.0]


def test_a_batch_in_order_is_returned_as_it_is() -> None:
    items = [FailItem("7", 1, "e"), FailItem("8", 1, "e")]
    starts = [0.5, 0.25]
    ordered, started = in_id_order(items, starts)
    assert ordered is items
    assert started is starts


def test_an_id_that_cannot_be_ours_leaves_the_batch_as_it_is() -> None:
    items = [LeaseRef("20", 1), LeaseRef("x1", 1), LeaseRef("3", 1)]
    ordered, started = in_id_order(items, None)
    assert ordered is items
    assert started is None
