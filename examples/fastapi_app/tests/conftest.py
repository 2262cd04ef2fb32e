"""Fixtures: a database of the tests' own, the app through httpx, a real worker process."""

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient
from psycopg import sql
from psycopg.conninfo import make_conninfo

from documents.app import build_api
from documents.settings import Settings
from golemq_pg import PostgresStore, Queue

PROJECT_DIR = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def settings() -> Iterator[Settings]:
    """Settings on a fresh database (on the server of $GOLEMQ_DSN), dropped at the end."""
    server = os.environ.get("GOLEMQ_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
    name = f"documents_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield Settings(dsn=make_conninfo(server, dbname=name))
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture(scope="session")
def client(settings: Settings) -> Iterator[TestClient]:
    """The app, started (its lifespan migrated the queue and created its table)."""
    with TestClient(build_api(settings)) as client:
        yield client


@pytest.fixture(scope="session")
def queue(settings: Settings, client: TestClient) -> Iterator[Queue]:
    """A sync Queue on the app's queue, for the tests to look at jobs directly."""
    with PostgresStore.connect(settings.dsn, schema=settings.queue_schema, max_size=2) as store:
        yield Queue(store)


@pytest.fixture(scope="session")
def database(settings: Settings, client: TestClient) -> Iterator[psycopg.Connection]:
    """A connection of the tests' own to the app's database (autocommit: sees commits)."""
    with psycopg.connect(settings.dsn, autocommit=True) as conn:
        yield conn


@pytest.fixture(scope="session")
def worker_process(
    settings: Settings, client: TestClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[subprocess.Popen[bytes]]:
    """``golemq-pg worker documents.worker:build_worker`` in its own process."""
    log_path = tmp_path_factory.mktemp("worker") / "worker.log"
    env = {**os.environ, "GOLEMQ_DSN": settings.dsn, "GOLEMQ_SCHEMA": settings.queue_schema}
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "golemq_pg.cli", "worker", "documents.worker:build_worker"],
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
