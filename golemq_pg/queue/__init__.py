"""The producer and administration API: :class:`Queue` and its asyncio twin
:class:`AsyncQueue` (both re-exported by ``golemq_pg``).

Every method is written once, as a plan (``plans``: enqueue, schedules, inspection;
``control``: cancellation, pause / resume, retry and run-now of one job), declared once for
both classes in ``methods``; ``core`` turns a plan into a method of either class. Every
module in this package but this one is private.
"""

from golemq_pg.queue.async_queue import AsyncQueue
from golemq_pg.queue.sync_queue import Queue

__all__ = ["AsyncQueue", "Queue"]
