"""Three worker processes whose pools go through PgBouncer in transaction mode
(tests/plugins/pgbouncer.py), with ``notify=False`` and with a direct ``listen_dsn``.

Every feature at once, on one queue: a ``serialize_by_scope`` type and a resource pool (the
guard ledger of tests/support/worker_process.py, written directly to PostgreSQL: intervals
inside each job's lease), a transactional handler (its effect commits with its completion),
a cross-process cancel, a schedule ticking every second, results and ``queue.wait``, pause
and resume. The workers' store has ``prepare=False``; the pgbouncer database has fewer
server connections than the clients, so transactions of different processes share server
sessions. Afterwards: each job ran exactly once, the guards held, no claim failed.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from golemq_pg import JobStatus, PostgresStore, Queue
from tests.plugins.pgbouncer import Bouncer
from tests.support.ledgers import effects_table
from tests.support.waiting import wait_until
from tests.support.workers import kill_leftovers, start_process, worker_config

pytestmark = pytest.mark.pgbouncer

SCOPES, PER_SCOPE, GPU_JOBS, TX_JOBS, ANSWERS = 4, 8, 8, 6, 3
GPU_CONCURRENCY = 2


def _handlers() -> list[dict[str, Any]]:
    quick = {"ledger": "guard", "sleep": [0.005, 0.02], "sleep_mode": "ignore"}
    return [
        # Slower than one process's two slots can drain alone: the work spreads.
        {"type": "scoped", "options": {"concurrency": 2, "serialize_by_scope": True}, **quick,
         "sleep": [0.05, 0.1]},
        {"type": "gpu", "options": {"concurrency": 3}, **quick, "sleep": [0.05, 0.1]},
        {"type": "tx", "options": {"transactional": True, "concurrency": 2},
         "ledger": "effects_in_transaction"},
        {"type": "block", "announce": "running", "sleep": 120},
        {"type": "answer", "options": {"concurrency": 2}, "returns": {"answer": 42}},
        {"type": "tick", "ledger": "ticks"},
    ]


def _query(dsn: str, text: str, schema: str, *args: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        query = sql.SQL(text).format(schema=sql.Identifier(schema))  # type: ignore[arg-type]
        return conn.execute(query, args).fetchall()


@pytest.fixture
def ledgers(pg_store: PostgresStore, pg_dsn: str) -> str:
    """The test's schema, migrated, with the guard, effects and ticks ledgers."""
    schema = pg_store.schema
    effects_table(pg_dsn, schema)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        ident = sql.Identifier(schema)
        conn.execute(sql.SQL(
            "CREATE TABLE {}.ledger (n bigserial PRIMARY KEY, job_id bigint NOT NULL, "
            "type text NOT NULL, scope text, worker text NOT NULL, pid int NOT NULL, "
            "claimed_at timestamptz, started_at timestamptz NOT NULL, finished_at timestamptz)"
        ).format(ident))
        conn.execute(sql.SQL(
            "CREATE TABLE {}.ticks (job_id text NOT NULL, worker text NOT NULL, pid int NOT "
            "NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())").format(ident))
    return schema


@pytest.fixture(params=["notify_off", "listen_dsn"])
def wakeups(request: pytest.FixtureRequest, pg_dsn: str) -> dict[str, Any]:
    """The Worker options of each variant: poll only, or LISTEN on the server directly."""
    if request.param == "notify_off":
        return {"notify": False, "poll_interval": 0.1}
    return {"listen_dsn": pg_dsn, "poll_interval": 0.5}


@pytest.fixture
def procs(pgbouncer: Bouncer, pg_dsn: str, ledgers: str, wakeups: dict[str, Any],
          tmp_path: Path) -> Iterator[list[tuple[subprocess.Popen[bytes], Path, Path]]]:
    """Three worker processes through PgBouncer: (process, stdout file, log file)."""
    started: list[tuple[subprocess.Popen[bytes], Path, Path]] = []
    for i in range(3):
        out, log = tmp_path / f"w{i}.out", tmp_path / f"w{i}.jsonl"
        config = worker_config(
            pgbouncer.dsn(), ledgers, f"pgb-{i}", mode="run", ready="when_running",
            ledger_dsn=pg_dsn, logs={"path": str(log)},
            store={"max_size": 6, "prepare": False, "application_name": "pgbouncer-worker"},
            worker={**wakeups, "lease_grace": 3, "shutdown_grace": 5, "abandon_grace": 1,
                    "resources": {"gpu": {"concurrency": GPU_CONCURRENCY, "types": ["gpu"]}}},
            schedules=[["every-second", "tick", {}, {"every": 1}]],
            handlers=_handlers(),
        )
        with out.open("wb") as stdout:
            proc = start_process(config, stdout=stdout, stderr=subprocess.STDOUT, text=False)
        started.append((proc, out, log))
    try:
        wait_until(lambda: all(b"ready\n" in out.read_bytes() for _, out, _ in started), 60,
                   what="three workers ready")
        yield started
    finally:
        for proc, _, _ in started:
            if proc.poll() is None:
                proc.terminate()
        for proc, _, _ in started:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                kill_leftovers([proc])


