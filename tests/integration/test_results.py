"""Job results, attempt history and delete_on end to end (both stores, real worker threads),
and the coalesced completion hint: one "done" NOTIFY per completing statement carrying the
ids (PostgreSQL: LISTEN on channel_name('done'); InMemoryStore: a "done" Notification)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import structlog

from golemq_pg import (
    InMemoryStore,
    JobEvent,
    JobStatus,
    PostgresStore,
    Queue,
    QueueConfigError,
    RetryableJobError,
    TerminalJobError,
    Worker,
)
from golemq_pg.store.port import HISTORY_LIMIT, FailItem, ResultRef
from tests.support.in_process import add_job, fast_worker
from tests.support.observers import Recorder
from tests.support.store_port import SHORT_LEASE, add, claim, refs, slots
from tests.support.waiting import wait_until

CANARY = "canary-result-r77"


def test_returned_values_are_stored_as_results_and_given_to_observers(store: Any) -> None:
    queue = Queue(store)
    seen = Recorder()
    worker = fast_worker(store, observers=[seen])
    values: dict[str, Any] = {
        "mapping": {"url": "s3://reports/r1.pdf", "pages": [1, 2]},
        "list": [1, "two", 3.5, None],
        "str": "done",
        "int": 7,
        "float": 2.25,
        "none": None,
        "true": True,
    }

    @worker.handler("r")
    def run(job: JobEvent[Any]) -> Any:
        return values[job.payload["kind"]]

    ids = {kind: add_job(queue, "r", {"kind": kind}) for kind in values}
    worker.run_until_empty(timeout=20)
    for kind, job_id in ids.items():
        summary = queue.get(job_id)
        assert summary is not None
        assert summary.status is JobStatus.SUCCEEDED, kind
        expected = None if kind in ("none", "true") else values[kind]
        assert summary.result == expected, kind
        assert summary.errors == ()
        # the "succeeded" transition carries the stored result, as read back
        (done,) = [t for t in seen.of("succeeded") if t.job_id == job_id]
        assert done.result == summary.result, kind
    assert all(t.result is None for t in seen.transitions if t.outcome != "succeeded")


def test_false_is_still_retried_and_stores_no_result(store: Any) -> None:
    queue = Queue(store)
    worker = fast_worker(store)

    @worker.handler("f")
    def flaky(job: JobEvent[Any]) -> Any:
        return False if job.attempt == 1 else {"attempt": job.attempt}

    job_id = add_job(queue, "f", {})
    worker.run_until_empty(timeout=20)
    summary = queue.get(job_id)
    assert summary is not None
    assert (summary.status, summary.attempts, summary.result) == (
        JobStatus.SUCCEEDED, 2, {"attempt": 2},
    )
    assert [(e.attempt, e.error) for e in summary.errors] == [
        (1, "HandlerReturnedFalse: handler returned False")
    ]


def test_grouped_handlers_keep_no_result(store: Any) -> None:
    queue = Queue(store)
    worker = fast_worker(store)

    @worker.handler("g", grouped=True)
    def group(batch: Any) -> Any:
        return {"kept": False}

    job_id = add_job(queue, "g", {}, scope=("S", "1"))
    worker.run_until_empty(timeout=20)
    summary = queue.get(job_id)
    assert summary is not None
    assert (summary.status, summary.result) == (JobStatus.SUCCEEDED, None)


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("set", "ResultRejected: result is not JSON-safe: sets are not JSON-safe"),
        ("object", "ResultRejected: result is not JSON-safe: values of type object are not "
                   "JSON-safe"),
        ("nan", "ResultRejected: result is not JSON-safe: non-finite float (NaN or infinity)"),
        ("big", "ResultRejected: result is 1.2 MiB"),
    ],
)
def test_a_result_that_cannot_be_stored_fails_the_job_terminally(
    store: Any, kind: str, expected: str
) -> None:
    queue = Queue(store)
    rec = Recorder()
    worker = fast_worker(store, observers=[rec])
    bad: dict[str, Any] = {
        "set": {CANARY},
        "object": {"key": CANARY, "value": object()},
        "nan": [CANARY, float("nan")],
        "big": CANARY + "x" * (1250 * 1024),
    }

    @worker.handler("bad")
    def run(job: JobEvent[Any]) -> Any:
        return bad[kind]

    job_id = add_job(queue, "bad", {}, max_attempts=5)
    with structlog.testing.capture_logs() as logs:
        worker.run_until_empty(timeout=20)
    summary = queue.get(job_id)
    assert summary is not None
    assert (summary.status, summary.attempts, summary.result) == (JobStatus.FAILED, 1, None)
    assert summary.last_error is not None
    assert summary.last_error.startswith(expected)
    if kind == "big":
        assert summary.last_error.endswith("over the 1 MiB limit")
    (failed,) = rec.of("failed-terminal")
    assert failed.error == summary.last_error
    assert [e.error for e in summary.errors] == [summary.last_error]
    for text in (summary.last_error, repr(logs), repr(rec.transitions)):
        assert CANARY not in text


def test_transactional_handlers_store_their_result(pg_store: PostgresStore) -> None:
    queue = Queue(pg_store)
    seen = Recorder()
    worker = Worker(pg_store, poll_interval=0.05, observers=[seen])

    @worker.handler("tx", transactional=True)
    def tx(job: JobEvent[Any]) -> Any:
        assert job.connection is not None
        if job.payload.get("bad"):
            job.connection.execute("CREATE TEMP TABLE should_roll_back (x int)")
            return {CANARY}
        return {"n": job.payload["n"]}

    good = add_job(queue, "tx", {"n": 3})
    bad = add_job(queue, "tx", {"bad": True}, max_attempts=4)
    worker.run_until_empty(timeout=30)
    summary = queue.get(good)
    assert summary is not None
    assert (summary.status, summary.result) == (JobStatus.SUCCEEDED, {"n": 3})
    (done,) = seen.of("succeeded")
    assert (done.job_id, done.result) == (good, {"n": 3})
    failed = queue.get(bad)
    assert failed is not None
    assert (failed.status, failed.attempts) == (JobStatus.FAILED, 1)
    assert failed.last_error == "ResultRejected: result is not JSON-safe: sets are not JSON-safe"


# -- attempt history ----------------------------------------------------------------------------
def test_the_history_lists_every_failed_attempt_with_its_worker(store: Any) -> None:
    queue = Queue(store)
    worker = fast_worker(store, worker_id="history-worker")

    @worker.handler("h")
    def run(job: JobEvent[Any]) -> None:
        if job.attempt < 3:
            raise RetryableJobError(f"try {job.attempt}")
        raise TerminalJobError("giving up")

    job_id = add_job(queue, "h", {}, max_attempts=5)
    worker.run_until_empty(timeout=20)
    summary = queue.get(job_id)
    assert summary is not None
    assert summary.status is JobStatus.FAILED
    assert [(e.attempt, e.error, e.worker_id) for e in summary.errors] == [
        (1, "RetryableJobError: try 1", "history-worker"),
        (2, "RetryableJobError: try 2", "history-worker"),
        (3, "TerminalJobError: giving up", "history-worker"),
    ]
    assert summary.errors[-1].error == summary.last_error


def test_the_history_keeps_the_last_twenty_attempts(store: Any) -> None:
    queue = Queue(store)
    worker = fast_worker(store, retry_strategy=lambda ctx: 0)

    @worker.handler("h")
    def run(job: JobEvent[Any]) -> None:
        raise RetryableJobError(f"try {job.attempt}")

    job_id = add_job(queue, "h", {}, max_attempts=25)
    worker.run_until_empty(timeout=30)
    summary = queue.get(job_id)
    assert summary is not None
    assert (summary.status, summary.attempts) == (JobStatus.FAILED, 25)
    assert len(summary.errors) == HISTORY_LIMIT
    assert [e.attempt for e in summary.errors] == list(range(6, 26))
    assert summary.errors[-1].error == "RetryableJobError: try 25"


def test_a_reaped_attempt_is_recorded_without_a_worker(store: Any) -> None:
    queue = Queue(store)
    job_id = add_job(queue, "h", {}, max_attempts=3)
    claim(store, slots("h", lease=SHORT_LEASE), owner="vanished")
    wait_until(store.lease_recover_expired)
    worker = fast_worker(store, worker_id="second")

    @worker.handler("h")
    def run(job: JobEvent[Any]) -> None:
        raise TerminalJobError("no")

    worker.run_until_empty(timeout=20)
    summary = queue.get(job_id)
    assert summary is not None
    assert [(e.attempt, e.worker_id) for e in summary.errors] == [(1, None), (2, "second")]


# -- delete_on ----------------------------------------------------------------------------------
def _delete_on_worker(store: Any, rec: Recorder, **options: Any) -> Worker:
    worker = fast_worker(store, observers=[rec], **options)

    @worker.handler("ok")
    def ok(job: JobEvent[Any]) -> Any:
        return {"n": 1}

    @worker.handler("bad")
    def bad(job: JobEvent[Any]) -> None:
        raise TerminalJobError("no")

    return worker


@pytest.mark.parametrize(
    ("delete_on", "ok_kept", "bad_kept"),
    [("never", True, True), ("success", False, True), ("always", False, False)],
)
def test_delete_on_deletes_finished_rows(
    store: Any, delete_on: str, ok_kept: bool, bad_kept: bool
) -> None:
    queue = Queue(store)
    rec = Recorder()
    worker = _delete_on_worker(store, rec, delete_on=delete_on)
    ok_ids = [add_job(queue, "ok", {"i": i}) for i in range(5)]
    bad_id = add_job(queue, "bad", {})
    worker.run_until_empty(timeout=20)
    assert all((queue.get(i) is not None) is ok_kept for i in ok_ids)
    assert (queue.get(bad_id) is not None) is bad_kept
    assert sorted(t.job_id for t in rec.of("succeeded")) == sorted(ok_ids)
    assert [t.job_id for t in rec.of("failed-terminal")] == [bad_id]
    assert rec.of("lease-lost") == []


def test_a_handler_delete_on_overrides_the_worker(store: Any) -> None:
    queue = Queue(store)
    worker = fast_worker(store, delete_on="always")

    @worker.handler("kept", delete_on="never")
    def kept(job: JobEvent[Any]) -> None:
        raise TerminalJobError("no")

    @worker.handler("gone")
    def gone(job: JobEvent[Any]) -> None:
        return None

    @worker.handler("success-only", delete_on="success")
    def success_only(job: JobEvent[Any]) -> None:
        raise TerminalJobError("no")

    kept_id = add_job(queue, "kept", {})
    gone_id = add_job(queue, "gone", {})
    dead_id = add_job(queue, "success-only", {})
    worker.run_until_empty(timeout=20)
    assert queue.get(kept_id) is not None
    assert queue.get(gone_id) is None
    dead = queue.get(dead_id)
    assert dead is not None
    assert dead.status is JobStatus.FAILED


def test_delete_on_always_deletes_the_dead_letters_its_reaper_makes(store: Any) -> None:
    rec = Recorder()
    worker = _delete_on_worker(store, rec, delete_on="always")
    gone = add(store, "bad", max_attempts=1)  # claimed by a worker that dies with it
    claim(store, slots("bad", lease=SHORT_LEASE), owner="crashed")
    worker.start()
    try:
        wait_until(lambda: rec.of("failed-terminal"), timeout=10)
    finally:
        worker.stop()
    assert [t.job_id for t in rec.of("failed-terminal")] == [gone]
    assert store.job_get(gone) is None


def test_delete_on_with_a_transactional_handler(pg_store: PostgresStore) -> None:
    queue = Queue(pg_store)
    worker = Worker(pg_store, poll_interval=0.05)

    @worker.handler("tx", transactional=True, delete_on="success")
    def tx(job: JobEvent[Any]) -> Any:
        return {"n": 1}

    job_id = add_job(queue, "tx", {})
    worker.run_until_empty(timeout=30)
    assert queue.get(job_id) is None


@pytest.mark.parametrize("value", ["sometimes", "", None, 1, True, "SUCCESS"])
def test_delete_on_is_validated(value: Any) -> None:
    store = InMemoryStore()
    if value is not None:
        with pytest.raises(QueueConfigError, match="delete_on"):
            Worker(store, delete_on=value)
    worker = Worker(store)
    with pytest.raises(QueueConfigError, match="delete_on"):
        worker.handler("a", delete_on=value if value is not None else 0)
    assert worker.handler_types == ()


# -- the coalesced completion hint ---------------------------------------------------------------
@pytest.fixture
def done_listener(pg_store: PostgresStore, pg_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    conn = psycopg.connect(pg_dsn, autocommit=True)
    channel = conn.execute(
        psycopg.sql.SQL("SELECT {}.channel_name('done')").format(
            psycopg.sql.Identifier(pg_store.schema)
        )
    ).fetchone()
    assert channel is not None
    conn.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel[0])))
    yield conn
    conn.close()


def _received(conn: psycopg.Connection[Any], timeout: float = 1.0) -> list[str]:
    return [note.payload for note in conn.notifies(timeout=timeout, stop_after=None)]


def _hints(conn: psycopg.Connection[Any]) -> list[list[str]]:
    # Every completing statement has committed when these run: what is queued is all there is.
    return [json.loads(payload) for payload in _received(conn, timeout=0.5)]


def test_one_done_notification_per_completion_batch(
    pg_store: PostgresStore, done_listener: psycopg.Connection[Any]
) -> None:
    for _ in range(200):
        add(pg_store, "a")
    jobs = claim(pg_store, slots("a", limit=200))
    assert len(jobs) == 200
    first = jobs[:150]
    assert pg_store.job_complete_many("w1", refs(first)) == {j.id for j in first}
    assert [sorted(h, key=int) for h in _hints(done_listener)] == [_ids(first)]
    rest = jobs[150:]
    with_results = [ResultRef(j.id, j.lease_token, b"1") for j in rest[:20]]
    assert pg_store.job_complete_many("w1", with_results, delete_types=["none"])
    failed = [FailItem(j.id, j.lease_token, "E") for j in rest[20:40]]
    assert pg_store.job_fail_many("w1", failed)
    assert pg_store.job_complete_many("w1", refs(rest[40:]), delete_types=["a"])
    hints = [sorted(h, key=int) for h in _hints(done_listener)]
    assert hints == [_ids(rest[:20]), _ids(rest[20:40]), _ids(rest[40:])]


def _ids(jobs: list[Any]) -> list[str]:
    return sorted((j.id for j in jobs), key=int)


def _flatten(items: list[list[str]]) -> list[str]:
    return [i for item in items for i in item]


def test_nothing_written_sends_no_notification(
    pg_store: PostgresStore, done_listener: psycopg.Connection[Any]
) -> None:
    add(pg_store, "a")
    (job,) = claim(pg_store, "a")
    assert pg_store.job_complete_many("someone-else", refs([job])) == set()
    assert _hints(done_listener) == []


def test_a_long_id_list_becomes_a_recheck_hint(
    pg_store: PostgresStore, done_listener: psycopg.Connection[Any]
) -> None:
    Queue(pg_store).add_many("a", [{} for _ in range(1200)])
    jobs = claim(pg_store, slots("a", limit=1200))
    assert len(pg_store.job_complete_many("w1", refs(jobs))) == 1200
    assert _received(done_listener, timeout=0.5) == [""]


def test_the_reaper_announces_dead_letters_only(
    pg_store: PostgresStore, done_listener: psycopg.Connection[Any]
) -> None:
    dead = add(pg_store, "a", max_attempts=1)
    add(pg_store, "b", max_attempts=3)
    claim(pg_store, slots("a", lease=SHORT_LEASE), slots("b", lease=SHORT_LEASE))
    reaped: list[Any] = []
    wait_until(lambda: reaped.extend(pg_store.lease_recover_expired()) or len(reaped) == 2)
    assert sorted(r.outcome for r in reaped) == ["failed-terminal", "reclaimed"]
    assert _hints(done_listener) == [[dead]]


def test_a_draining_worker_sends_one_notification_per_flush(
    pg_store: PostgresStore, done_listener: psycopg.Connection[Any]
) -> None:
    queue = Queue(pg_store)
    assert queue.add_many("d", [{"i": i} for i in range(300)]) == 300
    worker = fast_worker(pg_store)

    @worker.handler("d", concurrency=8)
    def run(job: JobEvent[Any]) -> Any:
        return job.payload["i"]

    worker.run_until_empty(timeout=30)
    hints = _hints(done_listener)
    announced = _flatten(hints)
    assert len(announced) == len(set(announced)) == 300
    assert sorted(announced) == sorted(j.id for j in queue.find(types=["d"], limit=1000))
    # Coalesced: many jobs per notification (one per completing statement, not per job).
    assert len(hints) < 300


def test_the_memory_store_publishes_one_done_notification_per_batch() -> None:
    store = InMemoryStore()
    listener = store.open_listener()
    ids = [add(store, "a", max_attempts=1) for _ in range(30)]
    jobs = claim(store, slots("a", limit=30))
    store.job_complete_many("w1", refs(jobs[:10]))
    store.job_fail_many("w1", [FailItem(j.id, j.lease_token, "E") for j in jobs[10:20]])
    store.job_complete_many("w1", refs(jobs[20:]), delete_types=["a"])
    store.job_complete_many("w1", refs(jobs[:10]))  # already written: fenced out, no hint
    done = [(n.kind, n.items) for n in listener.wait(0.1) if n.kind == "done"]
    assert done == [("done", tuple(ids[:10])), ("done", tuple(ids[10:20])),
                    ("done", tuple(ids[20:]))]
