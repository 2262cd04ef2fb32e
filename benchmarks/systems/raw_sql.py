"""The raw-SQL ceiling: a tiny psycopg loop over golemq-pg's own table shape.

It claims B due rows with the same statement shape golemq-pg uses (a MATERIALIZED CTE with
FOR UPDATE SKIP LOCKED in claim order, then one UPDATE ... RETURNING) and completes them with
one ``UPDATE ... WHERE id = ANY(...)``, keeping rows as SUCCEEDED. No leases renewed, no
guards, no retries, no handler dispatch: nothing a real queue could do faster than this.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
from psycopg import sql

from benchmarks.sandbox import Sandbox, apply_golemq_schema
from benchmarks.systems.base import (
    JOB_TYPE,
    LatencyProbe,
    LoadedResult,
    LoadPlan,
    SteadyResult,
    System,
    Variant,
    paced,
    payload_text,
    produce_paced,
    wait_until,
)

_CLAIM = """
WITH picked AS MATERIALIZED (
    SELECT id FROM {jobs}
     WHERE status = 'pending' AND type = %(type)s AND run_at <= now()
     ORDER BY priority DESC, run_at, id
     LIMIT %(limit)s
     FOR UPDATE SKIP LOCKED
)
UPDATE {jobs} AS j
   SET status = 'running', attempts = j.attempts + 1, lease_owner = %(owner)s,
       lease_token = j.lease_token + 1, lease_expires_at = now() + interval '5 minutes',
       started_at = now(), updated_at = now()
  FROM picked
 WHERE j.id = picked.id
RETURNING j.id, j.payload
"""

_COMPLETE = """
UPDATE {jobs}
   SET status = 'succeeded', finished_at = now(), updated_at = now(), lease_expires_at = NULL
 WHERE id = ANY(%(ids)s) AND lease_owner = %(owner)s AND status = 'running'
"""

_FILL = """
INSERT INTO {jobs} (type, payload)
SELECT %(type)s, jsonb_build_object('i', g) FROM generate_series(1, %(n)s) AS g
"""

_FILL_RANGE = """
INSERT INTO {jobs} (type, payload)
SELECT %(type)s, jsonb_build_object('i', g)
  FROM generate_series(%(first)s::integer, %(last)s::integer) AS g
"""

#: Jobs that ran once and succeeded, finished over the past 30 days (the shape of
#: benchmarks/bigtable.py's finished rows): a long-running queue's kept history, where
#: golemq-pg keeps it (migration 0008: jobs_history, a partition per status and day, made
#: first as the maintenance service would have; ids from the jobs table's identity).
_MAKE_HISTORY_DAYS = """
SELECT {ensure}('succeeded', {day}(now()) - k) FROM generate_series(0, 31) AS k
"""
_FILL_FINISHED = """
INSERT INTO {history} (id, type, payload, status, priority, run_at, attempts, max_attempts,
                       lease_token, started_at, finished_at, created_at, updated_at)
SELECT nextval(pg_get_serial_sequence(format('%%I.jobs', %(schema)s::text), 'id')),
       %(type)s, jsonb_build_object('i', g),
       'succeeded', 0, t, 1, 3, 1, t, t, t, t
  FROM (SELECT g, now() - interval '1 hour' - (g %% 2592000) * interval '1 second' AS t
          FROM generate_series(1, %(n)s::bigint) AS g) AS finished
