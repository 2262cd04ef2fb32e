"""Migrations applied to a live database (real PostgreSQL, a fresh schema per test): files
marked ``-- golemq: no-transaction`` (statement by statement in autocommit, recorded after,
an INVALID index of a failed CONCURRENTLY build dropped and built again), each step's
lock_timeout with its retries, and concurrent migrators. Each test writes its own migration
files into a temporary folder (``load_migrations``), so none depends on what sql/migrations
holds; the upgrade of a loaded queue to the shipped ones is test_pg_migrations_under_load.py.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
import structlog
from psycopg import errors as pg_errors
from psycopg import sql

from golemq_pg import MigrationLockTimeout, PostgresStore
from golemq_pg.store.postgres._migration_files import (
    NO_TRANSACTION_MARKER,
    Migration,
    load_migrations,
)
from golemq_pg.store.postgres._migrations import LockPolicy, migrate, migration_script
from tests.support.waiting import wait_until

#: Short waits, many tries: the tests hold locks for about a second.
FAST = LockPolicy(lock_timeout=0.2, retries=100, first_delay=0.05, max_delay=0.2)

PROBE = "CREATE TABLE probe (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v int);\n"


def write_migrations(folder: Path, files: dict[str, str]) -> tuple[Migration, ...]:
    """``files`` (name -> text) as a migrations folder, read back as the migrator reads one."""
    folder.mkdir(exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    return load_migrations(folder)


def ledger(dsn: str, schema: str) -> list[int]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(sql.SQL("SELECT version FROM {}.schema_migrations ORDER BY 1")
                            .format(sql.Identifier(schema))).fetchall()
    return [row[0] for row in rows]


def index_states(dsn: str, schema: str) -> dict[str, bool]:
    """Index name -> valid, for the indexes of ``schema``."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT c.relname, i.indisvalid FROM pg_index i"
            " JOIN pg_class c ON c.oid = i.indexrelid"
            " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s", (schema,),
        ).fetchall()
    return dict(rows)


def session_settings(conn: psycopg.Connection[Any]) -> tuple[str, ...]:
    row = conn.execute("SELECT current_setting('lock_timeout'), "
                       "current_setting('statement_timeout'), current_setting('search_path')"
                       ).fetchone()
    assert row is not None
    return tuple(row)


