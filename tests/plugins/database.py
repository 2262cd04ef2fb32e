"""Database fixtures: a real PostgreSQL (GOLEMQ_TEST_DSN, else the local server, else an
embedded one) and a fresh schema per test, plus both stores for the contract suite."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from golemq_pg import InMemoryStore, PostgresStore
from golemq_pg.pytest_plugin import find_dsn
from tests.support.schemas import fresh_schema

LOCAL_DSN = "postgresql://postgres@127.0.0.1:5432/test"


def suite_dsn() -> str:
    """The DSN of the PostgreSQL the suite runs against (the users' plugin's rule, with the
    local ``test`` database as the local server): ``$GOLEMQ_TEST_DSN``, else LOCAL_DSN if it
    answers, else the embedded server (started if need be)."""
    return find_dsn(local=(LOCAL_DSN,))


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    """The DSN of the PostgreSQL the suite runs against (:func:`suite_dsn`)."""
    return suite_dsn()


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


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "async_store_too: the `store` fixture also runs the module's tests on the async "
        "producer path (AsyncPostgresStore, through tests.support.async_bridge.AsyncPort)",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``store``: both stores, the PostgresStore also through PgBouncer in transaction mode
    (marked ``pgbouncer``); a module marked ``async_store_too`` also gets the async port."""
    if "store" not in metafunc.fixturenames:
        return
    bouncer = pytest.param("pgbouncer", marks=pytest.mark.pgbouncer)
    kinds: list[Any] = ["memory", "postgres", bouncer]
    if metafunc.definition.get_closest_marker("async_store_too") is not None:
        kinds.append("async-postgres")
    metafunc.parametrize("store", kinds, indirect=True)


@pytest.fixture
def store(request: pytest.FixtureRequest) -> object:
    """Both stores, for the contract suite; the PostgresStore twice: directly, and through
    PgBouncer in transaction mode (``bouncer_store``, tests/plugins/pgbouncer.py); and the
    async port (see pytest_generate_tests)."""
    if request.param == "memory":
        return request.getfixturevalue("mem_store")
    if request.param == "pgbouncer":
        return request.getfixturevalue("bouncer_store")
    if request.param == "async-postgres":
        return request.getfixturevalue("async_port")
    return request.getfixturevalue("pg_store")
