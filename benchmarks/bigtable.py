"""Opt-in scenario: golemq-pg beside a big history, and what one job costs the database.

Not part of ``python -m benchmarks`` (neither ``--quick`` nor the full run): it writes
gigabytes and takes about twenty minutes (``--legacy``: longer). Run it alone, on a machine
nothing else is measuring on::

    python -m benchmarks.bigtable                  # 10M jobs: 9M finished (history), 1M due
    python -m benchmarks.bigtable --legacy         # the 10M rows all in `jobs`, then upgraded
    python -m benchmarks.bigtable --cost-only      # only the per-job cost (seconds)
    python -m benchmarks.bigtable --rows 200000 --due 20000 --soak-minutes 0.2   # a try-out

The layout measured is migration 0008's (sql/migrations/0008_history.sql): `jobs` holds live
work only; a finished job moves, in the statement that finishes it, into `jobs_history`,
partitioned by status and then by UTC day of finished_at, whose rows history_counts counts
exactly. The figures issue 39 sets targets for are printed at the end with their target and
"met" or "NOT met", and are under "targets" in the JSON.

Phases, each in a fresh schema made and dropped by the harness (``benchmarks/sandbox.py``):

1. **cost**: drain ``--cost-jobs`` no-op jobs (10k-row backlog batches) with one worker of
   concurrency 32 in an empty schema: jobs/s (the soak's yardstick), claim latency, and CPU
   seconds per job of the database backends serving the worker (``/proc/<pid>/stat`` of the
   backends whose ``application_name`` is the worker's: exact, whatever else runs on the
   server) and of the worker process. Then ``--baseline-seconds`` of the soak's own load (a
   producer topping up a full-speed drain) in that empty schema: the soak's like-for-like
   yardstick (a producer on the same cores costs the drain its share of them).
2. **generation**: ``--rows`` jobs made by SQL, ``--due`` of them due in `jobs`, the others
   finished over the past 30 days (one in ``--failed-every`` a dead letter, the rest
   succeeded), ids in the order they finished. By default the finished ones are history:
   the day partitions of those days are made first (``history_ensure_partition``), the rows
   loaded through the `jobs_history` root, whose statement triggers count them (no slower
   than loading through the status's partition, which fires none: 6.1 s against 6.4 s for
   a million rows, measured once), the count deltas folded, then ``VACUUM ANALYZE``; sizes.
   While the run is small (``--rows`` at most ``--verify-max-rows``) the maintained counts
   (count_by_status(), stats() and history_counts per day, type and status) are checked
   against a real count here and after each later phase.

   ``--legacy``: every row in `jobs`, as a release before 0008 left them. The reads are
   measured on that layout, then the **upgrade**: a worker drains (topped up by a producer)
   while its maintenance moves the finished rows into the history (``history_upkeep``,
   5,000 a call, back to back), timed until `jobs` holds none; then ``VACUUM ANALYZE`` (what
   autovacuum does next), and the other phases. 0008 makes partitions from yesterday on, so
   the moved rows of older days land in the DEFAULT partitions, which retention sweeps row
   by row; ``--legacy-partitions`` makes those days' partitions before the move instead.
3. **reads**: stats(), count_by_status(), the dashboard overview's verbs
   (``dashboard_overview``, and ``dashboard_throughput(60)`` which the page reads too) and
   the Prometheus collector's ``metrics_type_gauges``, median and max of 5 calls each
   (target: median under 100 ms; a call that fails, e.g. a dashboard read past its
   statement timeout, is reported with its error); without a target, the Failed page
   (``dashboard_dead_letters``), the first jobs page, find() (three filters), workers()
   (the registry) and paused() (the pause check). Again after the soak and after retention.
4. **drain at size**: ``--drain-jobs`` of the due rows (at most all of them), rate against
   phase 1's rate.
5. **soak**: a worker drains at full speed for ``--soak-minutes`` while a producer tops the
   backlog up by what it finished (at most ``SOAK_AHEAD`` ahead); its rate against phase 1's
   drain (target: at least 0.8x) and against phase 1's baseline; `jobs` sizes, dead tuples
   and HOT-update share and the history's size before and after, then after a ``VACUUM`` of
   `jobs`. Vacuuming is the server's autovacuum with PostgreSQL's default settings (whether
   the server runs it at all is in the output: with ``autovacuum = off`` nothing vacuums);
   ``--autovacuum`` gives `jobs` the per-table settings docs/DEPLOYMENT.md recommends.
6. **retention beside a drain**: a worker with ``Retention(older_than=--retention-days)``
   removes every finished row older than that (``history_prune``: the day partitions wholly
   before the cut-off dropped, the partition holding it and the DEFAULT ones swept 1,000
   rows a statement, back to back) while another worker drains, topped up by a producer,
   until a statement comes back short (at most ``--sweep-seconds``): seconds (target: under
   60), rows/s, and claim p99 during it against phase 4's (``--sweep-seconds 0``: skipped).

Figures go to stdout and to ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from benchmarks.sandbox import Sandbox, fresh_schema
from golemq_pg import JobStatus, PostgresStore, Queue, Retention, Worker
from golemq_pg.metrics import COUNT_CAP as METRICS_COUNT_CAP
from golemq_pg.store.dashboard import JobQuery
from golemq_pg.store.port import ClaimedJob, ClaimRequest, HistoryUpkeep
from golemq_pg.worker.maintenance import HISTORY_DAYS_AHEAD, HISTORY_LEGACY_BATCH, PRUNE_LIMIT

JOB_TYPE = "bench"
APP = "golemq-bigtable"
CLK_TCK = os.sysconf("SC_CLK_TCK")
DEAD_LETTER_ERROR = "bench: generated dead letter"

#: Issue 39's targets.
READ_TARGET_MS = 100.0
TARGET_READS = ("stats", "count_by_status", "dashboard_overview", "dashboard_throughput_60",
                "metrics_type_gauges")
RETENTION_TARGET_SECONDS = 60.0
SOAK_TARGET_RATIO = 0.8
#: A drain that finishes no job for this long has stalled: the run stops instead of waiting.
STALL_SECONDS = 120.0

# Statements run on a connection whose search_path is the sandbox's schema (_connect).
# Those run with parameters spell a literal % as %%.

#: The day partitions (both statuses) of every day the generated finished rows span.
_PARTITIONS = """
SELECT count(*) FILTER (WHERE history_ensure_partition(s.status, d.day::date))
  FROM unnest(ARRAY['succeeded', 'failed']) AS s(status),
       generate_series(history_day(now() - interval '30 days'),
                       history_day(now()), interval '1 day') AS d(day)
