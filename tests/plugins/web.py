"""Dashboard fixtures: the web app over the test's PostgresStore, driven through httpx."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from golemq_pg import PostgresStore, Queue
from golemq_pg.web import create_app
from tests.support.web_client import Dashboard


@pytest.fixture
def make_dashboard(pg_store: PostgresStore) -> Callable[..., Dashboard]:
    """``make_dashboard(**create_app options)``: a client of a dashboard over ``pg_store``."""

    def make(**options: Any) -> Dashboard:
        return Dashboard(create_app(pg_store, **options))

    return make


@pytest.fixture
def dashboard(make_dashboard: Callable[..., Dashboard]) -> Dashboard:
    """A dashboard with the default options (actions on, payloads hidden, no auth)."""
    return make_dashboard()


@pytest.fixture
def web_queue(pg_store: PostgresStore) -> Queue:
    """A Queue over the test's PostgresStore."""
    return Queue(pg_store)
