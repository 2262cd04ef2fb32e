"""The one method table of ``Queue`` and ``AsyncQueue``: every plan of ``queue.plans`` and
``queue.control`` declared once as a method of both classes (see ``queue.core``)."""

from __future__ import annotations

from golemq_pg.queue import control, plans
from golemq_pg.queue.core import QueueMethod


class QueueMethods:
    """Every method of ``Queue`` and ``AsyncQueue`` but ``add`` and ``add_many`` (whose
    typing overloads each class declares itself): on a ``Queue`` each returns its value, on
    an ``AsyncQueue`` a coroutine of it. The docstrings are the plans'."""

    # -- schedules
    schedule = QueueMethod(plans.schedule)
    unschedule = QueueMethod(plans.unschedule)
    schedules = QueueMethod(plans.schedules)
    run_schedule_now = QueueMethod(plans.run_schedule_now)
    pause_schedule = QueueMethod(plans.pause_schedule)
    resume_schedule = QueueMethod(plans.resume_schedule)
    # -- cancellation
    cancel_for_scope = QueueMethod(control.cancel_for_scope)
    cancel_pending_for_scope = QueueMethod(control.cancel_pending_for_scope)
    cancel_by_dedupe_keys = QueueMethod(control.cancel_by_dedupe_keys)
    cancel = QueueMethod(control.cancel)
    cancel_workflow = QueueMethod(control.cancel_workflow)
    delete = QueueMethod(control.delete)
    # -- workflows
    add_workflow = QueueMethod(plans.add_workflow)
    add_workflows = QueueMethod(plans.add_workflows)
    workflow = QueueMethod(plans.workflow)
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
    requeue_stale = QueueMethod(control.requeue_stale)


__all__ = ["QueueMethods"]
