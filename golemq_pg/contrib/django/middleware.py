"""Django's connection hygiene around every job, as a worker middleware.

A worker thread is not a request: nothing calls ``close_old_connections()`` for it, so a
connection past ``CONN_MAX_AGE``, or broken, would be reused by the next job. This does what
Django's request signals do, before and after each attempt.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.db import close_old_connections

E = TypeVar("E")


class ConnectionHygiene:
    """``close_old_connections()`` before and after each attempt, for sync handlers (on the
    handler's thread) and ``async def`` ones (on the thread Django runs their ORM calls on,
    through ``sync_to_async``)."""

    def around(self, job: E, call_next: Callable[[E], Any]) -> Any:
        """Run a sync handler's attempt between two ``close_old_connections()``."""
        close_old_connections()
        try:
            return call_next(job)
        finally:
            close_old_connections()

    async def around_async(self, job: E, call_next: Callable[[E], Awaitable[Any]]) -> Any:
        """Run an ``async def`` handler's attempt between two ``close_old_connections()``."""
        await sync_to_async(close_old_connections)()
        try:
            return await call_next(job)
        finally:
            await sync_to_async(close_old_connections)()
