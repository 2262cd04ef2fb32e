"""PostgresStore plumbing: owned vs wrapped pools, connection settings, bound stores."""

from __future__ import annotations

import math
import os
import socket
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool

from golemq_pg._types import JobStatus, Resource, Scope
from golemq_pg.store.port import (
    CancelFilter,
    ClaimRequest,
    EnqueueManyParams,
    EnqueueParams,
    FailItem,
    FindParams,
    LeaseRef,
    TypeSlots,
)
from golemq_pg.store.postgres import PostgresStore


def test_owned_pool_sets_timeouts_and_utc(pg_dsn: str, schema: str) -> None:
    with PostgresStore.connect(pg_dsn, schema=schema, statement_timeout=5, lock_timeout=2.5,
                               idle_in_transaction_session_timeout=7) as store:
        assert store.dsn == pg_dsn
        assert store.schema == schema
        with store.pool.connection() as conn:
            settings = {
                name: conn.execute("SELECT current_setting(%s)", (name,)).fetchone()[0]  # type: ignore[index]
                for name in ("statement_timeout", "lock_timeout",
                             "idle_in_transaction_session_timeout", "TimeZone", "jit")
            }
            assert conn.autocommit
    assert settings == {"statement_timeout": "5s", "lock_timeout": "2500ms",
                        "idle_in_transaction_session_timeout": "7s", "TimeZone": "UTC",
                        "jit": "off"}
    assert store.pool.closed  # the context manager closed the owned pool


def test_a_wrapped_non_autocommit_pool_works_and_stays_open(pg_dsn: str, schema: str) -> None:
    pool: ConnectionPool[Any] = ConnectionPool(pg_dsn, min_size=1, max_size=2, open=True)
    try:
        with PostgresStore(pool, schema=schema) as store:
            assert store.dsn is None
            assert store.migrate()
            store.job_enqueue(EnqueueParams(type="a", payload=b"{}"))
            store.job_enqueue(EnqueueParams(type="g", payload=b"{}", scope=Scope("S", "1")))
            store.job_enqueue_many(EnqueueManyParams(type="a", payloads=[b"{}"] * 3))
            jobs = store.job_claim(ClaimRequest("w", [
                TypeSlots("a", 10, 30), TypeSlots("g", 10, 30, serialize_by_scope=True)],
                {"p": Resource(concurrency=5, types=["g"])}))
            assert sorted(j.type for j in jobs) == ["a", "a", "a", "a", "g"]
            refs = [LeaseRef(j.id, j.lease_token) for j in jobs]
            assert store.job_complete_many("w", refs) == {j.id for j in jobs}
            assert store.job_stats()["succeeded"] == 5
            listener = store.open_listener()
            assert listener is not None
            store.job_enqueue(EnqueueParams(type="b", payload=b"{}"))
            notes = listener.wait(2.0)
            listener.close()
            assert [n.items for n in notes] == [("b",)]
        assert not pool.closed  # not ours to close
        with pool.connection() as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        pool.close()


def test_bound_store_verbs_roll_back_with_the_caller(
    pg_store: PostgresStore, pg_dsn: str
) -> None:
    job_id = pg_store.job_enqueue(EnqueueParams(type="a", payload=b"{}")).id
    assert job_id is not None
    with psycopg.connect(pg_dsn) as conn:
        bound = pg_store.with_connection(conn)
        assert [c.id for c in bound.job_cancel(CancelFilter(job_ids=[job_id]), "x")] == [job_id]
        assert bound.job_get(job_id) is None
        conn.rollback()
    assert pg_store.job_get(job_id) is not None
    bound.close()  # closing a bound store closes nothing
    assert not pg_store.pool.closed


def test_retry_failed_revives_dead_letters_and_wakes_workers(pg_store: PostgresStore) -> None:
    pg_store.job_enqueue_many(EnqueueManyParams(type="a", payloads=[b"{}"] * 4,
                                                scope=Scope("S", "1")))
    jobs = pg_store.job_claim(ClaimRequest("w", [TypeSlots("a", 10, 30)]))
    pg_store.job_fail_many("w", [FailItem(j.id, j.lease_token, "E") for j in jobs])
    listener = pg_store.open_listener()
    assert listener is not None
    try:
        assert pg_store.job_retry_failed(FindParams(scope_type="S", scope_id="1", limit=1)) == 1
        assert pg_store.job_retry_failed(FindParams(types=["other"], limit=None)) == 0
        assert pg_store.job_retry_failed(FindParams(limit=None)) == 3
        notes = listener.wait(2.0) + listener.wait(0.2)
        assert [(n.kind, n.items) for n in notes] == [("jobs", ("a",)), ("jobs", ("a",))]
    finally:
        listener.close()
    revived = pg_store.job_find(FindParams(statuses=[JobStatus.PENDING]))
    assert len(revived) == 4
    assert all(j.attempts == 0 and j.last_error is None for j in revived)
    assert [j.id for j in revived] == sorted((j.id for j in revived), key=int, reverse=True)


