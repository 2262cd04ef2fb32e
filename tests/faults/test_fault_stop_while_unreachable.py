"""Stopping a worker while its database is unreachable: ``golemq-pg worker`` on SIGTERM, and
``Worker.stop()`` in process, return within ``shutdown_grace + 5`` seconds, whether the
outage began after the worker started or the worker started during it (each of its service
threads used to wait out the pool's 30 s connection timeout: about a minute).

The outage is an :class:`~tests.support.outage_proxy.OutageProxy` that stops forwarding:
the suite's server is untouched. The worker's application logs JSON: every line of its output
is JSON then, psycopg_pool's connection errors included (they went to stderr bare)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from golemq_pg import PostgresStore, Worker
from tests.support.outage_proxy import OutageProxy
from tests.support.waiting import wait_until

pytestmark = pytest.mark.faults

GRACE = 3.0
#: The contract: a stop returns within the grace plus this.
MARGIN = 5.0

APP = textwrap.dedent(
    """
    import os
    import structlog
    from golemq_pg import PostgresStore, Worker

    structlog.configure(processors=[structlog.processors.add_log_level,
                                    structlog.processors.JSONRenderer()])

    store = PostgresStore.connect(os.environ["GOLEMQ_DSN"], schema=os.environ["TEST_SCHEMA"])
    worker = Worker(store, poll_interval=0.1, shutdown_grace=float(os.environ["TEST_GRACE"]))

    @worker.handler("outage.noop")
    def noop(job):
        pass
    """
)


@pytest.fixture
def proxy(pg_dsn: str) -> Iterator[OutageProxy]:
    front = OutageProxy(pg_dsn)
    try:
        yield front
    finally:
        front.down()


def _start_cli_worker(tmp_path: Path, dsn: str, schema: str) -> subprocess.Popen[str]:
    (tmp_path / "outage_app.py").write_text(APP)
    env = {k: v for k, v in os.environ.items() if k != "GOLEMQ_DEBUG"}
    env.update(GOLEMQ_DSN=dsn, TEST_SCHEMA=schema, TEST_GRACE=str(GRACE))
    return subprocess.Popen(
        [sys.executable, "-m", "golemq_pg.cli", "worker", "outage_app:worker"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )


def _wait_for_line(proc: subprocess.Popen[str], needle: str, timeout: float) -> str:
    """Read stderr until a line holds ``needle`` (the worker logs to stderr)."""
    assert proc.stderr is not None
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        if needle in line:
            return "".join(seen)
    raise AssertionError(f"no {needle!r} within {timeout}s:\n" + "".join(seen[-20:]))


def _sigterm_and_time(proc: subprocess.Popen[str]) -> tuple[float, int, str]:
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        _, rest = proc.communicate(timeout=GRACE + MARGIN + 30)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, rest = proc.communicate()
    return time.monotonic() - sent, proc.returncode, rest


@pytest.mark.parametrize("outage", ["after_start", "before_start"])
def test_worker_process_exits_within_the_grace_on_sigterm_while_the_database_is_down(
    pg_store: PostgresStore, schema: str, proxy: OutageProxy, tmp_path: Path, outage: str,
) -> None:
    if outage == "before_start":
        proxy.down()
    proc = _start_cli_worker(tmp_path, proxy.dsn(), schema)
    try:
        head = _wait_for_line(proc, "worker_started", timeout=60)
        if outage == "after_start":
            proxy.down()
        # Every service thread is now inside a store call waiting for a connection.
        time.sleep(2.0)
        took, code, rest = _sigterm_and_time(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert took < GRACE + MARGIN, (round(took, 1), rest[-3000:])
    assert code == 0, rest[-3000:]
    lines = [json.loads(line) for line in (head + rest).splitlines() if line.strip()]
    events = [line["event"] for line in lines]
    assert "worker_stopped" in events
    pool_lines = [line for line in lines if line.get("logger") == "psycopg.pool"]
    assert pool_lines, events
    assert all(line["level"] in ("warning", "error", "info") for line in pool_lines)


def test_worker_stop_returns_within_the_grace_while_the_database_is_down(
    pg_store: PostgresStore, schema: str, proxy: OutageProxy,
) -> None:
    store = PostgresStore.connect(proxy.dsn(), schema=schema, min_size=1, max_size=4)
    try:
        worker = Worker(store, poll_interval=0.1, shutdown_grace=GRACE)
        claimed: list[str] = []

        @worker.handler("outage.noop")
        def noop(job: object) -> None:
            claimed.append(str(job))

        worker.start()
        wait_until(lambda: worker.running, 10, what="the worker running")
        proxy.down()
        time.sleep(2.0)  # every service thread now waits on the pool
        started = time.monotonic()
        worker.stop()
        took = time.monotonic() - started
        assert not worker.running
        assert took < GRACE + MARGIN, round(took, 1)
        # A start while the database is down does not wait for it either, nor does its stop.
        started = time.monotonic()
        worker.start()
        worker.stop()
        assert time.monotonic() - started < GRACE + MARGIN + 5.0  # + the start's own wait
    finally:
        closing = time.monotonic()
        store.pool.close(timeout=1.0)
        assert time.monotonic() - closing < 5.0
