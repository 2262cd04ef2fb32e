"""Fixtures of the fault-injection suite: ``fault_env`` (see tests/support/fault_env.py) on
the suite's server, ``cluster_fault_env`` on a throwaway cluster of its own (the scenarios
that restart and stop PostgreSQL), ``standby_fault_env`` on a primary and its standby (the
failover), and ``suite_server_start``, with the two hooks that make
"the suite's server was never restarted" checkable.

That check (tests/faults/test_fault_zz_server_untouched.py) compares the server's
``pg_postmaster_start_time()`` now with the one read when the run began. Read where? In
``pytest_collection_finish``: once, before the run's first test, whichever directory it is
in, and only when a check was selected (``pytest -q``, ``pytest -q tests/faults``,
``-m faults``; not ``-m "not faults"`` or ``--collect-only``). Checked when? A test using
``suite_server_start`` is moved to the end of the run (``pytest_collection_modifyitems``),
so it vouches for every test before it whatever the order of the command line's paths. A
test, rather than an assertion in ``pytest_sessionfinish`` or in a fixture's teardown: a
failure is then reported as that test's, by name, instead of as an exit status with no
failing test or as an error pinned on whichever test ran last.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.plugins.database import suite_dsn
from tests.support.fault_env import FaultEnv, make_env
from tests.support.schemas import fresh_schema
from tests.support.server_control import (
    ServerStart,
    StreamingPair,
    ThrowawayCluster,
    server_started_at,
)

_SERVER_START = pytest.StashKey[ServerStart]()


@pytest.fixture
def fault_env(pg_dsn: str, schema: str, tmp_path: Path) -> Iterator[FaultEnv]:
    """A :class:`FaultEnv` (workers killed, backends ended and roles dropped afterwards)."""
    env = make_env(pg_dsn, schema, tmp_path)
    try:
        yield env
    finally:
        env.close()


@pytest.fixture
def cluster_fault_env(
    throwaway_cluster: ThrowawayCluster, tmp_path: Path
) -> Iterator[FaultEnv]:
    """A :class:`FaultEnv` on the throwaway cluster (tests/plugins/clusters.py): its workers,
    producer, ledger and checks all use the cluster's DSN, so a scenario may restart or stop
    the server. Afterwards the cluster is running again, then the env is closed as
    ``fault_env``'s is."""
    dsn = throwaway_cluster.dsn
    with fresh_schema(dsn) as schema:
        env = make_env(dsn, schema, tmp_path)
        try:
            yield env
        finally:
            try:
                throwaway_cluster.ensure_running()
            finally:
                env.close()


@pytest.fixture
def standby_fault_env(streaming_pair: StreamingPair, tmp_path: Path) -> Iterator[FaultEnv]:
    """A :class:`FaultEnv` on a primary and its synchronous standby (``streaming_pair``,
    tests/plugins/clusters.py): its workers, producer, ledger and checks all use the pair's
    multi-host DSN (read-write only), so they follow a failover. Closed as ``fault_env`` is;
    its schema is not dropped (the pair, data and all, is destroyed after the test)."""
    env = make_env(streaming_pair.dsn, "t_" + uuid.uuid4().hex[:12], tmp_path)
    try:
        yield env
    finally:
        env.close()


@pytest.fixture(scope="session")
def suite_server_start(request: pytest.FixtureRequest) -> ServerStart:
    """When the suite's server (``pg_dsn``) started, as read before the run's first test; a
    test using this runs last (see the module docstring)."""
    record = request.config.stash.get(_SERVER_START, None)
    if record is None:
        pytest.fail("the suite's server start time was not read when the run began")
    return record


def _checks_the_server(item: pytest.Item) -> bool:
    return "suite_server_start" in getattr(item, "fixturenames", ())


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests of ``suite_server_start`` go last; the others keep their order."""
    items.sort(key=_checks_the_server)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Read the suite's server's start time before the first test, if a test checks it."""
    if session.config.getoption("collectonly") or not any(
        _checks_the_server(item) for item in session.items
    ):
        return
    dsn = ""
    try:
        dsn = suite_dsn()
        record = ServerStart(dsn, started_at=server_started_at(dsn))
    except Exception as exc:  # no server at all: the check reports it (as every test will)
        record = ServerStart(dsn, error=f"{type(exc).__name__}: {exc}")
    session.config.stash[_SERVER_START] = record
