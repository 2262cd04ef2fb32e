"""The orders app."""

from django.apps import AppConfig


class OrdersConfig(AppConfig):
    """Orders placed through the web and confirmed by a golemq-pg job."""

    name = "orders"
    default_auto_field = "django.db.models.BigAutoField"
