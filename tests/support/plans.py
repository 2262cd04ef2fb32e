"""The plans PostgreSQL chose for the statements run on one connection, read with
auto_explain (statements inside functions too), and a table in the state that misleads the
planner."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import orjson
import psycopg
from psycopg import sql

from golemq_pg import Queue
from golemq_pg.store.port import ClaimedJob, ClaimRequest, TypeSlots
from golemq_pg.store.postgres import PostgresStore

Plan = dict[str, Any]

#: The settings that make auto_explain send the plan of every statement run, nested ones
#: included, to the client as a NOTICE in JSON, with the rows and loops each node ran
#: (no timings: they would cost more than the statements).
_AUTO_EXPLAIN = (
    "LOAD 'auto_explain'",
    "SET auto_explain.log_min_duration = 0",
    "SET auto_explain.log_analyze = on",
    "SET auto_explain.log_timing = off",
    "SET auto_explain.log_nested_statements = on",
    "SET auto_explain.log_format = json",
    "SET auto_explain.log_level = notice",
)


@contextlib.contextmanager
def explained(conn: psycopg.Connection[Any], plan_cache_mode: str) -> Iterator[list[Plan]]:
    """Collect the plan of every statement run on ``conn`` (autocommit) inside the block, with
    ``plan_cache_mode`` set for the session: a list of each plan's top node, filled as the
    block runs."""
    plans: list[Plan] = []

    def on_notice(diag: psycopg.errors.Diagnostic) -> None:
        _, found, text = (diag.message_primary or "").partition("plan:")
        if found:
            plans.append(orjson.loads(text)["Plan"])

    for setting in _AUTO_EXPLAIN:
        conn.execute(setting)
    conn.execute("SELECT set_config('plan_cache_mode', %s, false)", [plan_cache_mode])
    conn.add_notice_handler(on_notice)
    try:
        yield plans
    finally:
        conn.remove_notice_handler(on_notice)
        conn.execute("SET auto_explain.log_min_duration = -1")
        conn.execute("RESET plan_cache_mode")


def nodes(plan: Plan) -> Iterator[Plan]:
    """``plan`` and every node under it."""
    yield plan
    for child in plan.get("Plans", ()):
        yield from nodes(child)


def reads_of(plans: list[Plan], relation: str) -> list[Plan]:
    """The scan nodes of ``plans`` that read ``relation`` and ran (a branch the statement
    never entered, such as one behind a one-time filter, is left out)."""
    return [n for plan in plans for n in nodes(plan)
            if n["Node Type"].endswith("Scan") and n.get("Relation Name") == relation
            and n.get("Actual Loops", 1) > 0]


def loops_over(plans: list[Plan], relation: str) -> list[Plan]:
    """The Nested Loop nodes of ``plans`` with a scan of ``relation`` as a direct child: a
    loop that reads the relation once per row of its other side, or its other side once per
    row read."""
    return [n for plan in plans for n in nodes(plan)
            if n["Node Type"] == "Nested Loop"
            and any(c["Node Type"].endswith("Scan") and c.get("Relation Name") == relation
                    for c in n.get("Plans", ()))]


def vacuumed_while_idle(store: PostgresStore, dsn: str, *, finished: int, running: int,
                        scoped: bool = False) -> list[ClaimedJob]:
    """Put the store's jobs table in the state autovacuum leaves after an idle period, then
    start a drain: ``finished`` succeeded rows (in the history, migration 0008, as the
    completions put them), ``running`` jobs added and drained once (their
    rows passed through the indexes on running rows), ``running`` more added, ``VACUUM
    ANALYZE`` while none runs (the statistics say no row is running, the partial indexes on
    running rows are empty), then those ``running`` jobs claimed by owner "w" (returned, in
    claim order). ``scoped``: each job in a scope of its own (("s", "r<n>"))."""
    jobs = sql.Identifier(store.schema, "jobs")
    history = sql.Identifier(store.schema, "jobs_history")
    slots = [TypeSlots(type="work", limit=running, lease_seconds=300)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL(
            "INSERT INTO {} (id, type, payload, status, priority, run_at, attempts,"
            " max_attempts, lease_token, finished_at, created_at, updated_at)"
            " SELECT nextval(pg_get_serial_sequence(%s, 'id')), 'work', '{{}}', 'succeeded', 0,"
            " now(), 1, 3, 1, now(), now(), now() FROM generate_series(1, %s)"
        ).format(history), [f'"{store.schema}".jobs', finished])
        _add_work(store, conn, running, scoped)
        store.job_complete_many("w0", store.job_claim(ClaimRequest(owner="w0", types=slots)))
        _add_work(store, conn, running, scoped)
        conn.execute(sql.SQL("VACUUM ANALYZE {}, {}").format(jobs, history))
    claimed = store.job_claim(ClaimRequest(owner="w", types=slots))
    assert len(claimed) == running
    return claimed


def forget_statistics(dsn: str, schema: str) -> None:
    """What a statistics reset leaves: no planner statistics for any table of ``schema``
    (``pg_statistic`` rows deleted, sizes unknown) and the activity counters zeroed. Needs a
    superuser: only on a throwaway cluster (tests/plugins/clusters.py)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM pg_statistic WHERE starelid IN (SELECT c.oid FROM pg_class c"
                     " WHERE c.relnamespace = %s::regnamespace)", [schema])
        conn.execute("UPDATE pg_class SET reltuples = -1, relpages = 0"
                     " WHERE relnamespace = %s::regnamespace AND relkind IN ('r', 'p')",
                     [schema])
        conn.execute("SELECT pg_stat_reset()")


def _add_work(store: PostgresStore, conn: psycopg.Connection[Any], n: int,
              scoped: bool) -> None:
    if not scoped:
        Queue(store).add_many("work", [{"n": i} for i in range(n)])
        return
    conn.execute(sql.SQL(
        "INSERT INTO {} (type, payload, scope_type, scope_id)"
        " SELECT 'work', '{{}}', 's', 'r' || g FROM generate_series(1, %s) AS g"
    ).format(sql.Identifier(store.schema, "jobs")), [n])
