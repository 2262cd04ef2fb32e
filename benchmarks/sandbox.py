"""Fresh schemas and databases for one measurement, created and dropped by the harness.

golemq-pg and the raw-SQL ceiling get a fresh schema (golemq-pg is built to share a database
by schema). The peers get a dedicated database when the role may create one: their object
and NOTIFY channel names are fixed, so a database is the clean way to isolate them. Without
CREATEDB they fall back to a fresh schema put first on their connections' search_path.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

PREFIX = "golemq_bench_"


@dataclass(frozen=True, slots=True)
class Sandbox:
    """Where one measurement runs.

    ``schema`` is the harness-made schema (None when a whole database was made);
    ``search_path`` is set when a peer must see that schema through its search_path.
    """

    dsn: str
    schema: str | None = None
    database: str | None = None
    search_path: str | None = None

    @property
    def schema_name(self) -> str:
        """The harness-made schema (golemq-pg and raw-SQL sandboxes always have one)."""
        if self.schema is None:
            raise ValueError("this sandbox is a whole database, not a schema")
        return self.schema

    def conninfo(self) -> str:
        """A libpq conninfo for psycopg users, with the search_path applied when needed."""
        if self.search_path is None:
            return self.dsn
        return make_conninfo(self.dsn, options=f"-c search_path={self.search_path}")

    def asyncpg_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``asyncpg.connect`` (it does not read libpq conninfo)."""
        parts = conninfo_to_dict(self.dsn)
        kwargs: dict[str, Any] = {}
        for ours, theirs in (("host", "host"), ("user", "user"), ("password", "password"),
                             ("dbname", "database")):
            if parts.get(ours):
                kwargs[theirs] = parts[ours]
        if parts.get("port"):
            kwargs["port"] = int(str(parts["port"]))
        if self.search_path is not None:
            kwargs["server_settings"] = {"search_path": self.search_path}
        return kwargs

    def to_json(self) -> dict[str, Any]:
        """A JSON-safe form, to hand a sandbox to a child process."""
        return {"dsn": self.dsn, "schema": self.schema, "database": self.database,
                "search_path": self.search_path}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Sandbox:
        """The inverse of :meth:`to_json`."""
        return cls(dsn=data["dsn"], schema=data.get("schema"), database=data.get("database"),
                   search_path=data.get("search_path"))


def _name(tag: str) -> str:
    clean = "".join(ch if ch.isalnum() else "_" for ch in tag.lower())[:24]
    return f"{PREFIX}{clean}_{uuid.uuid4().hex[:8]}"


#: Sandboxes created and not yet dropped (a drop fails when the server restarts under a
#: run): :func:`drop_leftovers` retries them at the end of the run. Kind, name, admin DSN.
_LIVE: set[tuple[str, str, str]] = set()

_DROP = {"schema": "DROP SCHEMA IF EXISTS {} CASCADE",
         # FORCE: a peer's background connection may still be closing.
         "database": "DROP DATABASE IF EXISTS {} WITH (FORCE)"}


def _drop(kind: str, name: str, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL(_DROP[kind]).format(sql.Identifier(name)))
    _LIVE.discard((kind, name, dsn))


def drop_leftovers() -> list[str]:
    """Drop the sandboxes whose drop failed earlier in this run; returns those still left."""
    left = []
    for kind, name, dsn in sorted(_LIVE):
        try:
            _drop(kind, name, dsn)
        except psycopg.Error:
            left.append(name)
    return left


@contextmanager
def fresh_schema(dsn: str, tag: str, *, on_search_path: bool = False) -> Iterator[Sandbox]:
    """A new empty schema, dropped (CASCADE) afterwards."""
    name = _name(tag)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    _LIVE.add(("schema", name, dsn))
    try:
        yield Sandbox(dsn=dsn, schema=name, search_path=name if on_search_path else None)
    finally:
        _drop("schema", name, dsn)


@contextmanager
def fresh_database(dsn: str, tag: str) -> Iterator[Sandbox]:
    """A new database (or, without the CREATEDB privilege, a schema on the search_path)."""
    name = _name(tag)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        created = True
    except psycopg.errors.InsufficientPrivilege:
        created = False
    if not created:
        with fresh_schema(dsn, tag, on_search_path=True) as box:
            yield box
        return
    _LIVE.add(("database", name, dsn))
    try:
        yield Sandbox(dsn=make_conninfo(dsn, dbname=name), database=name)
    finally:
        _drop("database", name, dsn)


def sandbox_for(isolation: str, dsn: str, tag: str) -> AbstractContextManager[Sandbox]:
    """The context manager for a system's isolation kind ("schema" or "database")."""
    if isolation == "database":
        return fresh_database(dsn, tag)
    return fresh_schema(dsn, tag)


_TABLES = """
SELECT schemaname, tablename FROM pg_tables
 WHERE CASE WHEN %(schema)s::text IS NULL
            THEN schemaname NOT IN ('pg_catalog', 'information_schema')
            ELSE schemaname = %(schema)s::text END
"""


def analyze_backlog(box: Sandbox) -> None:
    """ANALYZE every table of ``box`` (its schema, or its whole database), after a backlog is
    loaded and before it is drained: every system starts from the same state, with
    statistics, whatever loaded the rows. Without them the peers' claims were planned badly
    (PGQueuer 2x100 drained 8.4k jobs/s on such a table, 12.7k analyzed), and autovacuum
    would decide at random, mid-run, when a table gets some."""
    with psycopg.connect(box.dsn, autocommit=True) as conn:
        tables = conn.execute(_TABLES, {"schema": box.schema}).fetchall()
        for schema, table in tables:
            conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(schema, table)))


def vacuum_analyze(box: Sandbox) -> None:
    """``VACUUM (ANALYZE)`` every table of ``box`` (its schema, or its whole database), one
    table a statement: what autovacuum does to a queue left idle (the after-vacuum
    scenario runs it with nothing consuming)."""
    with psycopg.connect(box.dsn, autocommit=True) as conn:  # VACUUM runs outside a block
        tables = conn.execute(_TABLES, {"schema": box.schema}).fetchall()
        for schema, table in tables:
            conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(sql.Identifier(schema, table)))


def apply_golemq_schema(conn: psycopg.Connection[Any], schema: str) -> None:
    """Apply golemq-pg's migrations into ``schema`` the way ``golemq-pg migrate`` does, with
    the search_path set to the target schema: a file in one transaction, and a file marked
    ``-- golemq: no-transaction`` (``CREATE INDEX CONCURRENTLY``) statement by statement
    outside any (the sandbox is new and empty: no lock, no retry needed)."""
    from golemq_pg.store.postgres._migrations import migrations  # noqa: PLC0415 - lazy

    for migration in migrations():
        if migration.transactional:
            with conn.transaction():
                conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(
                    sql.Identifier(schema)))
                # Migration files are trusted, shipped SQL (no parameters, several
                # statements).
                conn.execute(sql.SQL(migration.text))
            continue
        conn.commit()
        previous = conn.autocommit
        conn.autocommit = True
        try:
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
            for statement in migration.statements():
                conn.execute(sql.SQL(statement.text))
            conn.execute("RESET search_path")
        finally:
            conn.autocommit = previous
