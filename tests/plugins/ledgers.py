"""Fixtures of the ledger tests: a test schema with the effects ledger
(tests/support/ledgers.py) its handlers write to."""

from __future__ import annotations

import pytest

from golemq_pg import PostgresStore
from tests.support.ledgers import effects_table


@pytest.fixture
def effects_schema(pg_store: PostgresStore, pg_dsn: str) -> str:
    """The test's schema, with the effects ledger the handlers write to."""
    effects_table(pg_dsn, pg_store.schema)
    return pg_store.schema
