"""``AsyncQueue`` and ``AsyncPostgresStore``: the same API as ``Queue`` (every method, the same
signature, the same errors), enqueueing inside the caller's async transaction, waiting from
many tasks on one listening connection (counted in ``pg_stat_activity``), a cancel from the
async queue aborting a handler of this process, and the async queue over the in-memory
store. The contract of the producer verbs on the async path is the contract suite's
``async-postgres`` run (``tests/contract``, marked ``async_store_too``)."""

from __future__ import annotations

import asyncio
import inspect
import threading
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import psycopg
import pytest
from psycopg import sql

from golemq_pg import (
    AsyncPostgresStore,
    AsyncQueue,
    InMemoryStore,
    JobEvent,
    JobStatus,
    JobSummary,
    PostgresStore,
    Queue,
    QueuePayloadError,
)
from golemq_pg.store.postgres import _waiters
from tests.support.async_bridge import LoopThread, SyncFacade
from tests.support.in_process import fast_worker
from tests.support.waiting import wait_until


def _public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_") and callable(getattr(cls, name))}


def test_async_queue_has_every_queue_method_as_a_coroutine_with_the_same_signature() -> None:
    store = InMemoryStore()
    sync, asynchronous = Queue(store), AsyncQueue(store)
    assert _public(Queue) <= _public(AsyncQueue)
    for name in _public(Queue):
        method = getattr(asynchronous, name)
        assert inspect.iscoroutinefunction(method), name
        assert inspect.signature(method) == inspect.signature(getattr(sync, name)), name
        assert method.__doc__ == getattr(sync, name).__doc__, name


#: Calls that must fail before any SQL, the same way on both queues.
BAD_CALLS: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("add", ("", {}), {}),
    ("add", ("t", {"b": b"x"}), {}),
    ("add", ("t", {}), {"delay": -1}),
    ("add", ("t", {}), {"run_at": datetime(2026, 1, 1)}),
    ("add", ("t", {}), {"on_duplicate": "merge", "dedupe_key": "k"}),
    ("add", ("t", {}), {"tags": "one"}),
    ("add_many", ("t", {"a": 1}), {}),
    ("add_many", ("t", [{}, {"f": float("nan")}]), {}),
    ("get", (True,), {}),
    ("wait", ("12x",), {"timeout": 1}),
    ("wait", ("1",), {"timeout": -1}),
    ("find", (), {"statuses": ["nope"]}),
    ("find", (), {"limit": 0}),
    ("prune", (), {"older_than": 60, "statuses": ["pending"]}),
    ("schedule", ("k", "t", {}), {"cron": "0 0 30 2 *"}),
    ("schedule", ("k", "t", {}), {}),
    ("cancel_for_scope", (("a",),), {}),
    ("cancel_by_dedupe_keys", ("t", "k"), {}),
    ("pause", ("t",), {"reason": "r" * 1001}),
    ("retry", ("-1",), {}),
    ("requeue_stale", (), {"older_than": -1}),
    ("requeue_stale", (), {"types": "t"}),
]


