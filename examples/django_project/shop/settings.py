"""Settings of the shop example: one PostgreSQL database for the app and its queue.

The database comes from ``$GOLEMQ_DSN`` (a libpq URI or key=value string), the same variable
the ``golemq-pg`` command line reads, so ``golemq-pg stats`` looks at this project's queue.
"""

import os

from psycopg.conninfo import conninfo_to_dict

GOLEMQ_DSN = os.environ.get("GOLEMQ_DSN", "postgresql://postgres@127.0.0.1:5432/shop")
# The queue's tables live in their own schema, next to Django's tables in `public`.
GOLEMQ_SCHEMA = os.environ.get("GOLEMQ_SCHEMA", "golemq")

_db = conninfo_to_dict(GOLEMQ_DSN)
# Everything else in the DSN (sslmode, connect_timeout, ...) goes to psycopg as it is.
_LIBPQ_OPTIONS = {
    key: value
    for key, value in _db.items()
    if key not in {"dbname", "user", "password", "host", "port"}
}

DATABASES = {
    "default": {
        # Django picks its psycopg 3 driver when psycopg (3) is installed.
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _db.get("dbname", "shop"),
        "USER": _db.get("user", ""),
        "PASSWORD": _db.get("password", ""),
        "HOST": _db.get("host", ""),
        "PORT": _db.get("port", ""),
        "OPTIONS": _LIBPQ_OPTIONS,
        # Worker threads keep their connection between jobs (checked before reuse).
        "CONN_MAX_AGE": 60,
        "CONN_HEALTH_CHECKS": True,
        # The test database (created and dropped by the tests): $SHOP_TEST_DATABASE, else
        # Django's own test_<NAME>; two runs on one server need two names.
        "TEST": {"NAME": os.environ.get("SHOP_TEST_DATABASE") or None},
    }
}

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "insecure-example-key-change-me")
DEBUG = os.environ.get("DJANGO_DEBUG", "") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]

try:
    import django.tasks  # noqa: F401 - Django >= 6.0 has the Tasks API built in
except ImportError:  # Django 4.2-5.2: the django-tasks backport is an app of its own
    _TASKS_APP = ["django_tasks"]
else:
    _TASKS_APP = []

# golemq_pg.contrib.django: `manage.py golemq_worker`, and `migrate` applies golemq-pg's
# migrations (the queue's schema) after Django's.
INSTALLED_APPS = [*_TASKS_APP, "golemq_pg.contrib.django", "orders"]

# Django's Tasks API on golemq-pg: without a "dsn" the jobs are written on Django's own
# connection (DATABASES["default"]), so they commit with the request's transaction.
TASKS = {
    "default": {
        "BACKEND": "golemq_pg.contrib.django.GolemqBackend",
        "QUEUES": [],  # any queue_name
        "OPTIONS": {"schema": GOLEMQ_SCHEMA, "max_attempts": 3},
    }
}
MIDDLEWARE: list[str] = []
ROOT_URLCONF = "shop.urls"
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "INFO"},
}
