"""Durable steps through real workers: ``job.step(name, fn)`` / ``await job.astep(name,
coro_fn)`` run once per job and hand the stored value to later attempts; a value that cannot
be stored and a name used twice fail the job terminally; a stale attempt stores nothing;
``JobSummary.steps``; ``retry`` keeps the steps and ``reset_steps=True`` clears them (Queue,
AsyncQueue, CLI); a transactional handler's steps commit and roll back with its writes.

The worker process SIGKILLed between a step and the job's end is in
tests/faults/test_fault_durable_steps.py.
"""

from __future__ import annotations

import threading
from typing import Any

import orjson
import psycopg
import pytest
from psycopg import sql

from golemq_pg import (
    AsyncPostgresStore,
    AsyncQueue,
    JobAborted,
    JobEvent,
    JobStatus,
    PostgresStore,
    Queue,
    TerminalJobError,
)
from golemq_pg.store.port import FailItem
from tests.support.async_bridge import LoopThread
from tests.support.cli import run_cli
from tests.support.in_process import add_job, fast_worker
from tests.support.store_port import claim, slots
from tests.support.waiting import wait_until

CANARY = "canary-step-value-s41"


def test_a_step_is_not_run_again_on_a_retry_after_a_later_failure(store: Any) -> None:
    queue = Queue(store)
    worker = fast_worker(store)
    calls: list[int] = []

    def fetch() -> dict[str, Any]:
        calls.append(1)
        return {"rows": [1, 2, 3], "at": len(calls)}

    @worker.handler("report")
    def run(job: JobEvent[Any]) -> Any:
        rows = job.step("fetch", fetch)
        if job.attempt < 3:
            raise RuntimeError("the upload failed")
        return {"uploaded": len(rows["rows"]), "fetched_at": rows["at"]}

    job_id = add_job(queue, "report", {}, max_attempts=3)
    worker.run_until_empty(timeout=20)
    done = queue.get(job_id)
    assert done is not None
    assert (done.status, done.attempts) == (JobStatus.SUCCEEDED, 3)
    assert len(calls) == 1
    assert done.result == {"uploaded": 3, "fetched_at": 1}
    assert done.steps == {"fetch": {"rows": [1, 2, 3], "at": 1}}
    assert queue.wait(job_id, timeout=5).steps == done.steps
    assert [s.steps for s in queue.find(types=["report"])] == [done.steps]


def test_async_astep_is_awaited_once_per_job(store: Any) -> None:
    queue = Queue(store)
    worker = fast_worker(store)
    calls: list[int] = []

    async def ask() -> str:
        calls.append(1)
        return "answer"

    @worker.handler("llm")
    async def run(job: JobEvent[Any]) -> Any:
        first = await job.astep("ask", ask)
        second = await job.astep("count", _async_value(len(calls)))
        if job.attempt == 1:
            raise RuntimeError("the next call failed")
        return [first, second]

    job_id = add_job(queue, "llm", {}, max_attempts=2)
    worker.run_until_empty(timeout=20)
    done = queue.get(job_id)
    assert done is not None
    assert (done.status, done.attempts, done.result) == (JobStatus.SUCCEEDED, 2, ["answer", 1])
    assert len(calls) == 1
    assert done.steps == {"ask": "answer", "count": 1}


def _async_value(value: Any) -> Any:
    async def make() -> Any:
        return value

    return make


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"when": {CANARY, "set"}}, "is not JSON-safe"),
        ({"blob": CANARY + "x" * (1024 * 1024)}, "over the 1 MiB limit"),
    ],
    ids=["not-json-safe", "too-large"],
)
def test_a_value_that_cannot_be_stored_fails_the_job_terminally(
    store: Any, value: Any, problem: str
) -> None:
    queue = Queue(store)
    worker = fast_worker(store)
    after: list[int] = []

    @worker.handler("bad")
    def run(job: JobEvent[Any]) -> None:
        job.step("make", lambda: value)
        after.append(1)

    job_id = add_job(queue, "bad", {}, max_attempts=3)
    worker.run_until_empty(timeout=20)
    done = queue.get(job_id)
    assert done is not None
    assert (done.status, done.attempts) == (JobStatus.FAILED, 1)  # terminal: not retried
    assert done.last_error is not None
    assert done.last_error.startswith("StepRejected: step 'make': value ")
    assert problem in done.last_error
    assert CANARY not in done.last_error
    assert after == []
    assert done.steps == {}


def test_a_step_name_used_twice_in_one_attempt_fails_the_job_terminally(store: Any) -> None:
    queue = Queue(store)
    worker = fast_worker(store)
    second: list[int] = []

    @worker.handler("twice")
    def run(job: JobEvent[Any]) -> None:
        job.step("fetch", lambda: 1)
        job.step("fetch", lambda: second.append(1))

    job_id = add_job(queue, "twice", {}, max_attempts=3)
    worker.run_until_empty(timeout=20)
    done = queue.get(job_id)
    assert done is not None
    assert (done.status, done.attempts) == (JobStatus.FAILED, 1)
    assert done.last_error == (
        "StepRejected: step 'fetch' was already used in this attempt: step names are unique "
        "per job"
    )
    assert second == []
    assert done.steps == {"fetch": 1}


