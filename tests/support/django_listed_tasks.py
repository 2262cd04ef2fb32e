"""Tasks in a module that is no installed app's ``tasks``: the Django backend's tests name it
in ``OPTIONS["modules"]`` (tests/support/django_settings.py), so ``golemq_worker`` finds
them."""

from __future__ import annotations

from golemq_pg.contrib.django._tasks_api import task


@task
def listed(word: str) -> str:
    """Found only through ``OPTIONS["modules"]``."""
    return word.upper()
