"""Fresh schema names for tests: unique, and dropped (with everything in them) afterwards."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

import psycopg
from psycopg import sql


@contextlib.contextmanager
def fresh_schema(dsn: str, prefix: str = "t_", length: int = 12) -> Iterator[str]:
    """A unique schema name ``prefix`` + ``length`` hex digits (not created: the code under
    test creates it); ``DROP SCHEMA ... CASCADE`` on exit."""
    name = prefix + uuid.uuid4().hex[:length]
    try:
        yield name
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