"""
#: Finished rows ``lo``..``hi`` of ``n``: id g finished (30 days / n) * (n - g) ago, so ids
#: follow finish times and the last hour holds its share (the overview counts the last
#: hour's); every ``every``-th one a dead letter.
_FILL_FINISHED = """
INSERT INTO {table} (id, type, payload, status, priority, run_at, attempts, max_attempts,
                     last_error, lease_token, started_at, finished_at, created_at, updated_at)
SELECT r.g, %(type)s, jsonb_build_object('i', r.g),
       CASE WHEN r.dead THEN 'failed' ELSE 'succeeded' END, 0, r.t,
       CASE WHEN r.dead THEN 3 ELSE 1 END, 3, CASE WHEN r.dead THEN %(error)s END, 1,
       r.t, r.t, r.t, r.t
  FROM (SELECT g, coalesce(g %% nullif(%(every)s::bigint, 0) = 0, false) AS dead,
               now() - (%(n)s::bigint - g) * (interval '30 days' / %(n)s::bigint) AS t
          FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) AS g) AS r
"""
#: The due rows take ids after the finished ones.
_SKIP_IDS = "SELECT setval(pg_get_serial_sequence('jobs', 'id'), %(last)s::bigint)"
_FILL_DUE = """
INSERT INTO jobs (type, payload) SELECT %(type)s, jsonb_build_object('i', g)
FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) AS g
"""
_SIZES = """
SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c
WHERE c.oid = 'jobs'::regclass OR c.oid IN (
    SELECT indexrelid FROM pg_index WHERE indrelid = 'jobs'::regclass)
ORDER BY c.relname
"""
_TUPLES = """
SELECT n_live_tup, n_dead_tup, n_tup_upd, n_tup_hot_upd, autovacuum_count, autoanalyze_count
  FROM pg_stat_user_tables WHERE relid = 'jobs'::regclass
"""
#: The history's leaves: day partitions, table and index bytes (the DEFAULT partitions'
#: apart), and its rows as the maintained counts say.
_HISTORY = """
SELECT count(*) FILTER (WHERE c.relname ~ '_[0-9]{8}$'),
       coalesce(sum(pg_relation_size(t.relid)), 0),
       coalesce(sum(pg_indexes_size(t.relid)), 0),
       coalesce(sum(pg_relation_size(t.relid) + pg_indexes_size(t.relid))
                FILTER (WHERE c.relname LIKE '%\\_default'), 0),
       (SELECT coalesce(sum(h.n), 0) FROM history_totals h)
  FROM pg_partition_tree('jobs_history') AS t JOIN pg_class c ON c.oid = t.relid
 WHERE t.isleaf
"""
_FINISHED_IN_JOBS = "SELECT count(*) FROM jobs WHERE status IN ('succeeded', 'failed')"
_REAL_BY_STATUS = "SELECT j.status, count(*) FROM jobs_all j GROUP BY j.status"
_REAL_DUE = "SELECT count(*) FROM jobs WHERE status = 'pending' AND run_at <= now()"
_REAL_DAYS = """
SELECT history_day(h.finished_at), h.type, h.status, count(*)
  FROM jobs_history h GROUP BY 1, 2, 3
