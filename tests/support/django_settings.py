"""Django settings of the Django backend's tests (tests/integration/test_django_backend.py;
pytest-django reads them through ``DJANGO_SETTINGS_MODULE`` in pyproject.toml).

The database is the suite's PostgreSQL (``tests.plugins.database.suite_dsn``) under the name
``golemq_django``; pytest-django creates and drops ``test_golemq_django_<pid>`` from it. A worker
process started by the tests gets the test database's DSN in ``$GOLEMQ_DJANGO_DSN``.
"""

import os

from psycopg.conninfo import conninfo_to_dict

from golemq_pg.pytest_plugin import find_dsn

_given = os.environ.get("GOLEMQ_DJANGO_DSN")
_db = conninfo_to_dict(_given or find_dsn(local=("postgresql://postgres@127.0.0.1:5432/test",)))
if not _given:
    _db["dbname"] = "golemq_django"

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _db["dbname"],
        "USER": _db.get("user", ""),
        "PASSWORD": _db.get("password", ""),
        "HOST": _db.get("host", ""),
        "PORT": _db.get("port", ""),
        # Django's defaults for psycopg 3 (client-side binding cursors, jsonb read as text)
        # are what the backend must work with when it enqueues on Django's connection.
        "OPTIONS": {},
        # One test database per run (pytest-django creates and drops it): two suites on one
        # server (a developer's and CI's) never drop each other's.
        "TEST": {"NAME": f"test_golemq_django_{os.getpid()}"},
    }
}

_BACKPORT = ["django_tasks"]
try:
    import django.tasks  # noqa: F401 - Django >= 6.0 has the Tasks API built in
except ImportError:
    pass
else:
    _BACKPORT = []

INSTALLED_APPS = [*_BACKPORT, "golemq_pg.contrib.django", "tests.support.django_tasks_app"]

TASKS = {
    "default": {
        "BACKEND": "golemq_pg.contrib.django.GolemqBackend",
        "QUEUES": ["default", "ordered", "drain", "hygiene", "pool"],
        # Two attempts keep the failing task's retries short (the default is three).
        "OPTIONS": {"schema": "golemq_dj", "max_attempts": 2,
                    # tasks outside an installed app's tasks module
                    "modules": ["tests.support.django_listed_tasks"]},
    }
}

SECRET_KEY = "tests-only"  # noqa: S105 - a test settings module
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
