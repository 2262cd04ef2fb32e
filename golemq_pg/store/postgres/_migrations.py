"""Numbered, immutable migrations (``sql/migrations/NNNN_name.sql``) and their ledger.

``migrate`` applies the files not yet recorded in ``<schema>.schema_migrations``, each in its
own transaction with ``search_path`` pinned to the schema, serialised across concurrent
migrators by a transaction-scoped advisory lock. ``migration_script`` renders the very same
steps as one script for ``psql -f``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Any

import psycopg
import structlog
from psycopg import sql

from golemq_pg._validation import check_schema
from golemq_pg.store.postgres._sql import sql_dir, trusted_sql

log = structlog.get_logger("golemq_pg.store.migrations")

_FILE_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")

# The ledger. IF NOT EXISTS: migrate() runs it on every call, under the migration lock.
_LEDGER_DDL = """\
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)"""


@dataclass(frozen=True, slots=True)
class Migration:
    """One migration file: its number, its name (file stem) and its SQL text."""

    version: int
    name: str
    text: str


@cache
def migrations() -> tuple[Migration, ...]:
    """Every migration shipped in ``sql/migrations``, in version order."""
    found: list[Migration] = []
    for entry in sql_dir().joinpath("migrations").iterdir():
        match = _FILE_RE.match(entry.name)
        if match is None:
            continue
        found.append(
            Migration(
                version=int(match.group(1)),
                name=entry.name.removesuffix(".sql"),
                text=entry.read_text(encoding="utf-8"),
            )
        )
    found.sort(key=lambda item: item.version)
    versions = [item.version for item in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError("two migration files share a version number")
    return tuple(found)


def _lock_key_query() -> sql.SQL:
    # One lock per schema: migrators of different schemas do not wait for each other.
    return sql.SQL("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))")


def _lock_name(schema: str) -> str:
    return "golemq:migrate:" + schema


def migrate(conn: psycopg.Connection[Any], schema: str, *, up_to: int | None = None) -> list[str]:
    """Apply pending migrations to ``schema`` on ``conn``; returns the names applied.

    ``conn`` must not be inside a transaction: every step commits on its own. ``up_to``
    stops after that version (an older schema, as a release of it left it: upgrade tests).
    """
    check_schema(schema)
    ident = sql.Identifier(schema)
    applied: list[str] = []
    with conn.transaction():
        conn.execute(_lock_key_query(), (_lock_name(schema),))
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident))
        conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(ident))
        conn.execute(trusted_sql(_LEDGER_DDL))
    for migration in migrations():
        if up_to is not None and migration.version > up_to:
            break
        with conn.transaction():
            # Migrations are administration: the runtime statement_timeout of the store's
            # connections must not cut an index build short.
            conn.execute(sql.SQL("SET LOCAL statement_timeout = 0"))
            conn.execute(_lock_key_query(), (_lock_name(schema),))
            done = conn.execute(
                sql.SQL("SELECT 1 FROM {}.schema_migrations WHERE version = %s").format(ident),
                (migration.version,),
            ).fetchone()
            if done is not None:
                continue
            conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(ident))
            # No parameters: the file may hold several statements (simple query protocol).
            conn.execute(trusted_sql(migration.text), prepare=False)
            conn.execute(
                sql.SQL("INSERT INTO {}.schema_migrations (version, name) VALUES (%s, %s)").format(
                    ident
                ),
                (migration.version, migration.name),
            )
        applied.append(migration.name)
        log.info("migration_applied", schema=schema, migration=migration.name)
    return applied


def migration_script(schema: str) -> str:
    """The migrations for ``schema`` as one script for ``psql -f``, in one transaction.

    It creates the schema and the ledger, then runs every migration followed by its ledger
    row: applied to an empty schema it yields exactly what :func:`migrate` builds.
    """
    check_schema(schema)
    ident = sql.Identifier(schema)
    parts: list[sql.Composable] = [
        sql.SQL("-- golemq-pg migrations for schema {} (apply with psql -f)\n").format(ident),
        sql.SQL("BEGIN;\n"),
        sql.SQL("CREATE SCHEMA IF NOT EXISTS {};\n").format(ident),
        sql.SQL("SET LOCAL search_path TO {};\n").format(ident),
        trusted_sql(_LEDGER_DDL + ";\n"),
    ]
    for migration in migrations():
        parts.append(sql.SQL("\n-- {}\n").format(trusted_sql(migration.name)))
        parts.append(trusted_sql(migration.text.rstrip() + "\n"))
        parts.append(
            sql.SQL("INSERT INTO schema_migrations (version, name) VALUES ({}, {});\n").format(
                sql.Literal(migration.version), sql.Literal(migration.name)
            )
        )
    parts.append(sql.SQL("COMMIT;\n"))
    return sql.Composed(parts).as_string(None)