"""
_KEPT_DAYS = """
SELECT c.day, c.type, c.status, sum(c.n)::bigint
  FROM (SELECT f.day, f.type, f.status, f.n FROM history_counts f
        UNION ALL
        SELECT d.day, d.type, d.status, d.n FROM history_count_deltas d) c
 GROUP BY 1, 2, 3
HAVING sum(c.n) <> 0
"""
_BACKENDS = "SELECT pid FROM pg_stat_activity WHERE application_name = %(app)s"
#: The per-table autovacuum settings docs/DEPLOYMENT.md recommends (``--autovacuum``).
_RECOMMENDED_AUTOVACUUM = """
ALTER TABLE jobs SET (
    autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 10000,
    autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 1)
"""
@contextmanager
def _connect(box: Sandbox) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection whose search_path is the sandbox's schema."""
    with psycopg.connect(box.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(box.schema_name)))
        yield conn


def _one(conn: psycopg.Connection[Any], query: str, params: dict[str, Any] | None = None) -> Any:
    row = conn.execute(query, params).fetchone()
    return row[0] if row else None


class TimedStore(PostgresStore):
    """A PostgresStore that records how long each claim takes (seconds), and each
    ``history_upkeep`` (its start, seconds, rows moved)."""

    claims: list[float]
    upkeeps: list[tuple[float, float, int]]
    upkeep_errors: int

    def job_claim(self, request: ClaimRequest) -> list[ClaimedJob]:
        """The store's claim, timed."""
        started = time.perf_counter()
        try:
            return super().job_claim(request)
        finally:
            self.claims.append(time.perf_counter() - started)

    def history_upkeep(self, days_ahead: int = 3, legacy_limit: int = 5_000) -> HistoryUpkeep:
        """The store's upkeep, timed."""
        started = time.perf_counter()
        try:
            done = super().history_upkeep(days_ahead, legacy_limit)
        except Exception:
            self.upkeep_errors += 1
            raise
        self.upkeeps.append((started, time.perf_counter() - started, done.moved))
        return done


def _store(box: Sandbox, app: str = APP, max_size: int = 8) -> TimedStore:
    store = TimedStore.connect(box.dsn, schema=box.schema_name, min_size=1, max_size=max_size,
                               application_name=app)
    store.claims = []
    store.upkeeps = []
    store.upkeep_errors = 0
    return store


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else 0.0


def _claim_figures(claims: list[float]) -> dict[str, float]:
    return {"claims": len(claims), "claim_p50_ms": round(_pct(claims, 0.5) * 1000, 2),
            "claim_p99_ms": round(_pct(claims, 0.99) * 1000, 2)}


def backend_cpu(dsn: str, app: str) -> dict[int, float]:
    """CPU seconds (user + system) of each backend whose application_name is ``app``."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        pids = [row[0] for row in conn.execute(_BACKENDS, {"app": app}).fetchall()]
    out = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # another host's server, or the backend just left
        out[pid] = (int(fields[11]) + int(fields[12])) / CLK_TCK
    return out


def _wal_lsn(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
    return int(row[0]) if row else 0


def _process_cpu() -> float:
    times = os.times()
    return times.user + times.system


class Counter:
    """Handler calls, counted from many threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.value = 0

    def add(self) -> None:
        """One more."""
        with self._lock:
            self.value += 1


def _worker(store: PostgresStore, count: Counter, **options: Any) -> Worker:
    worker = Worker(store, poll_interval=0.5, **options)

    @worker.handler(JOB_TYPE, concurrency=32)
    def noop(_job: Any) -> None:
        count.add()

    return worker


def _drain(store: TimedStore, box: Sandbox, jobs: int, **options: Any) -> dict[str, float]:
    """Run a worker until it ran ``jobs`` handlers; rate, claim latency, CPU per job."""
    count = Counter()
    worker = _worker(store, count, **options)
    cpu0, own0, wal0 = backend_cpu(box.dsn, APP), _process_cpu(), _wal_lsn(box.dsn)
    store.claims.clear()
    started = time.perf_counter()
    worker.start()
    try:
        seen, moved_at = 0, started
        while count.value < jobs:
            time.sleep(0.005)
            if count.value != seen:
                seen, moved_at = count.value, time.perf_counter()
            elif time.perf_counter() - moved_at > STALL_SECONDS:
                raise RuntimeError(f"the drain stalled at {seen} of {jobs} jobs")
        seconds = time.perf_counter() - started
        cpu1, own1, wal1 = backend_cpu(box.dsn, APP), _process_cpu(), _wal_lsn(box.dsn)
    finally:
        worker.stop()
    db = sum(v - cpu0.get(pid, 0.0) for pid, v in cpu1.items())
    return {"jobs": count.value, "seconds": round(seconds, 2),
            "jobs_per_s": round(count.value / seconds, 1),
            "db_cpu_ms_per_job": round(db / count.value * 1000, 4),
            "worker_cpu_ms_per_job": round((own1 - own0) / count.value * 1000, 4),
            # The server's WAL, whoever wrote it: an upper bound on a shared server.
            "wal_bytes_per_job_at_most": round((wal1 - wal0) / count.value),
            **_claim_figures(store.claims)}


