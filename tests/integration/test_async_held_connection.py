"""The held producer connection of an ``AsyncPostgresStore`` that owns its pool
(``_async_checkout.HeldConnection``): consecutive verbs share one connection; concurrent
verbs, errors, cancelled tasks, idleness and ``close()`` give it back to the pool; a pool
the application passed in is never held. Counted with the pool's own statistics and in
``pg_stat_activity``."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import psycopg
import pytest
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from golemq_pg import AsyncPostgresStore, AsyncQueue, PostgresStore, Queue
from golemq_pg.store.postgres import _async_checkout
from golemq_pg.store.postgres._async_checkout import HOLD_IDLE
from tests.support.async_bridge import LoopThread
from tests.support.waiting import wait_until


def _backends(dsn: str, application_name: str) -> list[tuple[int, str]]:
    """(pid, state) of every session carrying ``application_name``."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid, coalesce(state, '') FROM pg_stat_activity WHERE application_name = %s",
            (application_name,),
        ).fetchall()
    return [(int(pid), str(state)) for pid, state in rows]


def _payload(store: PostgresStore, job_id: str) -> Any:
    encoded = store.job_payload(job_id)
    assert encoded is not None
    return orjson.loads(encoded)


def _in_store(
    loop_thread: LoopThread,
    dsn: str,
    schema: str,
    scenario: Callable[[AsyncPostgresStore, AsyncQueue], Awaitable[Any]],
    **options: Any,
) -> Any:
    """Run ``scenario`` on a store that owns its pool (closed afterwards)."""

    async def run() -> Any:
        async with await AsyncPostgresStore.connect(dsn, schema=schema, **options) as store:
            await store.pool.wait()
            return await scenario(store, AsyncQueue(store))

    return loop_thread.run(run())


async def _idle_back(store: AsyncPostgresStore) -> dict[str, int]:
    """Wait until the hold ended by idleness; the pool's statistics then."""
    held = store._shared.held
    assert held is not None
    for _ in range(200):
        if not held.held:
            break
        await asyncio.sleep(HOLD_IDLE / 5)
    assert not held.held
    await asyncio.sleep(0.01)  # the return task's putconn
    return store.pool.get_stats()


def test_consecutive_async_adds_share_one_connection_given_back_once_idle(
    pg_store: PostgresStore, pg_dsn: str, schema: str, loop_thread: LoopThread
) -> None:
    async def scenario(store: AsyncPostgresStore, queue: AsyncQueue) -> tuple[Any, ...]:
        before = store.pool.get_stats().get("requests_num", 0)
        ids = [await queue.add("t", {"n": n}) for n in range(50)]
        held = store._shared.held
        assert held is not None
        during = (held.held, store.pool.get_stats().get("requests_num", 0) - before)
        return ids, during, await _idle_back(store)

    ids, (held_during, checkouts), after = _in_store(
        loop_thread, pg_dsn, schema, scenario, min_size=2, max_size=2
    )
    assert held_during is True
    assert checkouts == 1  # one pool checkout for fifty adds
    assert after["pool_available"] == after["pool_size"] == 2  # and it is back
    assert sorted(job.id for job in Queue(pg_store).find(types=["t"], limit=100)) == sorted(ids)


def test_a_hold_past_its_age_limit_ends_at_its_next_verb(
    pg_store: PostgresStore, pg_dsn: str, schema: str, loop_thread: LoopThread,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_async_checkout, "HOLD_MAX", 0.0)  # every hold is already too old

    async def scenario(store: AsyncPostgresStore, queue: AsyncQueue) -> tuple[bool, int]:
        before = store.pool.get_stats().get("requests_num", 0)
        for n in range(5):
            await queue.add("t", {"n": n})
        held = store._shared.held
        assert held is not None
        return held.held, store.pool.get_stats().get("requests_num", 0) - before

    held, checkouts = _in_store(loop_thread, pg_dsn, schema, scenario, min_size=1, max_size=2)
    assert (held, checkouts) == (False, 5)  # each add through the pool's own checkout


def test_concurrent_async_adds_never_wait_for_a_held_connection(
    pg_store: PostgresStore, pg_dsn: str, schema: str, loop_thread: LoopThread
) -> None:
    async def scenario(store: AsyncPostgresStore, queue: AsyncQueue) -> tuple[Any, ...]:
        first = await queue.add("t", {"n": -1})  # a connection is held now
        ids = await asyncio.wait_for(
            asyncio.gather(*(queue.add("t", {"n": n}) for n in range(40))), timeout=20
        )
        return [first, *ids], await _idle_back(store)

    ids, after = _in_store(loop_thread, pg_dsn, schema, scenario, min_size=1, max_size=1)
    assert len(set(ids)) == 41
    assert after["pool_available"] == after["pool_size"]
    assert len(Queue(pg_store).find(types=["t"], limit=100)) == 41


