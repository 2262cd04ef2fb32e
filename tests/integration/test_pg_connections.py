"""How PostgresStore (and AsyncPostgresStore) set up the connections they open: no ``options``
startup parameter, timestamps in UTC whatever the session's zone, ``prepare=False``,
``listen_dsn``; a session that turned read-only is thrown away.
(Through PgBouncer: tests/integration/test_pgbouncer.py.)"""

from __future__ import annotations

from datetime import UTC, datetime

import psycopg
import pytest

from golemq_pg import AsyncPostgresStore, AsyncQueue, PostgresStore, Queue, QueueConfigError, Worker
from golemq_pg.store.port import RetryItem
from tests.support.async_bridge import LoopThread
from tests.support.store_port import add, claim, slots


def test_the_store_sends_no_options_startup_parameter(pg_dsn: str, schema: str) -> None:
    with PostgresStore.connect(pg_dsn, schema=schema, prepare=False) as store:
        kwargs = store.pool.kwargs
        assert isinstance(kwargs, dict)
        assert "options" not in kwargs
        assert kwargs["prepare_threshold"] is None


def test_timestamps_come_back_in_utc_when_the_session_zone_is_another(
    pg_store: PostgresStore, pg_dsn: str
) -> None:
    with PostgresStore.connect(pg_dsn, schema=pg_store.schema, min_size=1, max_size=1) as store:
        with store.pool.connection() as conn:  # the store's only connection, changed behind it
            conn.execute("SET TimeZone = 'Asia/Kathmandu'")
        job_id = add(store, "t")
        (job,) = claim(store, "t")
        store.job_retry_many("w1", [RetryItem(job.id, job.lease_token, 0, "boom")])
        summary = store.job_get(job_id)
        assert summary is not None
        assert summary.errors
        for stamp in (store.now(), job.lease_expires_at, summary.created_at,
                      summary.errors[0].at):
            assert stamp is not None
            assert stamp.tzinfo is UTC
        with store.pool.connection() as conn:  # still the other zone: decoded on the client
            assert conn.execute("SHOW TimeZone").fetchone() == ("Asia/Kathmandu",)


@pytest.mark.parametrize("prepare", [True, False])
def test_prepare_false_leaves_no_prepared_statement_on_the_server(
    pg_store: PostgresStore, pg_dsn: str, prepare: bool
) -> None:
    with PostgresStore.connect(pg_dsn, schema=pg_store.schema, min_size=1, max_size=1,
                               prepare=prepare) as store:
        for n in range(8):  # past psycopg's prepare_threshold, guarded and fast claims
            add(store, "g", scope=("s", str(n)))
            add(store, "f")
            claim(store, slots("g", limit=1, serialize_by_scope=True), "f")
            store.job_stats()
        with store.pool.connection() as conn:
            row = conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()
    assert row is not None
    assert (row[0] > 0) is prepare


@pytest.mark.parametrize("bad", ["", "   ", "dbname=x =y", 5])
def test_a_bad_listen_dsn_is_refused_by_the_store_and_the_worker(
    pg_store: PostgresStore, pg_dsn: str, bad: object
) -> None:
    with pytest.raises(ValueError, match="listen_dsn"):
        PostgresStore.connect(pg_dsn, schema=pg_store.schema, listen_dsn=bad)  # type: ignore[arg-type]
    with pytest.raises(QueueConfigError, match="listen_dsn"):
        Worker(pg_store, listen_dsn=bad)  # type: ignore[arg-type]


def test_listen_dsn_errors_never_echo_the_dsn_and_need_notify(pg_store: PostgresStore) -> None:
    with pytest.raises(QueueConfigError, match="notify=False") as caught:
        Worker(pg_store, notify=False, listen_dsn="postgresql://u:hunter2@db/x")
    assert "hunter2" not in str(caught.value)
    with pytest.raises(QueueConfigError, match="prepare must be True or False"):
        PostgresStore.connect("postgresql://u:hunter2@db/x", prepare="no")  # type: ignore[arg-type]


def test_listen_dsn_takes_the_listen_connections_and_only_them_elsewhere(
    pg_store: PostgresStore, pg_dsn: str
) -> None:
    nowhere = "postgresql://postgres@127.0.0.1:1/test?connect_timeout=2"  # refused at once
    with PostgresStore.connect(pg_dsn, schema=pg_store.schema, listen_dsn=nowhere) as store:
        listener = store.open_listener()
        assert listener is not None
        assert listener.connection is None
        listener.close()
        direct = store.open_listener(pg_dsn)  # a worker's listen_dsn wins over the store's
        assert direct is not None
        assert direct.connection is not None
        direct.close()
        # The pool still serves everything else; waits fall back to polling.
        queue = Queue(store)
        worker = Worker(store, poll_interval=0.05, listen_dsn=pg_dsn)
        worker.handler("t")(lambda job: None)
        job_id = queue.add("t", {})
        assert job_id is not None
        worker.start()
        try:
            assert queue.wait(job_id, timeout=20).status == "succeeded"
        finally:
            worker.stop()


def test_the_async_store_decodes_timestamps_in_utc_when_the_session_zone_is_another(
    pg_store: PostgresStore, pg_dsn: str, loop_thread: LoopThread
) -> None:
    async def scenario() -> tuple[list[datetime | None], tuple[object, ...] | None]:
        async with await AsyncPostgresStore.connect(pg_dsn, schema=pg_store.schema,
                                                    min_size=1, max_size=1) as store:
            async with store.pool.connection() as conn:  # its only connection, changed
                await conn.execute("SET TimeZone = 'Asia/Kathmandu'")
            queue = AsyncQueue(store)
            summary = await queue.get(await queue.add("t", {}))
            assert summary is not None
            async with store.pool.connection() as conn:
                zone = await (await conn.execute("SHOW TimeZone")).fetchone()
            return [summary.created_at, summary.run_at, summary.updated_at], zone

    stamps, zone = loop_thread.run(scenario())
    assert zone == ("Asia/Kathmandu",)  # still the other zone: decoded on the client
    for stamp in stamps:
        assert stamp is not None
        assert stamp.tzinfo is UTC


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_session_that_turned_read_only_is_thrown_away_and_the_next_add_works(
    pg_store: PostgresStore, pg_dsn: str, loop_thread: LoopThread, kind: str
) -> None:
    # A session that starts read-only (a role or database setting, a standby behind a
    # failover address) stays so; the store must not hand the same connection out again.
    read_only = "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY"
    if kind == "sync":
        with PostgresStore.connect(pg_dsn, schema=pg_store.schema, min_size=1,
                                   max_size=1) as store:
            with store.pool.connection() as conn:
                conn.execute(read_only)
            queue = Queue(store)
            with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
                queue.add("t", {})
            job_id = queue.add("t", {})
    else:
        async def scenario() -> str | None:
            async with await AsyncPostgresStore.connect(pg_dsn, schema=pg_store.schema,
                                                        min_size=1, max_size=1) as store:
                async with store.pool.connection() as conn:
                    await conn.execute(read_only)
                queue = AsyncQueue(store)
                with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
                    await queue.add("t", {})
                return await queue.add("t", {})

        job_id = loop_thread.run(scenario())
    assert job_id is not None
    assert [job.id for job in Queue(pg_store).find(types=["t"])] == [job_id]