def _fill(box: Sandbox, query: sql.Composed | str, lo: int, hi: int,
          chunk: int = 1_000_000, **params: Any) -> None:
    """Run ``query`` over ids ``lo``..``hi``, ``chunk`` a statement."""
    with _connect(box) as conn:
        for start in range(lo, hi + 1, chunk):
            conn.execute(query, {"type": JOB_TYPE, "lo": start, "hi": min(hi, start + chunk - 1),
                                 **params})


def _vacuum(box: Sandbox, tables: Sequence[str] = ("jobs",), *, analyze: bool = True) -> float:
    started = time.perf_counter()
    with _connect(box) as conn:
        stmt = "VACUUM (ANALYZE) {}" if analyze else "VACUUM {}"
        conn.execute(sql.SQL(stmt).format(sql.SQL(", ").join(map(sql.Identifier, tables))))
    return round(time.perf_counter() - started, 1)


def table_state(box: Sandbox) -> dict[str, Any]:
    """Sizes (MB) of the jobs table and each of its indexes, and its tuple counters."""
    with _connect(box) as conn:
        sizes = {name: round(size / 2**20, 1)
                 for name, size in conn.execute(_SIZES).fetchall()}
        live, dead, upd, hot, autovacuums, autoanalyzes = conn.execute(_TUPLES).fetchall()[0]
    return {"autovacuums": autovacuums, "autoanalyzes": autoanalyzes,
            "mb": sizes, "table_mb": sizes.get("jobs", 0.0),
            "indexes_mb": round(sum(v for k, v in sizes.items() if k != "jobs"), 1),
            "live": live, "dead": dead, "hot_update_share": round(hot / upd, 3) if upd else None}


def history_state(box: Sandbox) -> dict[str, Any]:
    """The history's day partitions, sizes (MB) and rows (its maintained counts)."""
    with _connect(box) as conn:
        days, table, indexes, default, rows = conn.execute(_HISTORY).fetchall()[0]
    return {"day_partitions": int(days), "table_mb": round(int(table) / 2**20, 1),
            "indexes_mb": round(int(indexes) / 2**20, 1),
            "default_partitions_mb": round(int(default) / 2**20, 1), "rows": int(rows)}


def _timed(call: Callable[[], object], times: int = 5) -> dict[str, Any]:
    """Median and max of ``times`` calls; a call that raises (a dashboard read past its
    statement timeout) ends the series with its error instead of the run."""
    seen: list[float] = []
    for _ in range(times):
        started = time.perf_counter()
        try:
            call()
        except Exception as exc:
            return {"error": f"{type(exc).__name__}: {exc}"[:300], "calls_before": len(seen),
                    "failed_after_ms": round((time.perf_counter() - started) * 1000, 1)}
        seen.append(time.perf_counter() - started)
    return {"median_ms": round(statistics.median(seen) * 1000, 2),
            "max_ms": round(max(seen) * 1000, 2)}


def reads(queue: Queue, store: PostgresStore) -> dict[str, dict[str, Any]]:
    """The read verbs' latency on the current tables (the first five have a target)."""
    return {
        "stats": _timed(queue.stats),
        "count_by_status": _timed(queue.count_by_status),
        "dashboard_overview": _timed(store.dashboard_overview),
        "dashboard_throughput_60": _timed(lambda: store.dashboard_throughput(60)),
        "metrics_type_gauges": _timed(lambda: store.metrics_type_gauges(METRICS_COUNT_CAP)),
        "dashboard_dead_letters": _timed(store.dashboard_dead_letters),
        "dashboard_jobs_first_page": _timed(lambda: store.dashboard_jobs(JobQuery())),
        "find_newest_100": _timed(lambda: queue.find(limit=100)),
        "find_failed_100": _timed(lambda: queue.find(statuses=[JobStatus.FAILED], limit=100)),
        "find_type_succeeded_100": _timed(lambda: queue.find(
            types=[JOB_TYPE], statuses=[JobStatus.SUCCEEDED], limit=100)),
        "workers_registry": _timed(queue.workers),
        "paused_check": _timed(queue.paused),
    }


