"""The worker side of ``GolemqBackend``: finding the project's tasks and a golemq-pg Worker
that runs them (``python manage.py golemq_worker``).

Tasks are found at start, by importing each installed app's ``tasks`` module and the modules
in the backend's ``OPTIONS["modules"]``; every ``@task`` there on the backend's alias gets a
handler for its job type, its module path.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterable, Mapping
from typing import Any

from django.apps import apps
from django.utils import timezone
from django.utils.module_loading import module_has_submodule

from golemq_pg import JobEvent, PostgresStore, TerminalJobError, Worker
from golemq_pg.contrib.django._results import RETURN_KEY, json_arguments
from golemq_pg.contrib.django._stores import StoreOptions, database_dsn
from golemq_pg.contrib.django._tasks_api import (
    InvalidTask,
    Task,
    TaskContext,
    TaskResult,
    TaskResultStatus,
    task_backends,
)
from golemq_pg.contrib.django.backend import GolemqBackend
from golemq_pg.contrib.django.middleware import ConnectionHygiene


def task_modules(extra: Iterable[str]) -> list[str]:
    """The modules holding tasks: each installed app's ``tasks`` (when it has one), then
    ``extra`` (``OPTIONS["modules"]``), in that order, without repeats."""
    names: list[str] = []
    for app in apps.get_app_configs():
        if module_has_submodule(app.module, "tasks"):
            names.append(f"{app.name}.tasks")
    names.extend(extra)
    return list(dict.fromkeys(names))


def discover_tasks(backend_alias: str, modules: Iterable[str]) -> dict[str, Task[..., Any]]:
    """Import ``modules`` and return their tasks on ``backend_alias`` by module path."""
    found: dict[str, Task[..., Any]] = {}
    for name in modules:
        module = importlib.import_module(name)
        for value in vars(module).values():
            if isinstance(value, Task) and value.backend == backend_alias:
                found.setdefault(value.module_path, value)
    return found


def golemq_backend(alias: str) -> GolemqBackend:
    """The configured backend ``TASKS[alias]``, which must be a GolemqBackend."""
    backend = task_backends[alias]
    if not isinstance(backend, GolemqBackend):
        raise InvalidTask(f"TASKS[{alias!r}] is not a golemq_pg.contrib.django.GolemqBackend")
    return backend


def build_worker(
    backend_alias: str = "default",
    *,
    queues: Iterable[str] = (),
    concurrency: int = 4,
    **worker_options: Any,
) -> Worker:
    """A Worker (on a store of its own) with a handler for every task of ``backend_alias``
    found by :func:`task_modules`; only those declared on ``queues`` when it is not empty.
    ``concurrency``: attempts of one task at once, and of all of them (``max_concurrency``).
    Django's connection hygiene (:class:`ConnectionHygiene`) is the outermost middleware."""
    backend = golemq_backend(backend_alias)
    options = backend.golemq_options
    wanted = set(queues)
    tasks = discover_tasks(backend_alias, task_modules(options.modules))
    middleware = [ConnectionHygiene(), *worker_options.pop("middleware", ())]
    worker = Worker(_worker_store(options, concurrency), max_concurrency=concurrency,
                    middleware=middleware, **worker_options)
    for module_path, task in sorted(tasks.items()):
        if wanted and task.queue_name not in wanted:
            continue
        worker.handler(module_path, concurrency=concurrency)(
            _async_handler(task, backend_alias, worker)
            if inspect.iscoroutinefunction(task.func)
            else _sync_handler(task, backend_alias, worker)
        )
    return worker


def _worker_store(options: StoreOptions, concurrency: int) -> PostgresStore:
    dsn = options.dsn if options.dsn is not None else database_dsn(options.database)
    return PostgresStore.connect(dsn, schema=options.schema, min_size=1,
                                 max_size=max(4, min(concurrency + 4, 32)))


def _sync_handler(task: Task[..., Any], alias: str, worker: Worker) -> Any:
    def run_task(job: JobEvent[dict[str, Any]]) -> dict[str, Any]:
        args, kwargs = _call_arguments(task, alias, worker, job)
        return _stored(task.func(*args, **kwargs))

    run_task.__qualname__ = run_task.__name__ = f"task:{task.module_path}"
    return run_task


def _async_handler(task: Task[..., Any], alias: str, worker: Worker) -> Any:
    async def run_task(job: JobEvent[dict[str, Any]]) -> dict[str, Any]:
        args, kwargs = _call_arguments(task, alias, worker, job)
        return _stored(await task.func(*args, **kwargs))

    run_task.__qualname__ = run_task.__name__ = f"task:{task.module_path}"
    return run_task


def _call_arguments(
    task: Task[..., Any], alias: str, worker: Worker, job: JobEvent[dict[str, Any]]
) -> tuple[list[Any], dict[str, Any]]:
    payload: Mapping[str, Any] = job.payload if isinstance(job.payload, dict) else {}
    args = list(payload.get("args", []))
    kwargs = dict(payload.get("kwargs", {}))
    if task.takes_context:
        now = timezone.now()
        result = TaskResult(
            task=task, id=job.id, status=TaskResultStatus.RUNNING,
            enqueued_at=job.enqueued_at, started_at=now, finished_at=None,
            last_attempted_at=now, args=args, kwargs=kwargs, backend=alias, errors=[],
            # The Tasks API counts attempts by these: context.attempt is the job's attempt.
            worker_ids=[worker.worker_id] * job.attempt,
        )
        args = [TaskContext(task_result=result), *args]
    return args, kwargs


def _stored(value: Any) -> dict[str, Any]:
    try:
        return {RETURN_KEY: json_arguments(value, "the task's return value")}
    except InvalidTask as exc:  # retrying returns the same value: fail the job now
        raise TerminalJobError(str(exc)) from exc
