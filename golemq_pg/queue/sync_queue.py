"""``Queue``: the producer and administration API for synchronous code.

Every method is a plan of ``queue.plans`` / ``queue.control`` (validation before any SQL,
the store call, the decoded result), declared once in
:class:`~golemq_pg.queue.methods.QueueMethods` for both the synchronous ``Queue`` and the
asyncio ``AsyncQueue`` (``queue.async_queue``). Bad input raises ``ValueError`` (or
``QueuePayloadError`` for payloads) and changes nothing.
"""

from __future__ import annotations

from golemq_pg.queue import plans
from golemq_pg.queue.core import SyncRunner, sync_method
from golemq_pg.queue.methods import QueueMethods
from golemq_pg.store.port import JobStore


class Queue(SyncRunner[JobStore], QueueMethods):
    """Enqueue, schedule, cancel and inspect jobs through a :class:`JobStore`.

    ``Queue(store, *, default_max_attempts=3, observers=())``; ``default_max_attempts``: an
    int or ``UNLIMITED``, the budget of jobs added without one. Observers see "enqueued"
    and "cancelled" transitions. ``wait`` blocks the calling thread.
    """

    add = sync_method(plans.add)
    add_many = sync_method(plans.add_many)


__all__ = ["Queue"]
