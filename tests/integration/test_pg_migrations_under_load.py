"""Upgrading a loaded queue while it runs: a schema at release 0001 holding ROWS jobs (about
90% finished) is migrated to the newest shipped migration by ``PostgresStore.migrate()``
(its default lock_timeout and retries) while a producer adds jobs and two claimers claim and
complete them, all in raw SQL of the 0001 table's shape, each on its own connection.

Reported (printed, and recorded as properties of the test in the JUnit XML): the longest
add, i.e. how long the migration blocked an enqueue, the longest claim and completion, and
when each migration was applied. Asserted: the longest add stays under BLOCKED_ADD_BOUND,
every row added is in ``jobs`` afterwards, and the loops never failed.

Written for the migrations to come: it applies whatever sql/migrations holds. The loops are
the 0001 application's statements on purpose: a migration that makes them fail (a column
they write renamed, finished rows no longer allowed in ``jobs``) is reported with the errors
they got, not hidden. The rows it checks are added under a type no claimer claims, so where
a later schema keeps finished jobs does not change the check.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import psycopg
from psycopg import sql

from golemq_pg import PostgresStore
from golemq_pg.store.postgres._migration_files import migrations
from golemq_pg.store.postgres._migrations import migrate

#: Jobs in the table before the upgrade. 1M keeps the whole test well under a minute on the
#: shared 2-core machine (the fill is most of it) while the index builds and constraint
#: checks of the released migrations take long enough to be seen in the adds.
ROWS = 1_000_000
#: The longest an add may wait while the migrations run (generous: the machine is shared).
BLOCKED_ADD_BOUND = 5.0
#: How long the load runs before and after the migration.
SETTLE = 1.0

# 90% succeeded (1 in 100 of them failed instead), 10% pending and due: the claimers' work.
_FILL = """
INSERT INTO {s}.jobs (type, payload, status, run_at, attempts, max_attempts, last_error,
                      started_at, finished_at, created_at, updated_at)
SELECT CASE WHEN g %% 10 = 0 THEN 'upgrade.work' ELSE 'upgrade.done' END,
       jsonb_build_object('n', g),
       CASE WHEN g %% 10 = 0 THEN 'pending' WHEN g %% 1000 = 1 THEN 'failed' ELSE 'succeeded' END,
       now() - interval '1 day',
       CASE WHEN g %% 10 = 0 THEN 0 ELSE 1 END, 3,
       CASE WHEN g %% 1000 = 1 THEN 'TerminalJobError: no' END,
       CASE WHEN g %% 10 = 0 THEN NULL ELSE now() - interval '1 day' END,
       CASE WHEN g %% 10 = 0 THEN NULL ELSE now() - interval '1 day' END,
       now() - interval '1 day', now() - interval '1 day'
  FROM generate_series(1, %s) AS g
"""

# The 0001 application's statements: an add, a claim of up to 20 due jobs in claim order
# (FOR UPDATE SKIP LOCKED), a fenced completion.
_ADD = "INSERT INTO {s}.jobs (type, payload) VALUES ('upgrade.added', %s) RETURNING id"
_CLAIM = """
UPDATE {s}.jobs SET status = 'running', attempts = attempts + 1, lease_owner = %(owner)s,
       lease_token = lease_token + 1, lease_expires_at = now() + interval '30 seconds',
       started_at = now(), updated_at = now()
 WHERE id IN (SELECT id FROM {s}.jobs
               WHERE status = 'pending' AND type = 'upgrade.work' AND run_at <= now()
               ORDER BY priority DESC, run_at, id
               LIMIT 20 FOR UPDATE SKIP LOCKED)
RETURNING id, lease_token
"""
_COMPLETE = """
UPDATE {s}.jobs SET status = 'succeeded', finished_at = now(), lease_owner = NULL,
       lease_expires_at = NULL, updated_at = now()
 WHERE id = ANY(%(ids)s) AND lease_token = ANY(%(tokens)s) AND lease_owner = %(owner)s
   AND status = 'running'
