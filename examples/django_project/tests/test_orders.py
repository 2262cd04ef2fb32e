"""Placing orders: the order row and its task commit together, and a worker process
confirms the order through the ORM. Real PostgreSQL, real transactions, a real worker."""

import json
import subprocess
import time
from typing import Any

import pytest
from django.db import transaction
from django.test import Client

from orders.models import Order
from orders.services import place_order
from orders.tasks import confirm_order

try:
    from django.tasks import TaskResultStatus
    from django.tasks.exceptions import TaskResultDoesNotExist
except ImportError:  # Django < 6.0: the django-tasks backport
    from django_tasks import TaskResultStatus  # type: ignore[assignment]
    from django_tasks.exceptions import (  # type: ignore[assignment]
        TaskResultDoesNotExist,
    )

# Transactional tests: Django commits for real, so other connections (the backend's pool,
# the worker process) see exactly what a production request would have committed.
pytestmark = pytest.mark.django_db(transaction=True)


class PaymentDeclinedError(Exception):
    """Something failing later in the caller's transaction."""


def finished(result_id: str, timeout: float = 30) -> Any:
    """The task's result once it is SUCCESSFUL or FAILED."""
    deadline = time.monotonic() + timeout
    while True:
        result = confirm_order.get_result(result_id)
        if result.is_finished:
            return result
        assert time.monotonic() < deadline, f"task {result_id} still {result.status}"
        time.sleep(0.1)


def test_the_task_is_enqueued_inside_djangos_own_transaction() -> None:
    with transaction.atomic():
        _order, result_id = place_order("book", 1)
        # Written on Django's connection: the backend's own pool cannot see it yet.
        with pytest.raises(TaskResultDoesNotExist):
            confirm_order.get_result(result_id)
    assert confirm_order.get_result(result_id).status == TaskResultStatus.READY


def test_a_rolled_back_order_leaves_neither_the_row_nor_the_task() -> None:
    placed: list[tuple[Order, str]] = []

    def checkout() -> None:
        with transaction.atomic():
            placed.append(place_order("book", 2))
            raise PaymentDeclinedError

    with pytest.raises(PaymentDeclinedError):
        checkout()
    [(order, result_id)] = placed
    assert not Order.objects.filter(pk=order.pk).exists()
    with pytest.raises(TaskResultDoesNotExist):
        confirm_order.get_result(result_id)


def test_a_placed_order_commits_with_its_ready_task(client: Client) -> None:
    response = client.post("/orders/", json.dumps({"item": "lamp", "quantity": 3}),
                           content_type="application/json")
    assert response.status_code == 201
    body = response.json()
    order = Order.objects.get(pk=body["id"])
    assert (order.item, order.quantity, order.status) == ("lamp", 3, Order.Status.PENDING)
    result = confirm_order.get_result(body["job_id"])
    assert result.status == TaskResultStatus.READY
    assert result.args == [order.pk]


def test_a_bad_order_is_refused_and_enqueues_nothing(client: Client) -> None:
    response = client.post("/orders/", json.dumps({"item": "lamp", "quantity": 0}),
                           content_type="application/json")
    assert response.status_code == 400
    assert not Order.objects.exists()
    assert "job_id" not in response.json()


def test_the_worker_process_confirms_the_order_through_the_orm(
    client: Client, worker_process: subprocess.Popen[bytes]
) -> None:
    created = client.post("/orders/", json.dumps({"item": "chair", "quantity": 1}),
                          content_type="application/json").json()
    result = finished(created["job_id"])
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == {"status": "confirmed"}
    order = Order.objects.get(pk=created["id"])
    assert order.status == Order.Status.CONFIRMED
    assert order.confirmed_at is not None
    assert client.get(f"/orders/{order.pk}/").json()["status"] == "confirmed"


def test_a_task_for_a_missing_order_fails_without_retrying(
    worker_process: subprocess.Popen[bytes],
) -> None:
    result = finished(confirm_order.enqueue(2**62).id)
    assert result.status == TaskResultStatus.FAILED
    assert result.attempts == 1
    [error] = result.errors
    assert "order not found" in error.traceback
