"""Fixtures for the shop's tests: a real worker process on Django's test database."""

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection
from psycopg.conninfo import make_conninfo

from golemq_pg.contrib.django import close_stores

PROJECT_DIR = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session", autouse=True)
def _backend_pools_closed(django_db_setup: None) -> Iterator[None]:
    """Close the backend's pools before pytest-django drops the test database."""
    yield
    close_stores()


@pytest.fixture(scope="session")
def worker_process(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[subprocess.Popen[bytes]]:
    """``manage.py golemq_worker`` in its own process, on the test database.

    It sees only committed rows, so the tests that use it are transactional
    (``django_db(transaction=True)``).
    """
    log_path = tmp_path_factory.mktemp("worker") / "worker.log"
    # The project's DSN, on the test database pytest-django created (its settings read
    # GOLEMQ_DSN: the worker's DATABASES["default"] is then the test database too).
    dsn = make_conninfo(settings.GOLEMQ_DSN, dbname=connection.settings_dict["NAME"])
    env = {**os.environ, "GOLEMQ_DSN": dsn}
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "golemq_worker"],
            cwd=PROJECT_DIR, env=env, stdout=log, stderr=subprocess.STDOUT,
        )
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)  # graceful: in-flight tasks finish
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        assert code == 0, log_path.read_text()
