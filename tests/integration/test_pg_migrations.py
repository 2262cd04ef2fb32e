"""Migrations on real PostgreSQL: idempotent, serialised, and equal to the printed script."""

from __future__ import annotations

import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from golemq_pg.store.port import EnqueueParams
from golemq_pg.store.postgres import PostgresStore, migration_script
from golemq_pg.store.postgres._migrations import migrations
from tests.support.schemas import fresh_schema


@pytest.fixture
def other_schema(pg_dsn: str) -> Iterator[str]:
    """A second fresh schema name, dropped afterwards."""
    with fresh_schema(pg_dsn) as name:
        yield name


def _catalog(conn: psycopg.Connection[Any], schema: str) -> dict[str, list[tuple[Any, ...]]]:
    """Everything migrations create in ``schema``, with the schema name normalised away."""
    queries = {
        "relations": """
            SELECT c.relname, c.relkind::text, coalesce(c.reloptions, ARRAY[]::text[])
              FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = %s ORDER BY 1""",
        "columns": """
            SELECT table_name, ordinal_position, column_name, data_type, column_default,
                   is_nullable, is_identity
              FROM information_schema.columns WHERE table_schema = %s ORDER BY 1, 2""",
        "indexes": """
            SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s ORDER BY 1""",
        "constraints": """
            SELECT c.relname, con.conname, pg_get_constraintdef(con.oid)
              FROM pg_constraint con
              JOIN pg_class c ON c.oid = con.conrelid
              JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = %s ORDER BY 1, 2""",
        "functions": """
            SELECT p.proname, pg_get_functiondef(p.oid)
              FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
             WHERE n.nspname = %s ORDER BY 1""",
        "triggers": """
            SELECT t.tgname, pg_get_triggerdef(t.oid)
              FROM pg_trigger t
              JOIN pg_class c ON c.oid = t.tgrelid
              JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = %s AND NOT t.tgisinternal ORDER BY 1""",
        "ledger": None,
    }
    out: dict[str, list[tuple[Any, ...]]] = {}
    for key, query in queries.items():
        if query is None:
            rows = conn.execute(
                sql.SQL("SELECT version, name FROM {}.schema_migrations ORDER BY 1").format(
                    sql.Identifier(schema)
                )
            ).fetchall()
        else:
            rows = conn.execute(query, (schema,)).fetchall()
        out[key] = [
            tuple(str(v).replace(schema, "<schema>") if v is not None else None for v in row)
            for row in rows
        ]
    return out


def test_migrate_twice_is_a_no_op(pg_dsn: str, schema: str) -> None:
    with PostgresStore.connect(pg_dsn, schema=schema) as store:
        first = store.migrate()
        assert first == [m.name for m in migrations()]
        with psycopg.connect(pg_dsn) as conn:
            before = _catalog(conn, schema)
        assert store.migrate() == []
        with psycopg.connect(pg_dsn) as conn:
            assert _catalog(conn, schema) == before
            assert [r[0] for r in before["ledger"]] == [str(m.version) for m in migrations()]


def test_concurrent_migrators_apply_each_migration_once(pg_dsn: str, schema: str) -> None:
    results: list[list[str]] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def run() -> None:
        try:
            with PostgresStore.connect(pg_dsn, schema=schema, max_size=1) as store:
                barrier.wait(timeout=10)
                results.append(store.migrate())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    applied = sorted(name for names in results for name in names)
    assert applied == sorted(m.name for m in migrations())


def test_script_builds_the_same_schema_as_migrate(
    pg_dsn: str, schema: str, other_schema: str
) -> None:
    with PostgresStore.connect(pg_dsn, schema=schema) as store:
        store.migrate()
    script = migration_script(other_schema)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        # No parameters: the script runs as one multi-statement simple query, like psql.
        conn.execute(sql.SQL(script))  # type: ignore[arg-type]
        migrated = _catalog(conn, schema)
        scripted = _catalog(conn, other_schema)
    assert migrated["functions"]  # the comparison is not vacuous
    assert migrated["triggers"]
    assert scripted == migrated
    # The script's ledger rows let migrate() recognise the schema as up to date.
    with PostgresStore.connect(pg_dsn, schema=other_schema) as store:
        assert store.migrate() == []


@pytest.mark.skipif(shutil.which("psql") is None, reason="needs the psql client on PATH")
def test_script_applies_with_psql(pg_dsn: str, schema: str, other_schema: str,
                                  tmp_path: Path) -> None:
    path = tmp_path / "golemq.sql"
    path.write_text(migration_script(other_schema), encoding="utf-8")
    done = subprocess.run(
        ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", pg_dsn, "-f", str(path)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 0, done.stderr
    with PostgresStore.connect(pg_dsn, schema=schema) as store:
        store.migrate()
    with psycopg.connect(pg_dsn) as conn:
        assert _catalog(conn, other_schema) == _catalog(conn, schema)
    # The psql-built schema works as a queue.
    with PostgresStore.connect(pg_dsn, schema=other_schema) as store:
        assert store.migrate() == []
        assert store.job_stats()["pending"] == 0


def test_bad_schema_names_are_rejected_before_any_sql(pg_dsn: str) -> None:
    for bad in ['x"; DROP TABLE y; --', "Upper", "1abc", "", "a" * 64, "a-b"]:
        with pytest.raises(ValueError, match="schema"):
            migration_script(bad)
        with pytest.raises(ValueError, match="schema"):
            PostgresStore.connect(pg_dsn, schema=bad)


def test_two_schemas_are_independent_queues(pg_dsn: str, schema: str, other_schema: str) -> None:
    with PostgresStore.connect(pg_dsn, schema=schema) as one, PostgresStore.connect(
        pg_dsn, schema=other_schema
    ) as two:
        one.migrate()
        two.migrate()
        one.job_enqueue(EnqueueParams(type="a", payload=b"{}"))
        assert one.job_stats()["pending"] == 1
        assert two.job_stats()["pending"] == 0
        assert one.channels() != two.channels()
