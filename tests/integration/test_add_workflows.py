"""Adding many workflows at once (``Queue.add_workflows`` / ``AsyncQueue.add_workflows``) on
PostgreSQL: ids in order, one statement whatever their number, the caller's transaction,
bad input refused before any write, and the previous release's one-workflow call
(0019's insert_job_graph, now a wrapper) during a rolling upgrade."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from golemq_pg import AsyncPostgresStore, AsyncQueue, JobStatus, PostgresStore, Queue, Workflow
from tests.support.async_bridge import LoopThread
from tests.support.wire import round_trips


def _fan(name: str, width: int = 10) -> Workflow:
    """fetch -> width x extract -> index."""
    wf = Workflow(name)
    root = wf.add("many.fetch", {"doc": name})
    pages = [wf.add("many.extract", {"page": n}, after=[root]) for n in range(width)]
    wf.add("many.index", {}, after=pages)
    return wf


def test_add_workflows_returns_each_workflows_id_in_order(pg_store: PostgresStore) -> None:
    queue = Queue(pg_store)
    ids = queue.add_workflows([_fan("a"), _fan("b", width=2), _fan("c", width=1)])
    summaries = [queue.workflow(i) for i in ids]
    assert [s.name for s in summaries if s is not None] == ["a", "b", "c"]
    assert [len(s.jobs) for s in summaries if s is not None] == [12, 4, 3]
    assert queue.stats()["pending"] == 3  # each fetch, released in the same statement
    assert queue.stats()["waiting"] == 16


@pytest.mark.parametrize("autocommit", [True, False])
def test_add_workflows_makes_the_same_round_trips_whatever_their_number(
    pg_store: PostgresStore, pg_dsn: str, autocommit: bool
) -> None:
    queue = Queue(pg_store)
    trips: dict[int, int] = {}
    with psycopg.connect(pg_dsn, autocommit=autocommit) as conn:
        queue.add("many.before", {}, connection=conn)  # the caller's transaction begun
        for count in (1, 10, 100):
            with round_trips(conn) as seen:
                queue.add_workflows([_fan(f"w{n}") for n in range(count)], connection=conn)
            trips[count] = len(seen.sent)
        conn.commit()
    # one statement; in the caller's transaction it is wrapped in a savepoint
    expected = 1 if autocommit else 3
    assert trips == {1: expected, 10: expected, 100: expected}
    assert queue.stats()["waiting"] == 111 * 11


def test_add_workflows_on_a_rolled_back_connection_leaves_nothing(
    pg_store: PostgresStore, pg_dsn: str
) -> None:
    queue = Queue(pg_store)
    with psycopg.connect(pg_dsn) as conn:
        ids = queue.add_workflows([_fan("a"), _fan("b")], connection=conn)
        conn.rollback()
    assert [queue.workflow(i) for i in ids] == [None, None]
    assert sum(queue.count_by_status().values()) == 0


def test_bad_input_to_add_workflows_is_refused_before_any_write(pg_store: PostgresStore) -> None:
    queue = Queue(pg_store)
    fan = _fan("a")
    assert queue.add_workflows([]) == []
    with pytest.raises(ValueError, match="list of Workflow"):
        queue.add_workflows(fan)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="item 1 is not a Workflow"):
        queue.add_workflows([fan, "b"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="item 1 is a Workflow given twice"):
        queue.add_workflows([fan, fan])
    with pytest.raises(ValueError, match="workflow 1 has no jobs"):
        queue.add_workflows([fan, Workflow("empty")])
    with pytest.raises(ValueError, match="at most 10000 jobs"):
        queue.add_workflows([_fan(f"w{n}", width=998) for n in range(11)])
    assert sum(queue.count_by_status().values()) == 0


def test_a_duplicate_node_in_one_workflow_writes_none_of_them(pg_store: PostgresStore) -> None:
    queue = Queue(pg_store)
    held = queue.add("many.index", {}, dedupe_key="doc")
    keyed = Workflow("keyed")
    keyed.add("many.index", {}, after=[keyed.add("many.fetch", {})], dedupe_key="doc")
    with pytest.raises(ValueError, match="duplicate"):
        queue.add_workflows([_fan("a"), keyed])
    assert held is not None
    assert queue.count_by_status()[JobStatus.PENDING] == 1  # the holder only
    assert sum(queue.count_by_status().values()) == 1


def test_async_queue_adds_many_workflows(
    loop_thread: LoopThread, async_pg_store: AsyncPostgresStore, pg_store: PostgresStore
) -> None:
    aqueue = AsyncQueue(async_pg_store)
    ids = loop_thread.run(aqueue.add_workflows([_fan("a", width=1), _fan("b", width=1)]))
    assert len(ids) == 2
    summary = loop_thread.run(aqueue.workflow(ids[1]))
    assert summary is not None
    assert summary.name == "b"
    assert Queue(pg_store).count_by_status()[JobStatus.WAITING] == 4


def test_the_previous_releases_one_workflow_call_still_writes_a_workflow(
    pg_store: PostgresStore, pg_dsn: str
) -> None:
    # what a worker of the release before migration 0021 sends (0019's insert_job_graph):
    # a -> b, one workflow, during a rolling upgrade
    queue = Queue(pg_store)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        found = conn.execute(
            sql.SQL("SELECT g.workflow_id, g.job_ids FROM {}.insert_job_graph("
                    "%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) g").format(
                sql.Identifier(pg_store.schema)),
            ["old", ["old.a", "old.b"], ["{}", "{}"], [None, None], [None, None], [None, None],
             [0.0, 0.0], [3, 3], [0, 0], None, [None, None], ["fail", "fail"], [0], [1], [],
             []]).fetchone()
    assert found is not None
    workflow_id, (a, b) = found
    summary = queue.workflow(str(workflow_id))
    assert summary is not None
    assert summary.name == "old"
    assert summary.edges == [(str(a), str(b))]
    assert [j.status for j in summary.jobs] == [JobStatus.PENDING, JobStatus.WAITING]
