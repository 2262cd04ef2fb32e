"""Fixtures for the plan tests (tests/integration/test_pg_plans.py): a workflow part way
through (tests.support.plans.workflow_partly_run) on a store in each statistics state."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import pytest

from golemq_pg import PostgresStore
from tests.support.plans import PartlyRun, add_history, vacuumed_while_idle, workflow_partly_run
from tests.support.schemas import fresh_schema

#: Finished rows in the history of the largest state.
MILLION = 1_000_000


class GraphState(NamedTuple):
    """A store, its DSN, and the workflow part way through on it."""

    store: PostgresStore
    dsn: str
    graph: PartlyRun


@pytest.fixture(scope="module")
def graph_vacuumed_while_idle(pg_dsn: str) -> Iterator[GraphState]:
    """The workflow beside 20,000 finished and 3,000 running jobs, the statistics taken by a
    ``VACUUM ANALYZE`` while nothing ran (tests.support.plans.vacuumed_while_idle)."""
    with fresh_schema(pg_dsn) as schema, PostgresStore.connect(
            pg_dsn, schema=schema, max_size=4) as store:
        store.migrate()
        graph = workflow_partly_run(store)
        vacuumed_while_idle(store, pg_dsn, finished=20_000, running=3_000)
        yield GraphState(store, pg_dsn, graph)


@pytest.fixture(scope="module")
def graph_beside_a_million(pg_dsn: str) -> Iterator[GraphState]:
    """The workflow beside a backlog of 5,000 jobs and a million finished jobs in the
    history, analyzed."""
    with fresh_schema(pg_dsn) as schema, PostgresStore.connect(
            pg_dsn, schema=schema, max_size=4) as store:
        store.migrate()
        graph = workflow_partly_run(store, backlog=5_000)
        add_history(store, pg_dsn, MILLION)
        yield GraphState(store, pg_dsn, graph)


@pytest.fixture(params=["fresh tables", "vacuumed while idle", "a million finished"])
def graph_state(request: pytest.FixtureRequest, pg_dsn: str) -> Iterator[GraphState]:
    """The workflow on fresh tables that were never analyzed (a new schema, a backlog of
    5,000 jobs: the state of a queue's first minute), after an idle ``VACUUM ANALYZE``, or
    beside a million finished rows."""
    if request.param == "vacuumed while idle":
        yield request.getfixturevalue("graph_vacuumed_while_idle")
        return
    if request.param == "a million finished":
        yield request.getfixturevalue("graph_beside_a_million")
        return
    store: PostgresStore = request.getfixturevalue("pg_store")
    yield GraphState(store, pg_dsn, workflow_partly_run(store, backlog=5_000))