def test_ids_that_cannot_be_ours_match_nothing(pg_store: PostgresStore) -> None:
    assert pg_store.job_get("not-a-number") is None
    assert pg_store.job_get(str(2**70)) is None
    assert pg_store.job_complete_many("w", [LeaseRef("x", 1)]) == set()
    assert pg_store.job_cancel(CancelFilter(job_ids=["x"]), None) == []


def _socket_options(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """The TCP keepalive options the kernel holds for ``conn``'s socket."""
    with socket.socket(fileno=os.dup(conn.pgconn.socket)) as sock:
        return {
            "SO_KEEPALIVE": sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
            "TCP_KEEPIDLE": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
            "TCP_KEEPINTVL": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
            "TCP_KEEPCNT": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
            "TCP_USER_TIMEOUT": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT),
        }


def _tcp_dsn(pg_dsn: str) -> str:
    host = str(conninfo_to_dict(pg_dsn).get("host") or "")
    if host.startswith("/"):
        pytest.skip("the test server listens on a Unix socket only (no TCP options to read)")
    return pg_dsn


def test_pool_and_listen_sockets_carry_keepalives_and_a_user_timeout(
    pg_dsn: str, schema: str,
) -> None:
    dsn = _tcp_dsn(pg_dsn)
    with PostgresStore.connect(dsn, schema=schema) as store:
        store.migrate()
        with store.pool.connection() as conn:
            pooled = _socket_options(conn)
            server_side = [conn.execute("SHOW " + name).fetchone() for name in (
                "tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count",
                "tcp_user_timeout")]
        listener = store.open_listener()
        assert listener is not None
        assert listener.connection is not None
        listening = _socket_options(listener.connection)
        listener.close()
    defaults = {"SO_KEEPALIVE": 1, "TCP_KEEPIDLE": 5, "TCP_KEEPINTVL": 2, "TCP_KEEPCNT": 3,
                "TCP_USER_TIMEOUT": 10_000}
    assert pooled == defaults
    # The server's end of the session is bounded the same way.
    assert server_side == [("5",), ("2",), ("3",), ("10000",)]
    assert listening == defaults
    with PostgresStore.connect(dsn, schema=schema, tcp_user_timeout=3) as tuned, \
            tuned.pool.connection() as conn:
        assert _socket_options(conn) == {"SO_KEEPALIVE": 1, "TCP_KEEPIDLE": 2,
                                         "TCP_KEEPINTVL": 1, "TCP_KEEPCNT": 3,
                                         "TCP_USER_TIMEOUT": 3000}


def test_keepalive_settings_in_the_dsn_win_and_zero_keeps_the_kernel_defaults(
    pg_dsn: str, schema: str,
) -> None:
    dsn = _tcp_dsn(pg_dsn)
    with PostgresStore.connect(make_conninfo(dsn, keepalives_idle="7"), schema=schema) as store, \
            store.pool.connection() as conn:
        options = _socket_options(conn)
    assert options["TCP_KEEPIDLE"] == 7
    assert options["TCP_USER_TIMEOUT"] == 10_000
    with PostgresStore.connect(dsn, schema=schema, tcp_user_timeout=0) as plain, \
            plain.pool.connection() as conn:
        assert _socket_options(conn)["TCP_USER_TIMEOUT"] == 0  # the kernel's default


def test_a_unix_socket_connection_ignores_the_tcp_options(pg_dsn: str, schema: str) -> None:
    host = str(conninfo_to_dict(pg_dsn).get("host") or "")
    if not host.startswith("/"):
        host = "/var/run/postgresql"
        if not os.path.exists(f"{host}/.s.PGSQL.5432"):
            pytest.skip("no Unix socket of the test server to connect through")
        info = conninfo_to_dict(pg_dsn)
        dsn = make_conninfo(pg_dsn, host=host, hostaddr="", port=str(info.get("port") or 5432))
    else:
        dsn = pg_dsn
    with PostgresStore.connect(dsn, schema=schema, tcp_user_timeout=2) as store:
        store.migrate()
        store.job_enqueue(EnqueueParams(type="a", payload=b"{}"))
        listener = store.open_listener()
        assert listener is not None
        assert listener.connection is not None
        store.job_enqueue(EnqueueParams(type="b", payload=b"{}"))
        notes = listener.wait(2.0)
        listener.close()
        assert store.job_stats()["pending"] == 2
    assert [n.items for n in notes] == [("b",)]


@pytest.mark.parametrize("value", [-1, 0.5, math.nan, math.inf, 3601, True, "10", None])
def test_a_bad_tcp_user_timeout_is_refused_before_any_connection(
    value: Any, schema: str,
) -> None:
    # An unreachable DSN: a refusal must come from the check, not from connecting.
    with pytest.raises((TypeError, ValueError), match="tcp_user_timeout"):
        PostgresStore.connect("host=192.0.2.1 connect_timeout=1", schema=schema,
                              tcp_user_timeout=value)
