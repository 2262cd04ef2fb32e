"""The suite never stops or restarts the PostgreSQL it runs on (``pg_dsn``'s: the local
server, or the embedded one): the scenarios that do (S7, S8) use a throwaway cluster of
their own (tests/plugins/clusters.py).

The server's ``pg_postmaster_start_time()`` is read when the run begins and compared here
with the current one; tests/plugins/faults.py says why the reading is taken in a hook at the
end of collection and why this test is moved to the end of the run (it always runs last,
after every fault directory's test, under ``pytest -q``, ``pytest -q tests/faults`` and
``-m faults``). The module's name sorts last in tests/faults too, so a listing shows it where
it runs. That the measure sees a restart is shown on the throwaway cluster by S7
(tests/faults/test_fault_server.py).
"""

from __future__ import annotations

import pytest

from tests.support.server_control import ServerStart, server_started_at

pytestmark = pytest.mark.faults


def test_the_suites_server_was_not_restarted_during_the_run(
    suite_server_start: ServerStart, pg_dsn: str
) -> None:
    assert suite_server_start.error is None, (
        f"the suite's server could not be read when the run began: {suite_server_start.error}"
    )
    assert suite_server_start.dsn == pg_dsn
    now = server_started_at(pg_dsn)
    assert now == suite_server_start.started_at, (
        f"the server at {pg_dsn} was restarted during the run: it started at "
        f"{suite_server_start.started_at} when the run began, at {now} now"
    )
