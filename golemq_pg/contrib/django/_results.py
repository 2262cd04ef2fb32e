"""A golemq-pg job read back as a Tasks API ``TaskResult``, and what a task's job carries.

The job's payload is ``{"args": [...], "kwargs": {...}, "queue_name": str}``; its type is the
task's module path; a successful attempt stores ``{"return_value": value}`` (wrapped: the
worker reads a bare ``True``/``False`` as an outcome, and ``None`` would store nothing).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import orjson
from django.utils.module_loading import import_string

from golemq_pg import AttemptError, JobStatus, JobSummary
from golemq_pg.contrib.django._tasks_api import (
    InvalidTask,
    Task,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
)

#: The key of a successful attempt's stored result.
RETURN_KEY = "return_value"
#: Where a failed attempt without a traceback (a timeout, a lost lease) says it came from.
_NO_TRACEBACK_CLASS = "builtins.Exception"

_STATUSES: Mapping[JobStatus, TaskResultStatus] = {
    JobStatus.PENDING: TaskResultStatus.READY,
    JobStatus.WAITING: TaskResultStatus.READY,
    JobStatus.RUNNING: TaskResultStatus.RUNNING,
    JobStatus.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    JobStatus.FAILED: TaskResultStatus.FAILED,
}


def task_status(status: JobStatus) -> TaskResultStatus:
    """The Tasks API status of a job status (waiting and pending are both READY)."""
    return _STATUSES[status]


def json_arguments(value: Any, where: str) -> Any:
    """``value`` as plain JSON data (tuples become lists), else ``InvalidTask`` naming
    ``where``; never quoting the value (it may be private)."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidTask(f"{where}: a non-finite float is not JSON")
        return value
    if isinstance(value, list | tuple):
        return [json_arguments(item, where) for item in value]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidTask(f"{where}: dict keys must be strings to be JSON")
            out[key] = json_arguments(item, where)
        return out
    raise InvalidTask(f"{where}: a {type(value).__name__} is not JSON")


def exception_class_path(attempt: AttemptError) -> str:
    """The dotted path of the exception an attempt raised, read from the exception line of
    its traceback (the first unindented line after the last "Traceback" header)."""
    if not attempt.traceback:
        return _NO_TRACEBACK_CLASS
    lines = attempt.traceback.splitlines()
    start = max((i for i, line in enumerate(lines) if line.startswith("Traceback ")),
                default=-1)
    for line in lines[start + 1:]:
        if line and not line[0].isspace():
            name = line.partition(":")[0].strip()
            if name.replace(".", "").replace("_", "").isalnum():
                return name if "." in name else f"builtins.{name}"
            break
    return _NO_TRACEBACK_CLASS


def load_task(module_path: str) -> Task[..., Any]:
    """The ``@task`` object at ``module_path`` (a job's type); ``TaskResultDoesNotExist``
    when it is not one (its code moved, or the job is not a task's)."""
    try:
        found = import_string(module_path)
    except ImportError:
        raise TaskResultDoesNotExist(f"no task at {module_path!r}") from None
    if not isinstance(found, Task):
        raise TaskResultDoesNotExist(f"{module_path!r} is not a task")
    return found


def task_result(job: JobSummary, payload: bytes | None, backend: str) -> TaskResult[..., Any]:
    """The ``TaskResult`` of a job (its payload read apart: summaries carry none)."""
    data: Any = orjson.loads(payload) if payload else {}
    if not isinstance(data, dict):
        data = {}
    task = load_task(job.type)
    queue_name = data.get("queue_name")
    if isinstance(queue_name, str) and queue_name and queue_name != task.queue_name:
        task = _task_as(task, queue_name=queue_name, priority=job.priority)
    elif job.priority != task.priority:
        task = _task_as(task, priority=job.priority)
    errors = [TaskError(exception_class_path=exception_class_path(e),
                        traceback=e.traceback or e.error) for e in job.errors]
    # One entry per attempt started (the Tasks API counts attempts by them); the worker of
    # an attempt that did not fail is not recorded, so it reads as "".
    by_attempt = {e.attempt: e.worker_id or "" for e in job.errors}
    worker_ids = [by_attempt.get(n, "") for n in range(1, job.attempts + 1)]
    args, kwargs = data.get("args", []), data.get("kwargs", {})
    result = TaskResult(
        task=task,
        id=job.id,
        status=task_status(job.status),
        enqueued_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        last_attempted_at=job.started_at or (job.errors[-1].at if job.errors else None),
        args=args if isinstance(args, list) else [],
        kwargs=kwargs if isinstance(kwargs, dict) else {},
        backend=backend,
        errors=errors,
        worker_ids=worker_ids,
    )
    if job.status is JobStatus.SUCCEEDED and isinstance(job.result, dict):
        # TaskResult is frozen; its own backends set the return value the same way.
        object.__setattr__(result, "_return_value", job.result.get(RETURN_KEY))
    return result


def _task_as(task: Task[..., Any], **changes: Any) -> Task[..., Any]:
    """The task with the queue / priority its job was enqueued with (``Task.using`` validates
    again, against this process's settings: a queue no longer listed keeps the task's)."""
    try:
        return task.using(**changes)
    except InvalidTask:
        return task
