"""Placing orders: the order row and its job commit together, and a worker process
confirms the order through the ORM. Real PostgreSQL, real transactions, a real worker."""

import json
import subprocess

import psycopg
import pytest
from django.db import connection, transaction
from django.test import Client

from golemq_pg import JobStatus, Queue
from orders.jobs import OrderConfirm
from orders.models import Order
from orders.services import place_order
from shop.jobqueue import get_queue, get_store

# Transactional tests: Django commits for real, so other connections (the store's pool, the
# worker process) see exactly what a production request would have committed.
pytestmark = pytest.mark.django_db(transaction=True)


class PaymentDeclinedError(Exception):
    """Something failing later in the caller's transaction."""


def test_the_job_is_written_inside_djangos_own_transaction() -> None:
    with transaction.atomic():
        order, job_id = place_order("book", 1)
        django_conn = connection.connection
        assert isinstance(django_conn, psycopg.Connection)  # Django's psycopg 3 backend
        # On Django's connection the job is there; from any other connection it is not yet.
        assert Queue(get_store().with_connection(django_conn)).get(job_id) is not None
        assert get_queue().get(job_id) is None
    committed = get_queue().get(job_id)
    assert committed is not None
    assert committed.scope == ("Order", str(order.pk))


def test_a_rolled_back_order_leaves_neither_the_row_nor_the_job() -> None:
    placed: list[tuple[Order, str]] = []

    def checkout() -> None:
        with transaction.atomic():
            placed.append(place_order("book", 2))
            raise PaymentDeclinedError

    with pytest.raises(PaymentDeclinedError):
        checkout()
    [(order, job_id)] = placed
    assert not Order.objects.filter(pk=order.pk).exists()
    assert get_queue().get(job_id) is None
    assert get_queue().find_for_scope(("Order", str(order.pk))) == []


def test_a_placed_order_commits_with_its_pending_job(client: Client) -> None:
    response = client.post("/orders/", json.dumps({"item": "lamp", "quantity": 3}),
                           content_type="application/json")
    assert response.status_code == 201
    body = response.json()
    order = Order.objects.get(pk=body["id"])
    assert (order.item, order.quantity, order.status) == ("lamp", 3, Order.Status.PENDING)
    job = get_queue().get(body["job_id"])
    assert job is not None
    assert (job.type, job.status, job.scope) == (
        "order.confirm", JobStatus.PENDING, ("Order", str(order.pk))
    )


def test_a_bad_order_is_refused_and_enqueues_nothing(client: Client) -> None:
    jobs_before = len(get_queue().find(types=["order.confirm"], limit=10_000))
    response = client.post("/orders/", json.dumps({"item": "lamp", "quantity": 0}),
                           content_type="application/json")
    assert response.status_code == 400
    assert not Order.objects.exists()
    assert len(get_queue().find(types=["order.confirm"], limit=10_000)) == jobs_before


def test_the_worker_process_confirms_the_order_through_the_orm(
    client: Client, worker_process: subprocess.Popen[bytes]
) -> None:
    created = client.post("/orders/", json.dumps({"item": "chair", "quantity": 1}),
                          content_type="application/json").json()
    done = get_queue().wait(created["job_id"], timeout=30)
    assert done.status is JobStatus.SUCCEEDED
    assert done.result == {"status": "confirmed"}
    order = Order.objects.get(pk=created["id"])
    assert order.status == Order.Status.CONFIRMED
    assert order.confirmed_at is not None
    assert client.get(f"/orders/{order.pk}/").json()["status"] == "confirmed"


def test_a_job_for_a_missing_order_fails_without_retrying(
    worker_process: subprocess.Popen[bytes],
) -> None:
    job_id = get_queue().add(OrderConfirm, {"order_id": 2**62})
    assert job_id is not None
    done = get_queue().wait(job_id, timeout=30)
    assert done.status is JobStatus.FAILED
    assert done.attempts == 1
    assert done.last_error is not None
    assert "order not found" in done.last_error