def test_a_step_whose_fn_raises_stores_nothing_and_may_run_again(store: Any) -> None:
    queue = Queue(store)
    worker = fast_worker(store)
    tries: list[int] = []

    def flaky() -> str:
        tries.append(1)
        if len(tries) == 1:
            raise ConnectionError("down")
        return "up"

    @worker.handler("flaky")
    def run(job: JobEvent[Any]) -> str:
        try:
            return job.step("call", flaky)
        except ConnectionError:
            return job.step("call", flaky)  # the same name again: it was not used

    job_id = add_job(queue, "flaky", {})
    worker.run_until_empty(timeout=20)
    done = queue.get(job_id)
    assert done is not None
    assert (done.status, done.attempts, done.result, done.steps) == (
        JobStatus.SUCCEEDED, 1, "up", {"call": "up"})


def test_retry_keeps_the_steps_and_reset_steps_runs_them_again(store: Any) -> None:
    queue = Queue(store)
    worker = fast_worker(store)
    fetched: list[int] = []
    outcomes = ["fail", "fail", "ok"]

    @worker.handler("sync")
    def run(job: JobEvent[Any]) -> None:
        job.step("fetch", lambda: fetched.append(1) or len(fetched))
        if outcomes.pop(0) == "fail":
            raise TerminalJobError("the target refused it")

    job_id = add_job(queue, "sync", {})
    worker.run_until_empty(timeout=20)
    assert fetched == [1]
    assert queue.retry(job_id) is True
    worker.run_until_empty(timeout=20)
    failed = queue.get(job_id)
    assert failed is not None
    assert (failed.status, failed.steps) == (JobStatus.FAILED, {"fetch": 1})
    assert fetched == [1]  # kept: not fetched again
    assert queue.retry(job_id, reset_steps=True) is True
    assert queue.get(job_id).steps == {}  # type: ignore[union-attr]
    worker.run_until_empty(timeout=20)
    done = queue.get(job_id)
    assert done is not None
    assert (done.status, done.steps) == (JobStatus.SUCCEEDED, {"fetch": 2})
    assert fetched == [1, 1]
    with pytest.raises(ValueError, match="reset_steps"):
        queue.retry(job_id, reset_steps="yes")  # type: ignore[arg-type]


def test_a_stale_attempt_stores_no_step(store: Any) -> None:
    queue = Queue(store)
    worker = fast_worker(store)
    waiting, release = threading.Event(), threading.Event()
    seen: list[BaseException] = []

    @worker.handler("slow", concurrency=2)
    def run(job: JobEvent[Any]) -> int:
        job.step("before", lambda: job.attempt)
        if job.attempt == 1:
            waiting.set()
            release.wait(20)
            try:
                job.step("after", lambda: job.attempt)
            except JobAborted as exc:
                seen.append(exc)
                raise
        return int(job.step("after", lambda: job.attempt))

    job_id = add_job(queue, "slow", {}, max_attempts=3)
    worker.start()
    try:
        assert waiting.wait(20)
        assert queue.requeue_stale(0) == 1  # the lease is taken from the first attempt
        wait_until(lambda: (queue.get(job_id) or _none).attempts == 2, timeout=20)
        release.set()
        done = queue.wait(job_id, timeout=20)
    finally:
        release.set()
        worker.stop()
    assert done.status is JobStatus.SUCCEEDED
    assert done.steps == {"before": 1, "after": 2}
    assert [str(e) for e in seen] == ["lease-lost"]


class _None:
    attempts = 0


_none = _None()


def test_the_async_queue_retries_with_and_without_the_steps(
    loop_thread: LoopThread, async_pg_store: AsyncPostgresStore, pg_store: PostgresStore
) -> None:
    aqueue = AsyncQueue(async_pg_store)
    job_id = _dead_letter_with_step(pg_store)
    assert loop_thread.run(aqueue.retry(job_id)) is True
    assert loop_thread.run(aqueue.get(job_id)).steps == {"fetch": [1]}
    _fail_again(pg_store, job_id)
    assert loop_thread.run(aqueue.retry(job_id, reset_steps=True)) is True
    assert loop_thread.run(aqueue.get(job_id)).steps == {}


def test_the_cli_retry_keeps_the_steps_unless_reset_steps(
    pg_store: PostgresStore, pg_dsn: str, schema: str
) -> None:
    job_id = _dead_letter_with_step(pg_store)
    kept = run_cli("--schema", schema, "retry", job_id, dsn=pg_dsn)
    assert kept.returncode == 0, kept.stderr
    assert pg_store.job_step_get(job_id) == {"fetch": [1]}
    _fail_again(pg_store, job_id)
    reset = run_cli("--schema", schema, "retry", "--reset-steps", job_id, dsn=pg_dsn)
    assert reset.returncode == 0, reset.stderr
    assert reset.stdout.strip() == f"job {job_id} moved back to pending"
    assert pg_store.job_step_get(job_id) == {}