def verify_counts(box: Sandbox, queue: Queue) -> dict[str, Any]:
    """The maintained counts against a real count, on a quiet schema: count_by_status() and
    stats() against jobs_all, history_counts (+ deltas) against the history per day, type
    and status."""
    by_status = {str(k): v for k, v in queue.count_by_status().items()}
    stats = queue.stats()
    with _connect(box) as conn:
        real = {str(s): int(n) for s, n in conn.execute(_REAL_BY_STATUS).fetchall()}
        real_due = int(_one(conn, _REAL_DUE))
        real_days = {(d, t, s): int(n) for d, t, s, n in conn.execute(_REAL_DAYS).fetchall()}
        kept_days = {(d, t, s): int(n) for d, t, s, n in conn.execute(_KEPT_DAYS).fetchall()}
    real_all = {str(s): real.get(str(s), 0) for s in JobStatus}
    real_stats = {"pending": real_due, "scheduled": real_all["pending"] - real_due,
                  "running": real_all["running"], "succeeded": real_all["succeeded"],
                  "failed": real_all["failed"]}
    wrong_days = [{"day": str(k[0]), "type": k[1], "status": k[2],
                   "kept": kept_days.get(k, 0), "real": real_days.get(k, 0)}
                  for k in sorted(set(real_days) | set(kept_days), key=str)
                  if kept_days.get(k, 0) != real_days.get(k, 0)]
    exact = (by_status == real_all and dict(stats) == real_stats and not wrong_days)
    return {"exact": exact, "count_by_status": by_status, "real": real_all,
            "stats": dict(stats), "real_stats": real_stats, "day_rows": len(real_days),
            "wrong_days": wrong_days[:10], "wrong_day_count": len(wrong_days)}


#: The soak's producer keeps at most this many jobs ahead of what the worker finished.
SOAK_AHEAD = 20_000


@contextmanager
def _producer(queue: Queue, stop: threading.Event, done: Counter) -> Iterator[list[int]]:
    """Top the backlog up by what the worker finishes (a steady state at the drain rate)."""
    added = [0]

    def produce() -> None:
        while not stop.is_set():
            if added[0] - done.value >= SOAK_AHEAD:
                time.sleep(0.01)
                continue
            added[0] += queue.add_many(JOB_TYPE, [{"i": i} for i in range(500)])

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    try:
        yield added
    finally:
        stop.set()
        thread.join()


def _topped_up(queue: Queue, store: TimedStore, seconds: float) -> dict[str, Any]:
    """A full-speed drain topped up by the producer for ``seconds``."""
    count = Counter()
    worker = _worker(store, count)
    store.claims.clear()
    stop = threading.Event()
    started = time.perf_counter()
    worker.start()
    try:
        with _producer(queue, stop, count) as added:
            time.sleep(seconds)
    finally:
        worker.stop()
    elapsed = time.perf_counter() - started
    return {"seconds": round(elapsed, 1), "processed": count.value,
            "processed_per_s": round(count.value / elapsed, 1), "enqueued": added[0],
            **_claim_figures(store.claims)}


def phase_cost(dsn: str, jobs: int, baseline_seconds: float) -> dict[str, Any]:
    """Phase 1: the per-job cost on a small backlog (10k rows topped up), then the soak's
    load on the empty schema for ``baseline_seconds``."""
    with fresh_schema(dsn, "bigtable_cost") as box:
        store = _store(box)
        try:
            store.migrate()
            filled = 0
            while filled < jobs:
                _fill(box, _FILL_DUE, filled + 1, filled + 10_000)
                filled += 10_000
            _vacuum(box)
            out: dict[str, Any] = _drain(store, box, jobs)
            if baseline_seconds > 0:
                out["baseline"] = _topped_up(Queue(store), store, baseline_seconds)
        finally:
            store.close()
    return out


def generate(box: Sandbox, store: TimedStore, args: argparse.Namespace) -> dict[str, Any]:
    """Phase 2: the finished rows (history, or ``jobs`` with --legacy), then the due ones."""
    finished = args.rows - args.due
    out: dict[str, Any] = {"layout": "legacy" if args.legacy else "history",
                           "finished": finished, "due": args.due}
    started = time.perf_counter()
    if not args.legacy or args.legacy_partitions:
        with _connect(box) as conn:
            out["partitions_made"] = int(_one(conn, _PARTITIONS))
        out["partitions_seconds"] = round(time.perf_counter() - started, 1)
    table = "jobs" if args.legacy else "jobs_history"
    if finished:
        _fill(box, sql.SQL(_FILL_FINISHED).format(table=sql.Identifier(table)), 1, finished,
              n=finished, every=args.failed_every, error=DEAD_LETTER_ERROR)
        with _connect(box) as conn:
            conn.execute(_SKIP_IDS, {"last": finished})
    _fill(box, _FILL_DUE, finished + 1, args.rows)
    if not args.legacy:
        # What a worker's maintenance does every few seconds (no legacy rows: it moves none).
        out["deltas_folded"] = store.history_upkeep(HISTORY_DAYS_AHEAD, 0).folded
    out["seconds"] = round(time.perf_counter() - started, 1)
    out["vacuum_analyze_seconds"] = _vacuum(box, ("jobs", "jobs_history", "history_counts"))
    out["jobs"] = table_state(box)
    out["history"] = history_state(box)
    return out


