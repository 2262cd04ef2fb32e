"""Fixtures: a test database, the service served by uvicorn as the README runs
it, an httpx client, and a real worker process."""

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from documents.settings import Settings
from golemq_pg import PostgresStore, Queue

PROJECT_DIR = Path(__file__).resolve().parent.parent
#: The database the tests run the service on (emptied at the start of each run):
#: $DOCUMENTS_TEST_DATABASE, else ``test_documents``; two runs on one server need two names.
TEST_DATABASE = os.environ.get("DOCUMENTS_TEST_DATABASE") or "test_documents"
#: How long a process of the tests may take to start or to stop, in seconds.
PROCESS_DEADLINE = 30.0


@pytest.fixture(scope="session")
def settings() -> Settings:
    """Settings on the test database (``TEST_DATABASE``) of the server of $GOLEMQ_DSN.

    Like Django's test database, but kept between runs (dropping a database costs a
    checkpoint, seconds on a busy server) and emptied at the start of each: the service's
    tables and the queue's schema are dropped, and the service's startup recreates them.
    """
    server = os.environ.get("GOLEMQ_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
    settings = Settings(dsn=make_conninfo(server, dbname=TEST_DATABASE))
    with psycopg.connect(server, autocommit=True) as admin:
        exists = admin.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (TEST_DATABASE,)
        ).fetchone()
        if exists is None:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(TEST_DATABASE)))
    with psycopg.connect(settings.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS public, {} CASCADE").format(
            sql.Identifier(settings.queue_schema)
        ))
        conn.execute("CREATE SCHEMA public")
    return settings


def start(
    command: list[str], settings: Settings, log_path: Path
) -> subprocess.Popen[bytes]:
    """Start ``command`` in the project's directory with the settings in its environment."""
    env = {**os.environ, "GOLEMQ_DSN": settings.dsn, "GOLEMQ_SCHEMA": settings.queue_schema}
    with log_path.open("wb") as log:
        return subprocess.Popen(
            command, cwd=PROJECT_DIR, env=env, stdout=log, stderr=subprocess.STDOUT
        )


def stop(proc: subprocess.Popen[bytes], log_path: Path, *, clean: tuple[int, ...] = (0,)) -> None:
    """SIGTERM (a graceful stop), then check that the process exited with a ``clean`` code."""
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=PROCESS_DEADLINE)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    assert code in clean, log_path.read_text()


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def base_url(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``uvicorn --factory documents.app:build_api``, answering (its startup migrated the
    queue and created the service's table)."""
    log_path = tmp_path_factory.mktemp("api") / "uvicorn.log"
    port = free_port()
    proc = start(
        [sys.executable, "-m", "uvicorn", "--factory", "documents.app:build_api",
         "--host", "127.0.0.1", "--port", str(port)],
        settings, log_path,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + PROCESS_DEADLINE
        while True:
            assert proc.poll() is None, log_path.read_text()
            try:
                if httpx.get(f"{url}/queue/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.1)
        yield url
    finally:
        # Once shut down, uvicorn re-raises the signal it caught: -SIGTERM is a clean exit.
        stop(proc, log_path, clean=(0, -signal.SIGTERM))


@pytest.fixture(scope="session")
def client(base_url: str) -> Iterator[httpx.Client]:
    """An httpx client of the running service."""
    with httpx.Client(base_url=base_url, timeout=PROCESS_DEADLINE) as client:
        yield client


@pytest.fixture(scope="session")
def queue(settings: Settings, base_url: str) -> Iterator[Queue]:
    """A sync Queue on the service's queue, for the tests to look at jobs directly."""
    with PostgresStore.connect(settings.dsn, schema=settings.queue_schema, max_size=2) as store:
        yield Queue(store)


@pytest.fixture(scope="session")
def database(settings: Settings, base_url: str) -> Iterator[psycopg.Connection]:
    """A connection of the tests' own to the service's database (autocommit: sees commits)."""
    with psycopg.connect(settings.dsn, autocommit=True) as conn:
        yield conn


@pytest.fixture(scope="session")
def worker_process(
    settings: Settings, base_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[subprocess.Popen[bytes]]:
    """``golemq-pg worker documents.worker:build_worker`` in its own process."""
    log_path = tmp_path_factory.mktemp("worker") / "worker.log"
    proc = start(
        [sys.executable, "-m", "golemq_pg.cli", "worker", "documents.worker:build_worker"],
        settings, log_path,
    )
    try:
        yield proc
    finally:
        stop(proc, log_path)
