"""A real worker process for the fault scenarios (run as ``python fault_worker.py CONFIG``).

CONFIG is one JSON object (see ``_support.WorkerSpec.config``):

* ``dsn``, ``schema``, ``worker_id`` (also the ``application_name`` of every queue connection,
  so a test can find this worker's backends in ``pg_stat_activity``), ``log_path``;
* ``worker``: keyword arguments of :class:`golemq_pg.Worker` (durations in seconds), plus
  ``resources`` as ``{name: {concurrency, rate_per_minute, types, costs}}``;
* ``pool``: ``max_size``, ``*_timeout`` arguments of ``PostgresStore.connect``, and optional
  ``extra_options`` (``-c name=value`` settings added to every queue connection, e.g. planner
  switches: the worker then wraps a pool of its own);
* ``types``: ``[{name, concurrency, timeout, serialize_by_scope, not_while_running,
  waits_for}]``, every type served by the same ledger-writing handler;
* ``mode``: ``"run"`` (``Worker.run()``: SIGTERM/SIGINT shut it down gracefully) or
  ``"drain"`` (``run_until_empty``);
* ``hooks``: ``{"kill_after_claim": true}`` SIGKILLs the process right after the first claim
  that returned jobs has committed, before any handler starts.

The handler writes the effects ledger on its own connection (``<worker_id>-ledger``, to
``ledger_dsn`` when given, else ``dsn``): one row per run at start ``(job_id, attempt, token,
worker, pid, type, scope, tag)`` and its end (outcome, signal reason). What it does in between
comes from the payload:

* ``sleep``: seconds, waiting on the signal unless ``ignore``; once the signal fired it
  raises ``JobAborted``, unless ``abort_on_signal`` is false (then it returns normally);
* ``raise``: an exception class name, ``message`` its text;
* ``first_only``: apply the behaviour on the job's first run only (no earlier ledger row);
* ``only_on``: sleep only in the worker whose id ends with ``-<only_on>``;
* ``tag``: copied to the ledger (e.g. a dedupe key).

Logs (structlog and stdlib logging, DEBUG and up) go to ``log_path`` as JSON lines; SIGUSR1
appends every thread's stack to it.
"""

from __future__ import annotations

import faulthandler
import json
import logging
import os
import signal
import sys
import threading
import time
from typing import Any

import structlog
from psycopg import sql
from psycopg_pool import ConnectionPool

from golemq_pg import PostgresStore, Resource, RetryableJobError, TerminalJobError, Worker


def _configure_logging(path: str) -> None:
    stream = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - lives as long as the process
    # SIGUSR1 dumps every thread's stack into the log (WorkerProc.dump_stacks), to see
    # where a worker that stopped working is waiting.
    faulthandler.register(signal.SIGUSR1, file=stream, all_threads=True)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(default=repr),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        logger_factory=structlog.WriteLoggerFactory(file=stream),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter(
        '{"event": %(message)r, "level": "%(levelname)s", "logger": "%(name)s", "stdlib": true}'
    ))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG)


