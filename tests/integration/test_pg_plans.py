"""The plans PostgreSQL picks for the store's statements when its statistics mislead it.

The state every deployment with autovacuum reaches after an idle period: finished rows, a
``VACUUM ANALYZE`` while nothing ran (statistics and partial indexes say no row is running),
then a drain with thousands of rows running. A plan chosen from those statistics that reads
the partial indexes on running rows, the whole table, or the ids once per row grows with the
drain and feeds on itself (a drain fell to 0.06x). Each test asserts on the plans
auto_explain reports (statements inside functions too), under both plan cache modes: the
plan a prepared statement settles on after its first executions is the generic one.

The finished rows are in the history (migration 0008). The fenced writes and the reaper are
also checked with no statistics at all (a statistics reset), on a throwaway cluster of the
suite's own: deleting statistics needs a superuser, never taken on the suite's server.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, NamedTuple

import psycopg
import pytest
from psycopg import sql

from golemq_pg import JobStatus, Queue, Resource, Workflow
from golemq_pg.store.port import (
    ClaimedJob,
    ClaimRequest,
    CompleteAndClaimParams,
    FailItem,
    ResultRef,
    RetryItem,
    TypeSlots,
)
from golemq_pg.store.postgres import PostgresStore
from golemq_pg.store.postgres._plans import PlanContext
from golemq_pg.store.postgres._producer import job_get_many
from golemq_pg.store.postgres._run_sync import run_plan
from golemq_pg.store.postgres._sql import queries_for
from tests.plugins.plans import GraphState
from tests.support.plans import (
    PartlyRun,
    Plan,
    explained,
    forget_statistics,
    loops_over,
    nodes,
    reads_of,
    vacuumed_while_idle,
    whole_reads,
)
from tests.support.schemas import fresh_schema
from tests.support.server_control import ThrowawayCluster

MODES = ("force_generic_plan", "force_custom_plan")
#: Rows finished before the idle VACUUM, and jobs running in the drain after it.
FINISHED, RUNNING = 20_000, 3_000
#: A worker's batch of outcomes (the completer's default chunk).
BATCH = 500

class Misled(NamedTuple):
    """A store whose tables are put in a state that misleads the planner (:meth:`prepare`)."""

    store: PostgresStore
    dsn: str
    #: After the idle VACUUM, every statistic of the schema deleted too.
    reset: bool

    def prepare(self, **kwargs: Any) -> list[ClaimedJob]:
        """:func:`vacuumed_while_idle`, then the statistics forgotten when ``reset``."""
        jobs = vacuumed_while_idle(self.store, self.dsn, finished=FINISHED, running=RUNNING,
                                   **kwargs)
        if self.reset:
            forget_statistics(self.dsn, self.store.schema)
        return jobs


@pytest.fixture(params=["vacuumed while idle", "statistics reset"])
def misled(request: pytest.FixtureRequest, pg_dsn: str) -> Iterator[Misled]:
    """The suite's server after an idle VACUUM, or a throwaway cluster where the statistics
    are then deleted as well."""
    if request.param == "vacuumed while idle":
        yield Misled(request.getfixturevalue("pg_store"), pg_dsn, reset=False)
        return
    cluster: ThrowawayCluster = request.getfixturevalue("throwaway_cluster")
    with fresh_schema(cluster.dsn) as schema, PostgresStore.connect(
            cluster.dsn, schema=schema, max_size=4) as store:
        store.migrate()
        yield Misled(store, cluster.dsn, reset=True)


#: A write on a store bound to the connection auto_explain watches (also given).
Write = Callable[[PostgresStore, psycopg.Connection[Any], list[ClaimedJob]], set[str]]


def _complete_in_a_transaction(store: PostgresStore, conn: psycopg.Connection[Any],
                               jobs: list[ClaimedJob]) -> set[str]:
    with conn.transaction():  # the transactional handler's completion, in its transaction
        return store.job_complete_many("w", jobs, delete_types=["work"])


def _complete_and_claim(store: PostgresStore, _conn: psycopg.Connection[Any],
                        jobs: list[ClaimedJob]) -> set[str]:
    result = store.job_complete_and_claim(CompleteAndClaimParams(
        owner="w", items=jobs, claim=TypeSlots(type="work", limit=10, lease_seconds=300),
        resources={"pool": Resource(concurrency=RUNNING, types=["work"])}))
    assert len(result.claimed) == 0  # every job of the type is running already
    return result.written


#: A failed attempt's traceback, as a worker sends it with each item (migration 0010).
TRACE = 'Traceback (most recent call last):\n  File "h.py", line 1, in h\nValueError: boom\n'


def _previous_form(conn: psycopg.Connection[Any], statement: str, schema: str,
                   params: list[Any]) -> set[str]:
    query = sql.SQL(statement).format(schema=sql.Identifier(schema))
    return {str(row[0]) for row in conn.execute(query, params).fetchall()}


def _fail_previous_form(store: PostgresStore, conn: psycopg.Connection[Any],
                        jobs: list[ClaimedJob]) -> set[str]:
    return _previous_form(
        conn, "SELECT f.id FROM {schema}.fail_jobs(%s::text, %s::bigint[], %s::bigint[],"
        " %s::text[], %s::text[], %s::int) AS f(id)", store.schema,
        ["w", [int(j.id) for j in jobs], [j.token for j in jobs], ["boom"] * len(jobs), [],
         20])


def _retry_previous_form(store: PostgresStore, conn: psycopg.Connection[Any],
                         jobs: list[ClaimedJob]) -> set[str]:
    return _previous_form(
        conn, "SELECT r.id FROM {schema}.retry_jobs(%s::text, %s::bigint[], %s::bigint[],"
        " %s::float8[], %s::text[], %s::boolean[], %s::int) AS r(id)", store.schema,
        ["w", [int(j.id) for j in jobs], [j.token for j in jobs], [1.0] * len(jobs),
         ["again"] * len(jobs), [True] * len(jobs), 20])


#: Every statement given a worker's list of ids: its call, and the indexes it may read
#: besides the primary key (each with an index condition).
FENCED_WRITES: dict[str, tuple[Write, frozenset[str]]] = {
    "complete": (lambda s, _c, jobs: s.job_complete_many("w", jobs), frozenset()),
    "complete storing results": (lambda s, _c, jobs: s.job_complete_many(
        "w", [ResultRef(j.id, j.token, b'{"n": 1}') for j in jobs]), frozenset()),
    "complete deleting": (lambda s, _c, jobs: s.job_complete_many(
        "w", jobs, delete_types=["work"]), frozenset()),
    "transactional completion": (_complete_in_a_transaction, frozenset()),
    "fail": (lambda s, _c, jobs: s.job_fail_many(
        "w", [FailItem(j.id, j.token, "boom", TRACE) for j in jobs]), frozenset()),
    "fail deleting": (lambda s, _c, jobs: s.job_fail_many(
        "w", [FailItem(j.id, j.token, "boom", TRACE) for j in jobs], delete_types=["work"]),
        frozenset()),
    # the superseded test probes the pending key of each held keyed row
    "retry": (lambda s, _c, jobs: s.job_retry_many(
        "w", [RetryItem(j.id, j.token, 1.0, "again", traceback=TRACE) for j in jobs]),
        frozenset({"jobs_dedupe_pending_uq"})),
    # the forms a worker of the release before 0010 calls during a rolling upgrade
    "fail, previous form": (_fail_previous_form, frozenset()),
    "retry, previous form": (_retry_previous_form, frozenset({"jobs_dedupe_pending_uq"})),
    "release": (lambda s, _c, jobs: s.job_release_many("w", jobs),
                frozenset({"jobs_dedupe_pending_uq"})),
    "renew": (lambda s, _c, jobs: s.lease_renew("w", jobs, 60.0), frozenset()),
    "held": (lambda s, _c, jobs: s.lease_held("w", jobs), frozenset()),
    # the pool's complete-and-claim: the claim half walks the claim index of the type and
    # counts the live leases of the pool's member type (a range of jobs_running_idx)
    "complete and claim": (_complete_and_claim, frozenset(
        {"jobs_claim_idx", "jobs_dedupe_running_idx", "jobs_running_idx"})),
}


def _index_reads(read: Plan) -> list[Plan]:
    """The index scans a read of ``jobs`` is made of: itself, or for a bitmap heap scan the
    bitmap index scans under it (with no statistics at all, the pool's claim fetches the
    given ids' rows through a bitmap of jobs_pkey: the same rows, in block order)."""
    if read["Node Type"] != "Bitmap Heap Scan":
        return [read]
    return [n for n in nodes(read) if n["Node Type"] == "Bitmap Index Scan"]


def _assert_probes_by_index(plans: list[Plan], allowed: frozenset[str]) -> None:
    """Every read of ``jobs`` descends the primary key (or an ``allowed`` index) with an
    index condition, and no nested loop pairs ``jobs`` with another input row by row."""
    reads = reads_of(plans, "jobs")
    assert reads, plans
    for read in reads:
        assert read["Node Type"] in ("Index Scan", "Index Only Scan", "Bitmap Heap Scan"), read
        probes = _index_reads(read)
        assert probes, read
        # a bitmap gives no order and no early stop: only the given ids' probes may use one
        indexes = allowed | {"jobs_pkey"} if probes == [read] else {"jobs_pkey"}
        for probe in probes:
            assert probe["Index Name"] in indexes, read
            assert "Index Cond" in probe, read
    assert loops_over(plans, "jobs") == [], plans


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(FENCED_WRITES))
def test_a_fenced_write_probes_the_primary_key_per_id_whatever_the_statistics(
    misled: Misled, name: str, mode: str
) -> None:
    write, allowed = FENCED_WRITES[name]
    batch = misled.prepare()[-BATCH:]
    with psycopg.connect(misled.dsn, autocommit=True) as conn, explained(conn, mode) as plans:
        written = write(misled.store.with_connection(conn), conn, batch)
    assert written == {j.id for j in batch}, name
    _assert_probes_by_index(plans, allowed)