"""

_COUNT_FINISHED = "SELECT count(*) FROM {all} WHERE status = 'succeeded'"

_INSERT_ONE = "INSERT INTO {jobs} (type, payload) VALUES (%(type)s, %(payload)s::jsonb)"
_COPY = "COPY {jobs} (type, payload) FROM STDIN"
_CHANNEL = "SELECT {fn}('jobs')"


class _Statements:
    """The ceiling's statements, composed for one schema."""

    def __init__(self, schema: str) -> None:
        jobs = sql.Identifier(schema, "jobs")
        self.claim = sql.SQL(_CLAIM).format(jobs=jobs)
        self.complete = sql.SQL(_COMPLETE).format(jobs=jobs)
        self.fill = sql.SQL(_FILL).format(jobs=jobs)
        self.fill_range = sql.SQL(_FILL_RANGE).format(jobs=jobs)
        self.make_history_days = sql.SQL(_MAKE_HISTORY_DAYS).format(
            ensure=sql.Identifier(schema, "history_ensure_partition"),
            day=sql.Identifier(schema, "history_day"))
        self.fill_finished = sql.SQL(_FILL_FINISHED).format(
            history=sql.Identifier(schema, "jobs_history"))
        self.count_finished = sql.SQL(_COUNT_FINISHED).format(
            all=sql.Identifier(schema, "jobs_all"))
        self.insert_one = sql.SQL(_INSERT_ONE).format(jobs=jobs)
        self.copy = sql.SQL(_COPY).format(jobs=jobs)
        self.channel = sql.SQL(_CHANNEL).format(fn=sql.Identifier(schema, "channel_name"))


class _Consumer:
    """One claim/complete loop on its own autocommit connection."""

    def __init__(self, box: Sandbox, batch: int, owner: str) -> None:
        self.q = _Statements(box.schema_name)
        self.conn = psycopg.connect(box.dsn, autocommit=True)
        self.batch = batch
        self.owner = owner
        self.processed = 0

    def step(self, on_job: Any = None) -> int:
        """Claim, run the no-op handler, complete; returns how many jobs went through."""
        rows = self.conn.execute(
            self.q.claim, {"type": JOB_TYPE, "limit": self.batch, "owner": self.owner}
        ).fetchall()
        if not rows:
            return 0
        if on_job is not None:
            for _id, payload in rows:
                on_job(payload)
        self.conn.execute(self.q.complete, {"ids": [r[0] for r in rows], "owner": self.owner})
        self.processed += len(rows)
        return len(rows)

    def close(self) -> None:
        self.conn.close()


def fill_golemq_table(box: Sandbox, n: int) -> None:
    """Insert ``n`` due no-op jobs into golemq-pg's table in ``box`` in one statement (the
    fast setup for big backlogs; golemq-pg's table shape, not its API). The scenarios ANALYZE
    a filled backlog (``sandbox.analyze_backlog``), as they do every system's."""
    q = _Statements(box.schema_name)
    with psycopg.connect(box.dsn, autocommit=True) as conn:
        conn.execute(q.fill, {"type": JOB_TYPE, "n": n})


def fill_golemq_history(box: Sandbox, n: int) -> None:
    """Insert ``n`` finished (succeeded) no-op jobs into golemq-pg's history in ``box`` in one
    statement (its day partitions made first): the kept history of a queue that has run for a
    while (not analyzed here)."""
    q = _Statements(box.schema_name)
    with psycopg.connect(box.dsn, autocommit=True) as conn:
        conn.execute(q.make_history_days)
        conn.execute(q.fill_finished, {"type": JOB_TYPE, "n": n, "schema": box.schema_name})


def count_golemq_finished(box: Sandbox) -> int:
    """The succeeded rows of golemq-pg's table in ``box``."""
    q = _Statements(box.schema_name)
    with psycopg.connect(box.dsn, autocommit=True) as conn:
        rows = conn.execute(q.count_finished).fetchall()
    return int(rows[0][0])


