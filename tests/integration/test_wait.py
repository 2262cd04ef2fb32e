"""``queue.wait``: results of waiting on both stores with a real worker, bad input, and the
PostgreSQL store's shared listener: 200 threads waiting on a pool of 4 (connections counted
in ``pg_stat_activity``), the cancel and completion hints waking waiters long before the
poll, the poll finding a finish nobody announced, a killed listener connection, the
listener stopping when nobody waits, and ``close`` leaving no connection behind.

Timing bounds are the issue's ("promptly": within a couple of seconds while the poll
interval is set to a minute), generous for a loaded machine.
"""

from __future__ import annotations

import math
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from golemq_pg import JobEvent, JobStatus, JobSummary, PostgresStore, Queue, TerminalJobError
from golemq_pg.store.postgres import _waiters
from tests.support.in_process import add_job, fast_worker
from tests.support.waiting import wait_until

#: "Promptly": a hint must wake a waiter within this many seconds although the poll
#: interval is a minute.
PROMPT = 3.0
#: The poll interval while a test proves that a hint, not the poll, woke the waiter.
LONG_POLL = 60.0


class Waiting:
    """``queue.wait(job_id, timeout=...)`` on its own thread."""

    def __init__(self, queue: Queue, job_id: str, timeout: float = 60.0) -> None:
        self.summary: JobSummary | None = None
        self.error: BaseException | None = None
        self.returned_at: float | None = None
        self._thread = threading.Thread(target=self._run, args=(queue, job_id, timeout))
        self._thread.start()

    def _run(self, queue: Queue, job_id: str, timeout: float) -> None:
        try:
            self.summary = queue.wait(job_id, timeout=timeout)
        except BaseException as exc:  # reported by outcome(), in the test thread
            self.error = exc
        self.returned_at = time.monotonic()

    def still_blocked(self, seconds: float = 0.3) -> bool:
        """Whether the wait has not returned after ``seconds``."""
        self._thread.join(seconds)
        return self._thread.is_alive()

    def outcome(self, timeout: float = 30.0) -> Any:
        """The summary returned or the exception raised."""
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "queue.wait did not return"
        return self.error if self.error is not None else self.summary


def _app_name() -> str:
    return "golemq-wait-" + uuid.uuid4().hex[:10]


def _connections(dsn: str, application_name: str) -> list[str]:
    """The last statements of the server connections with this application_name."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = conn.execute(
            "SELECT coalesce(query, '') FROM pg_stat_activity WHERE application_name = %s",
            (application_name,),
        ).fetchall()
    return [row[0] for row in found]


def _listening(dsn: str, application_name: str) -> int:
    return sum(q.lstrip().upper().startswith("LISTEN") for q in _connections(dsn, application_name))


def _sql(dsn: str, schema: str, statement: str, *args: Any) -> None:
    """Run ``statement`` (``{schema}`` composed as an identifier) on a fresh connection."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL(statement).format(schema=sql.Identifier(schema)), args)


def _finish_by_hand(dsn: str, schema: str, job_id: str) -> None:
    """Mark a job SUCCEEDED in SQL, announcing nothing (as a lost hint would leave it)."""
    _sql(dsn, schema, "UPDATE {schema}.jobs SET status = 'succeeded', lease_owner = NULL,"
         " lease_expires_at = NULL, finished_at = now() WHERE id = %s", int(job_id))


@pytest.fixture
def app_store(pg_dsn: str, schema: str) -> Iterator[PostgresStore]:
    """A migrated PostgresStore on a pool of 4 whose connections carry their own
    application_name (``store.pool.kwargs``), so a test can count them."""
    store = PostgresStore.connect(
        pg_dsn, schema=schema, min_size=1, max_size=4, application_name=_app_name()
    )
    store.migrate()
    yield store
    store.close()


def _app(store: PostgresStore) -> str:
    kwargs: Any = store.pool.kwargs
    return str(kwargs["application_name"])


