"""Django's Tasks API, from wherever this Django has it.

Django >= 6.0 ships it as ``django.tasks``; on Django 4.2-5.2 the ``django-tasks`` backport
provides the same API as ``django_tasks`` (its exception classes carry an ``Error`` suffix
there). Everything else in this package imports the API from here, so the choice is made
once. The types are checked against ``django.tasks`` (django-stubs), the documented path.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django.tasks import (
        Task,
        TaskContext,
        TaskResult,
        TaskResultStatus,
        task,
        task_backends,
    )
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
else:

    def _package() -> tuple[str, bool]:
        try:
            importlib.import_module("django.tasks")
        except ImportError:
            return "django_tasks", True
        return "django.tasks", False

    _NAME, _BACKPORT = _package()
    _api: Any = importlib.import_module(_NAME)
    _base: Any = importlib.import_module(f"{_NAME}.base")
    _exceptions: Any = importlib.import_module(f"{_NAME}.exceptions")
    BaseTaskBackend = importlib.import_module(f"{_NAME}.backends.base").BaseTaskBackend
    Task = _api.Task if hasattr(_api, "Task") else _base.Task
    TaskContext = _api.TaskContext
    TaskError = _base.TaskError
    TaskResult = _api.TaskResult
    TaskResultStatus = _api.TaskResultStatus
    task_backends = _api.task_backends
    task = _api.task
    InvalidTask = _exceptions.InvalidTaskError if _BACKPORT else _exceptions.InvalidTask
    TaskResultDoesNotExist = _exceptions.TaskResultDoesNotExist

__all__ = [
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "task",
    "task_backends",
]