class RawSql(System):
    """The ceiling: claim B + complete B in bare SQL, 1-2 threads."""

    name = "raw-sql"
    title = "raw SQL ceiling"
    isolation = "schema"

    def variants(self, scenario: str, quick: bool) -> list[Variant]:
        def v(batch: int, threads: int, *, reference: bool = False,
              full_only: bool = False) -> Variant:
            return Variant(self.name, f"b{batch}x{threads}",
                           f"raw SQL B={batch} x{threads} thread{'s' if threads > 1 else ''}",
                           {"batch": batch, "threads": threads}, reference, full_only)

        if scenario == "drain":
            return [v(100, 1, reference=True), v(100, 2, reference=True),
                    v(500, 1, full_only=True), v(500, 2, full_only=True),
                    v(10, 1, full_only=True)]
        if scenario == "steady":
            return [v(100, 2, reference=True)]
        if scenario == "latency":
            return [Variant(self.name, "listen", "raw SQL LISTEN + claim 100",
                            {"batch": 100, "threads": 1}, reference=True)]
        if scenario == "loaded":
            return [Variant(self.name, "listen-b100x2", "raw SQL LISTEN + claim 100 x2 threads",
                            {"batch": 100, "threads": 2}, reference=True)]
        if scenario == "bulk":
            return [Variant(self.name, "copy", "raw SQL COPY", {}, reference=True)]
        if scenario == "single":
            return [Variant(self.name, "insert", "raw SQL INSERT+COMMIT", {}, reference=True)]
        if scenario == "guarded":
            # Never more than 32 jobs leased, as under a pool with a cap of 32 (claim 32,
            # run, commit their completion, claim again): a reference for the binding pool.
            return [Variant(self.name, "b32x1",
                            "raw SQL B=32 x1 thread (never more than 32 leased)",
                            {"batch": 32, "threads": 1})]
        return [v(100, 1, reference=True)]

    def install(self, box: Sandbox) -> None:
        with psycopg.connect(box.dsn) as conn:
            apply_golemq_schema(conn, box.schema_name)

    def enqueue_setup(self, box: Sandbox, n: int, *, scopes: int = 0,
                      interleaved: bool = False) -> None:
        fill_golemq_table(box, n)

    def bulk_enqueue(self, box: Sandbox, n: int) -> float:
        q = _Statements(box.schema_name)
        with psycopg.connect(box.dsn) as conn:
            started = time.perf_counter()
            with conn.cursor() as cur, cur.copy(q.copy) as copy:
                for i in range(n):
                    copy.write_row((JOB_TYPE, payload_text(i)))
            conn.commit()
            return time.perf_counter() - started

    def single_enqueue(self, box: Sandbox, n: int) -> float:
        q = _Statements(box.schema_name)
        with psycopg.connect(box.dsn, autocommit=True) as conn:
            started = time.perf_counter()
            for i in range(n):
                conn.execute(q.insert_one, {"type": JOB_TYPE, "payload": payload_text(i)})
            return time.perf_counter() - started

    def drain(self, box: Sandbox, variant: Variant, n: int) -> float:
        consumers = [_Consumer(box, variant.options["batch"], f"raw-{t}")
                     for t in range(variant.options["threads"])]
        barrier = threading.Barrier(len(consumers) + 1)
        finished: list[float] = []

        def loop(consumer: _Consumer) -> None:
            barrier.wait()
            while consumer.step():
                pass
            finished.append(time.perf_counter())

        threads = [threading.Thread(target=loop, args=(c,), daemon=True) for c in consumers]
        for thread in threads:
            thread.start()
        barrier.wait()
        started = time.perf_counter()
        for thread in threads:
            thread.join()
        for consumer in consumers:
            consumer.close()
        done = sum(c.processed for c in consumers)
        if done != n:
            raise RuntimeError(f"raw drain processed {done} of {n} jobs")
        return max(finished) - started

    def drain_partial(self, box: Sandbox, variant: Variant, k: int) -> float:
        consumer = _Consumer(box, variant.options["batch"], "raw-scale")
        try:
            started = time.perf_counter()
            while consumer.processed < k and consumer.step():
                pass
            elapsed = time.perf_counter() - started
        finally:
            consumer.close()
        if consumer.processed < k:
            raise RuntimeError(f"raw scale drain ran dry after {consumer.processed} of {k} jobs")
        return elapsed

    def steady(self, box: Sandbox, variant: Variant, seconds: float) -> SteadyResult:
        q = _Statements(box.schema_name)
        stop = threading.Event()
        enqueued = [0]
        consumers = [_Consumer(box, variant.options["batch"], f"raw-{t}")
                     for t in range(variant.options["threads"])]

        def produce() -> None:
            with psycopg.connect(box.dsn, autocommit=True) as conn:
                while not stop.is_set():
                    conn.execute(q.fill, {"type": JOB_TYPE, "n": 100})
                    enqueued[0] += 100

        def consume(consumer: _Consumer) -> None:
            while not stop.is_set():
                if not consumer.step():
                    stop.wait(0.002)

        threads = [threading.Thread(target=produce, daemon=True)]
        threads += [threading.Thread(target=consume, args=(c,), daemon=True) for c in consumers]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        time.sleep(seconds)
        processed, sent = sum(c.processed for c in consumers), enqueued[0]
        elapsed = time.perf_counter() - started
        stop.set()
        for thread in threads:
            thread.join()
        for consumer in consumers:
            consumer.close()
        return SteadyResult(enqueued=sent, processed=processed, seconds=elapsed)

    def loaded(self, box: Sandbox, variant: Variant, plan: LoadPlan) -> LoadedResult:
        q = _Statements(box.schema_name)
        probe = LatencyProbe(plan.total)
        stop = threading.Event()
        consumers = [_Consumer(box, variant.options["batch"], f"raw-loaded-{t}")
                     for t in range(variant.options["threads"])]
        channel = consumers[0].conn.execute(q.channel).fetchall()[0][0]
        for consumer in consumers:
            consumer.conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))

        def consume(consumer: _Consumer) -> None:
            # Claim until empty, then wait for the next INSERT's notification.
            while not stop.is_set():
                if not consumer.step(lambda payload: probe.start(payload["i"])):
                    for _note in consumer.conn.notifies(timeout=0.1, stop_after=1):
                        pass

        threads = [threading.Thread(target=consume, args=(c,), daemon=True) for c in consumers]
        for thread in threads:
            thread.start()
        try:
            with psycopg.connect(box.dsn, autocommit=True) as conn:
                time.sleep(0.2)  # let the consumers settle into their idle wait

                def send(first: int, count: int) -> None:
                    conn.execute(q.fill_range, {"type": JOB_TYPE, "first": first,
                                                "last": first + count - 1})

                window = produce_paced(plan, probe, send)
            wait_until(probe.done, timeout=10, interval=0.02)
        finally:
            stop.set()
            for thread in threads:
                thread.join()
            for consumer in consumers:
                consumer.close()
        return LoadedResult(probe, *window)

    def latency(self, box: Sandbox, variant: Variant, count: int, interval: float) -> list[float]:
        q = _Statements(box.schema_name)
        probe = LatencyProbe(count)
        stop = threading.Event()
        consumer = _Consumer(box, variant.options["batch"], "raw-latency")
        channel = consumer.conn.execute(q.channel).fetchall()[0][0]
        consumer.conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        ready = threading.Event()

        def consume() -> None:
            ready.set()
            while not stop.is_set():
                if not consumer.step(lambda payload: probe.start(payload["i"])):
                    for _note in consumer.conn.notifies(timeout=0.1, stop_after=1):
                        pass

        thread = threading.Thread(target=consume, daemon=True)
        thread.start()
        ready.wait()
        try:
            with psycopg.connect(box.dsn, autocommit=True) as conn:
                time.sleep(0.2)  # let the consumer settle into its idle wait
                started = time.perf_counter()
                for i in range(count):
                    time.sleep(paced(started, i, interval))
                    probe.committed[i] = time.perf_counter()
                    conn.execute(q.insert_one, {"type": JOB_TYPE, "payload": payload_text(i)})
            wait_until(probe.done, timeout=10)
        finally:
            stop.set()
            thread.join()
            consumer.close()
        return probe.latencies()
