"""Django's Tasks API on golemq-pg: tasks enqueued through ``GolemqBackend`` and run by a
real ``manage.py golemq_worker`` process, on a real PostgreSQL test database (pytest-django,
settings in tests/support/django_settings.py, tasks in tests/support/django_tasks_app/).

Transactional tests (``django_db(transaction=True)``): the worker process sees only what
commits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

# Django, its Tasks API and pytest-django come with the examples extra
# (pip install -e '.[dev,examples]'); `.[dev]` alone skips this module.
pytest.importorskip("django", reason="Django is not installed: pip install -e '.[dev,examples]'")
pytest.importorskip(
    "pytest_django", reason="pytest-django is not installed: pip install -e '.[dev,examples]'"
)

from asgiref.sync import sync_to_async
from django.db import connections, transaction
from django.utils import timezone

from golemq_pg import Queue
from golemq_pg.contrib.django import close_stores
from golemq_pg.contrib.django._stores import database_dsn
from golemq_pg.contrib.django._tasks_api import (
    InvalidTask,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_backends,
)
from tests.support import django_listed_tasks
from tests.support.django_tasks_app import tasks
from tests.support.django_worker import DjangoWorker
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


class CheckoutFailedError(Exception):
    """Something failing later in the caller's transaction."""


@pytest.fixture(scope="module", autouse=True)
def _stores_closed(django_db_setup: None) -> Iterator[None]:
    """The backend's store pools closed before pytest-django drops the test database."""
    yield
    close_stores()


@pytest.fixture(scope="module")
def start_worker(
    _stores_closed: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., DjangoWorker]]:
    """Starts ``golemq_worker`` processes on the test database; each is stopped with
    SIGTERM at the end and must exit 0."""
    with django_db_blocker.unblock():
        dsn = database_dsn()
    started: list[DjangoWorker] = []

    def start(*args: str) -> DjangoWorker:
        log = tmp_path_factory.mktemp("django-worker") / "worker.log"
        worker = DjangoWorker(dsn, log, args)
        started.append(worker)
        worker.wait_ready()
        return worker

    yield start
    codes = [(worker.terminate(), worker) for worker in started]
    for code, worker in codes:
        assert code == 0, worker.output()


@pytest.fixture(scope="module")
def default_worker(start_worker: Callable[..., DjangoWorker]) -> DjangoWorker:
    """A worker of the "default" queue's tasks."""
    return start_worker("--queue", "default", "--concurrency", "4")


def finished(result: TaskResult[Any, Any], timeout: float = 30) -> TaskResult[Any, Any]:
    """``result`` refreshed until it is SUCCESSFUL or FAILED."""

    def done() -> bool:
        result.refresh()
        return result.is_finished

    wait_until(done, timeout=timeout, interval=0.1, what=f"task {result.id} finished")
    return result


def test_a_task_runs_with_its_arguments_and_its_result_is_read_back(
    default_worker: DjangoWorker,
) -> None:
    result = tasks.describe.enqueue(2, 3, label="five")
    assert result.status == TaskResultStatus.READY
    assert (result.args, result.kwargs) == ([2, 3], {"label": "five"})
    finished(result)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == {"sum": 5, "label": "five"}
    fetched = tasks.describe.get_result(result.id)
    assert fetched.status == TaskResultStatus.SUCCESSFUL
    assert fetched.return_value == {"sum": 5, "label": "five"}
    assert (fetched.args, fetched.kwargs) == ([2, 3], {"label": "five"})
    assert fetched.task.module_path == tasks.describe.module_path
    assert fetched.attempts == 1
    assert fetched.errors == []
    assert fetched.enqueued_at is not None
    assert fetched.finished_at is not None


def test_a_return_value_of_false_is_a_successful_result(default_worker: DjangoWorker) -> None:
    result = finished(tasks.returns_false.enqueue())
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value is False
    assert result.attempts == 1


def test_a_task_that_raises_fails_with_its_exception_class_and_traceback(
    default_worker: DjangoWorker,
) -> None:
    result = finished(tasks.explode.enqueue("on purpose"), timeout=60)
    assert result.status == TaskResultStatus.FAILED
    with pytest.raises(ValueError, match="failed"):
        _ = result.return_value
    # Retried by golemq-pg's rules: OPTIONS["max_attempts"] is 2 in these settings.
    assert result.attempts == 2
    assert len(result.errors) == 2
    error = result.errors[-1]
    assert error.exception_class is tasks.LedgerError
    assert "Traceback (most recent call last)" in error.traceback
    assert "exploded: on purpose" in error.traceback
    assert "in explode" in error.traceback


def test_a_context_task_sees_the_attempt_number_on_its_retry(
    default_worker: DjangoWorker,
) -> None:
    result = finished(tasks.flaky.enqueue(2), timeout=60)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 2
    assert result.attempts == 2
    [error] = result.errors
    assert error.exception_class is RuntimeError
    assert "attempt 1 fails" in error.traceback


def test_an_async_task_runs_and_aget_result_reads_it(default_worker: DjangoWorker) -> None:
    async def enqueue() -> TaskResult[Any, Any]:
        return await tasks.add_async.aenqueue(20, 22)

    result = finished(asyncio.run(enqueue()))
    assert result.return_value == 42

    async def fetch() -> TaskResult[Any, Any]:
        try:
            return await tasks.add_async.aget_result(result.id)
        finally:  # aenqueue used Django's connection on sync_to_async's thread: close it
            await sync_to_async(connections.close_all)()

    assert asyncio.run(fetch()).return_value == 42


