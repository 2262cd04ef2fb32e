"""Reading migration files: statement splitting, the no-transaction marker and the checks made
before anything is applied, the lock policy's bounds, and the psql script around a
migration applied outside a transaction (no database: the script is text)."""

from __future__ import annotations

import re

import pytest

from golemq_pg.cli import schema as schema_commands
from golemq_pg.store.postgres._migration_files import (
    NO_TRANSACTION_MARKER,
    Migration,
    created_index,
    index_concurrently,
    migrations,
    parse_migration,
)
from golemq_pg.store.postgres._migrations import (
    DEFAULT_LOCK_RETRIES,
    DEFAULT_LOCK_TIMEOUT,
    LockPolicy,
    migration_script,
)
from golemq_pg.store.postgres._sql import split_statements


def test_statements_split_at_semicolons_outside_comments_literals_and_quotes() -> None:
    text = (
        "-- a header; with a semicolon\n"
        "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $body$ SELECT 1; $body$;\n"
        "SELECT 'a;b''c', E'\\';', \"odd;\"\"name\" FROM t$1;\n"
        "/* a /* nested; */ comment; */ SELECT $$;$$ || $1;\n"
        "SELECT 2  -- no final semicolon\n"
        "-- only a comment; after the last statement\n"
    )
    statements = split_statements(text)
    assert [s.code for s in statements] == [
        "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS ''",
        "SELECT '', E'', \"odd;\"\"name\" FROM t$1",
        "SELECT '' || $1",
        "SELECT 2",
    ]
    # The text is sent as written, leading comments included.
    assert statements[0].text.startswith("-- a header; with a semicolon\nCREATE FUNCTION")
    assert statements[0].text.endswith("$body$ SELECT 1; $body$")


@pytest.mark.parametrize("text", ["SELECT 'open", "SELECT $x$ open", "/* open", 'SELECT "x'])
def test_an_unterminated_literal_or_comment_is_an_error(text: str) -> None:
    with pytest.raises(ValueError, match="unterminated"):
        split_statements(text)


def test_every_shipped_migration_splits_and_runs_in_a_transaction() -> None:
    shipped = migrations()
    assert [m.version for m in shipped] == list(range(1, len(shipped) + 1))
    for migration in shipped:
        assert migration.statements(), migration.name
    # The released files (0001-0007) are all applied in one transaction each.
    assert all(m.transactional for m in shipped if m.version <= 7)


def test_the_marker_in_the_leading_comment_block_makes_a_no_transaction_migration() -> None:
    text = (f"-- golemq-pg 0008: an index.\n--\n{NO_TRANSACTION_MARKER}\n\n"
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_x_idx ON jobs (type);\n"
            "DROP INDEX CONCURRENTLY IF EXISTS jobs_old_idx;\n")
    migration = parse_migration("0008_index.sql", text)
    assert migration is not None
    assert (migration.version, migration.name, migration.transactional) == (
        8, "0008_index", False)
    assert [created_index(s) for s in migration.statements()] == ["jobs_x_idx", None]
    plain = parse_migration("0009_plain.sql", "-- no marker\nCREATE TABLE t (x int);\n")
    assert plain is not None
    assert plain.transactional
    assert parse_migration("README.md", "text") is None
    assert parse_migration("8_short.sql", "SELECT 1;") is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # The marker below the first statement: the file would silently run in a transaction.
        (f"CREATE TABLE t (x int);\n{NO_TRANSACTION_MARKER}\n", "comment block at the top"),
        (f"{NO_TRANSACTION_MARKER}\n{NO_TRANSACTION_MARKER}\nSELECT 1;\n", "once"),
        ("CREATE INDEX CONCURRENTLY IF NOT EXISTS i ON jobs (type);\n", "put '-- golemq"),
        ("BEGIN;\nCREATE TABLE t (x int);\nCOMMIT;\n", "BEGIN in a migration"),
        (f"{NO_TRANSACTION_MARKER}\nCREATE INDEX CONCURRENTLY i ON jobs (type);\n",
         "IF NOT EXISTS <name>"),
        (f"{NO_TRANSACTION_MARKER}\nCREATE UNIQUE INDEX CONCURRENTLY ON jobs (type);\n",
         "IF NOT EXISTS <name>"),
        ("SELECT 'open;\n", "unterminated"),
    ],
)
def test_a_file_the_migrator_would_apply_wrongly_is_refused_when_read(
    text: str, message: str
) -> None:
    with pytest.raises(RuntimeError, match=re.escape(message)):
        parse_migration("0008_bad.sql", text)


def test_concurrently_in_a_comment_or_a_function_body_is_not_a_statement_of_it() -> None:
    text = ("-- We do not CREATE INDEX CONCURRENTLY here.\n"
            "CREATE FUNCTION f() RETURNS text LANGUAGE sql AS $$ SELECT 'CONCURRENTLY' $$;\n")
    migration = parse_migration("0008_fn.sql", text)
    assert migration is not None
    assert migration.transactional


