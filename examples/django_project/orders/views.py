"""JSON views: place an order, read it back."""

import json

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from orders.models import Order
from orders.services import place_order


@csrf_exempt  # a JSON API for the example; a browser-facing form keeps CSRF protection
@require_POST
def create_order(request: HttpRequest) -> HttpResponse:
    """``POST /orders/`` with ``{"item": str, "quantity": int}``: 201 with the ids."""
    try:
        body = json.loads(request.body)
        item, quantity = body["item"], body["quantity"]
    except (ValueError, KeyError, TypeError):
        return JsonResponse({"error": "expected {item, quantity}"}, status=400)
    if not isinstance(item, str) or not 0 < len(item) <= 100:
        return JsonResponse({"error": "item must be 1-100 characters"}, status=400)
    if not isinstance(quantity, int) or isinstance(quantity, bool) or quantity < 1:
        return JsonResponse({"error": "quantity must be a positive integer"}, status=400)
    order, job_id = place_order(item, quantity)
    return JsonResponse({"id": order.pk, "job_id": job_id, "status": order.status}, status=201)


@require_GET
def order_detail(request: HttpRequest, order_id: int) -> HttpResponse:
    """``GET /orders/<id>/``: the order and its status; 404 when unknown."""
    order = Order.objects.filter(pk=order_id).first()
    if order is None:
        return JsonResponse({"error": "no such order"}, status=404)
    return JsonResponse({"id": order.pk, "item": order.item, "quantity": order.quantity,
                         "status": order.status})
