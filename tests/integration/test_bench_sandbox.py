"""The benchmark harness's sandboxes (``benchmarks.sandbox``) against a real PostgreSQL: a
loaded backlog is analyzed in the sandbox it was loaded into, and nowhere else, so every
system drains it from the same state as the raw-SQL ceiling's (which always ran ANALYZE);
the after-vacuum scenario's VACUUM ANALYZE reaches every table of its sandbox, and no other."""

from __future__ import annotations

import time
from collections.abc import Callable

import psycopg
import pytest
from psycopg import sql

from benchmarks.sandbox import (
    Sandbox,
    analyze_backlog,
    fresh_database,
    fresh_schema,
    vacuum_analyze,
)


def _analyzed(dsn: str, schema: str) -> dict[str, bool]:
    """Each table of ``schema``: whether it was analyzed (manually) at least once."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows: list[tuple[str, bool]] = conn.execute(
            "SELECT relname, analyze_count > 0 FROM pg_stat_user_tables"
            " WHERE schemaname = %s",
            [schema],
        ).fetchall()
    return dict(rows)


def _vacuumed(dsn: str, schema: str) -> dict[str, bool]:
    """Each table of ``schema``: whether it was vacuumed and analyzed (manually)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows: list[tuple[str, bool]] = conn.execute(
            "SELECT relname, vacuum_count > 0 AND analyze_count > 0 FROM pg_stat_user_tables"
            " WHERE schemaname = %s",
            [schema],
        ).fetchall()
    return dict(rows)


def _two_tables(box: Sandbox, schema: str) -> None:
    with psycopg.connect(box.dsn, autocommit=True) as conn:
        for table in ("jobs", "other"):
            conn.execute(sql.SQL("CREATE TABLE {} (id int)").format(
                sql.Identifier(schema, table)))
            conn.execute(sql.SQL("INSERT INTO {} SELECT generate_series(1, 50)").format(
                sql.Identifier(schema, table)))


def _analyzed_eventually(dsn: str, schema: str, expected: dict[str, bool], *,
                         read: Callable[[str, str], dict[str, bool]] = _analyzed,
                         ) -> dict[str, bool]:
    """``read`` (``_analyzed``) once it reads ``expected`` (or after 5 s): the backend that
    ran ANALYZE reports its statistics as it exits, a moment after the client closed it."""
    deadline = time.monotonic() + 5
    seen = read(dsn, schema)
    while seen != expected and time.monotonic() < deadline:
        time.sleep(0.05)
        seen = read(dsn, schema)
    return seen


@pytest.mark.parametrize(("upkeep", "read"), [(analyze_backlog, _analyzed),
                                             (vacuum_analyze, _vacuumed)],
                         ids=["analyze_backlog", "vacuum_analyze"])
def test_sandbox_upkeep_reaches_every_table_of_a_schema_sandbox_and_no_other(
    pg_dsn: str, upkeep: Callable[[Sandbox], None],
    read: Callable[[str, str], dict[str, bool]],
) -> None:
    # analyze_backlog analyses the sandbox's tables; vacuum_analyze also vacuums them
    with fresh_schema(pg_dsn, "upkept") as box, fresh_schema(pg_dsn, "untouched") as other:
        assert box.schema is not None
        assert other.schema is not None
        _two_tables(box, box.schema)
        _two_tables(other, other.schema)

        upkeep(box)

        expected = {"jobs": True, "other": True}
        assert _analyzed_eventually(pg_dsn, box.schema, expected, read=read) == expected
        assert read(pg_dsn, other.schema) == {"jobs": False, "other": False}


def test_analyze_backlog_analyzes_the_tables_of_a_database_sandbox(pg_dsn: str) -> None:
    with fresh_database(pg_dsn, "analyzed_db") as box:
        schema = box.schema or "public"
        _two_tables(box, schema)

        analyze_backlog(box)

        expected = {"jobs": True, "other": True}
        assert _analyzed_eventually(box.dsn, schema, expected) == expected


def test_analyze_backlog_of_an_empty_sandbox_does_nothing(pg_dsn: str) -> None:
    with fresh_schema(pg_dsn, "empty") as box:
        assert box.schema is not None
        analyze_backlog(box)
        assert _analyzed(pg_dsn, box.schema) == {}