@pytest.mark.parametrize("mode", MODES)
def test_progress_probes_the_primary_key_whatever_the_statistics(
    misled: Misled, mode: str
) -> None:
    job = misled.prepare()[-1]
    with psycopg.connect(misled.dsn, autocommit=True) as conn, explained(conn, mode) as plans:
        assert misled.store.with_connection(conn).job_progress("w", job, 0.5)
    _assert_probes_by_index(plans, frozenset())


#: The claims and the reaper select by status: each may read the indexes on pending or
#: running rows, but only as a range with an index condition, never as a whole.
CLAIMS: dict[str, TypeSlots] = {
    "fast": TypeSlots("work", 100, 300),
    "serialize_by_scope": TypeSlots("work", 100, 300, serialize_by_scope=True),
    "not_while_running": TypeSlots("work", 100, 300, not_while_running=("other",)),
    "grouped": TypeSlots("work", 100, 300, grouped=True, max_batch=5),
    # guarded by a pool only: the lean claim (job_claim_pooled), room for 100 more
    "resource pool": TypeSlots("work", 100, 300),
}
#: The resource pools of a claim kind (none but the pooled one's).
CLAIM_POOLS: dict[str, dict[str, Resource]] = {
    "resource pool": {"pool": Resource(concurrency=RUNNING + 100, types=["work"])},
}


