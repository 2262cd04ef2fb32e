"""Loading the shipped SQL: named blocks, and the $n rewrite of the long guarded claims."""

from __future__ import annotations

from pathlib import Path

import pytest

import golemq_pg
from golemq_pg.store.port import TypeSlots
from golemq_pg.store.postgres._claim import guarded_statement
from golemq_pg.store.postgres._sql import (
    Queries,
    RawStatement,
    listen_statement,
    parse_named,
    sql_dir,
)


def test_named_blocks_split_and_reject_duplicates_and_empty_bodies() -> None:
    text = "-- header\n-- name: one\nSELECT 1\n\n-- name: two\nSELECT 2\n"
    assert parse_named(text, "x.sql") == {"one": "SELECT 1", "two": "SELECT 2"}
    with pytest.raises(RuntimeError, match="duplicate query name 'one'"):
        parse_named("-- name: one\nSELECT 1\n-- name: one\nSELECT 2\n", "x.sql")
    with pytest.raises(RuntimeError, match="empty query 'two'"):
        parse_named("-- name: one\nSELECT 1\n-- name: two\n", "x.sql")


def test_raw_statement_numbers_each_name_once_in_order_of_first_use() -> None:
    raw = RawStatement.convert(
        b"SELECT %(b)s::int, %(a)s::text, %(b)s::int WHERE x LIKE 'a%%' AND y = %(c)s")
    assert raw.text == b"SELECT $1::int, $2::text, $1::int WHERE x LIKE 'a%' AND y = $3"
    assert raw.names == ("b", "a", "c")
    assert raw.args({"a": "A", "b": 2, "c": None, "unused": 9}) == [2, "A", None]
    with pytest.raises(KeyError):
        raw.args({"a": "A", "b": 2})


def test_the_guarded_claims_keep_every_parameter_through_the_rewrite() -> None:
    queries = Queries("golemq")
    for name in ("job_claim_guarded", "job_claim_grouped", "job_claim_pooled"):
        raw = queries.raw(name)
        assert queries.raw(name) is raw  # converted once
        assert b"%(" not in raw.text
        assert f"${len(raw.names)}".encode() in raw.text
        assert f"${len(raw.names) + 1}".encode() not in raw.text
        assert {"type", "limit", "owner", "pool_names", "rate_window"} <= set(raw.names)
    assert {"cursor_type", "scope_depth"} <= set(queries.raw("job_claim_guarded").names)
    assert "scope_depth" not in queries.raw("job_claim_pooled").names  # no scope walk


@pytest.mark.parametrize(("slot", "statement"), [
    (TypeSlots("t", 32, 30), "job_claim_pooled"),  # on the guarded path only for its pools
    (TypeSlots("t", 32, 30, serialize_by_scope=True), "job_claim_guarded"),
    (TypeSlots("t", 32, 30, not_while_running=("u",)), "job_claim_guarded"),
    (TypeSlots("t", 32, 30, waits_for=("u",)), "job_claim_guarded"),
    (TypeSlots("t", 32, 30, grouped=True, serialize_by_scope=True), "job_claim_grouped"),
])
def test_a_type_guarded_by_pools_only_takes_the_lean_claim(slot: TypeSlots,
                                                           statement: str) -> None:
    assert guarded_statement(slot) == statement


def test_templates_are_not_rendered_with_the_schema_and_listen_quotes_its_channel() -> None:
    assert "template_listen" not in Queries("golemq").names()
    rendered = listen_statement('golemq_jobs"; DROP TABLE x; --').as_string(None)
    assert rendered == 'LISTEN "golemq_jobs""; DROP TABLE x; --"'


def test_the_sql_directory_is_the_one_beside_the_running_code() -> None:
    # An editable install maps golemq_pg.sql to the checkout it came from; a worktree run
    # with PYTHONPATH must still load its own statements and migrations.
    package = Path(golemq_pg.__file__).resolve().parent
    found = Path(str(sql_dir()))
    assert found in (package / "sql", package.parent / "sql")
    assert (found / "migrations" / "0001_initial.sql").is_file()
