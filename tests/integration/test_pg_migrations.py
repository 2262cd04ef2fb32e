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

from golemq_pg import JobEvent, JobStatus, Queue, Worker
from golemq_pg.store.port import EnqueueParams
from golemq_pg.store.postgres import PostgresStore, migration_script
from golemq_pg.store.postgres._migrations import migrate, migrations
from golemq_pg.store.postgres._sql import split_statements
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
             WHERE n.nspname = %s ORDER BY 1, 2""",  # overloads (0010) share a name
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
        # Statement by statement, as psql -f sends them (a no-transaction migration's
        # CREATE INDEX CONCURRENTLY cannot run inside a multi-statement query); no
        # parameters, like psql.
        for statement in split_statements(script):
            conn.execute(sql.SQL(statement.text))  # type: ignore[arg-type]
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


# One row of each status a 0001 schema can hold, written with 0001's columns only.
_ROWS_0001 = """
INSERT INTO {s}.jobs (type, payload, status, run_at, attempts, max_attempts, last_error,
                      lease_owner, lease_token, lease_expires_at, started_at, finished_at,
                      scope_type, scope_id, dedupe_key, progress)
VALUES ('up.due', '{{"n": 1}}', 'pending', now(), 0, 3, NULL, NULL, 0, NULL, NULL, NULL,
        NULL, NULL, NULL, NULL),
       ('up.later', '{{"n": 2}}', 'pending', now() + interval '1 hour', 1, 3, 'boom', NULL,
        1, NULL, NULL, NULL, 'A', 'a1', 'k1', NULL),
       ('up.due', '{{"n": 3}}', 'running', now() - interval '1 minute', 1, 3, NULL,
        'dead-worker', 7, now() - interval '10 seconds', now() - interval '1 minute', NULL,
        NULL, NULL, NULL, '{{"pct": 50}}'),
       ('up.done', '{{"n": 4}}', 'succeeded', now(), 1, 3, NULL, NULL, 1, NULL, now(), now(),
        NULL, NULL, NULL, '0.5'),
       ('up.dead', '{{"n": 5}}', 'failed', now(), 3, 3, 'TerminalJobError: no', NULL, 3,
        NULL, now(), now(), 'A', 'a2', NULL, NULL)
"""

_ROW_PROJECTION = """
SELECT id, type, payload::text, status, run_at, attempts, max_attempts, last_error,
       lease_owner, lease_token, lease_expires_at, started_at, finished_at, scope_type,
       scope_id, dedupe_key, progress::text, created_at
  FROM {s}.jobs ORDER BY id
"""


def _schema_sql(text: str, schema: str) -> sql.Composed:
    return sql.SQL(text).format(s=sql.Identifier(schema))  # type: ignore[arg-type]


def _at_0001_with_jobs(pg_dsn: str, schema: str) -> list[tuple[Any, ...]]:
    """``schema`` as release 0001 left it, holding one job of every status; its rows."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert [m.split("_")[0] for m in migrate(conn, schema, up_to=1)] == ["0001"]
        conn.execute(_schema_sql(_ROWS_0001, schema))
        return conn.execute(_schema_sql(_ROW_PROJECTION, schema)).fetchall()


def test_an_upgraded_0001_schema_keeps_its_jobs_and_equals_a_fresh_one(
    pg_dsn: str, schema: str, other_schema: str
) -> None:
    before = _at_0001_with_jobs(pg_dsn, schema)
    assert {row[3] for row in before} == {"pending", "running", "succeeded", "failed"}
    with PostgresStore.connect(pg_dsn, schema=schema) as store:
        applied = store.migrate()
    assert applied == [m.name for m in migrations() if m.version > 1]
    with PostgresStore.connect(pg_dsn, schema=other_schema) as store:
        store.migrate()
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute(_schema_sql(_ROW_PROJECTION, schema)).fetchall() == before
        new_columns = conn.execute(_schema_sql(
            "SELECT count(*) FROM {s}.jobs_all WHERE result IS NULL AND errors IS NULL "
            "AND tags IS NULL AND trace_context IS NULL", schema)).fetchone()
        assert new_columns == (len(before),)
        upgraded, fresh = _catalog(conn, schema), _catalog(conn, other_schema)
    assert upgraded["relations"]  # not vacuous
    assert upgraded["functions"]
    assert upgraded == fresh
    # The jobs read back through the port with the new fields empty.
    with PostgresStore.connect(pg_dsn, schema=schema) as store:
        for summary in Queue(store).find(limit=10):
            assert (summary.result, summary.errors, summary.tags) == (None, (), ())


def test_a_worker_drains_the_jobs_of_an_upgraded_schema(pg_dsn: str, schema: str) -> None:
    _at_0001_with_jobs(pg_dsn, schema)
    ran: list[tuple[str, int]] = []
    with PostgresStore.connect(pg_dsn, schema=schema) as store:
        store.migrate()
        queue = Queue(store)
        worker = Worker(store, poll_interval=0.05, lease_grace=5)

        @worker.handler("up.due")
        def due(job: JobEvent) -> None:
            ran.append((job.payload["n"], job.attempt))

        worker.run_until_empty(timeout=30)
        counts = queue.count_by_status()
    # The pending job ran on its first attempt; the running row of a dead worker (its lease
    # expired) was reaped and ran again as its second.
    assert sorted(ran) == [(1, 1), (3, 2)]
    assert counts[JobStatus.SUCCEEDED] == 3
    assert counts[JobStatus.PENDING] == 1  # up.later: not due, no handler for it
    assert counts[JobStatus.FAILED] == 1
    assert counts[JobStatus.RUNNING] == 0