def _assert_ranges_of_indexes(plans: list[Plan]) -> None:
    reads = reads_of(plans, "jobs")
    assert reads, plans
    for read in reads:
        assert read["Node Type"] in ("Index Scan", "Index Only Scan"), read
        assert "Index Cond" in read, read


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("scoped", [False, True], ids=["unscoped", "scoped"])
@pytest.mark.parametrize("kind", list(CLAIMS))
def test_a_claim_reads_index_ranges_after_a_vacuum_while_idle(
    pg_store: PostgresStore, pg_dsn: str, kind: str, scoped: bool, mode: str
) -> None:
    # scoped: thousands of scopes with a live lease, more than a guarded claim reads into
    # one hash, so it probes jobs_running_idx per scope instead
    vacuumed_while_idle(pg_store, pg_dsn, finished=FINISHED, running=RUNNING, scoped=scoped)
    # a new backlog behind the running jobs (in one scope for the guarded claims)
    Queue(pg_store).add_many("work", [{"n": n} for n in range(1000)],
                             scope=("s", "one") if kind != "fast" else None)
    with psycopg.connect(pg_dsn, autocommit=True) as conn, explained(conn, mode) as plans:
        claimed = pg_store.with_connection(conn).job_claim(
            ClaimRequest(owner="w2", types=[CLAIMS[kind]], resources=CLAIM_POOLS.get(kind, {})))
    assert claimed, kind
    _assert_ranges_of_indexes(plans)


@pytest.mark.parametrize("mode", MODES)
def test_the_reaper_reads_expired_leases_by_expiry_whatever_the_statistics(
    misled: Misled, mode: str
) -> None:
    misled.prepare()
    with psycopg.connect(misled.dsn, autocommit=True) as conn, explained(conn, mode) as plans:
        assert misled.store.with_connection(conn).lease_recover_expired() == []
    _assert_ranges_of_indexes(plans)
    # the expired leases are found by expiry; every other read of the statement is by id
    expired = [r for r in reads_of(plans, "jobs") if r["Index Name"] == "jobs_lease_idx"]
    assert [r["Index Cond"] for r in expired] == ["(lease_expires_at < now())"], plans


