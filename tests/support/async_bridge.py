"""Calling the asyncio producer from synchronous tests: an event loop in a thread, and two
thin facades that send every call through the real async path.

* :class:`LoopThread`: one event loop running in a daemon thread; ``run(coro)`` waits for
  a coroutine scheduled on it (from any thread).
* :class:`AsyncPort`: the ``JobStore`` port whose producer and dashboard verbs (every
  coroutine method of ``AsyncPostgresStore``: the plans on the asyncio executor) run on an
  ``AsyncPostgresStore`` and whose consumer verbs (claim, complete, leases, ...) run on a
  ``PostgresStore`` of the same schema: the contract suite then checks the async verbs.
* :class:`SyncFacade`: any ``AsyncQueue`` method called synchronously (``await`` on the loop).
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from golemq_pg import AsyncPostgresStore, AsyncQueue, PostgresStore

T = TypeVar("T")


class LoopThread:
    """An event loop in a daemon thread (see the module docstring)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 120) -> T:
        """Run ``coro`` on the loop and return its result (or raise its exception)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        """Stop the loop and its thread."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


class AsyncPort:
    """The port, producer verbs on the async store, the rest on the sync one."""

    def __init__(self, loop: LoopThread, astore: AsyncPostgresStore, sync: PostgresStore) -> None:
        self._loop = loop
        self.astore = astore
        self.sync = sync

    def __getattr__(self, name: str) -> Any:
        if inspect.iscoroutinefunction(getattr(AsyncPostgresStore, name, None)):
            method = getattr(self.astore, name)

            def verb(*args: Any, **kwargs: Any) -> Any:
                return self._loop.run(method(*args, **kwargs))

            return verb
        return getattr(self.sync, name)

    @property
    def identity(self) -> tuple[str, ...]:
        """The async store's identity (equal to the sync store's: one queue)."""
        return self.astore.identity


class SyncFacade:
    """An ``AsyncQueue`` whose methods are called as plain functions (awaited on the loop)."""

    def __init__(self, loop: LoopThread, queue: AsyncQueue) -> None:
        self._loop = loop
        self.queue = queue
        self.store = queue.store

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.queue, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._loop.run(method(*args, **kwargs))

        return call
