"""The producer and administration API: ``Queue`` (and the method table it shares with
``AsyncQueue``).

Every method is a plan of ``_queue_plans`` / ``_queue_control`` (validation before any SQL,
the store call, the decoded result), declared once in :class:`QueueMethods` for both the
synchronous ``Queue`` and the asyncio ``AsyncQueue`` (``golemq_pg.async_queue``). Bad input
raises ``ValueError`` (or ``QueuePayloadError`` for payloads) and changes nothing.
"""

from __future__ import annotations

from golemq_pg import _queue_control as control
from golemq_pg import _queue_plans as plans
from golemq_pg._queue_core import QueueMethod, SyncRunner, sync_method
from golemq_pg.store.port import JobStore


class QueueMethods:
    """Every method of ``Queue`` and ``AsyncQueue`` but ``add`` and ``add_many`` (whose
    typing overloads each class declares itself): on a ``Queue`` each returns its value, on
    an ``AsyncQueue`` a coroutine of it. The docstrings are the plans'."""

    # -- schedules
    schedule = QueueMethod(plans.schedule)
    unschedule = QueueMethod(plans.unschedule)
    schedules = QueueMethod(plans.schedules)
    # -- cancellation
    cancel_for_scope = QueueMethod(control.cancel_for_scope)
    cancel_pending_for_scope = QueueMethod(control.cancel_pending_for_scope)
    cancel_by_dedupe_keys = QueueMethod(control.cancel_by_dedupe_keys)
    cancel = QueueMethod(control.cancel)
    # -- inspection and administration
    get = QueueMethod(plans.get)
    wait = QueueMethod(plans.wait)
    find_for_scope = QueueMethod(plans.find_for_scope)
    find = QueueMethod(plans.find)
    workers = QueueMethod(plans.workers)
    count_by_status = QueueMethod(plans.count_by_status)
    stats = QueueMethod(plans.stats)
    retry_failed = QueueMethod(plans.retry_failed)
    prune = QueueMethod(plans.prune)
    # -- control of single jobs and of types
    pause = QueueMethod(control.pause)
    resume = QueueMethod(control.resume)
    paused = QueueMethod(control.paused)
    retry = QueueMethod(control.retry)
    run_now = QueueMethod(control.run_now)


class Queue(SyncRunner[JobStore], QueueMethods):
    """Enqueue, schedule, cancel and inspect jobs through a :class:`JobStore`.

    ``Queue(store, *, default_max_attempts=3, observers=())``; observers see "enqueued" and
    "cancelled" transitions. ``wait`` blocks the calling thread.
    """

    add = sync_method(plans.add)
    add_many = sync_method(plans.add_many)


__all__ = ["Queue", "QueueMethods"]
