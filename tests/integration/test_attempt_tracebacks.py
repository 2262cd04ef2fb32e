"""Each failed attempt's traceback, from a real worker to PostgreSQL: sync and ``async def``
handlers, grouped batches and transactional handlers, retried then dead-lettered. The
traceback names the function that raised, holds no locals (the payload's canary is not in
it), is never logged, and is None where nothing was raised."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from golemq_pg import BatchEvent, JobEvent, JobStatus, PostgresStore, Queue
from tests.support.in_process import add_job, fast_worker
from tests.support.logs import captured_logs

CANARY = "CANARY-" + uuid.uuid4().hex
#: The length of the raising function's local (one digit of attempt number appended).
SECRET_CHARS = len(CANARY) + 2


def raising_deep_inside_the_upstream_call(n: int) -> None:
    secret = f"{CANARY}-{n}"  # a local: captured only if locals were (they must not be)
    raise ValueError(f"upstream refused attempt {n} ({len(secret)} chars)")


def _error(attempt: int) -> str:
    return f"ValueError: upstream refused attempt {attempt} ({SECRET_CHARS} chars)"


def _assert_names_the_raiser(trace: str | None, handler: str, attempt: int) -> None:
    assert trace is not None
    assert trace.startswith("Traceback (most recent call last):\n"), trace
    assert f", in {handler}\n" in trace, trace
    assert ", in raising_deep_inside_the_upstream_call\n" in trace, trace
    assert trace.endswith(f"{_error(attempt)}\n"), trace
    assert CANARY not in trace  # no locals, no payload


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_each_attempt_keeps_the_traceback_naming_the_raising_function(
    pg_store: PostgresStore, kind: str
) -> None:
    queue = Queue(pg_store)
    worker = fast_worker(pg_store)
    if kind == "sync":
        @worker.handler("upstream.sync")
        def sync_handler_calling_upstream(job: JobEvent[Any]) -> None:
            raising_deep_inside_the_upstream_call(job.attempt)

        job_type, handler = "upstream.sync", "sync_handler_calling_upstream"
    else:
        @worker.handler("upstream.async")
        async def async_handler_calling_upstream(job: JobEvent[Any]) -> None:
            raising_deep_inside_the_upstream_call(job.attempt)

        job_type, handler = "upstream.async", "async_handler_calling_upstream"
    job_id = add_job(queue, job_type, {"secret": CANARY}, max_attempts=2)
    with captured_logs() as logs:
        worker.run_until_empty(timeout=30)
    summary = queue.get(job_id)
    assert summary is not None
    assert summary.status is JobStatus.FAILED  # retried once, then dead-lettered
    assert [e.attempt for e in summary.errors] == [1, 2]
    for entry in summary.errors:
        _assert_names_the_raiser(entry.traceback, handler, entry.attempt)
        assert entry.error == _error(entry.attempt)
    assert summary.last_error == summary.errors[-1].error  # the first line, not the traceback
    text = logs.getvalue()
    assert "jobs_dead_lettered" in text  # the capture worked
    assert "Traceback" not in text
    assert "raising_deep_inside_the_upstream_call" not in text
    assert CANARY not in text


def test_a_grouped_batch_gives_each_job_the_batch_traceback(pg_store: PostgresStore) -> None:
    queue = Queue(pg_store)
    worker = fast_worker(pg_store)

    @worker.handler("digest", grouped=True)
    def grouped_handler_calling_upstream(event: BatchEvent[Any]) -> None:
        raising_deep_inside_the_upstream_call(event.attempt)

    ids = [add_job(queue, "digest", {"n": n, "secret": CANARY}, scope=("User", "u1"),
                   max_attempts=2) for n in range(3)]
    worker.run_until_empty(timeout=30)
    for job_id in ids:
        summary = queue.get(job_id)
        assert summary is not None
        assert summary.status is JobStatus.FAILED
        assert [e.attempt for e in summary.errors] == [1, 2]
        for entry in summary.errors:
            _assert_names_the_raiser(entry.traceback, "grouped_handler_calling_upstream",
                                     entry.attempt)


def test_a_transactional_handlers_failure_keeps_its_traceback(pg_store: PostgresStore) -> None:
    queue = Queue(pg_store)
    worker = fast_worker(pg_store)

    @worker.handler("charge", transactional=True)
    def transactional_handler_calling_upstream(job: JobEvent[Any]) -> None:
        raising_deep_inside_the_upstream_call(job.attempt)

    job_id = add_job(queue, "charge", {"secret": CANARY}, max_attempts=2)
    worker.run_until_empty(timeout=30)
    summary = queue.get(job_id)
    assert summary is not None
    assert summary.status is JobStatus.FAILED
    assert [e.attempt for e in summary.errors] == [1, 2]
    for entry in summary.errors:
        _assert_names_the_raiser(entry.traceback, "transactional_handler_calling_upstream",
                                 entry.attempt)


def test_attempts_that_raised_nothing_have_no_traceback(pg_store: PostgresStore) -> None:
    queue = Queue(pg_store)
    worker = fast_worker(pg_store)

    @worker.handler("falsy")
    def falsy(job: JobEvent[Any]) -> bool:
        return False

    @worker.handler("slow", timeout=0.1)
    def slow(job: JobEvent[Any]) -> None:
        job.signal.wait(5)

    ids = [add_job(queue, "falsy", {}, max_attempts=1), add_job(queue, "slow", {}, max_attempts=1)]
    worker.run_until_empty(timeout=30)
    for job_id in ids:
        summary = queue.get(job_id)
        assert summary is not None
        assert summary.status is JobStatus.FAILED
        (entry,) = summary.errors
        assert entry.traceback is None, entry
