"""Job dependencies and workflows end to end on PostgreSQL: real worker threads (sync,
async and transactional handlers), the Queue and AsyncQueue APIs, the caller's transaction,
and through PgBouncer in transaction mode (marked ``pgbouncer``)."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from golemq_pg import (
    AsyncPostgresStore,
    AsyncQueue,
    JobEvent,
    JobStatus,
    JobType,
    PostgresStore,
    Queue,
    TerminalJobError,
    Workflow,
    WorkflowRun,
)
from golemq_pg.store.port import ClaimRequest, TypeSlots
from tests.support.async_bridge import LoopThread
from tests.support.in_process import add_job, fast_worker
from tests.support.waiting import wait_until
from tests.support.wire import round_trips


def _status(queue: Queue, job_id: str) -> JobStatus | None:
    job = queue.get(job_id)
    return None if job is None else job.status


def _diamond(queue: Queue) -> tuple[WorkflowRun, list[Any]]:
    wf = Workflow("diamond")
    a = wf.add("wf.step", {"name": "A"})
    b = wf.add("wf.step", {"name": "B"}, after=[a])
    c = wf.add("wf.step", {"name": "C"}, after=[a])
    d = wf.add("wf.join", {"name": "D"}, after=[b, c])
    return queue.add_workflow(wf), [a, b, c, d]


def test_a_diamond_runs_in_order_and_the_join_sees_both_results(pg_store: PostgresStore) -> None:
    queue = Queue(pg_store)
    run, (a, b, c, d) = _diamond(queue)
    order: list[str] = []
    seen: dict[str, Any] = {}
    worker = fast_worker(pg_store)

    @worker.handler("wf.step", concurrency=2)
    def step(job: JobEvent[Any]) -> Any:
        order.append(job.payload["name"])
        return {"from": job.payload["name"]}

    @worker.handler("wf.join")
    def join(job: JobEvent[Any]) -> Any:
        order.append("D")
        seen["parents"] = {k: (v.status, v.result) for k, v in job.parents.items()}
        seen["workflow"] = job.workflow_id
        return None

    worker.run_until_empty(timeout=30)
    assert order[0] == "A"
    assert order[-1] == "D"
    assert sorted(order[1:3]) == ["B", "C"]
    assert seen["parents"] == {
        run.job_ids[b]: (JobStatus.SUCCEEDED, {"from": "B"}),
        run.job_ids[c]: (JobStatus.SUCCEEDED, {"from": "C"}),
    }
    assert seen["workflow"] == run.id
    summary = queue.workflow(run.id)
    assert summary is not None
    assert summary.status == "succeeded"
    assert {(p, ch) for p, ch in summary.edges} == {
        (run.job_ids[a], run.job_ids[b]), (run.job_ids[a], run.job_ids[c]),
        (run.job_ids[b], run.job_ids[d]), (run.job_ids[c], run.job_ids[d])}


def test_a_released_child_is_claimed_without_waiting_for_a_poll(pg_store: PostgresStore) -> None:
    queue = Queue(pg_store)
    parent = add_job(queue, "wake.parent", {})
    kid = queue.add("wake.child", {}, depends_on=[parent])
    assert kid is not None
    started = threading.Event()
    worker = fast_worker(pg_store, poll_interval=30)  # only a NOTIFY can wake it in time
    worker.handler("wake.parent")(lambda job: None)
    worker.handler("wake.child")(lambda job: started.set())
    worker.start()
    try:
        assert started.wait(10)
    finally:
        worker.stop()
    assert _status(queue, kid) is JobStatus.SUCCEEDED


@pytest.mark.parametrize(
    ("policy", "child_after", "grandchild_after"),
    [
        ("fail", JobStatus.FAILED, JobStatus.FAILED),
        ("cancel", None, JobStatus.FAILED),
        ("run", JobStatus.SUCCEEDED, JobStatus.SUCCEEDED),
    ],
)
def test_each_failure_policy_propagates_two_levels_down(
    pg_store: PostgresStore, policy: str, child_after: JobStatus | None,
    grandchild_after: JobStatus,
) -> None:
    queue = Queue(pg_store)
    parent = add_job(queue, "pol.parent", {})
    kid = queue.add("pol.child", {}, depends_on=[parent], on_parent_failure=policy)  # type: ignore[arg-type]
    assert kid is not None
    grandkid = queue.add("pol.grand", {}, depends_on=[kid])
    assert grandkid is not None
    ran: list[str] = []
    worker = fast_worker(pg_store)

    @worker.handler("pol.parent")
    def parent_fails(job: JobEvent[Any]) -> None:
        raise TerminalJobError("no")

    worker.handler("pol.child")(lambda job: ran.append("child"))
    worker.handler("pol.grand")(lambda job: ran.append("grand"))
    worker.run_until_empty(timeout=30)
    assert _status(queue, parent) is JobStatus.FAILED
    assert _status(queue, kid) is child_after
    assert _status(queue, grandkid) is grandchild_after
    if policy == "fail":
        assert queue.get(kid).last_error == f"parent {parent} failed"  # type: ignore[union-attr]
        assert queue.get(grandkid).last_error == f"parent {kid} failed"  # type: ignore[union-attr]
    if policy == "cancel":
        assert queue.get(grandkid).last_error == f"parent {kid} was cancelled"  # type: ignore[union-attr]
    assert ran == (["child", "grand"] if policy == "run" else [])


def test_retrying_a_failed_parent_rearms_its_dependents(pg_store: PostgresStore) -> None:
    queue = Queue(pg_store)
    parent = add_job(queue, "re.parent", {})
    kid = queue.add("re.child", {}, depends_on=[parent])
    assert kid is not None
    attempts = {"n": 0}
    worker = fast_worker(pg_store)

    @worker.handler("re.parent")
    def flaky(job: JobEvent[Any]) -> str:
        attempts["n"] += 1
        if attempts["n"] == 1:
            raise TerminalJobError("first time")
        return "ok"

    worker.handler("re.child")(lambda job: job.parents[parent].result)
    worker.run_until_empty(timeout=30)
    assert _status(queue, kid) is JobStatus.FAILED
    assert queue.retry(kid) is False  # its parent is still FAILED: nothing changes
    assert _status(queue, kid) is JobStatus.FAILED
    assert queue.retry(parent) is True
    assert _status(queue, kid) is JobStatus.WAITING
    worker.run_until_empty(timeout=30)
    assert _status(queue, parent) is JobStatus.SUCCEEDED
    child = queue.get(kid)
    assert child is not None
    assert child.status is JobStatus.SUCCEEDED
    assert child.result == "ok"


def test_cancel_workflow_mid_run_leaves_nothing_due(pg_store: PostgresStore) -> None:
    queue = Queue(pg_store)
    run, (a, _b, _c, _d) = _diamond(queue)
    worker = fast_worker(pg_store)
    worker.handler("wf.step")(lambda job: None)
    worker.handler("wf.join")(lambda job: None)
    # run A only: B and C become due, D waits
    (claimed,) = pg_store.job_claim(
        ClaimRequest(owner="t", types=[TypeSlots("wf.step", 1, 30.0)]))
    assert claimed.id == run.job_ids[a]
    pg_store.job_complete_many("t", [claimed])
    assert queue.stats()["waiting"] == 1
    assert queue.stats()["pending"] == 2
    assert queue.cancel_workflow(run.id) == 3
    assert queue.stats()["pending"] == queue.stats()["waiting"] == 0
    worker.run_until_empty(timeout=10)
    summary = queue.workflow(run.id)
    assert summary is not None
    assert summary.status == "cancelled"
    assert [j.id for j in summary.jobs] == [run.job_ids[a]]
    assert queue.cancel_workflow(run.id) == 0


def test_depends_on_an_unknown_id_writes_nothing(pg_store: PostgresStore) -> None:
    queue = Queue(pg_store)
    parent = add_job(queue, "u.parent", {})
    before = queue.count_by_status()
    with pytest.raises(ValueError, match="depends_on"):
        queue.add("u.child", {}, depends_on=[parent, "900000001"])
    with pytest.raises(ValueError, match="depends_on"):
        queue.add_many("u.child", [{}, {}], depends_on=["900000001"])
    with pytest.raises(ValueError, match="depends_on"):
        queue.add("u.child", {}, depends_on=["not-an-id"])
    assert queue.count_by_status() == before


def test_bad_workflow_input_is_refused_before_any_sql(pg_store: PostgresStore) -> None:
    queue = Queue(pg_store)
    grouped = JobType("g.batch", grouped=True)
    wf = Workflow("bad")
    first = wf.add("a", {})
    with pytest.raises(ValueError, match="grouped"):
        wf.add(grouped, {}, scope=("s", "1"), after=[first])
    with pytest.raises(ValueError, match="grouped"):
        queue.add(grouped, {}, scope=("s", "1"), depends_on=["1"])
    with pytest.raises(ValueError, match="after"):
        wf.add("b", {}, after=[Workflow("other").add("x", {})])
    with pytest.raises(ValueError, match="on_parent_failure"):
        wf.add("b", {}, on_parent_failure="explode")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no jobs"):
        queue.add_workflow(Workflow("empty"))
    assert len(wf) == 1
    assert queue.workflow("900000001") is None


def test_add_workflow_on_a_rolled_back_connection_leaves_nothing(
    pg_store: PostgresStore, pg_dsn: str
) -> None:
    queue = Queue(pg_store)
    with psycopg.connect(pg_dsn) as conn:
        wf = Workflow("tx")
        root = wf.add("tx.a", {})
        wf.add("tx.b", {}, after=[root])
        run = queue.add_workflow(wf, connection=conn)
        conn.rollback()
    assert queue.workflow(run.id) is None
    assert sum(queue.count_by_status().values()) == 0


def test_a_duplicate_node_in_the_callers_transaction_leaves_it_usable(
    pg_store: PostgresStore, pg_dsn: str
) -> None:
    queue = Queue(pg_store)
    add_job(queue, "dup.b", {}, dedupe_key="k")
    with psycopg.connect(pg_dsn) as conn:
        mine = queue.add("dup.mine", {}, connection=conn)
        wf = Workflow("dup")
        root = wf.add("dup.a", {})
        wf.add("dup.b", {}, after=[root], dedupe_key="k")
        with pytest.raises(ValueError, match="duplicate"):
            queue.add_workflow(wf, connection=conn)
        conn.commit()
    assert mine is not None
    assert _status(queue, mine) is JobStatus.PENDING
    assert queue.stats()["pending"] == 2  # dup.b's holder and mine: nothing of the workflow


def _fan(size: int) -> Workflow:
    """fetch -> (size - 2) x extract -> index (one job when size is 1)."""
    wf = Workflow(f"fan of {size}")
    root = wf.add("fan.fetch", {"url": "u"})
    if size > 1:
        pages = [wf.add("fan.extract", {"page": n}, after=[root]) for n in range(size - 2)]
        wf.add("fan.index", {}, after=pages or [root])
    return wf


@pytest.mark.parametrize("autocommit", [True, False])
def test_add_workflow_makes_the_same_round_trips_whatever_its_size(
    pg_store: PostgresStore, pg_dsn: str, autocommit: bool
) -> None:
    queue = Queue(pg_store)
    trips: dict[int, list[str]] = {}
    with psycopg.connect(pg_dsn, autocommit=autocommit) as conn:
        add_job(queue, "fan.before", {}, connection=conn)  # the caller's transaction begun
        for size in (1, 12, 60):
            with round_trips(conn) as seen:
                queue.add_workflow(_fan(size), connection=conn)
            trips[size] = seen.sent
        conn.commit()
    # one statement; in the caller's transaction it is wrapped in a savepoint
    expected = 1 if autocommit else 3
    assert {size: len(sent) for size, sent in trips.items()} == {
        1: expected, 12: expected, 60: expected}, trips
    assert queue.stats()["pending"] == 4  # "before" and each fetch, released in the same statement
    assert queue.stats()["waiting"] == 70


def test_an_add_with_parents_makes_two_round_trips(pg_store: PostgresStore, pg_dsn: str) -> None:
    queue = Queue(pg_store)
    first = add_job(queue, "p.one", {})
    second = add_job(queue, "p.two", {})
    with psycopg.connect(pg_dsn, autocommit=True) as conn, round_trips(conn) as seen:
        kid = queue.add("p.kid", {}, depends_on=[first, second], connection=conn)
    assert len(seen.sent) == 2, seen.sent  # the parents checked, then the insert and link
    assert kid is not None
    assert _status(queue, kid) is JobStatus.WAITING
    assert sorted(p.id for p in pg_store.job_links(kid).parents) == sorted([first, second])


def test_waiting_counts_in_stats_and_filters(pg_store: PostgresStore) -> None:
    queue = Queue(pg_store)
    parent = add_job(queue, "c.parent", {})
    assert queue.add_many("c.child", [{"n": n} for n in range(3)], depends_on=[parent]) == 3
    assert queue.stats()["waiting"] == 3
    assert queue.count_by_status()[JobStatus.WAITING] == 3
    assert len(queue.find(statuses=[JobStatus.WAITING])) == 3
    assert len(queue.find(statuses=["waiting"])) == 3


def test_transactional_and_async_handlers_see_their_parents(pg_store: PostgresStore) -> None:
    queue = Queue(pg_store)
    parent = add_job(queue, "h.parent", {})
    tx_child = queue.add("h.tx", {}, depends_on=[parent])
    async_child = queue.add("h.async", {}, depends_on=[parent])
    assert tx_child is not None
    assert async_child is not None
    seen: dict[str, Any] = {}
    worker = fast_worker(pg_store)
    worker.handler("h.parent")(lambda job: 42)

    @worker.handler("h.tx", transactional=True)
    def tx(job: JobEvent[Any]) -> None:
        seen["tx"] = (job.parents[parent].result, job.workflow_id)

    @worker.handler("h.async")
    async def in_loop(job: JobEvent[Any]) -> None:
        seen["async"] = (job.parents[parent].result, job.workflow_id)

    worker.run_until_empty(timeout=30)
    assert seen == {"tx": (42, None), "async": (42, None)}


def test_handlers_of_one_claim_read_their_parents_in_one_statement(
    pg_store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = Queue(pg_store)
    parent = add_job(queue, "one.parent", {})
    assert queue.add_many("one.child", [{"n": n} for n in range(20)], depends_on=[parent]) == 20
    plain = add_job(queue, "one.plain", {})
    reads: list[list[str]] = []
    read_many = pg_store.job_parents_many

    def counted(job_ids: Any) -> Any:
        reads.append(list(job_ids))
        return read_many(job_ids)

    monkeypatch.setattr(pg_store, "job_parents_many", counted)
    seen: dict[str, Any] = {}
    worker = fast_worker(pg_store)
    worker.handler("one.parent")(lambda job: {"doc": 7})

    @worker.handler("one.child", concurrency=20)
    def kid(job: JobEvent[Any]) -> None:
        seen[job.id] = (job.parents[parent].result, job.workflow_id)

    @worker.handler("one.plain")
    def alone(job: JobEvent[Any]) -> None:
        seen[job.id] = dict(job.parents)

    worker.run_until_empty(timeout=30)
    assert len(seen) == 21
    assert seen.pop(plain) == {}
    assert all(value == ({"doc": 7}, None) for value in seen.values())
    # a read per claim, not per job: the children, released together, are claimed together
    # (a claim may split them in two on a loaded machine), the plain job's claim is one more
    children = [r for r in reads if set(r) & set(seen)]
    assert 1 <= len(children) <= 2, reads
    assert sorted(j for r in children for j in r if j in seen) == sorted(seen)
    assert len(reads) <= 3, reads


def test_claims_of_a_type_found_with_parents_have_them_read_ahead(
    pg_store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = Queue(pg_store)
    readers: list[str] = []
    read_many = pg_store.job_parents_many

    def counted(job_ids: Any) -> Any:
        readers.append(threading.current_thread().name)
        return read_many(job_ids)

    monkeypatch.setattr(pg_store, "job_parents_many", counted)
    worker = fast_worker(pg_store)
    worker.handler("ahead.parent")(lambda job: 1)
    results: list[int] = []
    # one slot: a claim's jobs wait in the buffer while the handler runs the previous one
    worker.handler("ahead.child", concurrency=1)(
        lambda job: results.append(job.parents[next(iter(job.parents))].result))
    worker.start()
    try:
        for wave in (1, 2):  # the first teaches the worker that ahead.child has parents
            parent = add_job(queue, "ahead.parent", {})
            queue.add_many("ahead.child", [{"n": n} for n in range(20)], depends_on=[parent])
            assert wait_until(lambda wave=wave: len(results) == 20 * wave, timeout=30)
    finally:
        worker.stop()
    assert results == [1] * 40
    assert not readers[0].startswith("golemq-parents"), readers  # a handler's own read
    # then read ahead (a handler may still win the race to a claim's first read)
    assert any(name.startswith("golemq-parents") for name in readers), readers


def test_async_queue_adds_and_reads_workflows(
    loop_thread: LoopThread, async_pg_store: AsyncPostgresStore, pg_store: PostgresStore
) -> None:
    aqueue = AsyncQueue(async_pg_store)
    wf = Workflow("async")
    root = wf.add("as.a", {})
    leaf = wf.add("as.b", {}, after=[root])
    run = loop_thread.run(aqueue.add_workflow(wf))
    summary = loop_thread.run(aqueue.workflow(run.id))
    assert summary is not None
    assert summary.status == "running"
    kid = loop_thread.run(aqueue.add("as.c", {}, depends_on=[run.job_ids[leaf]]))
    assert kid is not None
    assert _status(Queue(pg_store), kid) is JobStatus.WAITING
    assert loop_thread.run(aqueue.cancel_workflow(run.id)) == 2
    assert _status(Queue(pg_store), kid) is JobStatus.FAILED  # its parent was cancelled


@pytest.mark.pgbouncer
def test_a_workflow_runs_through_pgbouncer_in_transaction_mode(
    bouncer_store: PostgresStore,
) -> None:
    queue = Queue(bouncer_store)
    run, (_a, b, c, d) = _diamond(queue)
    seen: dict[str, Any] = {}
    worker = fast_worker(bouncer_store)
    worker.handler("wf.step")(lambda job: job.payload["name"])

    @worker.handler("wf.join")
    def join(job: JobEvent[Any]) -> None:
        seen.update({k: v.result for k, v in job.parents.items()})

    worker.run_until_empty(timeout=30)
    assert seen == {run.job_ids[b]: "B", run.job_ids[c]: "C"}
    summary = queue.workflow(run.id)
    assert summary is not None
    assert summary.status == "succeeded"
    assert _status(queue, run.job_ids[d]) is JobStatus.SUCCEEDED
    failing = add_job(queue, "bx.parent", {})
    kid = queue.add("bx.child", {}, depends_on=[failing])
    assert kid is not None
    assert queue.cancel(failing) is True
    assert _status(queue, kid) is JobStatus.FAILED
