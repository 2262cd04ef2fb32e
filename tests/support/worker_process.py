"""The suite's one subprocess worker, configured by data.

Run as ``python -m tests.support.worker_process CONFIG`` where CONFIG is a JSON object, or
``@path`` to a file holding one (build and start it with :mod:`tests.support.workers`; tests
pass data, never code). Every line it prints goes through one lock, so lines written from
several handler threads never interleave ("wrote wrote7").

Top-level keys:

* ``dsn``, ``schema``, ``worker_id`` (the Worker's id; also the ``application_name`` of its
  queue connections unless ``store.application_name`` says otherwise);
* ``mode``: ``"run"`` (``Worker.run()`` until SIGTERM/SIGINT, a graceful stop), ``"drain"``
  (``run_until_empty(timeout=drain_timeout)``, default 300 s) or ``"cancel"`` (no worker: a
  canceller reading commands on stdin, see below);
* ``ready``: when to print ``ready``: ``"at_once"`` (default, before the worker starts) or
  ``"when_running"`` (once ``worker.running``: its signal handlers are installed). After
  the worker returns the process prints ``exited``;
* ``logs``: ``"default"`` (structlog's defaults, on stdout), ``"stderr"`` (structlog on
  stderr, stdout keeps only the protocol lines) or ``{"path": ...}`` (structlog and stdlib
  logging, DEBUG and up, as JSON lines in that file; SIGUSR1 appends every thread's stack);
* ``store``: ``max_size`` (6), ``application_name``, ``rate_window``, ``prepare``,
  ``listen_dsn``, ``*_timeout`` arguments of ``PostgresStore.connect``, and
  ``extra_options`` (``-c name=value`` settings, e.g. planner switches: the store then
  wraps a pool of this process's own, as an application that brings its own pool would),
  and ``ledger_size`` (the ``fault`` ledger's pool, default 4);
* ``worker``: keyword arguments of :class:`golemq_pg.Worker` (durations in seconds), with
  ``resources`` as ``{name: Resource fields}``;
* ``schedules``: ``[[key, type, payload, {options}]]`` declared with ``Queue.schedule`` at
  start-up, as every process of an application would;
* ``handlers``: ``[{"type": ..., "options": {handler options}, ...behaviour}]`` (below);
* ``hooks``: ``{"kill_after_claim": true}`` SIGKILLs the process right after the first claim
  that returned jobs has committed, before any handler starts;
* ``ledger_dsn``: where the ``fault`` and ``guard`` ledgers are written (default ``dsn``).

A handler's behaviour, in the order it happens:

* ``ledger``: which table a run writes (the test creates it):

  - ``"effects"``: ``effects (job_id, attempt, worker, pid)`` on a pool connection at the
    start; ``"effects_in_transaction"``: the same row through ``job.connection`` (a
    transactional handler: the row commits with the completion or not at all);
  - ``"ticks"``: ``ticks (job_id, worker, pid)`` at the start;
  - ``"guard"``: ``ledger (job_id, type, scope, worker, pid, claimed_at, started_at)`` at the
    start (``claimed_at`` is the job's ``updated_at`` as the claim wrote it: the lease's
    write; ``started_at`` is left to the handler's start since migration 0015) and
    ``finished_at`` at the end, from one connection per handler thread;
  - ``"batches"``: a grouped handler: ``ledger (job_id, grp, seq, attempt, batch, pid,
    started, ended, ok)``, one row per job of the batch, written after the sleep;
  - ``"fault"``: the fault scenarios' ledger (tests/support/fault_env.py): a row at the start
    ``(job_id, attempt, token, worker, pid, type, scope, tag)`` and its end ``(outcome,
    reason)``; what happens in between comes from the *payload*: ``step`` (a durable step of
    that name first: its function writes ``step_ledger (job_id, attempt, pid, kind 'ran',
    value)`` and returns ``{"attempt", "pid"}``; what the step gave back is written as kind
    ``'got'``; the test creates the table), ``sleep`` (seconds, on
    the signal unless ``ignore``; once the signal fired it raises ``JobAborted`` unless
    ``abort_on_signal`` is false), ``raise`` (an exception class name: ``Terminal``,
    ``Retryable``, ``KeyboardInterrupt``, ``SystemExit``, ``BaseException``, ``ValueError``,
    ``RuntimeError``; ``message`` its text), ``poison`` (raise, on every run, an exception
    whose text PostgreSQL cannot store as given: ``"nul"``: ``ValueError("poison \\x00
    nul")``, ``"surrogate"``: ``ValueError("poison \\udcff surrogate")``, ``"str-raises"``:
    a ``PoisonStrError`` whose ``__str__`` raises; the payload cannot carry the text itself,
    an add refuses both), ``first_only`` (only on the job's first run), ``only_on`` (sleep
    only in the worker whose id ends with ``-<only_on>``), ``tag``; with ``"async": true``
    on the handler entry the fault handler is an ``async def`` (its ledger rows written off
    the event loop; ``step`` and ``sleep`` are the sync handler's only);
* ``announce``: a word printed with the job id when the run starts (``"running 17"``);
* ``returns``: the value the handler returns (its job's result), after the sleep;
* ``sleep``: seconds, or ``[low, high]`` for a uniformly random duration; ``sleep_mode``:
  ``"signal"`` (default: wait on ``job.signal``, then ``raise_if_cancelled``), ``"ignore"``
  (plain ``time.sleep``) or ``"hang"`` (sleep until the process is killed);
* ``block_when``: ``{"field": "n", "at_least": 6, "print": "wrote", "seconds": 120}``: for a
  payload whose field is at least that, print ``"<print> <job id>"`` and sleep that long;
* ``fail_first_batch_when``: ``{"field": "seq", "multiple_of": 23}``: a batch whose jobs are
  all on their first attempt and that holds such a job raises ``RuntimeError("poisoned
  once")`` (after its ledger rows, written with ``ok`` false).

Canceller (``mode: "cancel"``): it connects, prints ``ready``, then reads one command a line
on stdin: ``id <job_id>`` (``Queue.cancel``) or ``scope <type> <id>``
(``Queue.cancel_for_scope``), both with ``reason`` ``cancel_reason`` (default "remote
cancel"), and prints ``done <count> <monotonic before the call> <monotonic after it>``.
"""

