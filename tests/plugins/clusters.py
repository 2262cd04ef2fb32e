"""PostgreSQL clusters of the suite's own: ``throwaway_cluster``, and ``streaming_pair`` (a
primary with a synchronous streaming standby, for the failover scenario).

A test that restarts, stops, starts or reconfigures PostgreSQL does it to one of these,
never to the server ``pg_dsn`` names (tests/support/server_control.py says why and how the
cluster is made). Where no cluster can be made (no server programs on the machine, or
``GOLEMQ_FAULTS_NO_SERVER_CONTROL`` set) the tests that need one skip and say why; with
``GOLEMQ_REQUIRE_THROWAWAY_CLUSTER`` set (.ci/run sets it) they fail instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import NoReturn

import pytest

from tests.support.server_control import (
    ClusterUnavailableError,
    StreamingPair,
    ThrowawayCluster,
)

#: Set: no throwaway cluster fails the tests that need one instead of skipping them.
REQUIRE_ENV = "GOLEMQ_REQUIRE_THROWAWAY_CLUSTER"


@pytest.fixture(scope="module")
def throwaway_cluster() -> Iterator[ThrowawayCluster]:
    """A running cluster (database ``test``, ``.dsn``) for one test module, stopped
    (``-m immediate``) and removed after it. Module scope: a module's scenarios share it
    (initdb costs a few seconds), and no outage outlives the module that caused it."""
    try:
        cluster = ThrowawayCluster.create()
    except ClusterUnavailableError as exc:
        _unavailable(f"no throwaway PostgreSQL cluster to restart and stop: {exc}")
    try:
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture
def streaming_pair() -> Iterator[StreamingPair]:
    """A running primary and its synchronous streaming standby (``.dsn``: both, read-write
    only), both destroyed after the test. Function scope: a failover uses the pair up."""
    try:
        pair = StreamingPair.create()
    except ClusterUnavailableError as exc:
        _unavailable(f"no throwaway primary and standby to fail over: {exc}")
    try:
        yield pair
    finally:
        pair.destroy()


def _unavailable(why: str) -> NoReturn:
    """Skip, or fail with :data:`REQUIRE_ENV` set."""
    if os.environ.get(REQUIRE_ENV):
        pytest.fail(f"{why}; and {REQUIRE_ENV} is set")
    pytest.skip(why)
