"""golemq-pg for Django: a backend of Django's Tasks API and the worker that runs it.

``TASKS = {"default": {"BACKEND": "golemq_pg.contrib.django.GolemqBackend", ...}}`` and
``"golemq_pg.contrib.django"`` in ``INSTALLED_APPS`` (``manage.py golemq_worker``; ``migrate``
applies golemq-pg's migrations). Django >= 6.0 has the API as ``django.tasks``; on Django
4.2-5.2 install the ``django-tasks`` backport (``pip install 'golemq-pg[django]'``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from golemq_pg.contrib.django._stores import close_stores
    from golemq_pg.contrib.django.backend import GolemqBackend
    from golemq_pg.contrib.django.middleware import ConnectionHygiene

#: Imported on first use: Django imports this package (INSTALLED_APPS) before its settings
#: and apps are ready, and the Tasks API may only be imported then.
_EXPORTS = {
    "ConnectionHygiene": "golemq_pg.contrib.django.middleware",
    "GolemqBackend": "golemq_pg.contrib.django.backend",
    "close_stores": "golemq_pg.contrib.django._stores",
}

__all__ = ["ConnectionHygiene", "GolemqBackend", "close_stores"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
