"""PostgresStore through PgBouncer 1.18 in transaction mode (the suite's own instance,
tests/plugins/pgbouncer.py): prepared statements, session settings, wake-ups.

``golemq_single`` has one server connection, so every client's transactions run on the same
server session: what one client leaves there the next one meets.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, timedelta

import httpx
import psycopg
import pytest

from golemq_pg import (
    AsyncPostgresStore,
    AsyncQueue,
    JobEvent,
    PostgresStore,
    PreparedStatementsUnsupported,
    Queue,
    Worker,
)
from golemq_pg.store.port import RetryItem
from tests.plugins.pgbouncer import Bouncer
from tests.support.async_bridge import LoopThread
from tests.support.store_port import add, claim, slots
from tests.support.waiting import wait_until
from tests.support.web_server import web_process

pytestmark = pytest.mark.pgbouncer


def _store(bouncer: Bouncer, schema: str, *, prepare: bool, database: str = "golemq_single",
           max_size: int = 2) -> PostgresStore:
    return PostgresStore.connect(bouncer.dsn(database), schema=schema, min_size=1,
                                 max_size=max_size, prepare=prepare)


@pytest.fixture
def single(pgbouncer: Bouncer) -> Iterator[psycopg.Connection[object]]:
    """A plain client of ``golemq_single`` (no prepared statements of its own)."""
    with psycopg.connect(pgbouncer.dsn("golemq_single"), autocommit=True,
                         prepare_threshold=None) as conn:
        yield conn
        conn.execute("RESET ALL")


@pytest.fixture
def prepared(pgbouncer: Bouncer) -> Iterator[str]:
    """``golemq_prepared``; the prepared statements a test leaves on its one server session
    are dropped after it."""
    yield "golemq_prepared"
    with psycopg.connect(pgbouncer.dsn("golemq_prepared"), autocommit=True,
                         prepare_threshold=None) as conn:
        conn.execute("DEALLOCATE ALL")


@pytest.fixture
def migrated(pg_store: PostgresStore) -> str:
    """The test's schema, migrated directly (the stores under test only use it)."""
    return pg_store.schema


def test_pgbouncer_refuses_the_options_startup_parameter_the_store_no_longer_sends(
    pgbouncer: Bouncer, migrated: str
) -> None:
    with pytest.raises(psycopg.OperationalError, match="options"):
        psycopg.connect(pgbouncer.dsn(), options="-c jit=off", connect_timeout=5).close()
    with _store(pgbouncer, migrated, prepare=False, database="golemq") as store:
        assert store.now().tzinfo is not None


def test_prepared_guarded_claims_of_two_clients_fail_with_an_error_naming_prepare_false(
    pgbouncer: Bouncer, migrated: str, prepared: str
) -> None:
    guarded = slots("g", limit=1, serialize_by_scope=True)
    with (_store(pgbouncer, migrated, prepare=True, database=prepared) as first,
          _store(pgbouncer, migrated, prepare=True, database=prepared) as second):
        add(first, "g", scope=("s", "1"))
        add(first, "g", scope=("s", "2"))
        assert len(claim(first, guarded, owner="a")) == 1  # prepares _pg3_0 on the server
        with pytest.raises(PreparedStatementsUnsupported, match=r"prepare=False") as caught:
            claim(second, guarded, owner="b")  # its own _pg3_0 meets the first one's
        assert isinstance(caught.value.__cause__, psycopg.errors.DuplicatePreparedStatement)
        # The worker's claim loop logs this error and backs off; the store stays usable.
        assert second.job_stats()["running"] == 1


def test_a_prepared_statement_gone_from_the_server_session_names_prepare_false(
    pgbouncer: Bouncer, migrated: str, prepared: str
) -> None:
    guarded = slots("g", limit=1, serialize_by_scope=True)
    # One connection: the claims below run on the one that prepared the statements.
    with _store(pgbouncer, migrated, prepare=True, database=prepared, max_size=1) as store:
        add(store, "g", scope=("s", "1"))
        add(store, "g", scope=("s", "2"))
        assert len(claim(store, guarded, owner="a")) == 1
        # What a pooler does when the next transaction lands on another server session.
        with psycopg.connect(pgbouncer.dsn(prepared), autocommit=True,
                             prepare_threshold=None) as other:
            other.execute("DEALLOCATE ALL")
        with pytest.raises(PreparedStatementsUnsupported, match=r"prepare=False") as caught:
            claim(store, guarded, owner="a")
        assert isinstance(caught.value.__cause__, psycopg.errors.InvalidSqlStatementName)


def test_the_async_store_names_prepare_false_when_its_prepared_add_is_gone_from_the_server(
    pgbouncer: Bouncer, migrated: str, prepared: str, loop_thread: LoopThread
) -> None:
    async def scenario() -> tuple[BaseException, str | None]:
        async with await AsyncPostgresStore.connect(pgbouncer.dsn(prepared), schema=migrated,
                                                    min_size=1, max_size=1) as store:
            queue = AsyncQueue(store)
            for n in range(8):  # past psycopg's prepare_threshold (5): the add is prepared
                await queue.add("t", {"n": n})
            # What a pooler does when the next transaction lands on another server session.
            with psycopg.connect(pgbouncer.dsn(prepared), autocommit=True,
                                 prepare_threshold=None) as other:
                other.execute("DEALLOCATE ALL")
            with pytest.raises(PreparedStatementsUnsupported, match=r"prepare=False") as caught:
                await queue.add("t", {"n": 8})
            # The connection whose cache no longer matched was thrown away: the next add
            # runs on a fresh one.
            return caught.value, await queue.add("t", {"n": 9})

    error, job_id = loop_thread.run(scenario())
    assert isinstance(error.__cause__, psycopg.errors.InvalidSqlStatementName)
    assert job_id is not None


