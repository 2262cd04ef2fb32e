"""Placing an order: the row and its confirmation task commit together or not at all."""

from django.db import transaction

from orders.models import Order
from orders.tasks import confirm_order


def place_order(item: str, quantity: int) -> tuple[Order, str]:
    """Create an order and enqueue its confirmation in one transaction; returns the order
    and the task result's id.

    The backend writes the job on Django's own connection, so it is part of this
    ``atomic()`` block, or of the caller's if it is nested in one: if that rolls back,
    neither the order nor the job exists, and a worker never sees a job whose order is not
    committed yet.
    """
    with transaction.atomic():
        order = Order.objects.create(item=item, quantity=quantity)
        result = confirm_order.enqueue(order.pk)
    return order, result.id