# -- results of waiting, both stores ------------------------------------------------------------


def test_wait_returns_the_summary_of_a_job_a_worker_completes(store: Any) -> None:
    queue = Queue(store)
    worker = fast_worker(store)
    gate = threading.Event()

    @worker.handler("report.build")
    def build(job: JobEvent[Any]) -> None:
        assert gate.wait(30)

    job_id = add_job(queue, "report.build", {"report": "r1"})
    waiting = Waiting(queue, job_id)
    with worker:
        assert waiting.still_blocked()
        gate.set()
        summary = waiting.outcome()
    assert isinstance(summary, JobSummary)
    assert (summary.id, summary.type, summary.status) == (
        job_id, "report.build", JobStatus.SUCCEEDED
    )
    assert summary.finished_at is not None


def test_wait_returns_a_job_whose_handler_failed_terminally(store: Any) -> None:
    queue = Queue(store)
    worker = fast_worker(store)

    @worker.handler("report.build")
    def build(job: JobEvent[Any]) -> None:
        raise TerminalJobError("the report template is missing")

    job_id = add_job(queue, "report.build", {})
    with worker:
        summary = queue.wait(job_id, timeout=30)
    assert summary.status is JobStatus.FAILED
    assert summary.last_error is not None
    assert "the report template is missing" in summary.last_error


def test_wait_on_a_finished_job_returns_at_once_and_changes_nothing(store: Any) -> None:
    queue = Queue(store)
    worker = fast_worker(store)
    worker.handler("t")(lambda job: None)
    job_id = add_job(queue, "t", {})
    worker.run_until_empty(timeout=20)
    before = queue.get(job_id)
    assert queue.wait(job_id) == before
    assert queue.wait(job_id, timeout=0) == before
    assert queue.wait(int(job_id), timeout=timedelta(seconds=1)) == before  # type: ignore[arg-type]


def test_wait_on_an_unknown_job_raises_lookup_error(store: Any) -> None:
    with pytest.raises(LookupError, match="job 424242 does not exist"):
        Queue(store).wait("424242", timeout=5)


def test_wait_past_its_timeout_raises_timeout_error(store: Any) -> None:
    queue = Queue(store)
    job_id = add_job(queue, "t", {}, delay=3600)
    with pytest.raises(TimeoutError, match=rf"job {job_id} did not finish within 0\.2 seconds"):
        queue.wait(job_id, timeout=0.2)
    with pytest.raises(TimeoutError):
        queue.wait(job_id, timeout=timedelta(milliseconds=100))
    with pytest.raises(TimeoutError):
        queue.wait(job_id, timeout=0)


@pytest.mark.parametrize(
    "timeout",
    [-1, -0.5, math.nan, math.inf, "5", True, timedelta(seconds=-1), 10**12],
    ids=["negative", "negative-float", "nan", "inf", "str", "bool", "negative-delta", "huge"],
)
def test_wait_rejects_a_bad_timeout_with_value_error(store: Any, timeout: Any) -> None:
    queue = Queue(store)
    job_id = add_job(queue, "t", {})
    with pytest.raises(ValueError, match="timeout"):
        queue.wait(job_id, timeout=timeout)


@pytest.mark.parametrize("job_id", ["abc", "", None, 1.5, "1 OR 1=1"])
def test_wait_rejects_a_bad_job_id_with_value_error(store: Any, job_id: Any) -> None:
    with pytest.raises(ValueError, match="job_id"):
        Queue(store).wait(job_id, timeout=1)


# -- the PostgreSQL store's shared listener -------------------------------------------------------