def phase_upgrade(box: Sandbox, queue: Queue, store: TimedStore, legacy_rows: int,
                  seconds: float) -> dict[str, Any]:
    """--legacy: a drain, topped up by the producer, while the worker's maintenance moves
    the finished rows out of `jobs` (history_upkeep, HISTORY_LEGACY_BATCH a call, back to
    back), until a call moves a short batch or ``seconds`` pass."""
    count = Counter()
    worker = _worker(store, count)
    store.claims.clear()
    store.upkeeps.clear()
    stop = threading.Event()
    started = time.perf_counter()
    worker.start()
    try:
        with _producer(queue, stop, count):
            while time.perf_counter() - started < seconds:
                time.sleep(0.2)
                calls = list(store.upkeeps)
                moved = sum(c[2] for c in calls)
                if moved >= legacy_rows or (moved and calls[-1][2] < HISTORY_LEGACY_BATCH):
                    break
    finally:
        worker.stop()
    wall = time.perf_counter() - started
    calls = list(store.upkeeps)
    moving = [c for c in calls if c[2]]
    moved = sum(c[2] for c in calls)
    move_seconds = (moving[-1][0] + moving[-1][1] - moving[0][0]) if moving else 0.0
    with _connect(box) as conn:
        left = int(_one(conn, _FINISHED_IN_JOBS))
    out: dict[str, Any] = {
        "legacy_rows": legacy_rows, "moved": moved, "left_in_jobs": left,
        "complete": left == 0, "wall_seconds": round(wall, 1),
        "move_seconds": round(move_seconds, 1),
        "moved_per_s": round(moved / move_seconds, 1) if move_seconds else None,
        "upkeep_calls": len(calls), "upkeep_errors": store.upkeep_errors,
        "upkeep_call_p50_ms": round(_pct([c[1] for c in moving], 0.5) * 1000, 1),
        "upkeep_call_max_ms": round(max((c[1] for c in moving), default=0.0) * 1000, 1),
        "drained": count.value, "drained_per_s": round(count.value / wall, 1),
        **_claim_figures(store.claims),
        "jobs": table_state(box), "history": history_state(box),
    }
    out["vacuum_analyze_seconds"] = _vacuum(box, ("jobs", "jobs_history", "history_counts"))
    out["jobs_after_vacuum"] = table_state(box)
    return out


class PruneCountingStore(PostgresStore):
    """A PostgresStore that records its retention statements: start, seconds, rows."""

    prunes: list[tuple[float, float, int]]

    def job_prune(self, statuses: Sequence[JobStatus], *, before: datetime | None,
                  age: float | None, limit: int | None = None) -> int:
        """The store's prune, timed and counted."""
        started = time.perf_counter()
        deleted = super().job_prune(statuses, before=before, age=age, limit=limit)
        self.prunes.append((started, time.perf_counter() - started, deleted))
        return deleted


def phase_retention(box: Sandbox, queue: Queue, store: TimedStore, days: float,
                    seconds: float) -> dict[str, Any]:
    """Phase 6: retention of every finished row older than ``days`` beside a topped-up drain.

    Runs until a statement comes back short (nothing older than the cut-off is left) or
    ``seconds`` pass, whichever is first; the producer keeps the drain busy all along, so
    every claim timed here ran beside the retention.
    """
    before = history_state(box)
    sweeper_store = PruneCountingStore.connect(box.dsn, schema=box.schema_name, max_size=2,
                                               application_name=APP + "-sweeper")
    sweeper_store.prunes = []
    sweeper = Worker(sweeper_store, poll_interval=1.0,
                     retention=Retention(older_than=timedelta(days=days), sweep_interval=1))
    count = Counter()
    drainer = _worker(store, count)
    store.claims.clear()
    stop = threading.Event()
    started = time.perf_counter()
    drainer.start()
    sweeper.start()
    try:
        with _producer(queue, stop, count):
            while time.perf_counter() - started < seconds:
                time.sleep(0.1)
                prunes = sweeper_store.prunes
                if prunes and prunes[-1][2] < PRUNE_LIMIT:
                    break
    finally:
        sweeper.stop()
        drainer.stop()
        sweeper_store.close()
    wall = time.perf_counter() - started
    prunes = sweeper_store.prunes
    removed = sum(p[2] for p in prunes)
    took = (prunes[-1][0] + prunes[-1][1] - prunes[0][0]) if prunes else 0.0
    return {
        "older_than_days": days, "complete": bool(prunes) and prunes[-1][2] < PRUNE_LIMIT,
        "seconds": round(took, 1), "wall_seconds": round(wall, 1), "rows_removed": removed,
        "rows_per_s": round(removed / took, 1) if took else None,
        "statements": len(prunes),
        # The first statement drops every day partition wholly before the cut-off.
        "first_statement_rows": prunes[0][2] if prunes else 0,
        "first_statement_ms": round(prunes[0][1] * 1000, 1) if prunes else 0.0,
        "statement_max_ms": round(max((p[1] for p in prunes), default=0.0) * 1000, 1),
        "drained": count.value, "drained_per_s": round(count.value / wall, 1),
        **_claim_figures(store.claims),
        "history_before": before, "history_after": history_state(box),
    }


