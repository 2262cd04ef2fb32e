"""URL routes of the shop example."""

from django.urls import path

from orders import views

urlpatterns = [
    path("orders/", views.create_order, name="create-order"),
    path("orders/<int:order_id>/", views.order_detail, name="order-detail"),
]