def test_two_hundred_waiters_share_one_listening_connection_and_no_pooled_one(
    pg_dsn: str, schema: str, app_store: PostgresStore
) -> None:
    queue = Queue(app_store)
    job_ids = [add_job(queue, "t", {"n": n}) for n in range(200)]
    waiters = [Waiting(queue, job_id) for job_id in job_ids]
    registry = app_store._shared.waiters
    wait_until(lambda: registry.waiting == 200, timeout=60, what="200 threads waiting")
    wait_until(lambda: _listening(pg_dsn, _app(app_store)) == 1, timeout=10,
               what="the listener connected")
    # While they wait: at most the pool (4) plus the one listener, whatever the pool did.
    connections = _connections(pg_dsn, _app(app_store))
    assert len(connections) <= 4 + 1, connections
    assert _listening(pg_dsn, _app(app_store)) == 1

    def pool_idle() -> bool:
        # Every pooled connection back in the pool (a poll borrows one for a moment).
        stats = app_store.pool.get_stats()
        return stats["pool_available"] == stats["pool_size"] and not stats["requests_waiting"]

    wait_until(pool_idle, timeout=10, what="no pooled connection held by the 200 waiters")

    # A worker on its own store drains them; every tenth job fails terminally.
    worker_store = PostgresStore.connect(pg_dsn, schema=schema, max_size=4,
                                         application_name=_app_name())
    worker = fast_worker(worker_store)

    @worker.handler("t", concurrency=8)
    def run(job: JobEvent[Any]) -> None:
        if job.payload["n"] % 10 == 0:
            raise TerminalJobError("tenth")

    try:
        with worker:
            outcomes = [w.outcome(timeout=60) for w in waiters]
    finally:
        worker_store.close()
    for n, (job_id, summary) in enumerate(zip(job_ids, outcomes, strict=True)):
        assert isinstance(summary, JobSummary), summary
        expected = JobStatus.FAILED if n % 10 == 0 else JobStatus.SUCCEEDED
        assert (summary.id, summary.status) == (job_id, expected)
    assert registry.waiting == 0
    app_store.close()
    wait_until(lambda: not _connections(pg_dsn, _app(app_store)), timeout=10,
               what="no connection left after close()")


def test_a_running_job_cancelled_while_waited_for_raises_lookup_error_promptly(
    pg_dsn: str, schema: str, app_store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_waiters, "POLL_INTERVAL", LONG_POLL)
    worker_store = PostgresStore.connect(pg_dsn, schema=schema, application_name=_app_name())
    worker = fast_worker(worker_store)
    started = threading.Event()

    @worker.handler("t")
    def block(job: JobEvent[Any]) -> None:
        started.set()
        job.signal.wait(30)

    queue = Queue(app_store)
    job_id = add_job(queue, "t", {})
    try:
        with worker:
            assert started.wait(20)
            waiting = Waiting(queue, job_id)
            assert waiting.still_blocked()
            cancelled_at = time.monotonic()
            # From another store: no in-process shortcut, only the database's hints.
            assert Queue(worker_store).cancel(job_id)
            error = waiting.outcome(timeout=30)
    finally:
        worker_store.close()
    assert isinstance(error, LookupError), error
    assert waiting.returned_at is not None
    assert waiting.returned_at - cancelled_at < PROMPT


def test_a_pending_job_cancelled_while_waited_for_raises_lookup_error_promptly(
    app_store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_waiters, "POLL_INTERVAL", LONG_POLL)
    queue = Queue(app_store)
    job_id = add_job(queue, "t", {}, delay=3600)
    waiting = Waiting(queue, job_id)
    assert waiting.still_blocked()
    cancelled_at = time.monotonic()
    assert queue.cancel(job_id)
    assert isinstance(waiting.outcome(), LookupError)
    assert waiting.returned_at is not None
    assert waiting.returned_at - cancelled_at < PROMPT