def _soak(box: Sandbox, queue: Queue, store: TimedStore, minutes: float) -> dict[str, Any]:
    """Phase 5: a full-speed drain topped up by a producer."""
    out: dict[str, Any] = {"minutes": minutes, "before": table_state(box),
                           "history_before": history_state(box)}
    out.update(_topped_up(queue, store, minutes * 60))
    out["after"] = table_state(box)
    out["history_after"] = history_state(box)
    out["vacuum_seconds"] = _vacuum(box, analyze=False)
    out["after_vacuum"] = table_state(box)
    return out


def _check_counts(box: Sandbox, queue: Queue, args: argparse.Namespace,
                  out: dict[str, Any], when: str) -> None:
    """verify_counts while the run is small enough for a real count (a quiet schema)."""
    if args.rows <= args.verify_max_rows:
        found = verify_counts(box, queue)
        out.setdefault("count_checks", {})[when] = found
        print("counts", when, "exact" if found["exact"] else "NOT EXACT",
              json.dumps(found, default=str), flush=True)


def phase_big(dsn: str, args: argparse.Namespace, cost: dict[str, Any]) -> dict[str, Any]:
    """Phases 2-6 on one big schema."""
    out: dict[str, Any] = {}
    with fresh_schema(dsn, "bigtable") as box:
        store = _store(box)
        queue = Queue(store)
        try:
            store.migrate()
            with _connect(box) as conn:
                out["server_autovacuum"] = _one(conn, "SHOW autovacuum")
            out["generation"] = generate(box, store, args)
            print("generated", json.dumps(out["generation"]), flush=True)
            _check_counts(box, queue, args, out, "after_generation")
            if args.legacy:
                out["reads_legacy"] = reads(queue, store)
                print("reads on the legacy layout", json.dumps(out["reads_legacy"]), flush=True)
                out["upgrade"] = phase_upgrade(box, queue, store, args.rows - args.due,
                                               args.upgrade_seconds)
                print("upgraded", json.dumps(out["upgrade"]), flush=True)
                _check_counts(box, queue, args, out, "after_upgrade")
            if args.autovacuum:
                with _connect(box) as conn:
                    conn.execute(_RECOMMENDED_AUTOVACUUM)
            out["reads"] = reads(queue, store)
            print("reads", json.dumps(out["reads"]), flush=True)
            # At most the due rows (a try-out's few, fewer still after its upgrade).
            with _connect(box) as conn:
                due = int(_one(conn, _REAL_DUE))
            out["drain"] = _drain(store, box, min(args.drain_jobs, max(due, 1)))
            out["drain"]["rate_vs_small_backlog"] = round(
                out["drain"]["jobs_per_s"] / cost["jobs_per_s"], 3)
            print("drained", json.dumps(out["drain"]), flush=True)
            if args.soak_minutes > 0:
                soak = out["soak"] = _soak(box, queue, store, args.soak_minutes)
                soak["rate_vs_cost_drain"] = round(
                    soak["processed_per_s"] / cost["jobs_per_s"], 3)
                if "baseline" in cost:
                    soak["rate_vs_baseline"] = round(
                        soak["processed_per_s"] / cost["baseline"]["processed_per_s"], 3)
                print("soaked", json.dumps(soak), flush=True)
                out["reads_after_soak"] = reads(queue, store)
                _check_counts(box, queue, args, out, "after_soak")
            if args.sweep_seconds > 0:
                kept = out["retention"] = phase_retention(
                    box, queue, store, args.retention_days, args.sweep_seconds)
                kept["claim_p99_without_retention_ms"] = out["drain"]["claim_p99_ms"]
                print("retention", json.dumps(kept), flush=True)
                out["reads_after_retention"] = reads(queue, store)
                _check_counts(box, queue, args, out, "after_retention")
        finally:
            store.close()
    return out