@pytest.mark.parametrize(
    ("method", "args", "kwargs"),
    BAD_CALLS,
    ids=[f"{m}-{i}" for i, (m, _a, _k) in enumerate(BAD_CALLS)],
)
def test_bad_input_gets_the_same_error_from_both_queues_and_writes_nothing(
    pg_store: PostgresStore,
    async_pg_store: AsyncPostgresStore,
    loop_thread: LoopThread,
    method: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> None:
    with pytest.raises((ValueError, QueuePayloadError)) as sync_error:
        getattr(Queue(pg_store), method)(*args, **kwargs)
    facade = SyncFacade(loop_thread, AsyncQueue(async_pg_store))
    with pytest.raises(type(sync_error.value)) as async_error:
        getattr(facade, method)(*args, **kwargs)
    assert str(async_error.value) == str(sync_error.value)
    assert Queue(pg_store).count_by_status() == dict.fromkeys(JobStatus, 0)


def _count(dsn: str, schema: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            sql.SQL("SELECT count(*) FROM {}.jobs_all").format(sql.Identifier(schema))
        ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize("keyed", [False, True], ids=["plain", "keyed"])
def test_an_async_callers_transaction_commits_or_rolls_back_the_job_with_its_own_row(
    pg_dsn: str,
    schema: str,
    async_pg_store: AsyncPostgresStore,
    loop_thread: LoopThread,
    keyed: bool,
) -> None:
    queue = AsyncQueue(async_pg_store)
    key = {"dedupe_key": "k"} if keyed else {}

    async def transaction(commit: bool) -> str | None:
        async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
            await conn.execute(
                sql.SQL("CREATE TABLE IF NOT EXISTS {}.orders (n int)").format(
                    sql.Identifier(schema)
                )
            )
            await conn.execute(
                sql.SQL("INSERT INTO {}.orders VALUES (1)").format(sql.Identifier(schema))
            )
            job_id = await queue.add("order.placed", {"n": 1}, connection=conn, **key)
            many = await queue.add_many("order.line", [{"i": 1}, {"i": 2}], connection=conn)
            assert many == 2
            if commit:
                await conn.commit()
            else:
                await conn.rollback()
            return job_id

    rolled_back = loop_thread.run(transaction(commit=False))
    assert rolled_back is not None
    assert _count(pg_dsn, schema) == 0
    assert loop_thread.run(queue.get(rolled_back)) is None

    committed = loop_thread.run(transaction(commit=True))
    assert committed is not None
    assert _count(pg_dsn, schema) == 3
    found = loop_thread.run(queue.find(types=["order.placed"]))
    assert [job.id for job in found] == [committed]
    with psycopg.connect(pg_dsn) as conn:
        orders = conn.execute(
            sql.SQL("SELECT count(*) FROM {}.orders").format(sql.Identifier(schema))
        ).fetchone()
    assert orders == (1,)


def _listening(dsn: str, application_name: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = conn.execute(
            "SELECT coalesce(query, '') FROM pg_stat_activity WHERE application_name = %s",
            (application_name,),
        ).fetchall()
    return sum(row[0].lstrip().upper().startswith("LISTEN") for row in found)


@pytest.fixture
def app_async_store(
    pg_dsn: str, pg_store: PostgresStore, schema: str, loop_thread: LoopThread
) -> Iterator[AsyncPostgresStore]:
    """An AsyncPostgresStore on the migrated schema whose connections carry their own
    application_name, so a test can count them."""
    name = "golemq-await-" + uuid.uuid4().hex[:10]
    store = loop_thread.run(
        AsyncPostgresStore.connect(pg_dsn, schema=schema, max_size=4, application_name=name)
    )
    yield store
    loop_thread.run(store.close())


def test_two_hundred_waiting_tasks_share_one_listening_connection(
    pg_dsn: str,
    pg_store: PostgresStore,
    app_async_store: AsyncPostgresStore,
    loop_thread: LoopThread,
) -> None:
    queue = AsyncQueue(app_async_store)
    name = str(app_async_store.pool.kwargs["application_name"])  # type: ignore[index]
    job_ids = [loop_thread.run(queue.add("t", {"n": n})) for n in range(200)]
    tasks = [
        asyncio.run_coroutine_threadsafe(queue.wait(job_id, timeout=60), loop_thread.loop)
        for job_id in job_ids
    ]
    waiters = app_async_store.waiters
    wait_until(lambda: waiters.waiting == 200, timeout=60, what="200 tasks waiting")
    wait_until(lambda: _listening(pg_dsn, name) == 1, timeout=10, what="the listener")
    stats = loop_thread.run(_pool_stats(app_async_store))
    assert stats["pool_size"] <= 4

    worker = fast_worker(pg_store)

    @worker.handler("t", concurrency=8)
    def run(job: JobEvent[Any]) -> dict[str, int]:
        return {"n": job.payload["n"]}

    with worker:
        outcomes = [task.result(timeout=60) for task in tasks]
    assert [(s.id, s.status, s.result) for s in outcomes] == [
        (job_id, JobStatus.SUCCEEDED, {"n": n}) for n, job_id in enumerate(job_ids)
    ]
    assert _listening(pg_dsn, name) <= 1
    loop_thread.run(app_async_store.close())
    wait_until(lambda: _listening(pg_dsn, name) == 0, timeout=10, what="listener closed")


async def _pool_stats(store: AsyncPostgresStore) -> dict[str, int]:
    return store.pool.get_stats()


def test_wait_raises_lookup_error_when_the_job_is_cancelled_meanwhile(
    async_pg_store: AsyncPostgresStore,
    loop_thread: LoopThread,
) -> None:
    queue = AsyncQueue(async_pg_store)

    async def scenario() -> BaseException | JobSummary:
        job_id = await queue.add("t", {})
        waiting = asyncio.ensure_future(queue.wait(job_id, timeout=30))
        await asyncio.sleep(0.2)
        assert not waiting.done()
        assert await queue.cancel(job_id)
        try:
            return await waiting
        except LookupError as exc:
            return exc

    assert isinstance(loop_thread.run(scenario()), LookupError)
    with pytest.raises(TimeoutError):
        loop_thread.run(queue.wait(loop_thread.run(queue.add("t", {})), timeout=0.2))


def test_a_cancel_from_the_async_queue_aborts_the_running_handler_of_this_process(
    pg_store: PostgresStore,
    async_pg_store: AsyncPostgresStore,
    loop_thread: LoopThread,
) -> None:
    assert async_pg_store.identity == pg_store.identity
    started, aborted = threading.Event(), threading.Event()
    worker = fast_worker(pg_store)

    @worker.handler("long")
    def long(job: JobEvent[Any]) -> None:
        started.set()
        if job.signal.wait(30):
            aborted.set()

    queue = AsyncQueue(async_pg_store)
    job_id = loop_thread.run(queue.add("long", {}))
    with worker:
        assert started.wait(30)
        assert loop_thread.run(queue.cancel(job_id, reason="gone"))
        assert aborted.wait(5)


def test_the_async_queue_deletes_jobs_and_controls_schedules(
    pg_store: PostgresStore, async_pg_store: AsyncPostgresStore, loop_thread: LoopThread
) -> None:
    queue = AsyncQueue(async_pg_store)

    async def scenario() -> None:
        await queue.schedule("nightly", "report", {}, cron="0 3 * * *")
        assert await queue.pause_schedule("nightly") is True
        assert (await queue.schedules())[0].paused is True
        assert await queue.run_schedule_now("nightly") is True
        assert await queue.resume_schedule("nightly") is True
        assert (await queue.schedules())[0].paused is False
        for verb in (queue.pause_schedule, queue.resume_schedule, queue.run_schedule_now):
            assert await verb("missing") is False
        (job,) = await queue.find(types=["report"])
        assert job.status is JobStatus.PENDING  # the run-now job, due now
        assert await queue.delete(job.id) is True  # live: cancelled
        assert await queue.get(job.id) is None
        assert await queue.delete(job.id) is False

    loop_thread.run(scenario())
    done_id = Queue(pg_store).add("t", {})
    worker = fast_worker(pg_store)
    worker.handler("t")(lambda job: None)
    worker.run_until_empty(30)
    assert loop_thread.run(queue.delete(done_id)) is True  # finished: deleted
    assert Queue(pg_store).count_by_status()[JobStatus.SUCCEEDED] == 0


def test_the_async_queue_works_over_the_in_memory_store() -> None:
    store = InMemoryStore()
    queue = AsyncQueue(store)

    async def scenario() -> JobSummary:
        job_id = await queue.add("t", {"a": 1})
        assert job_id is not None
        assert await queue.add_many("t", [{}, {}]) == 2
        assert (await queue.stats())["pending"] == 3
        worker = fast_worker(store)
        worker.handler("t")(lambda job: {"ok": True})
        waiting = asyncio.ensure_future(queue.wait(job_id, timeout=30))
        await asyncio.to_thread(worker.run_until_empty, 30)
        return await waiting

    summary = asyncio.run(scenario())
    assert (summary.status, summary.result) == (JobStatus.SUCCEEDED, {"ok": True})


def test_the_async_store_migrates_and_closes_what_it_owns(
    pg_dsn: str,
    schema: str,
    loop_thread: LoopThread,
) -> None:
    async def scenario() -> tuple[list[str], list[str], bool]:
        async with await AsyncPostgresStore.connect(pg_dsn, schema=schema) as store:
            first = await store.migrate()
            again = await store.migrate()
            pool = store.pool
        return first, again, pool.closed

    first, again, closed = loop_thread.run(scenario())
    assert first[:2] == ["0001_initial", "0002_operating_surface"]
    assert again == []
    assert closed
    with pytest.raises(ValueError, match="schema"):
        AsyncPostgresStore(object(), schema="Bad-Name")  # type: ignore[arg-type]


def test_a_finish_no_hint_announced_is_found_by_the_poll_and_the_listener_stops_when_idle(
    pg_dsn: str, schema: str, async_pg_store: AsyncPostgresStore, loop_thread: LoopThread,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_waiters, "POLL_INTERVAL", 0.3)
    monkeypatch.setattr(_waiters, "LINGER", 0.3)
    queue = AsyncQueue(async_pg_store)
    waiters = async_pg_store.waiters
    for _ in range(2):  # the second wait needs a listener again, after the first one left
        job_id = loop_thread.run(queue.add("t", {}))
        waiting = asyncio.run_coroutine_threadsafe(queue.wait(job_id, timeout=30),
                                                   loop_thread.loop)
        wait_until(lambda: waiters.listening and waiters.waiting == 1, timeout=10,
                   what="a task waiting, the listener running")
        with psycopg.connect(pg_dsn, autocommit=True) as conn:  # no NOTIFY: only a poll sees it
            conn.execute(sql.SQL("UPDATE {}.jobs SET status = 'succeeded', finished_at = now()"
                                 " WHERE id = %s").format(sql.Identifier(schema)), (int(job_id),))
        assert waiting.result(timeout=10).status is JobStatus.SUCCEEDED
        wait_until(lambda: not waiters.listening, timeout=10, what="the idle listener gone")
