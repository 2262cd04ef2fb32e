"""pytest fixtures for testing an application's jobs and handlers against golemq-pg.

Enable it in the application's ``conftest.py``::

    pytest_plugins = ["golemq_pg.pytest_plugin"]

Fixtures:

* ``golemq_store``: a migrated :class:`~golemq_pg.PostgresStore` on a fresh schema
  (``golemq_test_<random>``), dropped with everything in it after the test. The server is
  ``$GOLEMQ_TEST_DSN``, else a local server (libpq's defaults: ``PGHOST``, ``PGUSER``...,
  then ``postgres@127.0.0.1:5432``), else the embedded PostgreSQL (extra ``embedded``);
* ``golemq_dsn`` (session): that server's DSN, for your own connections;
* ``golemq_memory_store``: a fresh :class:`~golemq_pg.InMemoryStore` (no database);
* ``golemq_queue``: a :class:`~golemq_pg.Queue` on ``golemq_store``.

Assertions: :func:`golemq_pg.testing.assert_enqueued`. To run what was enqueued, build the
application's ``Worker`` on the same store and call ``worker.run_until_empty()``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from golemq_pg._embedded import ensure_server, reachable
from golemq_pg.queue import Queue
from golemq_pg.store.postgres import PostgresStore
from golemq_pg.testing import InMemoryStore

#: The variable naming the server the fixtures use.
ENV_TEST_DSN = "GOLEMQ_TEST_DSN"
#: Local servers tried, in order, when it is unset: libpq's defaults, then TCP on localhost.
LOCAL_DSNS = ("", "postgresql://postgres@127.0.0.1:5432/postgres")


def find_dsn(local: tuple[str, ...] = LOCAL_DSNS) -> str:
    """``$GOLEMQ_TEST_DSN``, else the first reachable of the ``local`` servers, else the
    embedded one."""
    env = os.environ.get(ENV_TEST_DSN)
    if env:
        return env
    for dsn in local:
        if reachable(dsn):
            return dsn
    return ensure_server()


@pytest.fixture(scope="session")
def golemq_dsn() -> str:
    """The DSN of the PostgreSQL server the golemq fixtures use (see the module docstring)."""
    return find_dsn()


@pytest.fixture
def golemq_store(golemq_dsn: str) -> Iterator[PostgresStore]:
    """A migrated PostgresStore on a fresh schema, dropped after the test."""
    schema = "golemq_test_" + uuid.uuid4().hex[:12]
    store = PostgresStore.connect(golemq_dsn, schema=schema, min_size=1, max_size=4)
    try:
        store.migrate()
        yield store
    finally:
        store.close()
        with psycopg.connect(golemq_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture
def golemq_memory_store() -> InMemoryStore:
    """A fresh InMemoryStore: the full port, no database (``connection=`` is refused)."""
    return InMemoryStore()


@pytest.fixture
def golemq_queue(golemq_store: PostgresStore) -> Queue:
    """A Queue on ``golemq_store``."""
    return Queue(golemq_store)