def test_a_quoted_index_name_is_read_as_postgresql_reads_it() -> None:
    (statement,) = split_statements(
        'create unique index concurrently if not exists "Odd ""Name""" on jobs (id)')
    assert created_index(statement) == 'Odd "Name"'
    (unquoted,) = split_statements("CREATE INDEX CONCURRENTLY IF NOT EXISTS Jobs_X ON jobs (id)")
    assert created_index(unquoted) == "jobs_x"


@pytest.mark.parametrize(
    ("statement", "concurrently"),
    [
        ("CREATE INDEX CONCURRENTLY IF NOT EXISTS i ON jobs (id)", True),
        ("create unique index concurrently if not exists i on jobs (id)", True),
        ("DROP INDEX CONCURRENTLY IF EXISTS i", True),
        ("REINDEX INDEX CONCURRENTLY i", True),
        ("REINDEX (VERBOSE) TABLE CONCURRENTLY jobs", True),
        ("CREATE INDEX IF NOT EXISTS i ON jobs (id)", False),
        ("ALTER TABLE jobs ADD COLUMN IF NOT EXISTS x int", False),
        ("SELECT 'CREATE INDEX CONCURRENTLY'", False),
    ],
)
def test_index_statements_made_concurrently_are_told_apart(
    statement: str, concurrently: bool
) -> None:
    (parsed,) = split_statements(statement)
    assert index_concurrently(parsed) is concurrently


def test_lock_policy_defaults_backoff_and_bounds() -> None:
    policy = LockPolicy()
    assert (policy.lock_timeout, policy.retries) == (DEFAULT_LOCK_TIMEOUT, DEFAULT_LOCK_RETRIES)
    assert policy.setting() == "1000"
    assert [policy.delay(n) for n in range(7)] == [0.5, 1, 2, 4, 8, 10, 10]
    assert LockPolicy(lock_timeout=0).setting() == "0"  # no limit
    # `golemq-pg migrate` has the same defaults as store.migrate().
    options = {param.name: param.default for param in schema_commands.migrate.params}
    assert options["lock_timeout"] == f"{DEFAULT_LOCK_TIMEOUT:g}s"
    assert options["lock_retries"] == DEFAULT_LOCK_RETRIES
    for bad in (
        {"lock_timeout": -1}, {"lock_timeout": float("nan")}, {"lock_timeout": "1s"},
        {"lock_timeout": 0.0001}, {"retries": -1}, {"retries": 1.5}, {"retries": True},
        {"retries": 1001}, {"first_delay": -0.1},
    ):
        with pytest.raises(ValueError, match=r"lock_timeout|lock_retries|first_delay"):
            LockPolicy(**bad)  # type: ignore[arg-type]


def _migration(version: int, text: str) -> Migration:
    found = parse_migration(f"{version:04d}_m{version}.sql", text)
    assert found is not None
    return found


def test_the_script_runs_a_no_transaction_migration_between_transaction_blocks() -> None:
    source = [
        _migration(1, "CREATE TABLE jobs (id bigint PRIMARY KEY, type text);\n"),
        _migration(2, f"{NO_TRANSACTION_MARKER}\n"
                      "CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_type_idx ON jobs (type);\n"),
        _migration(3, "ALTER TABLE jobs ADD COLUMN IF NOT EXISTS note text;\n"),
    ]
    script = migration_script("q", source=source)
    lines = [line for line in script.splitlines() if line and not line.startswith("--")]
    ledger = lines.index(");")  # the end of the ledger's CREATE TABLE
    assert lines[:4] == [
        "BEGIN;",
        "CREATE SCHEMA IF NOT EXISTS \"q\";",
        "SET LOCAL search_path TO \"q\";",
        "CREATE TABLE IF NOT EXISTS schema_migrations (",
    ]
    assert lines[ledger + 1:] == [
        "CREATE TABLE jobs (id bigint PRIMARY KEY, type text);",
        "INSERT INTO schema_migrations (version, name) VALUES (1, '0001_m1');",
        "COMMIT;",
        # Outside a transaction block: psql sends each statement on its own.
        "SET search_path TO \"q\";",
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_type_idx ON jobs (type);",
        "INSERT INTO schema_migrations (version, name) VALUES (2, '0002_m2');",
        "BEGIN;",
        "SET LOCAL search_path TO \"q\";",
        "ALTER TABLE jobs ADD COLUMN IF NOT EXISTS note text;",
        "INSERT INTO schema_migrations (version, name) VALUES (3, '0003_m3');",
        "COMMIT;",
        "RESET search_path;",
    ]


def test_the_script_runs_each_stretch_of_transactional_migrations_in_one_transaction() -> None:
    script = migration_script("q")
    kinds = [m.transactional for m in migrations()]
    stretches = sum(1 for i, t in enumerate(kinds) if t and (i == 0 or not kinds[i - 1]))
    assert not all(kinds), "the released set has a no-transaction migration (0017)"
    assert script.count("BEGIN;\n") == stretches
    assert script.count("COMMIT;\n") == stretches
    assert script.rstrip().endswith("RESET search_path;")
