"""Shared helpers for the worker integration tests (this module holds no tests).

* :class:`Recorder`: a thread-safe LifecycleObserver that can wait for transitions.
* :func:`wait_until`: poll a condition with a deadline (for state only visible in the DB).
* :func:`effects_table` / :func:`effects`: the effects ledger of RELIABILITY.md, one row per
  handler run: ``(job_id, attempt, worker, pid)``.
* :data:`WORKER_SCRIPT` / :func:`spawn_worker`: a real worker in a subprocess.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from golemq_pg import Transition


class Recorder:
    """Collects transitions; ``wait_for`` blocks until enough of an outcome arrived."""

    def __init__(self) -> None:
        self.transitions: list[Transition] = []
        self._cond = threading.Condition()

    def on_transition(self, t: Transition) -> None:
        with self._cond:
            self.transitions.append(t)
            self._cond.notify_all()

    def outcomes(self, job_id: str | None = None) -> list[str]:
        with self._cond:
            return [t.outcome for t in self.transitions if job_id is None or t.job_id == job_id]

    def of(self, outcome: str) -> list[Transition]:
        with self._cond:
            return [t for t in self.transitions if t.outcome == outcome]

    def wait_for(self, outcome: str, count: int = 1, timeout: float = 10.0) -> list[Transition]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                found = [t for t in self.transitions if t.outcome == outcome]
                if len(found) >= count:
                    return found
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(
                        f"waited {timeout}s for {count} x {outcome!r}; got "
                        f"{[t.outcome for t in self.transitions]}"
                    )
                self._cond.wait(remaining)


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.01) -> Any:
    """Poll ``predicate`` until truthy (returned) or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


def effects_table(dsn: str, schema: str) -> None:
    """Create the effects ledger in ``schema``."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {}.effects (job_id text NOT NULL, attempt int NOT "
                "NULL, worker text NOT NULL, pid int NOT NULL, at timestamptz NOT NULL "
                "DEFAULT clock_timestamp())"
            ).format(sql.Identifier(schema))
        )


def record_effect(conn: psycopg.Connection[Any], schema: str, job_id: str, attempt: int,
                  worker: str) -> None:
    conn.execute(
        sql.SQL("INSERT INTO {}.effects (job_id, attempt, worker, pid) VALUES (%s, %s, %s, %s)")
        .format(sql.Identifier(schema)),
        (job_id, attempt, worker, os.getpid()),
    )


def effects(dsn: str, schema: str) -> list[tuple[str, int, str, int]]:
    """Every ledger row, in insertion order."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            sql.SQL("SELECT job_id, attempt, worker, pid FROM {}.effects ORDER BY at")
            .format(sql.Identifier(schema))
        ).fetchall()
    return [(r[0], r[1], r[2], r[3]) for r in rows]


def job_rows(dsn: str, schema: str) -> list[tuple[Any, ...]]:
    """(id, status, attempts, lease_owner, last_error) of every job."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            sql.SQL("SELECT id::text, status, attempts, lease_owner, last_error FROM {}.jobs "
                    "ORDER BY id").format(sql.Identifier(schema))
        ).fetchall()


#: A worker process: records each run in the ledger, optionally sleeps, then succeeds.
#: argv: dsn schema worker_id sleep_seconds lease_grace poll_interval concurrency mode
WORKER_SCRIPT = r"""
import os, sys, time, signal
import psycopg
from psycopg import sql
from golemq_pg import PostgresStore, Worker

dsn, schema, worker_id = sys.argv[1], sys.argv[2], sys.argv[3]
sleep_s, lease_grace, poll = float(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
concurrency, mode = int(sys.argv[7]), sys.argv[8]
store = PostgresStore.connect(dsn, schema=schema, max_size=4 + concurrency)
worker = Worker(store, worker_id=worker_id, lease_grace=lease_grace, poll_interval=poll,
                base_backoff=0, max_backoff=0, shutdown_grace=float(os.environ.get("GRACE", "15")),
                abandon_grace=float(os.environ.get("ABANDON", "5")))
insert = sql.SQL("INSERT INTO {}.effects (job_id, attempt, worker, pid) VALUES (%s, %s, %s, %s)"
                 ).format(sql.Identifier(schema))

@worker.handler("work", concurrency=concurrency)
def work(job):
    with store.pool.connection() as conn:
        conn.execute(insert, (job.id, job.attempt, worker_id, os.getpid()))
    if sleep_s:
        if mode == "ignore":
            time.sleep(sleep_s)
        else:
            job.signal.wait(sleep_s)
            job.signal.raise_if_cancelled()

print("ready", flush=True)
if mode == "drain":
    worker.run_until_empty(timeout=120)
else:
    worker.run()
store.close()
print("exited", flush=True)
"""


def spawn_worker(
    dsn: str,
    schema: str,
    worker_id: str,
    *,
    sleep: float = 0.0,
    lease_grace: float = 30.0,
    poll: float = 0.05,
    concurrency: int = 4,
    mode: str = "cooperate",
    env: dict[str, str] | None = None,
) -> subprocess.Popen[str]:
    """Start ``WORKER_SCRIPT`` in a subprocess (waits until it printed "ready")."""
    return spawn_script(WORKER_SCRIPT, dsn, schema, worker_id, str(sleep), str(lease_grace),
                        str(poll), str(concurrency), mode, env=env)


def spawn_script(script: str, *args: str, env: dict[str, str] | None = None
                 ) -> subprocess.Popen[str]:
    """Run ``python -c script *args`` (stderr merged into stdout) and wait until its first
    line says "ready"; otherwise fail with what it printed."""
    proc = subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, **(env or {})},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "ready", line + (proc.stdout.read() if proc.poll() is not None else "")
    return proc


def stop_gracefully(procs: list[subprocess.Popen[str]]) -> None:
    """SIGTERM every process, then wait: each must exit 0 (its output is the message)."""
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, out


def kill_leftovers(procs: list[subprocess.Popen[str]]) -> None:
    """Kill whatever a failed test left running."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
