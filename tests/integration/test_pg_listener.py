"""LISTEN/NOTIFY on real PostgreSQL: hints, cancel notices, reconnects."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
import structlog

from golemq_pg.store.port import (
    CancelFilter,
    ClaimRequest,
    EnqueueManyParams,
    EnqueueParams,
    Notification,
    TypeSlots,
)
from golemq_pg.store.postgres import PostgresStore
from golemq_pg.store.postgres._listener import PgListener, parse_notification
from tests.support.waiting import wait_until


@pytest.fixture
def listener(pg_store: PostgresStore) -> Iterator[PgListener]:
    found = pg_store.open_listener()
    assert isinstance(found, PgListener)
    yield found
    found.close()


def _collect(listener: PgListener, want: int, timeout: float = 5.0) -> list[Notification]:
    got: list[Notification] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        got += listener.wait(0.2)
    return got


def test_an_insert_wakes_the_listener_with_its_type(
    pg_store: PostgresStore, listener: PgListener
) -> None:
    pg_store.job_enqueue(EnqueueParams(type="mail.send", payload=b'{"secret": 1}'))
    (note,) = _collect(listener, 1)
    assert note == Notification(kind="jobs", items=("mail.send",))


def test_a_future_job_sends_no_hint(pg_store: PostgresStore, listener: PgListener) -> None:
    pg_store.job_enqueue(EnqueueParams(type="later", payload=b"{}", delay=3600))
    assert listener.wait(0.3) == []


def test_cancelling_a_running_job_notifies_its_id(
    pg_store: PostgresStore, listener: PgListener
) -> None:
    ids = [pg_store.job_enqueue(EnqueueParams(type="a", payload=b"{}")).id for _ in range(3)]
    _collect(listener, 3, timeout=1.0)  # drain the insert hints
    running = pg_store.job_claim(ClaimRequest("w", [TypeSlots("a", 2, 30)]))
    cancelled = pg_store.job_cancel(CancelFilter(job_ids=[i for i in ids if i]), "gone")
    assert {c.id for c in cancelled} == set(ids)
    notes = _collect(listener, 1)
    assert [n.kind for n in notes] == ["cancel"]
    assert set(notes[0].items) == {j.id for j in running}


def test_cancel_notices_are_chunked_below_the_notify_limit(
    pg_store: PostgresStore, listener: PgListener
) -> None:
    pg_store.job_enqueue_many(EnqueueManyParams(type="a", payloads=[b"{}"] * 3000))
    running = pg_store.job_claim(ClaimRequest("w", [TypeSlots("a", 3000, 30)]))
    _collect(listener, 1, timeout=1.0)
    cancelled = pg_store.job_cancel(CancelFilter(scope=None, job_ids=[j.id for j in running]),
                                    None)
    assert len(cancelled) == 3000
    notes = _collect(listener, 2)
    notes += listener.wait(0.3)
    assert len(notes) >= 2
    assert all(n.kind == "cancel" for n in notes)
    assert sorted(i for n in notes for i in n.items) == sorted(j.id for j in running)


def test_listener_reconnects_after_its_backend_is_terminated(
    pg_store: PostgresStore, listener: PgListener, pg_dsn: str
) -> None:
    conn = listener.connection
    assert conn is not None
    pid = conn.info.backend_pid
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
    # Jobs enqueued during the gap are not hinted; the "reconnected" note makes workers poll.
    pg_store.job_enqueue(EnqueueParams(type="gap", payload=b"{}"))
    notes = _collect(listener, 1)
    assert Notification(kind="reconnected", items=()) in notes
    new_conn = listener.connection
    assert new_conn is not None
    assert new_conn.info.backend_pid != pid
    pg_store.job_enqueue(EnqueueParams(type="after", payload=b"{}"))
    later = _collect(listener, 1)
    assert Notification(kind="jobs", items=("after",)) in later


def test_close_ends_a_blocked_wait_and_closes_the_connection(
    listener: PgListener, pg_dsn: str
) -> None:
    conn = listener.connection
    assert conn is not None
    pid = conn.info.backend_pid
    results: list[list[Notification]] = []
    waiter = threading.Thread(target=lambda: results.append(listener.wait(60.0)))
    with structlog.testing.capture_logs() as logs:
        waiter.start()
        time.sleep(0.2)  # let it block on the socket
        listener.close()
        # Without the wake-up the thread would sit out its 60 s timeout.
        waiter.join(10.0)
    assert not waiter.is_alive()
    assert results == [[]]
    assert conn.closed
    assert listener.connection is None
    # A closing listener is not a lost connection: nothing logged, no reconnect.
    assert [e for e in logs if e["log_level"] in ("warning", "error")] == []
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        assert wait_gone(admin, pid)
    assert listener.wait(0.1) == []


def wait_gone(admin: psycopg.Connection[tuple[object, ...]], pid: int) -> bool:
    """Whether backend ``pid`` ends within a few seconds (a closed connection's backend)."""
    def gone() -> bool:
        row = admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s",
                            (pid,)).fetchone()
        return row == (0,)

    return wait_until(gone, timeout=5.0, what=f"backend {pid} ended")


