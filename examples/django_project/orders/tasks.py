"""The order tasks (Django's Tasks API, run by golemq-pg): ``manage.py golemq_worker`` finds
them here, in the app's ``tasks`` module."""

from django.db import transaction
from django.utils import timezone

from golemq_pg import TerminalJobError
from orders.models import Order

try:
    from django.tasks import task
except ImportError:  # Django < 6.0: the django-tasks backport
    from django_tasks import task  # type: ignore[no-redef]


@task
def confirm_order(order_id: int) -> dict[str, str]:
    """Mark the order confirmed (idempotent: a retry of a confirmed order changes nothing).

    The worker closes stale Django connections before and after each task, as a request
    would; the task itself is plain ORM code.
    """
    with transaction.atomic():
        order = Order.objects.select_for_update().filter(pk=order_id).first()
        if order is None:
            # Gone (deleted after it was placed): retrying cannot help, so fail it now.
            raise TerminalJobError("order not found")
        if order.status != Order.Status.CONFIRMED:
            order.status = Order.Status.CONFIRMED
            order.confirmed_at = timezone.now()
            order.save(update_fields=["status", "confirmed_at"])
    return {"status": str(order.status)}  # a plain str: results are JSON