def _wait_look(store: PostgresStore, conn: psycopg.Connection[Any], graph: PartlyRun) -> bool:
    """What ``queue.wait`` reads (job_get_many) for three jobs, one of them finished."""
    ctx = PlanContext(queries_for(store.schema), store.schema, ("plans",))
    ids = [int(graph.fetch), int(graph.extracts[2]), int(graph.index)]
    return len(run_plan(lambda: contextlib.nullcontext(conn), job_get_many(ctx, ids), False)) == 3


def _graph_prune(store: PostgresStore, conn: psycopg.Connection[Any], _graph: PartlyRun) -> bool:
    """The prune of the graph (job_prune's last two statements; the history's sweep before
    them reads by finish time, not by id), with nothing old enough to go."""
    queries = queries_for(store.schema)
    args = {"before": datetime(2000, 1, 1, tzinfo=UTC), "age": None, "limit": 1000}
    nodes_gone = conn.execute(queries["job_nodes_prune"], args).fetchall()
    edges_gone = conn.execute(queries["job_deps_prune"], args).rowcount
    return nodes_gone == [(0,)] and edges_gone == 0


#: Every read of jobs by id or by edge, given a store bound to the explained connection and
#: the workflow part way through: what it must find.
READS_BY_ID: dict[str, Callable[[PostgresStore, psycopg.Connection[Any], PartlyRun], bool]] = {
    # job.parents in a handler, and the job page's links: two parents in the history, one live
    "job.parents": lambda s, _c, g: len(s.job_links(g.index).parents) == 3,
    # job.parents of a claim batch's jobs, read at once
    "parents of a claim": lambda s, _c, g: len(s.job_parents_many(
        [g.index, g.extracts[2], g.outside, g.fetch])) == 4,
    "children": lambda s, _c, g: len(s.job_links(g.fetch).children) == 4,
    "job page": lambda s, _c, g: s.job_get(g.extracts[0]) is not None,
    "payload": lambda s, _c, g: s.job_payload(g.fetch) is not None,
    "workflow page": lambda s, _c, g: len(getattr(s.workflow_get(g.workflow), "jobs", ())) == 5,
    "wait": _wait_look,
    "an add naming parents": lambda s, _c, g: Queue(s).add(
        "wf.more", {}, depends_on=[g.fetch, g.extracts[2]]) is not None,
    # two jobs cancelled the first time, none after (the state is shared by a module)
    "workflow cancel": lambda s, _c, g: s.workflow_cancel(g.spare) is not None,
    "graph prune": _graph_prune,
}
#: The tables a read may walk whole: the graph prune looks for node rows and edges of jobs
#: gone, every one of them a candidate (each job probed by id).
WHOLE_READS_ALLOWED = {"graph prune": frozenset({"job_nodes", "job_deps"})}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(READS_BY_ID))
def test_a_read_by_id_or_edge_descends_indexes_in_every_statistics_state(
    graph_state: GraphState, name: str, mode: str
) -> None:
    with psycopg.connect(graph_state.dsn, autocommit=True) as conn, \
            explained(conn, mode) as plans:
        found = READS_BY_ID[name](graph_state.store.with_connection(conn), conn,
                                 graph_state.graph)
    assert found, name
    assert plans, name
    whole = whole_reads(plans, WHOLE_READS_ALLOWED.get(name, frozenset()))
    assert [(n["Node Type"], n["Relation Name"], n.get("Index Name")) for n in whole] == []


@pytest.mark.parametrize("mode", MODES)
def test_a_completion_releases_its_children_by_primary_key_in_every_statistics_state(
    graph_state: GraphState, mode: str
) -> None:
    # The settle path of a parent's completion (0020's walk, release_waiting): each child
    # probed by id, never a read of every WAITING job (jobs_waiting_idx) or of the history.
    store, queue = graph_state.store, Queue(graph_state.store)
    wf = Workflow("release")
    parent = wf.add("wf.release.parent", {})
    children = [wf.add("wf.release.child", {}, after=[parent]) for _ in range(3)]
    run = queue.add_workflow(wf)
    (claimed,) = store.job_claim(ClaimRequest(owner="w", types=[
        TypeSlots(type="wf.release.parent", limit=1, lease_seconds=300)]))
    with psycopg.connect(graph_state.dsn, autocommit=True) as conn, \
            explained(conn, mode) as plans:
        written = store.with_connection(conn).job_complete_many("w", [claimed])
    assert written == {claimed.id}
    released = [queue.get(run.job_ids[child]) for child in children]
    assert [job.status if job else None for job in released] == [JobStatus.PENDING] * 3
    assert plans
    whole = whole_reads(plans)
    assert [(n["Node Type"], n["Relation Name"], n.get("Index Name")) for n in whole] == []