def test_listener_never_raises_while_the_server_is_unreachable() -> None:
    # Port 9 (discard) on localhost refuses connections: wait() must not raise.
    listener = PgListener("postgresql://postgres@127.0.0.1:9/test", {"x": "jobs"},
                          min_backoff=0.01, max_backoff=0.05)
    try:
        assert listener.connection is None
        started = time.monotonic()
        # The loss is said once (a "lost" note with the error's type and first line).
        notes = listener.wait(0.3)
        assert [n.kind for n in notes] == ["lost"]
        assert notes[0].items[0].startswith("OperationalError: ")
        assert "\n" not in notes[0].items[0]
        assert listener.wait(0.3) == []
        assert time.monotonic() - started < 5
    finally:
        listener.close()
    assert listener.wait(0.1) == []  # closed: returns at once, never raises


def test_payload_parsing() -> None:
    assert parse_notification("jobs", "") == Notification("jobs", ())
    assert parse_notification("jobs", '["a","b"]') == Notification("jobs", ("a", "b"))
    assert parse_notification("jobs", "not json") == Notification("jobs", ())
    assert parse_notification("cancel", "[1,22]") == Notification("cancel", ("1", "22"))


def test_the_hints_of_a_long_schema_arrive_on_its_channel_name_channels(pg_dsn: str) -> None:
    # The trigger and notify_jobs_done compute the channel inline (0005): it must stay the
    # very name channel_name() gives, shortened with a hash, or nobody would hear the hints.
    schema = "h" * 55 + "_listen"
    store = PostgresStore.connect(pg_dsn, schema=schema, max_size=2)
    try:
        store.migrate()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            jobs, done = conn.execute(
                psycopg.sql.SQL("SELECT {}('jobs'), {}('done')").format(
                    psycopg.sql.Identifier(schema, "channel_name"),
                    psycopg.sql.Identifier(schema, "channel_name"),
                )
            ).fetchall()[0]
            assert len(jobs.encode()) <= 63
            assert jobs.startswith("h" * 39 + "_")
            for channel in (jobs, done):
                conn.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel)))
            store.job_enqueue(EnqueueParams(type="long.type", payload=b"{}"))
            with psycopg.connect(pg_dsn, autocommit=True) as other:
                other.execute(psycopg.sql.SQL("SELECT {}(ARRAY[7]::bigint[])").format(
                    psycopg.sql.Identifier(schema, "notify_jobs_done")))
            got = [(n.channel, n.payload) for n in conn.notifies(timeout=5.0, stop_after=2)]
        assert got == [(jobs, '["long.type"]'), (done, '["7"]')]
    finally:
        store.close()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(psycopg.sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE")
                         .format(psycopg.sql.Identifier(schema)))