from __future__ import annotations

import asyncio
import faulthandler
import itertools
import json
import logging
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import structlog
from psycopg import sql
from psycopg_pool import ConnectionPool

from golemq_pg import (
    PostgresStore,
    Queue,
    Resource,
    RetryableJobError,
    TerminalJobError,
    Worker,
)

_print_lock = threading.Lock()

RAISABLE: dict[str, type[BaseException]] = {
    "KeyboardInterrupt": KeyboardInterrupt,
    "SystemExit": SystemExit,
    "BaseException": BaseException,
    "ValueError": ValueError,
    "RuntimeError": RuntimeError,
}


def say(*words: object) -> None:
    """Print one protocol line, whole, whichever thread calls."""
    with _print_lock:
        sys.stdout.write(" ".join(str(w) for w in words) + "\n")
        sys.stdout.flush()


def load_config(arg: str) -> dict[str, Any]:
    """The config from the command line: JSON, or ``@path`` to a JSON file."""
    text = Path(arg[1:]).read_text(encoding="utf-8") if arg.startswith("@") else arg
    config: dict[str, Any] = json.loads(text)
    return config


# -- logging -------------------------------------------------------------------------------


def configure_logging(logs: Any) -> None:
    """Apply the ``logs`` setting (see the module docstring)."""
    if logs == "stderr":
        structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    elif isinstance(logs, dict):
        _log_to_file(logs["path"])


def _log_to_file(path: str) -> None:
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


# -- the store and the worker ---------------------------------------------------------------


