"""`golemq-pg worker --metrics-port` as a real process: /metrics scraped over HTTP, with one
process and with --processes 2 (every child's counts summed by the parent), and /healthz on
the same port (200 while the database answers, 503 when it does not)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from golemq_pg import PostgresStore, Queue
from golemq_pg.metrics import HealthCheck, MetricsServer
from tests.support.cli import assert_clean_failure, run_cli
from tests.support.waiting import wait_until

APP = textwrap.dedent(
    """
    import os, time
    from golemq_pg import PostgresStore, Worker

    store = PostgresStore.connect(os.environ["GOLEMQ_DSN"], schema=os.environ["TEST_SCHEMA"],
                                  min_size=1, max_size=4)
    worker = Worker(store, poll_interval=0.05, shutdown_grace=5)

    @worker.handler("cli.metric")
    def metric(job):
        time.sleep(0.05)  # long enough for both processes to take a share
        with open(os.environ["TEST_LEDGER"], "a") as ledger:
            ledger.write(f"{os.getpid()}\\n")
    """
)
JOBS = 20


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the exposition at ``url``, by (name, sorted labels)."""
    # what a Prometheus server asks for: the text format comes back all the same
    accept = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
    request = urllib.request.Request(url, headers={"Accept": accept})  # noqa: S310 - http
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - our http URL
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text) for s in family.samples
    }


def health(url: str) -> tuple[int, dict[str, str]]:
    """The status and JSON body of GET ``url`` (a /healthz)."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - our http URL
            status, content_type, body = (response.status, response.headers["Content-Type"],
                                          response.read())
    except urllib.error.HTTPError as error:  # 503
        status, content_type, body = error.code, error.headers["Content-Type"], error.read()
    assert content_type == "application/json"
    return status, json.loads(body)


def succeeded(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> float:
    """``golemq_jobs_total{type="cli.metric", outcome="succeeded"}``."""
    key = ("golemq_jobs_total", (("outcome", "succeeded"), ("type", "cli.metric")))
    return samples.get(key, 0.0)


class Stderr:
    """The lines a process writes to stderr, read on a thread as they come."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        assert proc.stderr is not None
        self._thread = threading.Thread(target=self._read, args=(proc.stderr,), daemon=True)
        self._thread.start()

    def _read(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            self.lines.append(line)

    def find(self, marker: str) -> str | None:
        return next((line for line in self.lines if marker in line), None)

    def text(self) -> str:
        self._thread.join(10)
        return "".join(self.lines)


@pytest.mark.parametrize("processes", [1, 2])
def test_metrics_port_serves_every_process_counts(
    pg_dsn: str, pg_store: PostgresStore, schema: str, tmp_path: Path, processes: int,
) -> None:
    (tmp_path / "cli_metrics_app.py").write_text(APP)
    ledger = tmp_path / "ledger.txt"
    ledger.touch()
    env = {k: v for k, v in os.environ.items() if k not in {"GOLEMQ_DEBUG",
                                                           "PROMETHEUS_MULTIPROC_DIR"}}
    env.update(GOLEMQ_DSN=pg_dsn, TEST_SCHEMA=schema, TEST_LEDGER=str(ledger))
    proc = subprocess.Popen(
        [sys.executable, "-m", "golemq_pg.cli", "worker", "cli_metrics_app:worker",
         "--processes", str(processes), "--metrics-port", "0"],  # the default host
        cwd=tmp_path, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
    )
    stderr = Stderr(proc)
    try:
        wait_until(lambda: stderr.find("serving metrics on ") is not None, 60,
                   what="the metrics endpoint")
        line = stderr.find("serving metrics on ")
        assert line is not None
        url = line.split("serving metrics on ", 1)[1].split()[0]
        assert url.startswith("http://127.0.0.1:")  # --metrics-host defaults to loopback
        wait_until(lambda: len(pg_store.worker_list()) == processes, 60, what="the workers")
        status, body = health(url.replace("/metrics", "/healthz"))
        assert (status, body["status"]) == (200, "ok"), body
        assert body["database_time"].startswith(str(pg_store.now().year))
        queue = Queue(pg_store)
        for i in range(JOBS):
            queue.add("cli.metric", {"i": i})
        wait_until(lambda: succeeded(scrape(url)) == JOBS, 60, interval=0.1,
                   what="every success counted")
        samples = scrape(url)
        pids = ledger.read_text().split()
        assert len(pids) == JOBS
        # each process did only its share, and the endpoint reports the sum
        assert len(set(pids)) == processes
        assert samples[("golemq_jobs_total", (("outcome", "started"), ("type", "cli.metric")))] \
            == JOBS
        assert samples[("golemq_job_wait_seconds_count", (("type", "cli.metric"),))] == JOBS
        assert samples[("golemq_job_duration_seconds_count",
                        (("outcome", "succeeded"), ("type", "cli.metric")))] == JOBS
        # the collector's gauges, read from the database by the serving process
        assert samples[("golemq_workers", ())] == processes
        assert samples[("golemq_queue_jobs", (("status", "pending"), ("type", "cli.metric")))] \
            == 0
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = stderr.text()
    assert proc.returncode == 0, text
    assert "Traceback" not in text
    if processes > 1:
        # the run's multiprocess directory is gone with it
        directory = text.split("(children's counts in ", 1)[1].split(")", 1)[0]
        assert not Path(directory).exists()


def test_a_metrics_port_in_use_is_one_clear_line(pg_dsn: str) -> None:
    """The port is bound before the target is imported: nothing starts (the target here
    does not even exist)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli("worker", "no_such_app:worker", "--metrics-port", str(port),
                         "--metrics-host", "127.0.0.1", dsn=pg_dsn)
    assert_clean_failure(result, 1)
    assert f"cannot serve metrics on 127.0.0.1:{port}" in result.stderr


def test_healthz_answers_503_while_the_database_does_not(pg_dsn: str, schema: str) -> None:
    """The check of the metrics port: 503 before a store is known (the target loading),
    200 while its store answers, 503 naming the error type once it cannot."""
    store = PostgresStore.connect(pg_dsn, schema=schema, min_size=1, max_size=1)
    check = HealthCheck()
    server = MetricsServer("127.0.0.1", 0, CollectorRegistry(), check)
    url = server.url.replace("/metrics", "/healthz")
    try:
        assert health(url) == (503, {"status": "unavailable", "error": "starting"})
        check.store = store
        status, body = health(url)
        assert (status, body["status"]) == (200, "ok")
        store.close()
        status, body = health(url)
        assert status == 503
        assert body["status"] == "unavailable"
        assert body["error"] not in ("", "starting", "timeout")
    finally:
        server.stop()
        store.close()


def test_healthz_gives_up_on_a_database_that_hangs(pg_dsn: str, schema: str) -> None:
    """A store whose connection waits on a lock another session holds: the probe answers
    503 "timeout" after the check's timeout, not when the statement ends."""
    store = PostgresStore.connect(pg_dsn, schema=schema, min_size=1, max_size=1)
    check = HealthCheck(store, timeout=0.5)
    server = MetricsServer("127.0.0.1", 0, CollectorRegistry(), check)
    url = server.url.replace("/metrics", "/healthz")
    try:
        with store.pool.connection() as held:  # the store's only connection, taken
            started = time.monotonic()
            assert health(url) == (503, {"status": "unavailable", "error": "timeout"})
            assert time.monotonic() - started < 5
            held.execute("SELECT 1")
        wait_until(lambda: health(url)[0] == 200, 30, what="the database answering again")
    finally:
        server.stop()
        store.close()
