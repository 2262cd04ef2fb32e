"""Placing an order: the row and its confirmation job commit together or not at all."""

from django.db import connection, transaction

from orders.jobs import OrderConfirm
from orders.models import Order
from shop.jobqueue import get_queue


def place_order(item: str, quantity: int) -> tuple[Order, str]:
    """Create an order and enqueue its confirmation in one transaction; returns both ids.

    The job is written on Django's own psycopg connection (``connection.connection``), so
    it is part of this ``atomic()`` block, or of the caller's if it is nested in one: if
    that rolls back, neither the order nor the job exists, and a worker never sees a job
    whose order is not committed yet.
    """
    with transaction.atomic():
        order = Order.objects.create(item=item, quantity=quantity)
        job_id = get_queue().add(
            OrderConfirm,
            {"order_id": order.pk},
            scope=("Order", str(order.pk)),
            connection=connection.connection,
        )
    if job_id is None:  # only an add with a dedupe_key can be rejected; this one has none
        raise RuntimeError("the confirmation job was rejected as a duplicate")
    return order, job_id