def open_store(config: dict[str, Any]) -> tuple[PostgresStore, ConnectionPool[Any] | None]:
    """The queue store (and the pool this process opened for it, if it wraps its own)."""
    dsn: str = config["dsn"]
    options: dict[str, Any] = config.get("store", {})
    app = options.get("application_name", config["worker_id"])
    max_size = int(options.get("max_size", 6))
    extra = options.get("extra_options")
    if extra:
        own_pool: ConnectionPool[Any] = ConnectionPool(
            dsn, min_size=1, max_size=max_size, open=True,
            kwargs={"autocommit": True, "options": "-c TimeZone=UTC -c jit=off " + extra,
                    "application_name": app},
        )
        return PostgresStore(own_pool, schema=config["schema"]), own_pool
    passed = {k: v for k, v in options.items()
              if k.endswith("_timeout") or k in ("rate_window", "prepare", "listen_dsn")}
    store = PostgresStore.connect(dsn, schema=config["schema"], min_size=1, max_size=max_size,
                                  application_name=app, **passed)
    return store, None


def build_worker(store: PostgresStore, config: dict[str, Any]) -> Worker:
    """A Worker with the ``worker`` options (``resources`` as Resource fields)."""
    kwargs: dict[str, Any] = dict(config.get("worker", {}))
    resources = kwargs.pop("resources", None)
    if resources:
        kwargs["resources"] = {name: Resource(**fields) for name, fields in resources.items()}
    return Worker(store, worker_id=config["worker_id"], **kwargs)


# -- ledgers -------------------------------------------------------------------------------


class Ledgers:
    """The statements and connections the handlers write their ledger rows with."""

    def __init__(self, config: dict[str, Any], store: PostgresStore) -> None:
        self.store = store
        self.dsn: str = config["dsn"]
        self.worker_id: str = config["worker_id"]
        self.pid = os.getpid()
        self._local = threading.local()
        self._fault_pool: ConnectionPool[Any] | None = None
        self._fault_dsn: str = config.get("ledger_dsn") or self.dsn
        self._fault_size = int(config.get("store", {}).get("ledger_size", 4))
        s = sql.Identifier(config["schema"])
        self.effect = sql.SQL(
            "INSERT INTO {}.effects (job_id, attempt, worker, pid) VALUES (%s, %s, %s, %s)"
        ).format(s)
        self.tick = sql.SQL(
            "INSERT INTO {}.ticks (job_id, worker, pid) VALUES (%s, %s, %s)").format(s)
        self.guard_start = sql.SQL(
            "INSERT INTO {s}.ledger (job_id, type, scope, worker, pid, claimed_at, started_at) "
            "VALUES (%s, %s, %s, %s, %s, (SELECT j.updated_at FROM {s}.jobs j WHERE j.id = %s), "
            "clock_timestamp()) RETURNING n").format(s=s)
        self.guard_end = sql.SQL(
            "UPDATE {}.ledger SET finished_at = clock_timestamp() WHERE n = %s").format(s)
        self.batch = sql.SQL(
            "INSERT INTO {}.ledger (job_id, grp, seq, attempt, batch, pid, started, ended, ok) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)").format(s)
        self.fault_start = sql.SQL(
            "INSERT INTO {s}.effects (job_id, attempt, token, worker, pid, type, scope, tag) "
            "SELECT %(id)s, %(attempt)s, (SELECT lease_token FROM {s}.jobs_all WHERE id = %(id)s "
            "AND lease_owner = %(worker)s AND status = 'running'), %(worker)s, %(pid)s, "
            "%(type)s, %(scope)s, %(tag)s "
            "RETURNING run_id, (SELECT count(*) FROM {s}.effects WHERE job_id = %(id)s)"
        ).format(s=s)
        self.step_row = sql.SQL(
            "INSERT INTO {}.step_ledger (job_id, attempt, pid, kind, value) "
            "VALUES (%s, %s, %s, %s, %s::jsonb)").format(s)
        self.fault_end = sql.SQL(
            "UPDATE {}.effects SET finished_at = clock_timestamp(), outcome = %s, reason = %s "
            "WHERE run_id = %s"
        ).format(s)

    def thread_connection(self) -> psycopg.Connection[Any]:
        """This handler thread's own autocommit connection (the guard ledger's)."""
        conn: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = psycopg.connect(self._fault_dsn, autocommit=True)
            self._local.conn = conn
        return conn

    def fault_pool(self) -> ConnectionPool[Any]:
        """The fault ledger's pool, tagged ``<worker_id>-ledger``, reconnecting through an
        outage for as long as the test lasts. Each connection is checked as it is handed out:
        after a server restart the pool still holds connections the server closed, and a
        ledger write on one would fail the job under test for the ledger's own sake (with
        no backoff, three such failures dead-lettered jobs of scenario 8)."""
        if self._fault_pool is None:
            self._fault_pool = ConnectionPool(
                self._fault_dsn, min_size=1, max_size=self._fault_size, open=True,
                kwargs={"autocommit": True, "application_name": self.worker_id + "-ledger"},
                reconnect_timeout=3600, check=ConnectionPool.check_connection,
            )
        return self._fault_pool

    def close(self) -> None:
        """Close the fault ledger's pool (the per-thread connections die with the process)."""
        if self._fault_pool is not None:
            self._fault_pool.close()


