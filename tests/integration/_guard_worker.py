"""A worker process for the guard tests (run with ``sys.executable``, config as one JSON
argument). It builds a PostgresStore and a golemq_pg.Worker with guarded handlers, prints
"ready" once started, and runs until SIGTERM ("run") or until nothing is due ("drain").

Every handler run writes one row to the test's ledger table, from its own connection:
``(job_id, type, scope, worker, pid, claimed_at, started_at, finished_at)`` where
``claimed_at`` is the job's ``started_at`` as the claim wrote it (database clock) and
``started_at`` / ``finished_at`` are ``clock_timestamp()`` when the handler began / ended.
A handler with ``"hang": true`` records its start and then sleeps until the process dies.

Config keys: dsn, schema, worker_id, mode, rate_window (optional), worker (Worker keyword
options), resources ({name: Resource fields}), handlers ([{type, sleep: [lo, hi], hang,
plus handler options: concurrency, serialize_by_scope, not_while_running, waits_for}]).
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
from typing import Any

import orjson
import psycopg
from psycopg import sql

from golemq_pg import JobEvent, PostgresStore, Resource, Worker

HANDLER_OPTIONS = ("concurrency", "serialize_by_scope", "not_while_running", "waits_for",
                   "timeout")


class Ledger:
    """One autocommit connection per handler thread, writing the test's ledger table."""

    def __init__(self, dsn: str, schema: str, worker_id: str) -> None:
        self.dsn = dsn
        self.worker_id = worker_id
        self.local = threading.local()
        table = sql.Identifier(schema, "ledger")
        jobs = sql.Identifier(schema, "jobs")
        self.insert = sql.SQL(
            "INSERT INTO {} (job_id, type, scope, worker, pid, claimed_at, started_at) "
            "VALUES (%s, %s, %s, %s, %s, (SELECT j.started_at FROM {} j WHERE j.id = %s), "
            "clock_timestamp()) RETURNING n").format(table, jobs)
        self.finish = sql.SQL(
            "UPDATE {} SET finished_at = clock_timestamp() WHERE n = %s").format(table)

    def conn(self) -> psycopg.Connection[Any]:
        conn: psycopg.Connection[Any] | None = getattr(self.local, "conn", None)
        if conn is None:
            conn = psycopg.connect(self.dsn, autocommit=True)
            self.local.conn = conn
        return conn

    def start(self, job: JobEvent[Any]) -> int:
        scope = None if job.scope is None else f"{job.scope[0]}:{job.scope[1]}"
        row = self.conn().execute(self.insert, (
            int(job.id), job.type, scope, self.worker_id, os.getpid(), int(job.id),
        )).fetchone()
        assert row is not None
        n: int = row[0]
        return n

    def end(self, n: int) -> None:
        self.conn().execute(self.finish, (n,))


def make_handler(ledger: Ledger, spec: dict[str, Any]) -> Any:
    low, high = spec.get("sleep", [0.001, 0.003])
    hang = bool(spec.get("hang", False))

    def handle(job: JobEvent[Any]) -> None:
        n = ledger.start(job)
        if hang:
            while True:  # until SIGKILL
                time.sleep(1)
        time.sleep(random.uniform(low, high))
        ledger.end(n)

    return handle


def announce(worker: Worker) -> None:
    """Print "ready" once ``worker.run()`` has started the worker (signals are handled)."""
    while not worker.running:
        time.sleep(0.01)
    print("ready", flush=True)


def main() -> None:
    cfg = orjson.loads(sys.argv[1])
    store = PostgresStore.connect(
        cfg["dsn"], schema=cfg["schema"], min_size=1, max_size=cfg.get("pool_size", 6),
        rate_window=cfg.get("rate_window", 60.0), application_name="guard-test-worker")
    resources = {name: Resource(**fields) for name, fields in cfg.get("resources", {}).items()}
    worker = Worker(store, worker_id=cfg["worker_id"], resources=resources,
                    **cfg.get("worker", {}))
    ledger = Ledger(cfg["dsn"], cfg["schema"], cfg["worker_id"])
    for spec in cfg["handlers"]:
        options = {key: spec[key] for key in HANDLER_OPTIONS if key in spec}
        worker.handler(spec["type"], **options)(make_handler(ledger, spec))
    try:
        if cfg["mode"] == "drain":
            print("ready", flush=True)
            worker.run_until_empty(timeout=cfg.get("timeout", 120))
        else:
            threading.Thread(target=announce, args=(worker,), daemon=True).start()
            worker.run()  # blocks until SIGTERM, then stops gracefully
    finally:
        store.close()


if __name__ == "__main__":
    main()