def test_the_cancel_channel_alone_wakes_a_waiter(
    pg_dsn: str, schema: str, app_store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workers' abort hint (the cancel channel) is heard too: the row deleted by hand
    and only that hint sent, the waiter raises long before the poll."""
    monkeypatch.setattr(_waiters, "POLL_INTERVAL", LONG_POLL)
    queue = Queue(app_store)
    job_id = add_job(queue, "t", {})
    waiting = Waiting(queue, job_id)
    assert waiting.still_blocked()
    hinted_at = time.monotonic()
    _sql(pg_dsn, schema, "DELETE FROM {schema}.jobs WHERE id = %s", int(job_id))
    _sql(pg_dsn, schema, "SELECT pg_notify({schema}.channel_name('cancel'), %s)",
         f'["{job_id}"]')
    assert isinstance(waiting.outcome(), LookupError)
    assert waiting.returned_at is not None
    assert waiting.returned_at - hinted_at < PROMPT


def test_the_completion_hint_wakes_the_waiters_of_the_jobs_it_names(
    pg_dsn: str, schema: str, app_store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_waiters, "POLL_INTERVAL", LONG_POLL)
    queue = Queue(app_store)
    named, other = add_job(queue, "t", {}), add_job(queue, "t", {})
    first, second = Waiting(queue, named), Waiting(queue, other)
    assert first.still_blocked()
    # A hint naming a job that has not finished wakes nobody for good.
    _sql(pg_dsn, schema, "SELECT {schema}.notify_jobs_done(ARRAY[%s]::bigint[])", int(named))
    assert first.still_blocked()
    _finish_by_hand(pg_dsn, schema, named)
    _finish_by_hand(pg_dsn, schema, other)
    hinted_at = time.monotonic()
    _sql(pg_dsn, schema, "SELECT {schema}.notify_jobs_done(ARRAY[%s]::bigint[])", int(named))
    summary = first.outcome()
    assert isinstance(summary, JobSummary)
    assert (summary.id, summary.status) == (named, JobStatus.SUCCEEDED)
    assert first.returned_at is not None
    assert first.returned_at - hinted_at < PROMPT
    # The other job finished too, but nothing named it: its waiter sleeps until the poll
    # or an empty hint ("re-check every waited job").
    assert second.still_blocked()
    _sql(pg_dsn, schema, "SELECT pg_notify({schema}.channel_name('done'), '')")
    summary = second.outcome(timeout=PROMPT + 5)
    assert isinstance(summary, JobSummary)
    assert (summary.id, summary.status) == (other, JobStatus.SUCCEEDED)


def test_the_poll_finds_a_finish_that_no_hint_announced(
    pg_dsn: str, schema: str, app_store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_waiters, "POLL_INTERVAL", 0.2)
    queue = Queue(app_store)
    job_id = add_job(queue, "t", {})
    waiting = Waiting(queue, job_id)
    assert waiting.still_blocked()
    _finish_by_hand(pg_dsn, schema, job_id)
    summary = waiting.outcome(timeout=10)
    assert isinstance(summary, JobSummary)
    assert summary.status is JobStatus.SUCCEEDED


def test_a_killed_listener_connection_reconnects_and_rechecks_every_waited_job(
    pg_dsn: str, schema: str, app_store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_waiters, "POLL_INTERVAL", LONG_POLL)
    queue = Queue(app_store)
    job_id = add_job(queue, "t", {})
    waiting = Waiting(queue, job_id)
    wait_until(lambda: _listening(pg_dsn, _app(app_store)) == 1, timeout=10,
               what="the listener connected")
    assert waiting.still_blocked()
    # Finished while nobody hears of it, then the listener's connection dies: the reconnect
    # checks every waited job, so the waiter wakes without waiting for the poll.
    _finish_by_hand(pg_dsn, schema, job_id)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = %s AND query ILIKE 'LISTEN%%'",
            (_app(app_store),),
        )
    summary = waiting.outcome(timeout=15)
    assert isinstance(summary, JobSummary)
    assert summary.status is JobStatus.SUCCEEDED


def test_the_listener_stops_when_nobody_waits_and_restarts_for_the_next_waiter(
    pg_dsn: str, schema: str, app_store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_waiters, "POLL_INTERVAL", 0.2)
    monkeypatch.setattr(_waiters, "LINGER", 0.2)
    queue = Queue(app_store)
    registry = app_store._shared.waiters
    for _ in range(2):
        job_id = add_job(queue, "t", {})
        waiting = Waiting(queue, job_id)
        wait_until(lambda: _listening(pg_dsn, _app(app_store)) == 1, timeout=10,
                   what="the listener connected")
        _finish_by_hand(pg_dsn, schema, job_id)
        assert isinstance(waiting.outcome(timeout=10), JobSummary)
        wait_until(lambda: not registry.listening, timeout=10, what="the listener stopped")
        wait_until(lambda: _listening(pg_dsn, _app(app_store)) == 0, timeout=10,
                   what="the listening connection closed")


def test_waits_that_need_not_sleep_open_no_listening_connection(
    pg_dsn: str, schema: str, app_store: PostgresStore
) -> None:
    queue = Queue(app_store)
    job_id = add_job(queue, "t", {})
    _finish_by_hand(pg_dsn, schema, job_id)
    assert queue.wait(job_id).status is JobStatus.SUCCEEDED
    with pytest.raises(LookupError):
        queue.wait("424242")
    assert not app_store._shared.waiters.listening
    assert _listening(pg_dsn, _app(app_store)) == 0


def test_close_ends_waits_in_progress_and_leaves_no_connection(
    pg_dsn: str, app_store: PostgresStore
) -> None:
    queue = Queue(app_store)
    job_id = add_job(queue, "t", {})
    waiters = [Waiting(queue, job_id) for _ in range(3)]
    wait_until(lambda: _listening(pg_dsn, _app(app_store)) == 1, timeout=10,
               what="the listener connected")
    assert waiters[0].still_blocked()
    app_store.close()
    for waiting in waiters:
        error = waiting.outcome(timeout=10)
        assert isinstance(error, RuntimeError)
        assert "closed" in str(error)
    wait_until(lambda: not _connections(pg_dsn, _app(app_store)), timeout=10,
               what="no connection left after close()")
    with pytest.raises(RuntimeError, match="closed"):
        queue.wait(job_id, timeout=1)


@pytest.mark.parametrize("outcome", ["succeeded", "failed", "deleted"])
def test_a_workers_completion_hint_wakes_the_waiter_promptly(
    pg_dsn: str, schema: str, app_store: PostgresStore, monkeypatch: pytest.MonkeyPatch,
    outcome: str,
) -> None:
    """End to end: the completing statement's ``done`` hint (not the poll, a minute here)
    ends the wait, for a success with a result, a dead letter and a ``delete_on`` delete."""
    monkeypatch.setattr(_waiters, "POLL_INTERVAL", LONG_POLL)
    worker_store = PostgresStore.connect(pg_dsn, schema=schema, application_name=_app_name())
    worker = fast_worker(worker_store)
    gate = threading.Event()

    @worker.handler("t", delete_on="success" if outcome == "deleted" else "never")
    def finish(job: JobEvent[Any]) -> dict[str, str]:
        assert gate.wait(30)
        if outcome == "failed":
            raise TerminalJobError("no")
        return {"url": "s3://r1"}

    queue = Queue(app_store)
    job_id = add_job(queue, "t", {})
    try:
        with worker:
            waiting = Waiting(queue, job_id)
            assert waiting.still_blocked()
            released = time.monotonic()
            gate.set()
            got = waiting.outcome(timeout=30)
    finally:
        worker_store.close()
    assert waiting.returned_at is not None
    assert waiting.returned_at - released < PROMPT
    if outcome == "deleted":
        assert isinstance(got, LookupError), got
    elif outcome == "failed":
        assert (got.status, got.last_error) == (JobStatus.FAILED, "TerminalJobError: no")
    else:
        assert (got.status, got.result) == (JobStatus.SUCCEEDED, {"url": "s3://r1"})