# -- handlers ------------------------------------------------------------------------------


def _sleep(job: Any, spec: dict[str, Any]) -> None:
    duration = spec.get("sleep", 0)
    seconds = random.uniform(*duration) if isinstance(duration, list) else float(duration)
    mode = spec.get("sleep_mode", "signal")
    if mode == "hang":
        while True:  # until SIGKILL
            time.sleep(1)
    if not seconds:
        return
    if mode == "ignore":
        time.sleep(seconds)
    else:
        job.signal.wait(seconds)
        job.signal.raise_if_cancelled()


def job_handler(spec: dict[str, Any], ledgers: Ledgers) -> Callable[[Any], object]:
    """The handler of one ``handlers`` entry that runs one job at a time."""
    ledger = spec.get("ledger")
    if ledger == "fault":
        return async_fault_handler(ledgers) if spec.get("async") else fault_handler(ledgers)
    announce = spec.get("announce")
    block = spec.get("block_when")

    def handle(job: Any) -> object:
        if announce:
            say(announce, job.id)
        row = None
        if ledger == "effects":
            with ledgers.store.pool.connection() as conn:
                conn.execute(ledgers.effect, (job.id, job.attempt, ledgers.worker_id,
                                              ledgers.pid))
        elif ledger == "effects_in_transaction":
            job.connection.execute(ledgers.effect, (job.id, job.attempt, ledgers.worker_id,
                                                    ledgers.pid))
        elif ledger == "ticks":
            with ledgers.store.pool.connection() as conn:
                conn.execute(ledgers.tick, (job.id, ledgers.worker_id, ledgers.pid))
        elif ledger == "guard":
            scope = None if job.scope is None else f"{job.scope[0]}:{job.scope[1]}"
            row = ledgers.thread_connection().execute(ledgers.guard_start, (
                int(job.id), job.type, scope, ledgers.worker_id, ledgers.pid, int(job.id),
            )).fetchone()
            assert row is not None
        if block and job.payload[block["field"]] >= block["at_least"]:
            say(block["print"], job.id)
            time.sleep(float(block["seconds"]))  # its effect written, not yet committed
        _sleep(job, spec)
        if row is not None:
            ledgers.thread_connection().execute(ledgers.guard_end, (row[0],))
        return spec.get("returns")

    return handle


def batch_handler(spec: dict[str, Any], ledgers: Ledgers) -> Callable[[Any], None]:
    """The handler of a grouped ``handlers`` entry (``ledger: "batches"``)."""
    counter = itertools.count()
    lock = threading.Lock()
    poison = spec.get("fail_first_batch_when")

    def handle(batch: Any) -> None:
        with lock:
            batch_no = f"{ledgers.worker_id}:{next(counter)}"
        started = time.time()
        # A batch has no abort signal to wait on: its sleep is a plain one.
        _sleep(batch, {**spec, "sleep_mode": spec.get("sleep_mode", "ignore")})
        poisoned = bool(poison) and (
            all(j.attempt == 1 for j in batch.jobs)
            and any(j.payload[poison["field"]] % poison["multiple_of"] == 0 for j in batch.jobs))
        ended = time.time()
        rows = [(j.id, j.payload["group"], j.payload["seq"], j.attempt, batch_no, ledgers.pid,
                 started, ended, not poisoned) for j in batch.jobs]
        with ledgers.store.pool.connection() as conn, conn.cursor() as cur:
            cur.executemany(ledgers.batch, rows)
        if poisoned:
            raise RuntimeError("poisoned once")

    return handle