def _dead_letter_with_step(store: PostgresStore) -> str:
    job_id = Queue(store).add("step.job", {}, max_attempts=1)
    assert job_id is not None
    (job,) = claim(store, slots("step.job"), owner="t")
    assert store.job_step_save("t", job, "fetch", orjson.dumps([1]))
    assert store.job_fail_many("t", [FailItem(job.id, job.lease_token, "down")]) == {job_id}
    return job_id


def _fail_again(store: PostgresStore, job_id: str) -> None:
    (job,) = claim(store, slots("step.job"), owner="t")
    assert job.id == job_id
    assert store.job_fail_many("t", [FailItem(job.id, job.lease_token, "down")]) == {job_id}


def test_a_transactional_handlers_steps_commit_and_roll_back_with_its_writes(
    pg_store: PostgresStore, pg_dsn: str, schema: str
) -> None:
    queue = Queue(pg_store)
    worker = fast_worker(pg_store)
    calls: list[int] = []

    @worker.handler("tx", transactional=True)
    def run(job: JobEvent[Any]) -> int:
        value = int(job.step("pick", lambda: calls.append(1) or job.attempt))
        job.step("pick-again", lambda: value)
        if job.attempt == 1:
            raise RuntimeError("rolled back with the step")
        return value

    job_id = add_job(queue, "tx", {}, max_attempts=2)
    worker.run_until_empty(timeout=20)
    done = queue.get(job_id)
    assert done is not None
    # attempt 1's steps rolled back with its transaction: attempt 2 ran the step again
    assert (done.status, done.result, len(calls)) == (JobStatus.SUCCEEDED, 2, 2)
    assert done.steps == {"pick": 2, "pick-again": 2}


def test_the_sweep_removes_the_steps_of_jobs_gone_for_good(
    pg_store: PostgresStore, pg_dsn: str, schema: str
) -> None:
    queue = Queue(pg_store)
    ids = [add_job(queue, "a", {"n": n}) for n in range(3)]
    held = claim(pg_store, slots("a"), owner="t")
    for job in held:
        assert pg_store.job_step_save("t", job, "s", orjson.dumps(job.id))
    cancelled, finished, live = ids
    queue.cancel(cancelled)
    assert pg_store.job_complete_many("t", [j for j in held if j.id == finished]) == {finished}
    assert _step_rows(pg_dsn, schema) == sorted(ids)  # the cancelled job's row is left
    sweep = pg_store.job_step_sweep(None, 1_000)
    assert (sweep.removed, sweep.after) == (1, None)
    assert _step_rows(pg_dsn, schema) == sorted([finished, live])
    assert queue.prune(older_than=0, statuses=["succeeded"]) == 1
    assert pg_store.job_step_sweep(None, 1_000).removed == 1
    assert _step_rows(pg_dsn, schema) == [live]


def _step_rows(dsn: str, schema: str) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = conn.execute(
            sql.SQL("SELECT job_id::text FROM {}.job_steps ORDER BY job_id").format(
                sql.Identifier(schema))
        ).fetchall()
    return [row[0] for row in found]


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_step_whose_connection_drops_while_saving_is_saved_not_run_again(
    pg_dsn: str, schema: str, kind: str
) -> None:
    # Every connection of the worker's store is terminated while the step's function runs:
    # the save that follows meets a dead connection. It is retried on a fresh one (the lease
    # fences a stale save), so the function ran once and the job succeeded on attempt 1.
    name = f"golemq-step-drop-{schema}"
    store = PostgresStore.connect(pg_dsn, schema=schema, min_size=2, max_size=4,
                                  application_name=name)
    try:
        store.migrate()
        queue = Queue(store)
        worker = fast_worker(store)
        calls: list[int] = []

        def cut_the_connections() -> str:
            calls.append(1)
            with psycopg.connect(pg_dsn, autocommit=True) as admin:
                cut = admin.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                    " WHERE application_name = %s", (name,)).fetchone()
            assert cut is not None
            assert cut[0] >= 1
            return "fetched"

        if kind == "sync":
            @worker.handler("fetch")
            def fetch(job: JobEvent[Any]) -> str:
                return job.step("fetch", cut_the_connections)
        else:
            async def cut_async() -> str:
                return cut_the_connections()

            @worker.handler("fetch")
            async def fetch_async(job: JobEvent[Any]) -> str:
                return await job.astep("fetch", cut_async)

        job_id = add_job(queue, "fetch", {})
        worker.run_until_empty(timeout=30)
        summary = queue.get(job_id)
        assert summary is not None
        assert summary.status is JobStatus.SUCCEEDED, summary.last_error
        assert (summary.attempts, summary.steps, summary.result) == (
            1, {"fetch": "fetched"}, "fetched")
        assert calls == [1]
    finally:
        store.close()
