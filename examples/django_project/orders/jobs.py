"""The order jobs: their typed declarations, their handlers (ORM code) and the worker."""

from typing import TypedDict

from django.db import close_old_connections, transaction
from django.utils import timezone

from golemq_pg import JobEvent, JobType, TerminalJobError, Worker
from orders.models import Order
from shop.jobqueue import get_store


class ConfirmPayload(TypedDict):
    """What ``order.confirm`` carries: the order's primary key, nothing else."""

    order_id: int


OrderConfirm = JobType("order.confirm", ConfirmPayload)


def confirm_order(job: JobEvent[ConfirmPayload]) -> dict[str, str]:
    """Mark the order confirmed (idempotent: a retry of a confirmed order changes nothing)."""
    # Worker threads are not requests: give them Django's per-request connection hygiene
    # (drop a connection past CONN_MAX_AGE or broken) before and after each job.
    close_old_connections()
    try:
        with transaction.atomic():
            order = Order.objects.select_for_update().filter(pk=job.payload["order_id"]).first()
            if order is None:
                # Gone (deleted after it was placed): retrying cannot help.
                raise TerminalJobError("order not found")
            if order.status != Order.Status.CONFIRMED:
                order.status = Order.Status.CONFIRMED
                order.confirmed_at = timezone.now()
                order.save(update_fields=["status", "confirmed_at"])
        return {"status": str(order.status)}  # a plain str: results are JSON
    finally:
        close_old_connections()


def build_worker() -> Worker:
    """A Worker on the project's store with the order handlers registered."""
    worker = Worker(get_store())
    worker.handler(OrderConfirm, concurrency=4, timeout=30)(confirm_order)
    return worker
