"""The order model: placed by a request, confirmed by a job."""

from django.db import models


class Order(models.Model):
    """One order; ``status`` moves from pending to confirmed in the worker."""

    class Status(models.TextChoices):
        """Where an order is."""

        PENDING = "pending"
        CONFIRMED = "confirmed"

    item = models.CharField(max_length=100)
    quantity = models.PositiveIntegerField()
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING)
    created_at = models.DateTimeField(auto_now_add=True)
    confirmed_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"order {self.pk} ({self.status})"