def _events(logs: list[Path], *names: str) -> list[dict[str, Any]]:
    found = []
    for path in logs:
        if path.exists():
            for line in path.read_text().splitlines():
                if line.startswith("{"):
                    event = json.loads(line)
                    if event.get("event") in names:
                        found.append(event)
    return found


def _overlap_at_most(rows: list[tuple[Any, ...]]) -> int:
    """The most intervals (started, finished) that were open at one instant."""
    return max((sum(1 for s, f in rows if s <= start < f) for start, _ in rows), default=0)


def test_three_workers_through_pgbouncer_run_every_feature_exactly_once(
    pgbouncer: Bouncer, pg_dsn: str, ledgers: str, wakeups: dict[str, Any],
    procs: list[tuple[subprocess.Popen[bytes], Path, Path]],
) -> None:
    schema = ledgers
    store = PostgresStore.connect(pgbouncer.dsn(), schema=schema, max_size=4, prepare=False,
                                  listen_dsn=wakeups.get("listen_dsn"))
    queue = Queue(store)
    try:
        queue.pause("scoped")
        scoped = [queue.add("scoped", {"n": n}, scope=("acct", str(n % SCOPES)))
                  for n in range(SCOPES * PER_SCOPE)]
        for n in range(GPU_JOBS):
            queue.add("gpu", {"n": n})
        tx = [queue.add("tx", {"n": n}) for n in range(TX_JOBS)]
        block = queue.add("block", {})
        answers = [queue.add("answer", {"n": n}) for n in range(ANSWERS)]
        assert block is not None
        assert None not in scoped + tx + answers

        # Results, waited for through the pooled store (LISTEN direct, or polls).
        for job_id in answers:
            assert job_id is not None
            assert queue.wait(job_id, timeout=60).result == {"answer": 42}

        # A cancel from this process aborts the handler in whichever worker runs it.
        outputs = [out for _, out, _ in procs]
        wait_until(lambda: any(f"running {block}" in out.read_text() for out in outputs), 30,
                   what="the blocking job running")
        assert queue.cancel(block, reason="test cancel")
        logs = [log for _, _, log in procs]
        wait_until(lambda: any(block in e.get("job_ids", []) for e in
                               _events(logs, "jobs_aborted", "lease_lost")), 30,
                   what="the blocking job's handler aborted")

        def finished(job_type: str) -> int:
            return store.job_stats_by_type().get(job_type, {}).get("succeeded", 0)

        wait_until(lambda: finished("gpu") == GPU_JOBS and finished("tx") == TX_JOBS, 60,
                   what="gpu and tx jobs done")
        # Paused meanwhile: not one scoped job started.
        assert _query(pg_dsn, "SELECT count(*) FROM {schema}.ledger WHERE type = 'scoped'",
                      schema) == [(0,)]
        assert queue.resume("scoped")
        wait_until(lambda: finished("scoped") == SCOPES * PER_SCOPE, 60, what="scoped jobs done")
        wait_until(lambda: len(_query(pg_dsn, "SELECT 1 FROM {schema}.ticks", schema)) >= 2, 30,
                   what="two schedule ticks")
        registered = queue.workers()
    finally:
        store.close()

    for proc, out, _ in procs:  # a graceful stop: every process exits 0
        proc.terminate()
        assert proc.wait(30) == 0, out.read_text()[-2000:]

    # serialize_by_scope: one run per job, never two of one scope at a time, across processes.
    runs = _query(pg_dsn, "SELECT job_id, scope, started_at, finished_at, pid FROM "
                          "{schema}.ledger WHERE type = 'scoped' ORDER BY n", schema)
    assert sorted(str(r[0]) for r in runs) == sorted(str(i) for i in scoped)
    for n in range(SCOPES):
        intervals = [(r[2], r[3]) for r in runs if r[1] == f"acct:{n}"]
        assert _overlap_at_most(intervals) == 1
    # Which process runs a scope's jobs is the claim's choice (a completing worker claims the
    # scope's next job in its completion's transaction), so the spread is not asserted; every
    # process registered and heartbeat through PgBouncer instead.
    assert {w.pid for w in registered} == {proc.pid for proc, _, _ in procs}
    # The resource pool: never more than its concurrency in flight, across processes.
    gpu = _query(pg_dsn, "SELECT started_at, finished_at FROM {schema}.ledger "
                         "WHERE type = 'gpu'", schema)
    assert len(gpu) == GPU_JOBS
    assert 1 <= _overlap_at_most(gpu) <= GPU_CONCURRENCY
    # Transactional handlers: one committed effect per job.
    effects = _query(pg_dsn, "SELECT job_id, attempt FROM {schema}.effects", schema)
    assert sorted(effects) == sorted((str(i), 1) for i in tx)
    # Schedules: every tick job ran once.
    ticks = _query(pg_dsn, "SELECT job_id FROM {schema}.ticks", schema)
    assert len(ticks) == len(set(ticks))
    # The cancelled job is gone; nothing failed; no claim ever failed through PgBouncer.
    with PostgresStore.connect(pg_dsn, schema=schema) as direct:
        assert direct.job_get(block) is None
        assert direct.job_count_by_status()[JobStatus.FAILED] == 0
    assert _events([log for _, _, log in procs], "claim_failed") == []
