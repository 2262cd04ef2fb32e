"""Database fixtures: a real PostgreSQL (GOLEMQ_TEST_DSN, else the local server, else an
embedded one) and a fresh schema per test, plus both stores for the contract suite."""

from __future__ import annotations

import os
from collections.abc import Iterator

import psycopg
import pytest

from golemq_pg import InMemoryStore, PostgresStore
from golemq_pg._embedded import ensure_server
from tests.support.schemas import fresh_schema

LOCAL_DSN = "postgresql://postgres@127.0.0.1:5432/test"


def _reachable(dsn: str) -> bool:
    try:
        with psycopg.connect(dsn, connect_timeout=3):
            return True
    except psycopg.Error:
        return False


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    """The DSN of the PostgreSQL the suite runs against."""
    env = os.environ.get("GOLEMQ_TEST_DSN")
    if env:
        return env
    if _reachable(LOCAL_DSN):
        return LOCAL_DSN
    return ensure_server()


@pytest.fixture
def schema(pg_dsn: str) -> Iterator[str]:
    """A unique schema name for one test, dropped afterwards."""
    with fresh_schema(pg_dsn) as name:
        yield name


@pytest.fixture
def pg_store(pg_dsn: str, schema: str) -> Iterator[object]:
    """A migrated PostgresStore on a fresh schema."""
    store = PostgresStore.connect(pg_dsn, schema=schema, min_size=1, max_size=8)
    store.migrate()
    yield store
    store.close()


@pytest.fixture
def mem_store() -> object:
    """A fresh InMemoryStore."""
    return InMemoryStore()


@pytest.fixture(
    params=["memory", "postgres", pytest.param("pgbouncer", marks=pytest.mark.pgbouncer)]
)
def store(request: pytest.FixtureRequest) -> object:
    """Both stores, for the contract suite; the PostgresStore twice: directly, and through
    PgBouncer in transaction mode (``bouncer_store``, tests/plugins/pgbouncer.py)."""
    if request.param == "memory":
        return request.getfixturevalue("mem_store")
    if request.param == "pgbouncer":
        return request.getfixturevalue("bouncer_store")
    return request.getfixturevalue("pg_store")