def test_prepare_false_prepares_nothing_on_a_server_session_many_clients_share(
    pgbouncer: Bouncer, migrated: str, single: psycopg.Connection[object]
) -> None:
    guarded = slots("g", limit=1, serialize_by_scope=True)
    with (_store(pgbouncer, migrated, prepare=False) as first,
          _store(pgbouncer, migrated, prepare=False) as second):
        for n in range(16):
            add(first, "g", scope=("s", str(n)))
        claimed = []
        for _ in range(8):  # past psycopg's prepare_threshold (5) on both stores
            claimed += claim(first, guarded, owner="a") + claim(second, guarded, owner="b")
            second.job_get(claimed[-1].id)
        assert len({job.id for job in claimed}) == 16
        assert single.execute("SELECT count(*) FROM pg_prepared_statements").fetchone() == (0,)


def test_the_dashboard_command_with_no_prepare_serves_through_a_shared_server_session(
    pgbouncer: Bouncer, migrated: str, single: psycopg.Connection[object]
) -> None:
    with PostgresStore.connect(pgbouncer.dsn("golemq_single"), schema=migrated,
                               prepare=False) as store:
        Queue(store).add("t", {"n": 1})
    with web_process(pgbouncer.dsn("golemq_single"), migrated, "--no-prepare") as url:
        # Past psycopg's prepare_threshold (5) on the command's two pooled connections,
        # which share one server session: prepared statements would collide there.
        answers = [httpx.get(url + path, timeout=10) for _ in range(8)
                   for path in ("/", "/jobs", "/healthz")]
    assert [a.status_code for a in answers] == [200] * len(answers)
    assert "Overview" in answers[0].text
    assert single.execute("SELECT count(*) FROM pg_prepared_statements").fetchone() == (0,)


def test_another_clients_timezone_and_jit_on_the_shared_server_session_change_no_result(
    pgbouncer: Bouncer, migrated: str, single: psycopg.Connection[object]
) -> None:
    pid = single.execute("SELECT pg_backend_pid()").fetchone()
    single.execute("SET TimeZone = 'Asia/Kathmandu'")  # +05:45, on the server session
    single.execute("SET jit = on")
    with _store(pgbouncer, migrated, prepare=False) as store:
        with store.pool.connection() as conn:  # the same server session, as promised
            assert conn.execute("SELECT pg_backend_pid()").fetchone() == pid
        queue = Queue(store)
        now = store.now()
        assert now.utcoffset() == timedelta(0)
        assert now.tzinfo is UTC
        job_id = queue.add("t", {})
        assert job_id is not None
        (job,) = claim(store, "t")
        store.job_retry_many("w1", [RetryItem(id=job.id, token=job.lease_token, delay=0,
                                              error="boom", consume_attempt=True)])
        summary = queue.get(job_id)
        assert summary is not None
        for stamp in (summary.created_at, summary.run_at, summary.errors[0].at):
            assert stamp is not None
            assert stamp.tzinfo is UTC
        assert abs(summary.created_at - now) < timedelta(minutes=1)
        # Cron in a zone of its own: the next 06:00 in Kolkata is 00:30 UTC, whatever the
        # session's zone.
        queue.schedule("daily", "t", {}, cron="0 6 * * *", timezone="Asia/Kolkata")
        (declared,) = queue.schedules()
        tick = declared.next_run_at
        assert tick is not None
        assert tick.tzinfo is UTC
        assert (tick.hour, tick.minute) == (0, 30)
        assert tick > now
    # The other client's session kept its zone (PgBouncer restores each client's TimeZone).
    assert single.execute("SHOW TimeZone").fetchone() == ("Asia/Kathmandu",)


def _listening(dsn: str, schema: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN%%' AND query LIKE %s",
            (f"%{schema}%",),
        ).fetchone()
    return bool(row and row[0])


def test_an_idle_worker_through_pgbouncer_is_woken_through_listen_dsn(
    pgbouncer: Bouncer, migrated: str, pg_dsn: str
) -> None:
    ran = [threading.Event(), threading.Event()]
    with _store(pgbouncer, migrated, prepare=False, database="golemq") as store:
        queue = Queue(store)
        queue.add("wake", {"n": 0})  # taken by the worker's first poll
        worker = Worker(store, poll_interval=60, listen_dsn=pg_dsn)

        @worker.handler("wake")
        def wake(job: JobEvent) -> None:
            ran[job.payload["n"]].set()

        worker.start()
        try:
            assert ran[0].wait(10)
            wait_until(lambda: _listening(pg_dsn, migrated), 10, what="the worker's LISTEN")
            queue.add("wake", {"n": 1})
            # Far sooner than the 60 s poll: the NOTIFY reached the direct LISTEN.
            assert ran[1].wait(10)
        finally:
            worker.stop()