def test_a_held_connection_the_server_closed_fails_one_add_and_the_next_add_works(
    pg_store: PostgresStore, pg_dsn: str, schema: str, loop_thread: LoopThread
) -> None:
    name = "golemq-held-" + uuid.uuid4().hex[:10]

    async def scenario(store: AsyncPostgresStore, queue: AsyncQueue) -> tuple[Any, ...]:
        await queue.add("t", {"n": 0})
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = %s", (name,))
        with pytest.raises(psycopg.OperationalError):
            await queue.add("t", {"n": 1})
        held = store._shared.held
        assert held is not None
        dropped = not held.held
        return dropped, await queue.add("t", {"n": 2})

    dropped, job_id = _in_store(loop_thread, pg_dsn, schema, scenario, min_size=1,
                                max_size=2, application_name=name)
    assert dropped  # the broken connection was not kept for the next verb
    assert _payload(pg_store, job_id) == {"n": 2}


def test_a_cancelled_add_gives_its_connection_back_and_leaves_no_transaction(
    pg_store: PostgresStore, pg_dsn: str, schema: str, loop_thread: LoopThread
) -> None:
    name = "golemq-held-" + uuid.uuid4().hex[:10]
    table = sql.Identifier(schema, "jobs")

    async def scenario(store: AsyncPostgresStore, queue: AsyncQueue) -> tuple[Any, ...]:
        await queue.add("t", {"n": 0})
        with psycopg.connect(pg_dsn) as blocker:  # the next insert waits on this lock
            blocker.execute(sql.SQL("LOCK TABLE {} IN EXCLUSIVE MODE").format(table))
            stuck = asyncio.ensure_future(queue.add("t", {"n": 1}))
            for _ in range(200):
                if any(state == "active" for _, state in _backends(pg_dsn, name)):
                    break
                await asyncio.sleep(0.02)
            stuck.cancel()
            with pytest.raises(asyncio.CancelledError):
                await stuck
            blocker.rollback()
        after_cancel = await queue.add("t", {"n": 2})
        await _idle_back(store)
        return after_cancel, _backends(pg_dsn, name)

    job_id, backends = _in_store(loop_thread, pg_dsn, schema, scenario, min_size=1,
                                 max_size=2, application_name=name)
    assert job_id is not None
    assert [state for _, state in backends if state.startswith("idle in transaction")] == []
    payloads = sorted(_payload(pg_store, job.id)["n"]
                      for job in Queue(pg_store).find(types=["t"], limit=10))
    assert payloads == [0, 2]  # the cancelled add wrote nothing


def test_closing_the_store_gives_the_held_connection_back_and_closes_its_pool(
    pg_store: PostgresStore, pg_dsn: str, schema: str, loop_thread: LoopThread
) -> None:
    name = "golemq-held-" + uuid.uuid4().hex[:10]

    async def scenario() -> bool:
        store = await AsyncPostgresStore.connect(pg_dsn, schema=schema, min_size=1,
                                                 max_size=2, application_name=name)
        await AsyncQueue(store).add("t", {})
        held = store._shared.held
        assert held is not None
        was_held = held.held
        await store.close()
        return was_held and not held.held and store.pool.closed

    assert loop_thread.run(scenario())
    wait_until(lambda: _backends(pg_dsn, name) == [], timeout=10, what="sessions closed")


def test_a_pool_the_application_passed_in_is_never_held(
    pg_store: PostgresStore, pg_dsn: str, schema: str, loop_thread: LoopThread
) -> None:
    async def scenario() -> list[tuple[int, int]]:
        async with AsyncConnectionPool(pg_dsn, min_size=1, max_size=1,
                                       kwargs={"autocommit": True}, open=False) as pool:
            await pool.wait()
            store = AsyncPostgresStore(pool, schema=schema)
            assert store._shared.held is None
            queue = AsyncQueue(store)
            seen = []
            for n in range(3):
                await queue.add("t", {"n": n})
                stats = pool.get_stats()
                seen.append((stats["pool_available"], stats.get("requests_num", 0)))
            return seen

    # Right after each add the application's only connection is back in its pool.
    assert loop_thread.run(scenario()) == [(1, 1), (1, 2), (1, 3)]