def migration_lock_free(dsn: str, schema: str) -> bool:
    """Whether another session can take the schema's migration lock right now."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))",
                           ("golemq:migrate:" + schema,)).fetchone()
        assert row is not None
        return bool(row[0])


@contextmanager
def holding(dsn: str, schema: str, statement: str) -> Iterator[psycopg.Connection[Any]]:
    """A transaction that ran ``statement`` on ``schema``'s tables and stays open: the long
    transaction of an application, holding the locks the statement took."""
    with psycopg.connect(dsn) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        conn.execute(statement)  # type: ignore[arg-type]
        yield conn
        conn.rollback()


@contextmanager
def in_thread(run: Any) -> Iterator[dict[str, Any]]:
    """Run ``run()`` in a thread; the dict gets its ``result`` or ``error`` once joined."""
    out: dict[str, Any] = {}

    def body() -> None:
        try:
            out["result"] = run()
        except BaseException as exc:  # the test asserts on it
            out["error"] = exc

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    try:
        yield out
    finally:
        thread.join(timeout=60)
        assert not thread.is_alive()


def test_a_no_transaction_migration_is_applied_statement_by_statement_and_recorded(
    pg_dsn: str, schema: str, tmp_path: Path
) -> None:
    source = write_migrations(tmp_path, {
        "0001_probe.sql": PROBE + "INSERT INTO probe (v) SELECT generate_series(1, 5000);\n",
        "0002_indexes.sql": (
            f"-- Two indexes built while the table takes writes.\n{NO_TRANSACTION_MARKER}\n\n"
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS probe_v_idx ON probe (v);\n"
            "-- A semicolon in a comment; and one in a string:\n"
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS probe_odd_idx ON probe (v)"
            " WHERE v::text <> ';';\n"
        ),
        "0003_column.sql": "ALTER TABLE probe ADD COLUMN IF NOT EXISTS w int;\n",
    })
    assert [m.transactional for m in source] == [True, False, True]
    # Through a pooled connection of a store: its own session settings come back as they were.
    with PostgresStore.connect(pg_dsn, schema=schema, max_size=1) as store, \
            store.pool.connection() as conn:
        before = session_settings(conn)
        assert migrate(conn, schema, source=source) == [m.name for m in source]
        assert session_settings(conn) == before
        assert conn.autocommit
    assert ledger(pg_dsn, schema) == [1, 2, 3]
    assert index_states(pg_dsn, schema) == {
        "schema_migrations_pkey": True, "probe_pkey": True, "probe_v_idx": True,
        "probe_odd_idx": True}
    assert migration_lock_free(pg_dsn, schema)

    # Again: nothing to do. A connection that is not autocommit is switched for the
    # no-transaction file and given back as it was; one inside a transaction is refused.
    with psycopg.connect(pg_dsn) as conn:
        assert migrate(conn, schema, source=source) == []
        assert not conn.autocommit
        conn.execute("SELECT 1")
        with pytest.raises(RuntimeError, match="not inside a transaction"):
            migrate(conn, schema, source=[*source, *write_migrations(tmp_path / "more", {
                "0004_more.sql": f"{NO_TRANSACTION_MARKER}\nSELECT 1;\n"})])


def test_an_invalid_index_left_by_a_failed_concurrent_build_is_dropped_and_built_again(
    pg_dsn: str, schema: str, tmp_path: Path
) -> None:
    source = write_migrations(tmp_path, {
        "0001_probe.sql": PROBE + "INSERT INTO probe (v) VALUES (1), (1), (2);\n",
        "0002_unique.sql": (
            f"{NO_TRANSACTION_MARKER}\n"
            "CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS probe_v_uq ON probe (v);\n"),
    })
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        with pytest.raises(pg_errors.UniqueViolation):
            migrate(conn, schema, source=source)
        # The failed build left an INVALID index (which IF NOT EXISTS alone would take for
        # done), no ledger row, and the migration lock free.
        assert index_states(pg_dsn, schema)["probe_v_uq"] is False
        assert ledger(pg_dsn, schema) == [1]
        assert migration_lock_free(pg_dsn, schema)
        conn.execute(sql.SQL("DELETE FROM {}.probe WHERE id = 2").format(
            sql.Identifier(schema)))
        with structlog.testing.capture_logs() as logs:
            assert migrate(conn, schema, source=source) == ["0002_unique"]
    assert [e["index"] for e in logs if e["event"] == "migration_invalid_index_dropped"] == [
        "probe_v_uq"]
    assert index_states(pg_dsn, schema)["probe_v_uq"] is True
    assert ledger(pg_dsn, schema) == [1, 2]


def test_a_step_refused_its_lock_retries_and_goes_on_once_the_lock_is_released(
    pg_dsn: str, schema: str, tmp_path: Path
) -> None:
    source = write_migrations(tmp_path, {
        "0001_probe.sql": PROBE + "INSERT INTO probe (v) VALUES (1);\n",
        "0002_column.sql": "ALTER TABLE probe ADD COLUMN IF NOT EXISTS w int;\n",
    })
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        migrate(conn, schema, source=source, up_to=1)
    reads: list[float] = []
    with holding(pg_dsn, schema, "SELECT * FROM probe") as long_transaction, \
            structlog.testing.capture_logs() as logs, psycopg.connect(
                pg_dsn, autocommit=True) as reader:

        def run() -> list[str]:
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                return migrate(conn, schema, source=source, policy=FAST)

        def retried() -> int:
            return sum(e["event"] == "migration_lock_timeout" for e in logs)

        with in_thread(run) as out:
            # While the ALTER waits for its lock, a reader queues behind it, but never for
            # longer than the step's lock_timeout: then the step gives up and lets it pass.
            deadline = time.monotonic() + 1.5
            while time.monotonic() < deadline:
                started = time.monotonic()
                reader.execute(sql.SQL("SELECT count(*) FROM {}.probe").format(
                    sql.Identifier(schema)))
                reads.append(time.monotonic() - started)
            wait_until(lambda: retried() >= 2, timeout=10, what="two retries")
            long_transaction.rollback()
        assert "error" not in out, out
        assert out["result"] == ["0002_column"]
    assert ledger(pg_dsn, schema) == [1, 2]
    waits = [e for e in logs if e["event"] == "migration_lock_timeout"]
    assert waits[0]["migration"] == "0002_column"
    assert [e["attempt"] for e in waits] == list(range(1, len(waits) + 1))
    # A reader waited at most about one lock_timeout (0.2 s), not for the long transaction.
    assert max(reads) < 1.0, max(reads)


def test_a_step_still_refused_after_its_retries_fails_naming_the_migration(
    pg_dsn: str, schema: str, tmp_path: Path
) -> None:
    source = write_migrations(tmp_path, {
        "0001_probe.sql": PROBE,
        "0002_column.sql": "ALTER TABLE probe ADD COLUMN IF NOT EXISTS w int;\n",
        "0003_outside.sql": (
            f"{NO_TRANSACTION_MARKER}\n"
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS probe_v_idx ON probe (v);\n"
            "ALTER TABLE probe ADD COLUMN IF NOT EXISTS z int;\n"),
    })
    policy = LockPolicy(lock_timeout=0.1, retries=2, first_delay=0.05, max_delay=0.1)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        migrate(conn, schema, source=source, up_to=1)
        with holding(pg_dsn, schema, "SELECT * FROM probe"):
            started = time.monotonic()
            with pytest.raises(MigrationLockTimeout) as raised:
                migrate(conn, schema, source=source, policy=policy)
            elapsed = time.monotonic() - started
        assert raised.value.migration == "0002_column"
        message = str(raised.value)
        assert message.startswith("migration 0002_column was refused a lock within its "
                                  "lock_timeout of 0.1s on each of 3 tries")
        assert "Nothing of it was applied" in message
        assert "--lock-timeout" in message
        assert elapsed < 5
        assert ledger(pg_dsn, schema) == [1]
        assert migration_lock_free(pg_dsn, schema)

        # Outside a transaction: the statement refused its lock is named, and what ran
        # before it stays applied. The index build itself waits for a writing transaction
        # without a limit: what it waits with (SHARE UPDATE EXCLUSIVE) blocks no write.
        assert migrate(conn, schema, source=source, policy=policy, up_to=2) == ["0002_column"]
        with holding(pg_dsn, schema, "SELECT * FROM probe"), holding(
                pg_dsn, schema, "UPDATE probe SET v = v WHERE false") as writer:
            with in_thread(lambda: migrate(conn, schema, source=source, policy=policy)) as out:
                wait_until(lambda: "probe_v_idx" in index_states(pg_dsn, schema), timeout=10,
                           what="the index build to start")
                time.sleep(1.0)  # several lock_timeouts: the build still waits
                assert "error" not in out
                assert index_states(pg_dsn, schema)["probe_v_idx"] is False  # being built
                writer.rollback()
            # The ALTER after it is refused by the reading transaction, still open.
            assert isinstance(out.get("error"), MigrationLockTimeout), out
            assert str(out["error"]).startswith(
                "migration 0003_outside (statement 2 of 2, outside a transaction) was refused")
            assert "The statements before that one are applied" in str(out["error"])
        assert ledger(pg_dsn, schema) == [1, 2]
        assert index_states(pg_dsn, schema)["probe_v_idx"] is True
        assert migration_lock_free(pg_dsn, schema)
        # Re-run once the transaction is gone: the index is there, the column is added.
        assert migrate(conn, schema, source=source, policy=policy) == ["0003_outside"]
    assert ledger(pg_dsn, schema) == [1, 2, 3]


def concurrent_migrations(folder: Path) -> tuple[Migration, ...]:
    return write_migrations(folder, {
        "0001_probe.sql": PROBE + "INSERT INTO probe (v) SELECT g % 1000 "
                                  "FROM generate_series(1, 200000) g;\n",
        "0002_index.sql": (
            f"{NO_TRANSACTION_MARKER}\n"
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS probe_v_idx ON probe (v);\n"
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS probe_id_v_idx ON probe (id, v);\n"),
        "0003_column.sql": "ALTER TABLE probe ADD COLUMN IF NOT EXISTS w int;\n",
        "0004_index.sql": (
            f"{NO_TRANSACTION_MARKER}\n"
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS probe_w_idx ON probe (w);\n"),
        "0005_function.sql": "CREATE FUNCTION probe_count() RETURNS bigint LANGUAGE sql "
                             "AS $$ SELECT count(*) FROM probe $$;\n",
    })


def test_concurrent_migrators_apply_each_migration_once(
    pg_dsn: str, schema: str, tmp_path: Path
) -> None:
    source = concurrent_migrations(tmp_path)
    results: list[list[str]] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def run(migrations: Sequence[Migration]) -> None:
        try:
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                barrier.wait(timeout=10)
                results.append(migrate(conn, schema, source=migrations, policy=FAST))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(source,)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    assert sorted(name for names in results for name in names) == [m.name for m in source]
    assert ledger(pg_dsn, schema) == [1, 2, 3, 4, 5]
    assert all(index_states(pg_dsn, schema).values())
    assert migration_lock_free(pg_dsn, schema)


@pytest.mark.skipif(shutil.which("psql") is None, reason="needs the psql client on PATH")
def test_the_psql_script_runs_a_no_transaction_migration_outside_its_transactions(
    pg_dsn: str, schema: str, tmp_path: Path
) -> None:
    source = concurrent_migrations(tmp_path)
    script = tmp_path / "golemq.sql"
    script.write_text(migration_script(schema, source=source), encoding="utf-8")
    done = subprocess.run(
        ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", pg_dsn, "-f", str(script)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert ledger(pg_dsn, schema) == [1, 2, 3, 4, 5]
    assert all(index_states(pg_dsn, schema).values())
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert migrate(conn, schema, source=source) == []  # the ledger says it is all there


def test_store_migrate_checks_its_lock_options_before_any_sql(pg_dsn: str, schema: str) -> None:
    with PostgresStore.connect(pg_dsn, schema=schema, max_size=1) as store:
        for bad in ({"lock_timeout": -1.0}, {"lock_timeout": float("inf")},
                    {"lock_retries": -1}, {"lock_retries": 2.5}):
            with pytest.raises(ValueError, match="lock_"):
                store.migrate(**bad)  # type: ignore[arg-type]
        with psycopg.connect(pg_dsn) as conn:
            assert conn.execute("SELECT to_regnamespace(%s)", (schema,)).fetchone() == (None,)
        assert store.migrate(lock_timeout=0, lock_retries=0)  # 0: no limit, no retry