def test_run_after_defers_the_task(default_worker: DjangoWorker) -> None:
    run_after = timezone.now() + timedelta(seconds=3)
    result = tasks.describe.using(run_after=run_after).enqueue(1, 1, label="later")
    wait_until(lambda: timezone.now() >= run_after - timedelta(seconds=1.5), timeout=5)
    result.refresh()
    assert result.status == TaskResultStatus.READY  # due in a second and a half: not run yet
    finished(result)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.started_at is not None
    assert result.started_at >= run_after


def test_the_higher_priority_of_two_due_tasks_runs_first(
    start_worker: Callable[..., DjangoWorker],
) -> None:
    low = tasks.ordered.using(priority=-50).enqueue("low")
    high = tasks.ordered.using(priority=50).enqueue("high")
    assert tasks.ordered.get_result(high.id).task.priority == 50
    start_worker("--queue", "ordered", "--concurrency", "1")
    finished(low)
    finished(high)
    # One attempt at a time (--concurrency 1): the high one was claimed and started first.
    assert high.started_at is not None
    assert low.started_at is not None
    assert high.started_at < low.started_at


def test_a_job_enqueued_in_a_committed_atomic_block_is_there_after_the_commit() -> None:
    with transaction.atomic():
        result = tasks.describe.enqueue(1, 2, label="committed")
        # On Django's connection only: another connection cannot see it before the commit.
        with pytest.raises(TaskResultDoesNotExist):
            tasks.describe.get_result(result.id)
    assert tasks.describe.get_result(result.id).status == TaskResultStatus.READY


def test_a_rolled_back_atomic_block_leaves_no_job() -> None:
    enqueued: list[TaskResult[Any, Any]] = []

    def checkout() -> None:
        with transaction.atomic():
            enqueued.append(tasks.describe.enqueue(1, 2, label="rolled back"))
            raise CheckoutFailedError

    with pytest.raises(CheckoutFailedError):
        checkout()
    [result] = enqueued
    with pytest.raises(TaskResultDoesNotExist):
        tasks.describe.get_result(result.id)


def test_an_unknown_queue_name_is_refused() -> None:
    with pytest.raises(InvalidTask, match="nowhere"):
        tasks.describe.using(queue_name="nowhere")


def test_arguments_that_are_not_json_are_refused_at_enqueue() -> None:
    queue = Queue(task_backends["default"].store)
    counted = len(queue.find(types=[tasks.describe.module_path], limit=10_000))
    with pytest.raises(InvalidTask, match="not JSON"):
        tasks.describe.enqueue(1, 2, label=object())  # type: ignore[arg-type]
    with pytest.raises(InvalidTask, match="non-finite"):
        tasks.describe.enqueue(1, float("nan"), label="x")
    assert len(queue.find(types=[tasks.describe.module_path], limit=10_000)) == counted


def test_an_unknown_result_id_does_not_exist() -> None:
    with pytest.raises(TaskResultDoesNotExist):
        tasks.describe.get_result("999999999999")
    with pytest.raises(TaskResultDoesNotExist):
        tasks.describe.get_result("not-an-id")


def test_sigterm_lets_the_running_task_finish_and_exits_0(
    start_worker: Callable[..., DjangoWorker],
) -> None:
    result = tasks.slow.enqueue(1.5)
    worker = start_worker("--queue", "drain")

    def running() -> bool:
        result.refresh()
        return result.status == TaskResultStatus.RUNNING

    wait_until(running, timeout=30, interval=0.05, what="the slow task running")
    assert worker.terminate() == 0, worker.output()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == "finished"


def test_each_task_gets_a_fresh_database_connection(
    start_worker: Callable[..., DjangoWorker],
) -> None:
    # close_old_connections around every job (CONN_MAX_AGE 0): the handler thread's Django
    # connection does not outlive its task, so consecutive tasks on one thread see two
    # backends (without the hygiene the thread would keep its first connection).
    start_worker("--queue", "hygiene", "--concurrency", "1")
    first = finished(tasks.database_backend.enqueue())
    second = finished(tasks.database_backend.enqueue())
    assert first.status == second.status == TaskResultStatus.SUCCESSFUL
    assert isinstance(first.return_value, int)
    assert first.return_value != second.return_value


def test_processes_runs_that_many_worker_processes(
    start_worker: Callable[..., DjangoWorker],
) -> None:
    worker = start_worker("--queue", "pool", "--concurrency", "1", "--processes", "2")
    results = [tasks.worker_process.enqueue(0.4) for _ in range(6)]
    pids = {finished(result).return_value for result in results}
    assert all(r.status == TaskResultStatus.SUCCESSFUL for r in results)
    assert len(pids) == 2, pids  # both children ran tasks
    assert worker.proc.pid not in pids  # the parent supervises, its children run
    # SIGTERM to the parent stops both children and exits 0 (the fixture checks the code)


def test_a_task_in_a_module_listed_in_options_modules_is_run(
    default_worker: DjangoWorker,
) -> None:
    result = finished(django_listed_tasks.listed.enqueue("found"))
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == "FOUND"