class PoisonStrError(Exception):
    """A handler's exception whose ``__str__`` raises (the ``poison`` payload key)."""

    def __str__(self) -> str:
        raise RuntimeError("this exception cannot be printed")


def raise_poison(kind: str) -> None:
    """Raise the exception the ``poison`` payload key names."""
    if kind == "nul":
        raise ValueError("poison \x00 nul")
    if kind == "surrogate":
        raise ValueError("poison \udcff surrogate")
    raise PoisonStrError(kind)


def _fault_start(job: Any, ledgers: Ledgers) -> tuple[int, int]:
    """The fault ledger's start row of a run: its run id, and how many runs the job had."""
    with ledgers.fault_pool().connection() as conn:
        row = conn.execute(
            ledgers.fault_start,
            {"id": int(job.id), "attempt": job.attempt, "worker": ledgers.worker_id,
             "pid": ledgers.pid, "type": job.type,
             "scope": None if job.scope is None else ":".join(job.scope),
             "tag": job.payload.get("tag")},
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _fault_end(run_id: int, outcome: str, reason: str | None, ledgers: Ledgers) -> None:
    with ledgers.fault_pool().connection() as conn:
        conn.execute(ledgers.fault_end, (outcome, reason, run_id))


def async_fault_handler(ledgers: Ledgers) -> Callable[[Any], Any]:
    """The fault handler as an ``async def``: the ledger rows in a thread, ``poison`` and
    ``raise`` raised by the coroutine itself."""

    async def handle(job: Any) -> None:
        run_id, _ = await asyncio.to_thread(_fault_start, job, ledgers)
        outcome = "ok"
        try:
            if job.payload.get("poison"):
                outcome = "raised:poison"
                raise_poison(str(job.payload["poison"]))
            name = job.payload.get("raise")
            if name:
                outcome = "raised:" + name
                raise RAISABLE[name](str(job.payload.get("message", "failed on purpose")))
        finally:
            await asyncio.to_thread(_fault_end, run_id, outcome, job.signal.reason, ledgers)

    return handle


def fault_handler(ledgers: Ledgers) -> Callable[[Any], None]:
    """The fault scenarios' handler: ledger rows around a payload-driven behaviour."""
    worker_id = ledgers.worker_id

    def handle(job: Any) -> None:
        payload = job.payload
        run_id, earlier = _fault_start(job, ledgers)
        behave = payload if (not payload.get("first_only") or not earlier) else {}
        only_on = payload.get("only_on")
        if only_on and not worker_id.endswith("-" + only_on):
            behave = {k: v for k, v in behave.items() if k != "sleep"}
        outcome = "ok"
        try:
            if payload.get("step"):
                _durable_step(job, str(payload["step"]), ledgers)
            seconds = float(behave.get("sleep", 0) or 0)
            if seconds:
                if behave.get("ignore"):
                    time.sleep(seconds)
                elif job.signal.wait(seconds) and behave.get("abort_on_signal", True):
                    outcome = "aborted"
                    job.signal.raise_if_cancelled()
            if payload.get("poison"):
                outcome = "raised:poison"
                raise_poison(str(payload["poison"]))
            name = behave.get("raise")
            if name:
                outcome = "raised:" + name
                message = str(behave.get("message", "handler failed on purpose"))
                if name == "Terminal":
                    raise TerminalJobError(message)
                if name == "Retryable":
                    raise RetryableJobError(message)
                raise RAISABLE[name](message)
        finally:
            _fault_end(run_id, outcome, job.signal.reason, ledgers)

    return handle


def _durable_step(job: Any, name: str, ledgers: Ledgers) -> None:
    """``job.step(name, ...)`` whose function leaves a 'ran' row; the value it gave back is
    written as a 'got' row (the ``step`` payload key of the fault handler)."""

    def write(kind: str, value: object) -> None:
        with ledgers.fault_pool().connection() as conn:
            conn.execute(ledgers.step_row, (int(job.id), job.attempt, ledgers.pid, kind,
                                            json.dumps(value)))

    def run() -> dict[str, int]:
        value = {"attempt": job.attempt, "pid": ledgers.pid}
        write("ran", value)
        return value

    write("got", job.step(name, run))


def register(worker: Worker, spec: dict[str, Any], ledgers: Ledgers) -> None:
    """Register the handler one ``handlers`` entry describes."""
    options: dict[str, Any] = spec.get("options", {})
    make = batch_handler if spec.get("ledger") == "batches" else job_handler
    worker.handler(spec["type"], **options)(make(spec, ledgers))


def kill_after_claim(store: PostgresStore) -> None:
    """SIGKILL this process right after the first claim that returned jobs committed."""
    real_claim = store.job_claim
    pid = os.getpid()

    def claim_then_die(request: Any) -> Any:
        jobs = real_claim(request)
        if jobs:
            # The claim has committed (autocommit); die before any handler starts.
            os.kill(pid, signal.SIGKILL)
            time.sleep(60)
        return jobs

    store.job_claim = claim_then_die  # type: ignore[method-assign]


# -- the processes -------------------------------------------------------------------------


def run_canceller(config: dict[str, Any]) -> None:
    """The ``cancel`` mode: one cancel per stdin line, timed on the monotonic clock."""
    store = PostgresStore.connect(config["dsn"], schema=config["schema"],
                                  max_size=int(config.get("store", {}).get("max_size", 2)))
    queue = Queue(store)
    reason = config.get("cancel_reason", "remote cancel")
    store.now()  # connect before the first command, so it measures the cancel alone
    say("ready")
    for line in sys.stdin:
        parts = line.split()
        if not parts:
            continue
        before = time.monotonic()
        if parts[0] == "id":
            count = int(queue.cancel(parts[1], reason=reason))
        else:
            count = queue.cancel_for_scope((parts[1], parts[2]), reason=reason)
        after = time.monotonic()
        say("done", count, repr(before), repr(after))
    store.close()


def run_worker(config: dict[str, Any]) -> None:
    """The ``run`` and ``drain`` modes."""
    store, own_pool = open_store(config)
    ledgers = Ledgers(config, store)
    for key, job_type, payload, options in config.get("schedules", []):
        Queue(store).schedule(key, job_type, payload, **options)
    worker = build_worker(store, config)
    for spec in config.get("handlers", []):
        register(worker, spec, ledgers)
    if config.get("hooks", {}).get("kill_after_claim"):
        kill_after_claim(store)

    def announce_ready() -> None:
        deadline = time.monotonic() + 60
        while not worker.running and time.monotonic() < deadline:
            time.sleep(0.005)
        say("ready")

    if config.get("ready", "at_once") == "when_running":
        threading.Thread(target=announce_ready, daemon=True).start()
    else:
        say("ready")
    try:
        if config.get("mode", "run") == "drain":
            worker.run_until_empty(timeout=float(config.get("drain_timeout", 300)))
        else:
            worker.run()  # blocks until SIGTERM, then stops gracefully
    finally:
        store.close()
        ledgers.close()
        if own_pool is not None:
            own_pool.close()
    say("exited")


def main(argv: list[str]) -> None:
    """Run the process ``argv[1]`` (JSON or ``@path``) describes."""
    config = load_config(argv[1])
    configure_logging(config.get("logs", "default"))
    if config.get("mode") == "cancel":
        run_canceller(config)
    else:
        run_worker(config)


if __name__ == "__main__":
    main(sys.argv)