def main() -> None:
    config: dict[str, Any] = json.loads(sys.argv[1])
    _configure_logging(config["log_path"])

    dsn: str = config["dsn"]
    schema: str = config["schema"]
    worker_id: str = config["worker_id"]
    pool_cfg: dict[str, Any] = config.get("pool", {})
    max_size = int(pool_cfg.get("max_size", 6))
    extra = pool_cfg.get("extra_options")
    if extra:
        # A pool with extra server settings (planner switches): wrapped, as an application
        # that brings its own pool would.
        options = "-c TimeZone=UTC -c jit=off " + extra
        own_pool: ConnectionPool[Any] = ConnectionPool(
            dsn, min_size=1, max_size=max_size, open=True,
            kwargs={"autocommit": True, "options": options, "application_name": worker_id},
        )
        store = PostgresStore(own_pool, schema=schema)
    else:
        own_pool = None  # type: ignore[assignment]
        store = PostgresStore.connect(
            dsn, schema=schema, min_size=1, max_size=max_size, application_name=worker_id,
            **{k: v for k, v in pool_cfg.items() if k.endswith("_timeout")},
        )
    ledger = ConnectionPool(
        config.get("ledger_dsn") or dsn, min_size=1,
        max_size=int(pool_cfg.get("ledger_size", 4)), open=True,
        kwargs={"autocommit": True, "application_name": worker_id + "-ledger"},
        reconnect_timeout=3600,
    )
    ident = sql.Identifier(schema)
    start_sql = sql.SQL(
        "INSERT INTO {s}.effects (job_id, attempt, token, worker, pid, type, scope, tag) "
        "SELECT %(id)s, %(attempt)s, (SELECT lease_token FROM {s}.jobs WHERE id = %(id)s "
        "AND lease_owner = %(worker)s AND status = 'running'), %(worker)s, %(pid)s, "
        "%(type)s, %(scope)s, %(tag)s "
        "RETURNING run_id, (SELECT count(*) FROM {s}.effects WHERE job_id = %(id)s)"
    ).format(s=ident)
    finish_sql = sql.SQL(
        "UPDATE {s}.effects SET finished_at = clock_timestamp(), outcome = %s, reason = %s "
        "WHERE run_id = %s"
    ).format(s=ident)

    worker_kwargs: dict[str, Any] = dict(config.get("worker", {}))
    resources = worker_kwargs.pop("resources", None)
    if resources:
        worker_kwargs["resources"] = {
            name: Resource(
                concurrency=spec.get("concurrency"),
                rate_per_minute=spec.get("rate_per_minute"),
                types=list(spec["types"]),
                costs=dict(spec.get("costs", {})),
            )
            for name, spec in resources.items()
        }
    worker = Worker(store, worker_id=worker_id, **worker_kwargs)
    pid = os.getpid()
    raisers: dict[str, type[BaseException]] = {
        "KeyboardInterrupt": KeyboardInterrupt,
        "SystemExit": SystemExit,
        "BaseException": BaseException,
        "ValueError": ValueError,
        "RuntimeError": RuntimeError,
    }

    def handle(job: Any) -> None:
        payload = job.payload
        with ledger.connection() as conn:
            run_id, earlier = conn.execute(
                start_sql,
                {"id": int(job.id), "attempt": job.attempt, "worker": worker_id, "pid": pid,
                 "type": job.type, "scope": None if job.scope is None else ":".join(job.scope),
                 "tag": payload.get("tag")},
            ).fetchone()
        behave = payload if (not payload.get("first_only") or not earlier) else {}
        only_on = payload.get("only_on")
        if only_on and not worker_id.endswith("-" + only_on):
            behave = {k: v for k, v in behave.items() if k != "sleep"}
        outcome = "ok"
        try:
            seconds = float(behave.get("sleep", 0) or 0)
            if seconds:
                if behave.get("ignore"):
                    time.sleep(seconds)
                elif job.signal.wait(seconds) and behave.get("abort_on_signal", True):
                    outcome = "aborted"
                    job.signal.raise_if_cancelled()
            name = behave.get("raise")
            if name:
                outcome = "raised:" + name
                message = str(behave.get("message", "handler failed on purpose"))
                if name == "Terminal":
                    raise TerminalJobError(message)
                if name == "Retryable":
                    raise RetryableJobError(message)
                raise raisers[name](message)
        finally:
            with ledger.connection() as conn:
                conn.execute(finish_sql, (outcome, job.signal.reason, run_id))

    for spec in config["types"]:
        options = {k: v for k, v in spec.items() if k != "name"}
        worker.handler(spec["name"], **options)(handle)

    hooks: dict[str, Any] = config.get("hooks", {})
    if hooks.get("kill_after_claim"):
        real_claim = store.job_claim

        def claim_then_die(request: Any) -> Any:
            jobs = real_claim(request)
            if jobs:
                # The claim has committed (autocommit); die before any handler starts.
                os.kill(pid, signal.SIGKILL)
                time.sleep(60)
            return jobs

        store.job_claim = claim_then_die  # type: ignore[method-assign]

    def announce_ready() -> None:
        deadline = time.monotonic() + 60
        while not worker.running and time.monotonic() < deadline:
            time.sleep(0.005)
        print("ready", flush=True)

    mode = config.get("mode", "run")
    if mode == "drain":
        threading.Thread(target=announce_ready, daemon=True).start()
        worker.run_until_empty(timeout=float(config.get("drain_timeout", 300)))
    else:
        threading.Thread(target=announce_ready, daemon=True).start()
        worker.run()
    store.close()
    ledger.close()
    if own_pool is not None:
        own_pool.close()
    print("exited", flush=True)


if __name__ == "__main__":
    main()
