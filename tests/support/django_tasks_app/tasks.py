"""Tasks run by a real ``manage.py golemq_worker`` in the Django backend's tests."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from golemq_pg.contrib.django._tasks_api import TaskContext, task


class LedgerError(Exception):
    """What the failing task raises (a class of this module: its path is checked)."""


@task
def describe(a: int, b: int, *, label: str) -> dict[str, Any]:
    """Echo what it was called with."""
    return {"sum": a + b, "label": label}


@task
def explode(reason: str) -> None:
    """Always raise."""
    raise LedgerError(f"exploded: {reason}")


@task(takes_context=True)
def flaky(context: TaskContext[Any, Any], succeed_on: int) -> int:
    """Fail until attempt ``succeed_on``; return the attempt it succeeded on."""
    if context.attempt < succeed_on:
        raise RuntimeError(f"attempt {context.attempt} fails")
    return context.attempt


@task
async def add_async(a: int, b: int) -> int:
    """An ``async def`` task."""
    await asyncio.sleep(0.01)
    return a + b


@task
def returns_false() -> bool:
    """A task whose return value golemq-pg alone would read as a failed attempt."""
    return False


@task(queue_name="ordered", priority=-10)
def ordered(name: str) -> str:
    """Run by the priority test's own worker (queue "ordered")."""
    return name


@task(queue_name="drain")
def slow(seconds: float) -> str:
    """Run by the SIGTERM test's own worker (queue "drain"): still running when it stops."""
    time.sleep(seconds)
    return "finished"


@task(queue_name="hygiene")
def database_backend() -> int:
    """The PostgreSQL backend pid of Django's connection in the handler thread (run by the
    connection-hygiene test's own worker, queue "hygiene")."""
    from django.db import connection  # noqa: PLC0415

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        row = cursor.fetchone()
    return int(row[0])


@task(queue_name="pool")
def worker_process(pause: float) -> int:
    """The worker process's pid, after ``pause`` seconds (queue "pool": the --processes
    test's own worker)."""
    time.sleep(pause)
    return os.getpid()
