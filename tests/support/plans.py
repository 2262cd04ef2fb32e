"""The plans PostgreSQL chose for the statements run on one connection, read with
auto_explain (statements inside functions too), and a table in the state that misleads the
planner."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, NamedTuple

import orjson
import psycopg
from psycopg import sql

from golemq_pg import Queue, Workflow
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


class PartlyRun(NamedTuple):
    """A workflow ``fetch -> 3 x extract -> index`` part way through (:func:`workflow_partly_run`),
    and a job added with ``depends_on`` outside it."""

    workflow: str
    fetch: str
    extracts: list[str]
    index: str
    #: A job outside the workflow waiting for the fetch (queue.add(..., depends_on=)).
    outside: str
    #: A workflow of two jobs without edges, not started, for a cancel (a second cancel
    #: finds nothing; no child is settled: 0016's trigger is read by other tests).
    spare: str


def workflow_partly_run(store: PostgresStore, backlog: int = 0) -> PartlyRun:
    """Add the workflow of :class:`PartlyRun` and run it part way with owner "w": the fetch
    and two extracts succeeded (their rows in the history), the third extract running, the
    index waiting for it. ``backlog``: pending jobs of another type added first."""
    queue = Queue(store)
    if backlog:
        queue.add_many("other", [{"n": n} for n in range(backlog)])
    wf = Workflow("partly run")
    fetch = wf.add("wf.fetch", {})
    extracts = [wf.add("wf.extract", {"n": n}, after=[fetch]) for n in range(3)]
    index = wf.add("wf.index", {}, after=extracts)
    run = queue.add_workflow(wf)
    outside = queue.add("wf.outside", {}, depends_on=[run.job_ids[fetch]])
    assert outside is not None
    spare = Workflow("spare")
    spare.add("wf.a", {})
    spare.add("wf.b", {})
    for kind, finished in (("wf.fetch", 1), ("wf.extract", 2)):
        claimed = store.job_claim(ClaimRequest(
            owner="w", types=[TypeSlots(type=kind, limit=finished + 1, lease_seconds=300)]))
        claimed.sort(key=lambda job: int(job.id))
        assert store.job_complete_many("w", claimed[:finished])
    return PartlyRun(workflow=run.id, fetch=run.job_ids[fetch],
                     extracts=[run.job_ids[e] for e in extracts], index=run.job_ids[index],
                     outside=outside, spare=queue.add_workflow(spare).id)


def add_history(store: PostgresStore, dsn: str, rows: int) -> None:
    """``rows`` succeeded jobs written straight into the history (migration 0008), as their
    completions would have left them, then ``VACUUM ANALYZE`` of the tables with them."""
    history = sql.Identifier(store.schema, "jobs_history")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL(
            "INSERT INTO {} (id, type, payload, status, priority, run_at, attempts,"
            " max_attempts, lease_token, finished_at, created_at, updated_at)"
            " SELECT nextval(pg_get_serial_sequence(%s, 'id')), 'work', '{{}}', 'succeeded', 0,"
            " now(), 1, 3, 1, now(), now(), now() FROM generate_series(1, %s)"
        ).format(history), [f'"{store.schema}".jobs', rows])
        conn.execute(sql.SQL("VACUUM ANALYZE {}").format(history))


#: The tables a read by id or by edge may only descend into (an index condition), never
#: read whole: the live jobs, the history's partitions, the edges, the nodes, the records.
GRAPH_TABLES = ("jobs", "jobs_history", "job_deps", "job_nodes", "workflows")


def whole_reads(plans: list[Plan], exempt: frozenset[str] = frozenset()) -> list[Plan]:
    """The scans in ``plans`` (that ran) of a :data:`GRAPH_TABLES` table, or of one of the
    history's partitions, that are not an index descent with an index condition: index
    scans without a condition (a whole index read in order), and sequential scans that read
    a row (one of an empty relation, such as a day partition not reached yet, reads
    nothing: the planner rightly picks it while the relation is empty). ``exempt``: tables a
    statement may read whole (the prune walks every node row by design)."""
    found = []
    for plan in plans:
        for node in nodes(plan):
            relation = node.get("Relation Name")
            if (relation is None or not node["Node Type"].endswith("Scan")
                    or node.get("Actual Loops", 1) == 0):
                continue
            table = "jobs_history" if relation.startswith("jobs_history") else relation
            if table not in GRAPH_TABLES or table in exempt or _descends(node):
                continue
            found.append(node)
    return found


def _descends(scan: Plan) -> bool:
    if scan["Node Type"] == "Seq Scan":
        return scan.get("Actual Rows", 0) == 0 and scan.get("Rows Removed by Filter", 0) == 0
    if scan["Node Type"] == "Bitmap Heap Scan":
        probes = [n for n in nodes(scan) if n["Node Type"] == "Bitmap Index Scan"]
        return bool(probes) and all("Index Cond" in p for p in probes)
    return scan["Node Type"] in ("Index Scan", "Index Only Scan") and "Index Cond" in scan
