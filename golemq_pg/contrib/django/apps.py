"""The Django app ``golemq_pg.contrib.django``: ``manage.py golemq_worker``, and golemq-pg's
migrations applied by ``manage.py migrate``."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class GolemqConfig(AppConfig):
    """Applies golemq-pg's migrations after ``migrate`` (``post_migrate``)."""

    name = "golemq_pg.contrib.django"
    label = "golemq_pg"
    verbose_name = "golemq-pg"

    def ready(self) -> None:
        """Connect the ``post_migrate`` hook: sent once per ``migrate`` for this app (it has
        a models module for that alone, see ``models.py``)."""
        post_migrate.connect(apply_queue_migrations, sender=self,
                             dispatch_uid="golemq_pg.migrate")


def apply_queue_migrations(sender: Any, *, using: str = "default", **kwargs: Any) -> None:
    """Create or upgrade the schema of every GolemqBackend in ``TASKS`` on database ``using``.

    golemq-pg keeps its own migration ledger, so a ``migrate`` with nothing new applies
    nothing. The store's connection commits apart from Django's (golemq-pg's migrations
    manage their own transactions).
    """
    del sender
    from golemq_pg.contrib.django._stores import shared_store  # noqa: PLC0415
    from golemq_pg.contrib.django._tasks_api import task_backends  # noqa: PLC0415
    from golemq_pg.contrib.django.backend import GolemqBackend  # noqa: PLC0415

    for backend in task_backends.all():
        if isinstance(backend, GolemqBackend):
            options = backend.golemq_options
            if options.dsn is None and options.database != using:
                continue
            shared_store(options).migrate()
