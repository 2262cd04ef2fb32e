"""`golemq-pg demo` end to end on a small workload, in its own schema."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from tests.support.schemas import fresh_schema


@pytest.fixture
def demo_schema(pg_dsn: str) -> Iterator[str]:
    """A schema name the demo accepts (it must contain 'demo'); dropped afterwards."""
    with fresh_schema(pg_dsn, "demo_") as name:
        yield name


def _demo(pg_dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "GOLEMQ_DEBUG"}
    env["GOLEMQ_DSN"] = pg_dsn
    return subprocess.run(
        [sys.executable, "-m", "golemq_pg.cli", "demo", *args], capture_output=True,
        text=True, env=env, timeout=180, check=False,
    )


def _statuses(pg_dsn: str, schema: str) -> dict[str, int]:
    with psycopg.connect(pg_dsn) as conn:
        rows = conn.execute(
            sql.SQL("SELECT status, count(*) FROM {}.jobs_all GROUP BY status").format(
                sql.Identifier(schema)
            )
        ).fetchall()
    return {status: int(count) for status, count in rows}


def test_demo_drains_a_small_workload_and_reports(pg_dsn: str, demo_schema: str) -> None:
    result = _demo(pg_dsn, "--schema", demo_schema, "--jobs", "300", "--quiet")
    assert result.returncode == 0, result.stdout + result.stderr
    for label in ("jobs/s", "succeeded", "retries", "dead letters", "p50", "p99", "total time"):
        assert label in result.stdout, result.stdout
    assert "Traceback" not in result.stderr
    counts = _statuses(pg_dsn, demo_schema)
    # Everything finished: poison jobs and exhausted flaky ones are dead letters.
    assert set(counts) <= {"succeeded", "failed"}, counts
    assert counts.get("failed", 0) >= 3
    assert counts["succeeded"] + counts["failed"] == 300
    # A second run starts from an empty schema again.
    again = _demo(pg_dsn, "--schema", demo_schema, "--jobs", "50", "--quiet")
    assert again.returncode == 0, again.stdout + again.stderr
    counts = _statuses(pg_dsn, demo_schema)
    assert sum(counts.values()) == 50, counts


def test_demo_refuses_a_schema_it_must_not_drop(pg_dsn: str) -> None:
    result = _demo(pg_dsn, "--schema", "golemq", "--jobs", "10")
    assert result.returncode == 2
    assert "contains 'demo'" in result.stderr
    assert "Traceback" not in result.stderr


def test_demo_worker_factory_runs_under_the_worker_command(pg_dsn: str, demo_schema: str) -> None:
    """docker-compose.yml's default target: `golemq-pg worker golemq_pg.cli.demo:build_worker`."""
    env = {k: v for k, v in os.environ.items() if k != "GOLEMQ_DEBUG"}
    env.update(GOLEMQ_DSN=pg_dsn, GOLEMQ_SCHEMA=demo_schema)
    cli = [sys.executable, "-m", "golemq_pg.cli"]
    migrated = subprocess.run([*cli, "--schema", demo_schema, "migrate"], env=env,
                              capture_output=True, text=True, timeout=60, check=False)
    assert migrated.returncode == 0, migrated.stderr
    proc = subprocess.Popen([*cli, "worker", "golemq_pg.cli.demo:build_worker"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for job_type, payload in (("demo.slow", '{"steps": 3}'), ("demo.noop", "{}"),
                                  ("demo.poison", "{}")):
            added = subprocess.run([*cli, "--schema", demo_schema, "enqueue", job_type, payload],
                                   env=env, capture_output=True, text=True, timeout=60,
                                   check=False)
            assert added.returncode == 0, added.stderr
        deadline = time.monotonic() + 60
        while _statuses(pg_dsn, demo_schema) != {"succeeded": 2, "failed": 1}:
            assert time.monotonic() < deadline, _statuses(pg_dsn, demo_schema)
            assert proc.poll() is None
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr
    with psycopg.connect(pg_dsn) as conn:
        progress = conn.execute(
            sql.SQL("SELECT progress FROM {}.jobs_all WHERE type = 'demo.slow'").format(
                sql.Identifier(demo_schema)
            )
        ).fetchone()
    assert progress is not None
    assert progress[0] == 1.0
