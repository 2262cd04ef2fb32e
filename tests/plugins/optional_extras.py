"""What the suite needs when an optional extra is missing.

``pip install -e '.[dev]'`` runs the whole default suite; the tests of an optional
integration skip with the extra that adds them (``examples`` for Django and pytest-django,
``bench`` for the harness's peers). pyproject.toml keeps pytest-django's settings
(``DJANGO_SETTINGS_MODULE``, ``django_find_project``) for the runs that have it; without
pytest-django they are registered here, so pytest does not warn of unknown options.
"""

from __future__ import annotations

import importlib.util

import pytest

#: The ini keys of pytest-django that pyproject.toml sets.
DJANGO_INI_KEYS = ("DJANGO_SETTINGS_MODULE", "django_find_project")


def pytest_addoption(parser: pytest.Parser) -> None:
    """Declares pytest-django's keys when pytest-django is not there to declare them."""
    if importlib.util.find_spec("pytest_django") is not None:
        return
    for key in DJANGO_INI_KEYS:
        parser.addini(key, f"pytest-django's {key} (unused: pytest-django is not installed)")
