"""Transactional handlers: the handler's writes commit with the claim and the completion."""

from __future__ import annotations

from typing import Any

import pytest

from golemq_pg import (
    InMemoryStore,
    JobEvent,
    JobStatus,
    PostgresStore,
    Queue,
    QueueConfigError,
    Worker,
)
from tests.support.ledgers import effects, effects_table, insert_effect


def test_writes_commit_with_the_completion(pg_store: PostgresStore, pg_dsn: str) -> None:
    schema = pg_store.schema
    effects_table(pg_dsn, schema)
    queue = Queue(pg_store)
    worker = Worker(pg_store, poll_interval=0.05)

    @worker.handler("tx", transactional=True, concurrency=2)
    def tx(event: JobEvent[Any]) -> None:
        assert event.connection is not None
        insert_effect(event, schema, "tx")
        event.progress({"written": 1})

    ids = [queue.add("tx", {"n": n}) for n in range(6)]
    worker.run_until_empty(timeout=30)
    for job_id in ids:
        summary = queue.get(job_id)  # type: ignore[arg-type]
        assert summary is not None
        assert summary.status is JobStatus.SUCCEEDED
        assert summary.progress == {"written": 1}
    assert sorted(row[0] for row in effects(pg_dsn, schema)) == sorted(ids)  # type: ignore[type-var]


def test_a_failed_attempt_rolls_its_writes_back(pg_store: PostgresStore, pg_dsn: str) -> None:
    schema = pg_store.schema
    effects_table(pg_dsn, schema)
    queue = Queue(pg_store)
    worker = Worker(pg_store, poll_interval=0.05, base_backoff=0, max_backoff=0)

    @worker.handler("tx-flaky", transactional=True)
    def flaky(event: JobEvent[Any]) -> None:
        insert_effect(event, schema, "tx")
        if event.attempt == 1:
            raise RuntimeError("after writing")

    job_id = queue.add("tx-flaky", {})
    assert job_id
    worker.run_until_empty(timeout=30)
    summary = queue.get(job_id)
    assert summary is not None
    assert summary.status is JobStatus.SUCCEEDED
    assert summary.attempts == 2
    assert summary.last_error == "RuntimeError: after writing"
    assert [(row[0], row[1]) for row in effects(pg_dsn, schema)] == [(job_id, 2)]


def test_terminal_failure_in_a_transactional_handler(pg_store: PostgresStore,
                                                     pg_dsn: str) -> None:
    effects_table(pg_dsn, pg_store.schema)
    queue = Queue(pg_store)
    worker = Worker(pg_store, poll_interval=0.05)

    @worker.handler("tx-dead", transactional=True)
    def dead(event: JobEvent[Any]) -> bool:
        insert_effect(event, pg_store.schema, "tx")
        return False

    job_id = queue.add("tx-dead", {}, max_attempts=1)
    assert job_id
    worker.run_until_empty(timeout=30)
    summary = queue.get(job_id)
    assert summary is not None
    assert summary.status is JobStatus.FAILED
    assert effects(pg_dsn, pg_store.schema) == []


def test_mixed_worker_with_ordinary_and_transactional_types(pg_store: PostgresStore) -> None:
    queue = Queue(pg_store)
    worker = Worker(pg_store, poll_interval=0.05)
    worker.handler("plain", concurrency=2)(lambda event: None)
    worker.handler("in-tx", transactional=True)(lambda event: None)
    for n in range(5):
        queue.add("plain", {"n": n})
        queue.add("in-tx", {"n": n})
    worker.run_until_empty(timeout=30)
    assert queue.count_by_status()[JobStatus.SUCCEEDED] == 10


def test_memory_store_refuses_transactional_handlers() -> None:
    with pytest.raises(QueueConfigError, match="transactional"):
        Worker(InMemoryStore()).handler("tx", transactional=True)(lambda event: None)
