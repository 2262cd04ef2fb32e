"""``GolemqBackend``: Django's Tasks API (``django.tasks``, or the ``django_tasks`` backport)
on golemq-pg.

A task enqueued here is a golemq-pg job whose type is the task's module path;
``python manage.py golemq_worker`` runs it. Without ``OPTIONS["dsn"]`` the job is written on
Django's own connection, so inside ``transaction.atomic()`` it commits (or rolls back) with
the transaction.
"""

from __future__ import annotations

from typing import Any, TypeVar

from django.db import connections
from django.utils import timezone
from typing_extensions import ParamSpec

from golemq_pg import PostgresStore, Queue, QueuePayloadError
from golemq_pg.contrib.django._results import json_arguments, task_result
from golemq_pg.contrib.django._stores import StoreOptions, shared_store, store_options
from golemq_pg.contrib.django._tasks_api import (
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
)

P = ParamSpec("P")
R = TypeVar("R")


class GolemqBackend(BaseTaskBackend):
    """A Tasks API backend that enqueues into golemq-pg and reads results back from it.

    ``OPTIONS``: ``schema`` (default ``"golemq"``), ``dsn`` (default: Django's own database,
    ``DATABASES["default"]``, enqueueing on Django's connection), ``max_attempts`` (each job's
    attempt budget, default 3) and ``modules`` (modules holding tasks, imported by
    ``golemq_worker`` besides each installed app's ``tasks``). ``QUEUES``: the queue names a
    task may use; empty allows any.
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        try:
            self.golemq_options: StoreOptions = store_options(self.options)
        except ValueError as exc:
            raise InvalidTask(f"TASKS[{alias!r}]: {exc}") from None

    @property
    def store(self) -> PostgresStore:
        """The store this backend's jobs are in (shared by the process's backends)."""
        return shared_store(self.golemq_options)

    def enqueue(
        self, task: Task[P, R], args: Any, kwargs: Any
    ) -> TaskResult[P, R]:
        """Add the task's job (on Django's connection unless ``OPTIONS["dsn"]`` is set);
        non-JSON arguments and an invalid task raise ``InvalidTask`` and add nothing."""
        self.validate_task(task)
        payload = {
            "args": json_arguments(list(args), "task arguments"),
            "kwargs": json_arguments(dict(kwargs), "task keyword arguments"),
            "queue_name": task.queue_name,
        }
        connection: Any = None
        if self.golemq_options.dsn is None:
            django_connection = connections[self.golemq_options.database]
            django_connection.ensure_connection()
            connection = django_connection.connection
        try:
            job_id = Queue(self.store).add(
                task.module_path,
                payload,
                run_at=task.run_after,
                priority=task.priority,
                max_attempts=self.golemq_options.max_attempts,
                connection=connection,
            )
        except (ValueError, QueuePayloadError) as exc:
            raise InvalidTask(str(exc)) from None
        if job_id is None:  # only an add with a dedupe key is ever rejected; this has none
            raise InvalidTask("the job was rejected as a duplicate")
        return self._enqueued(task, job_id, payload)

    def _enqueued(
        self, task: Task[P, R], job_id: str, payload: dict[str, Any]
    ) -> TaskResult[P, R]:
        # Built here rather than read back: on Django's connection the row may be visible
        # only to this transaction, which a read through the store's pool is not part of.
        return TaskResult(
            task=task,
            id=job_id,
            status=TaskResultStatus.READY,
            enqueued_at=timezone.now(),
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=payload["args"],
            kwargs=payload["kwargs"],
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )

    def get_result(self, result_id: str) -> TaskResult[..., Any]:
        """The job's result as committed (``TaskResultDoesNotExist`` when there is none)."""
        store = self.store
        try:
            job = Queue(store).get(result_id)
        except ValueError:
            job = None
        if job is None:
            raise TaskResultDoesNotExist(f"no task result {result_id!r}")
        return task_result(job, store.job_payload(result_id), self.alias)

