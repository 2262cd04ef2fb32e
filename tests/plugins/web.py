"""Dashboard fixtures: the web app over the test's PostgresStore or over an
AsyncPostgresStore of the same schema (``make_dashboard`` is parametrized: every route test
runs on both), driven through httpx."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from golemq_pg import PostgresStore, Queue
from golemq_pg.web import create_app
from tests.support.async_bridge import LoopThread
from tests.support.web_client import Dashboard


@pytest.fixture(params=["sync-store", "async-store"])
def make_dashboard(
    request: pytest.FixtureRequest, pg_store: PostgresStore
) -> Callable[..., Dashboard]:
    """``make_dashboard(**create_app options)``: a client of a dashboard over ``pg_store``,
    or over an ``AsyncPostgresStore`` of its schema (then requests run on that store's event
    loop: its pool belongs to it)."""
    if request.param == "sync-store":

        def make(**options: Any) -> Dashboard:
            return Dashboard(create_app(pg_store, **options))

        return make
    loop: LoopThread = request.getfixturevalue("loop_thread")
    astore = request.getfixturevalue("async_pg_store")

    def make_async(**options: Any) -> Dashboard:
        return Dashboard(create_app(astore, **options), loop=loop)

    return make_async


@pytest.fixture
def dashboard(make_dashboard: Callable[..., Dashboard]) -> Dashboard:
    """A dashboard with the default options (actions on, payloads hidden, no auth)."""
    return make_dashboard()


@pytest.fixture
def web_queue(pg_store: PostgresStore) -> Queue:
    """A Queue over the test's PostgresStore."""
    return Queue(pg_store)
