"""Fixtures of the asyncio producer: an event loop thread, an ``AsyncPostgresStore`` on the
test's schema, and the ``AsyncPort`` the contract suite runs on (``store`` param
``async-postgres``, see ``database.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from golemq_pg import AsyncPostgresStore, PostgresStore
from tests.support.async_bridge import AsyncPort, LoopThread


@pytest.fixture(scope="session")
def loop_thread() -> Iterator[LoopThread]:
    """One event loop in a thread for the session's async stores."""
    loop = LoopThread()
    yield loop
    loop.close()


@pytest.fixture
def async_pg_store(
    loop_thread: LoopThread, pg_store: PostgresStore, pg_dsn: str, schema: str
) -> Iterator[AsyncPostgresStore]:
    """An ``AsyncPostgresStore`` (on ``loop_thread``) on the migrated schema of ``pg_store``."""
    store = loop_thread.run(AsyncPostgresStore.connect(pg_dsn, schema=schema, max_size=8))
    yield store
    loop_thread.run(store.close())


@pytest.fixture
def async_port(
    loop_thread: LoopThread, async_pg_store: AsyncPostgresStore, pg_store: PostgresStore
) -> AsyncPort:
    """The port with its producer verbs on the async store (see ``AsyncPort``)."""
    return AsyncPort(loop_thread, async_pg_store, pg_store)