def _target(figure: str, value: Any, target: str | None, met: bool | None,
            **more: Any) -> dict[str, Any]:
    return {"figure": figure, "value": value, "target": target, "met": met, **more}


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 39's figures with their targets (``met`` None: a figure without a target)."""
    big = results.get("big")
    if big is None:
        return []
    found = []
    for name in TARGET_READS:
        r = big.get("reads", {}).get(name)
        if r is not None and "error" in r:
            found.append(_target(f"reads: {name} median of 5 (ms)", None,
                                 f"< {READ_TARGET_MS:g}", False, error=r["error"]))
        elif r is not None:
            found.append(_target(
                f"reads: {name} median of 5 (ms)", r["median_ms"], f"< {READ_TARGET_MS:g}",
                r["median_ms"] < READ_TARGET_MS, max_ms=r["max_ms"],
                max_met=r["max_ms"] < READ_TARGET_MS))
    if "soak" in big:
        soak = big["soak"]
        note = None
        if big.get("server_autovacuum") != "on":
            note = "the server's autovacuum is off: nothing vacuumed `jobs` during the soak"
        found.append(_target(
            "soak rate / phase-1 drain rate", soak["rate_vs_cost_drain"],
            f">= {SOAK_TARGET_RATIO:g}", soak["rate_vs_cost_drain"] >= SOAK_TARGET_RATIO,
            soak_per_s=soak["processed_per_s"], cost_per_s=results["cost"]["jobs_per_s"],
            note=note))
        if "rate_vs_baseline" in soak:
            found.append(_target(
                "soak rate / phase-1 baseline (same load, empty schema)",
                soak["rate_vs_baseline"], None, None,
                baseline_per_s=results["cost"]["baseline"]["processed_per_s"]))
    if "retention" in big:
        kept = big["retention"]
        found.append(_target(
            "retention: seconds to remove every row older than the cut-off",
            kept["seconds"], f"< {RETENTION_TARGET_SECONDS:g}",
            kept["complete"] and kept["seconds"] < RETENTION_TARGET_SECONDS,
            complete=kept["complete"], rows=kept["rows_removed"]))
        found.append(_target("retention: rows/s", kept["rows_per_s"], None, None))
        found.append(_target(
            "retention: claim p99 beside it (ms)", kept["claim_p99_ms"], None, None,
            without_ms=kept["claim_p99_without_retention_ms"]))
    if "upgrade" in big:
        up = big["upgrade"]
        found.append(_target(
            "upgrade: seconds to move the legacy finished rows beside a drain",
            up["move_seconds"], None, None, rows=up["moved"], left=up["left_in_jobs"],
            rows_per_s=up["moved_per_s"], drained_per_s=up["drained_per_s"],
            claim_p99_ms=up["claim_p99_ms"]))
    checks = big.get("count_checks", {})
    found.append(_target(
        "maintained counts equal a real count", sorted(checks) or "not checked (too big)",
        "exact", all(c["exact"] for c in checks.values()) if checks else None))
    return found


def _print_targets(found: list[dict[str, Any]]) -> None:
    print("\ntargets (issue 39)")
    for t in found:
        verdict = ("no target" if t["met"] is None else "met" if t["met"] else "NOT met")
        extra = {k: v for k, v in t.items()
                 if k not in ("figure", "value", "target", "met") and v is not None}
        target = f" target {t['target']}" if t["target"] else ""
        print(f"  {t['figure']}: {t['value']}{target}: {verdict}"
              + (f"  {json.dumps(extra, default=str)}" if extra else ""))


def main(argv: list[str] | None = None) -> int:
    """Run the phases; print and write the figures."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.bigtable", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dsn", default=os.environ.get(
        "GOLEMQ_DSN", "postgresql://postgres@127.0.0.1:5432/test"))
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--due", type=int, default=1_000_000)
    p.add_argument("--failed-every", type=int, default=20,
                   help="one finished row in this many is a dead letter (0: none)")
    p.add_argument("--legacy", action="store_true",
                   help="generate every row in `jobs` (a release before 0008), then time the "
                        "upgrade: the finished rows moved into the history beside a drain")
    p.add_argument("--legacy-partitions", action="store_true",
                   help="with --legacy: make the past days' history partitions before the "
                        "move (else the rows of days before yesterday land in DEFAULT)")
    p.add_argument("--upgrade-seconds", type=float, default=3600.0,
                   help="the most the --legacy upgrade may run (it stops when done)")
    p.add_argument("--cost-jobs", type=int, default=50_000)
    p.add_argument("--baseline-seconds", type=float, default=60.0,
                   help="the soak's load on the empty schema of phase 1 (0: skip)")
    p.add_argument("--drain-jobs", type=int, default=100_000)
    p.add_argument("--retention-days", type=float, default=1.0,
                   help="retention removes finished rows older than this")
    p.add_argument("--sweep-seconds", type=float, default=3600.0,
                   help="the most the retention phase may run (it stops when done; 0: skip)")
    p.add_argument("--soak-minutes", type=float, default=15.0)
    p.add_argument("--verify-max-rows", type=int, default=2_000_000,
                   help="check the maintained counts against real counts up to this --rows")
    p.add_argument("--cost-only", action="store_true", help="only phase 1")
    p.add_argument("--autovacuum", action="store_true",
                   help="give `jobs` the autovacuum settings docs/DEPLOYMENT.md recommends "
                        "(default: PostgreSQL's defaults; they act only where the server's "
                        "autovacuum is on)")
    p.add_argument("--out", type=Path, default=Path("benchmarks/out/bigtable.json"))
    args = p.parse_args(argv)
    if not 0 < args.due < args.rows:
        p.error("--due must be between 0 and --rows")
    if args.legacy_partitions and not args.legacy:
        p.error("--legacy-partitions goes with --legacy")
    results: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()},
                               "load_at_start": os.getloadavg()}
    results["cost"] = phase_cost(args.dsn, args.cost_jobs,
                                 0.0 if args.cost_only else args.baseline_seconds)
    print("cost", json.dumps(results["cost"]), flush=True)
    if not args.cost_only:
        results["big"] = phase_big(args.dsn, args, results["cost"])
    results["load_at_end"] = os.getloadavg()
    results["targets"] = targets(results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, default=str))
    print(json.dumps(results, indent=2, default=str))
    _print_targets(results["targets"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
