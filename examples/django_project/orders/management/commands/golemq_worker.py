"""``python manage.py golemq_worker``: run the project's golemq-pg worker until SIGTERM."""

from typing import Any

from django.core.management.base import BaseCommand

from orders.jobs import build_worker


class Command(BaseCommand):
    """Run the order handlers; SIGINT/SIGTERM stop it gracefully (in-flight jobs finish)."""

    help = "Run the golemq-pg worker with this project's job handlers."

    def handle(self, *args: Any, **options: Any) -> None:
        """Build the worker (Django is set up: handlers may use the ORM) and run it."""
        worker = build_worker()
        self.stdout.write("golemq worker running; Ctrl-C stops it gracefully", ending="\n")
        self.stdout.flush()
        worker.run()