"""


def _statement(text: str, schema: str) -> sql.Composed:
    return sql.SQL(text).format(s=sql.Identifier(schema))  # type: ignore[arg-type]


@dataclass
class Loop:
    """One load thread's record: each statement's (start, seconds), what it added or
    completed, and the errors it met (with the time since the load started)."""

    name: str
    timings: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    added: list[tuple[int, int]] = field(default_factory=list)
    completed: int = 0
    errors: list[tuple[float, str]] = field(default_factory=list)

    def timed(self, what: str, origin: float, run: Callable[[], Any]) -> Any:
        started = time.monotonic()
        result = run()
        self.timings.setdefault(what, []).append((started - origin, time.monotonic() - started))
        return result

    def failed(self, origin: float, exc: psycopg.Error) -> None:
        """Record ``exc``: its type and first line (the DETAIL quotes the row)."""
        first = str(exc).splitlines()[0] if str(exc) else ""
        self.errors.append((time.monotonic() - origin, f"{type(exc).__name__}: {first}"))

    def longest(self, what: str, since: float, until: float) -> tuple[float, float]:
        """The longest (seconds, start) of ``what`` among those running in [since, until]."""
        spans = [(took, start) for start, took in self.timings.get(what, ())
                 if start <= until and start + took >= since]
        return max(spans, default=(0.0, 0.0))


def _produce(dsn: str, schema: str, loop: Loop, origin: float, stop: threading.Event) -> None:
    query = _statement(_ADD, schema)
    with psycopg.connect(dsn, autocommit=True) as conn:
        seq = 0
        while not stop.is_set():
            seq += 1
            payload = orjson.dumps({"seq": seq}).decode()
            try:
                row = loop.timed("add", origin, lambda: conn.execute(
                    query, (payload,)).fetchone())  # noqa: B023 - called at once
            except psycopg.Error as exc:
                loop.failed(origin, exc)
                time.sleep(0.1)
                continue
            loop.added.append((row[0], seq))
            time.sleep(0.005)  # ~150 adds/s: a steady producer, not a CPU hog


def _claim_and_complete(
    dsn: str, schema: str, loop: Loop, origin: float, stop: threading.Event
) -> None:
    claim, complete = _statement(_CLAIM, schema), _statement(_COMPLETE, schema)
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.is_set():
            try:
                rows = loop.timed("claim", origin, lambda: conn.execute(
                    claim, {"owner": loop.name}).fetchall())
                if rows:
                    params = {"ids": [r[0] for r in rows], "tokens": [r[1] for r in rows],
                              "owner": loop.name}
                    done = loop.timed("complete", origin, lambda: conn.execute(
                        complete, params).rowcount)  # noqa: B023 - called at once
                    loop.completed += done
            except psycopg.Error as exc:
                loop.failed(origin, exc)
                time.sleep(0.1)
                continue
            time.sleep(0.01)


def test_upgrading_a_loaded_queue_under_load_blocks_adds_briefly_and_loses_none(
    pg_dsn: str, schema: str, record_property: Callable[[str, object], None]
) -> None:
    shipped = migrations()
    started = time.monotonic()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert migrate(conn, schema, up_to=1) == [shipped[0].name]
        conn.execute(_statement(_FILL, schema), (ROWS,))
        conn.execute(_statement("VACUUM (ANALYZE) {s}.jobs", schema))
    filled = time.monotonic() - started

    producer = Loop("producer")
    claimers = [Loop(f"claimer-{n}") for n in (1, 2)]
    stop = threading.Event()
    origin = time.monotonic()
    threads = [threading.Thread(target=_produce, args=(pg_dsn, schema, producer, origin, stop))]
    threads += [threading.Thread(target=_claim_and_complete,
                                 args=(pg_dsn, schema, loop, origin, stop)) for loop in claimers]
    for thread in threads:
        thread.start()
    try:
        time.sleep(SETTLE)
        begun = time.monotonic() - origin
        with PostgresStore.connect(pg_dsn, schema=schema, max_size=1) as store:
            applied = store.migrate()
        ended = time.monotonic() - origin
        time.sleep(SETTLE)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)

    with psycopg.connect(pg_dsn) as conn:
        when = conn.execute(_statement(
            "SELECT name, extract(epoch FROM applied_at - min(applied_at) OVER ())"
            " FROM {s}.schema_migrations WHERE version > 1 ORDER BY version", schema)).fetchall()
        added = dict(producer.added)
        found = dict(conn.execute(_statement(
            "SELECT id, (payload->>'seq')::int FROM {s}.jobs"
            " WHERE id = ANY(%s) AND type = 'upgrade.added' AND status = 'pending'", schema),
            (list(added),)).fetchall())

    add_took, add_at = producer.longest("add", begun, ended)
    claim_took = max(loop.longest("claim", begun, ended)[0] for loop in claimers)
    complete_took = max(loop.longest("complete", begun, ended)[0] for loop in claimers)
    adds_during = sum(begun <= start <= ended for start, _ in producer.timings.get("add", ()))
    report = {
        "rows": ROWS, "fill_s": round(filled, 1), "migrate_s": round(ended - begun, 2),
        "applied": applied, "adds_during_migration": adds_during,
        "longest_blocked_add_s": round(add_took, 3),
        "longest_blocked_add_at_s_into_migration": round(add_at - begun, 2),
        "longest_claim_s": round(claim_took, 3), "longest_complete_s": round(complete_took, 3),
        "completed": sum(loop.completed for loop in claimers),
        "applied_at_s": {name: round(float(at), 2) for name, at in when},
    }
    print(f"\nupgrade under load: {orjson.dumps(report).decode()}")
    for key in ("longest_blocked_add_s", "longest_claim_s", "migrate_s", "fill_s"):
        record_property(key, report[key])

    assert applied == [m.name for m in shipped[1:]]
    errors: dict[tuple[str, str], list[float]] = {}
    for loop in (producer, *claimers):
        for at, error in loop.errors:
            errors.setdefault((loop.name, error), []).append(at)
    assert not errors, (
        f"the 0001 application's raw statements failed against `jobs` while or after migrating "
        f"to {shipped[-1].name} (the migration ran from {begun:.1f}s to {ended:.1f}s): "
        + "; ".join(f"{name}: {error} ({len(at)} times, first at {at[0]:.1f}s)"
                    for (name, error), at in errors.items()))
    assert adds_during > 0
    assert add_took < BLOCKED_ADD_BOUND, report
    assert found == added, f"{len(set(added) - set(found))} added rows are missing"
