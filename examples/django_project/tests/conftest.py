"""Fixtures for the shop's tests: a real worker process on Django's test database."""

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from shop.jobqueue import close_queue, database_dsn

PROJECT_DIR = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session", autouse=True)
def _queue_store_closed_at_the_end(django_db_setup: None) -> Iterator[None]:
    """Close the store's pool before pytest-django drops the test database."""
    yield
    close_queue()


@pytest.fixture(scope="session")
def worker_process(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[subprocess.Popen[bytes]]:
    """``manage.py golemq_worker`` in its own process, on the test database.

    It sees only committed rows, so the tests that use it are transactional
    (``django_db(transaction=True)``).
    """
    log_path = tmp_path_factory.mktemp("worker") / "worker.log"
    env = {**os.environ, "GOLEMQ_DSN": database_dsn()}
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "golemq_worker"],
            cwd=PROJECT_DIR, env=env, stdout=log, stderr=subprocess.STDOUT,
        )
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)  # graceful: in-flight jobs finish
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        assert code == 0, log_path.read_text()
