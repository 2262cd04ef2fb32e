"""``AsyncQueue``: the ``Queue`` API for asyncio applications, every method a coroutine.

Same methods, arguments, validation, errors and return values as :class:`golemq_pg.Queue`:
both run the same plans (``golemq_pg.queue.plans``), declared once in
:class:`golemq_pg.queue.methods.QueueMethods`; here each store call is awaited on an
:class:`~golemq_pg.AsyncPostgresStore`. ``connection=`` on ``add`` / ``add_many`` takes a
``psycopg.AsyncConnection``: the job commits (or rolls back) with the caller's transaction.
An ``AsyncQueue`` over a synchronous store (an ``InMemoryStore`` in tests) runs each store
call in a worker thread.
"""

from __future__ import annotations

from golemq_pg.queue import plans
from golemq_pg.queue.core import AsyncRunner, async_method
from golemq_pg.queue.methods import QueueMethods
from golemq_pg.store.port import JobStore
from golemq_pg.store.postgres import AsyncPostgresStore


class AsyncQueue(AsyncRunner[AsyncPostgresStore | JobStore], QueueMethods):
    """Enqueue, schedule, cancel, wait for and inspect jobs from asyncio code.

    ``AsyncQueue(store, *, default_max_attempts=3, observers=())`` with an
    ``AsyncPostgresStore`` (or a synchronous ``JobStore``: each call then runs in a thread);
    ``default_max_attempts``: an int or ``UNLIMITED``, the budget of jobs added without one.
    ``await queue.wait(job_id)``: every task waiting on one store shares one LISTEN
    connection and holds no pooled connection while it waits.
    """

    add = async_method(plans.add)
    add_many = async_method(plans.add_many)


__all__ = ["AsyncQueue"]
