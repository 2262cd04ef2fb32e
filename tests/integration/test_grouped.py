"""Grouped handlers: every due job of one (type, scope) delivered as one BatchEvent in
arrival order; success consumes the batch, failure retries all of it; max_batch splits a
group; a running group is locked; different groups run in parallel; a grouped type needs a
scope. The headline test runs 10 groups x 50 messages through two worker processes while
the messages are being added."""

from __future__ import annotations

import itertools
import random
import subprocess
import threading
import time
from collections import Counter, defaultdict
from typing import Any, TypedDict

import psycopg
import pytest
from psycopg import sql

from golemq_pg import BatchEvent, JobStatus, JobType, PostgresStore, Queue, Scope, Worker
from golemq_pg.testing import memory_store
from tests.support.in_process import fast_worker
from tests.support.workers import kill_leftovers, spawn, stop_gracefully, worker_config


class DigestPayload(TypedDict):
    group: str
    seq: int


Digest = JobType("digest", DigestPayload, grouped=True)

GROUPS = 10
PER_GROUP = 50
MAX_BATCH = 20
CONCURRENCY = 3


def _spawn(dsn: str, schema: str, worker_id: str) -> subprocess.Popen[str]:
    """A worker process with a grouped handler. Each batch is written to the ledger, one row
    per job: (job_id, grp, seq, attempt, batch, pid, started, ended, ok). A batch whose jobs
    are all on their first attempt and that holds a message with seq % 23 == 0 fails once,
    so "failure retries every one" is exercised without ever exhausting an attempt budget."""
    return spawn(worker_config(
        dsn, schema, worker_id, store={"max_size": 8},
        worker={"poll_interval": 0.2, "base_backoff": 0, "max_backoff": 0,
                "shutdown_grace": 5},
        handlers=[{"type": "digest", "ledger": "batches", "sleep": [0.05, 0.15],
                   "options": {"grouped": True, "max_batch": MAX_BATCH,
                               "concurrency": CONCURRENCY},
                   "fail_first_batch_when": {"field": "seq", "multiple_of": 23}}],
    ))


def _count_succeeded(dsn: str, schema: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(sql.SQL("SELECT count(*) FROM {}.jobs_all WHERE status = 'succeeded'")
                           .format(sql.Identifier(schema))).fetchone()
    assert row is not None
    return int(row[0])


def test_ten_groups_of_fifty_through_two_worker_processes(
    pg_store: PostgresStore, pg_dsn: str
) -> None:
    schema = pg_store.schema
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL(
            "CREATE TABLE {}.ledger (job_id text NOT NULL, grp text NOT NULL, seq int NOT NULL,"
            " attempt int NOT NULL, batch text NOT NULL, pid int NOT NULL,"
            " started float8 NOT NULL, ended float8 NOT NULL, ok bool NOT NULL,"
            # The order rows were written in: a batch's rows go in as the handler got its
            # jobs. A heap scan need not return them so (two processes extending the table
            # at once put one batch's rows on pages out of order: a flaky failure).
            " written bigserial)"
        ).format(sql.Identifier(schema)))
    queue = Queue(pg_store)
    procs = [_spawn(pg_dsn, schema, f"grp-{i}") for i in range(2)]
    added: dict[str, list[str]] = defaultdict(list)
    errors: list[BaseException] = []

    def produce(groups: list[str]) -> None:
        # One producer per group, so a group's arrival order is its seq order.
        try:
            rng = random.Random(hash(tuple(groups)))
            for seq in range(PER_GROUP):
                for group in groups:
                    job_id = queue.add(Digest, {"group": group, "seq": seq},
                                       scope=("Team", group))
                    assert job_id is not None
                    added[group].append(job_id)
                time.sleep(rng.uniform(0.0, 0.02))
        except BaseException as exc:
            errors.append(exc)

    names = [f"g{n}" for n in range(GROUPS)]
    producers = [threading.Thread(target=produce, args=(names[i::2],)) for i in range(2)]
    try:
        for t in producers:
            t.start()
        for t in producers:
            t.join()
        assert errors == []
        deadline = time.monotonic() + 90
        while _count_succeeded(pg_dsn, schema) < GROUPS * PER_GROUP:
            assert time.monotonic() < deadline, "the groups never drained"
            time.sleep(0.1)
        stop_gracefully(procs)
    finally:
        kill_leftovers(procs)

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        ledger = conn.execute(sql.SQL(
            "SELECT job_id, grp, seq, attempt, batch, pid, started, ended, ok FROM {}.ledger"
            " ORDER BY written"
        ).format(sql.Identifier(schema))).fetchall()
    assert Counter(r[1] for r in (j for j in ledger if j[8])) == dict.fromkeys(names, PER_GROUP)
    batches: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    for row in ledger:
        batches[row[4]].append(row)

    # Every message delivered exactly once inside a successful batch.
    ok_ids = Counter(r[0] for r in ledger if r[8])
    assert set(ok_ids.values()) == {1}
    assert set(ok_ids) == {job_id for ids in added.values() for job_id in ids}

    per_group: dict[str, list[list[tuple[Any, ...]]]] = defaultdict(list)
    for rows in batches.values():
        assert len({r[1] for r in rows}) == 1  # a batch is one group
        assert 1 <= len(rows) <= MAX_BATCH
        per_group[rows[0][1]].append(rows)
    for group, group_batches in per_group.items():
        group_batches.sort(key=lambda rows: rows[0][6])
        # Never two batches of one group at once (failed ones included).
        for earlier, later in itertools.pairwise(group_batches):
            assert later[0][6] >= earlier[0][7], (group, earlier[0][4], later[0][4])
        # Arrival order: within every batch, and across the group's successful batches.
        for rows in group_batches:
            assert [r[2] for r in rows] == sorted(r[2] for r in rows)
            assert [int(r[0]) for r in rows] == sorted(int(r[0]) for r in rows)
        delivered = [r[2] for rows in group_batches if rows[0][8] for r in rows]
        assert delivered == list(range(PER_GROUP)), (group, delivered)
        assert [r[0] for rows in group_batches if rows[0][8] for r in rows] == added[group]

    # A failed batch was retried whole: each of its jobs succeeded later, on attempt 2.
    failed = [rows for rows in batches.values() if not rows[0][8]]
    assert failed, "no batch failed: the poison rule did not trigger"
    second = {r[0]: r[3] for r in ledger if r[8]}
    for rows in failed:
        assert all(second[r[0]] == 2 for r in rows)
    statuses = Counter(j.status for j in queue.find(types=[Digest], limit=1000))
    assert statuses == {JobStatus.SUCCEEDED: GROUPS * PER_GROUP}

    # Different groups ran in parallel, never more than the handler's concurrency per process.
    spans = sorted((rows[0][6], rows[0][7], rows[0][5]) for rows in batches.values())
    most = 0
    for pid in {s[2] for s in spans}:
        mine = [s for s in spans if s[2] == pid]
        for start, _, _ in mine:
            live = sum(1 for s in mine if s[0] <= start < s[1])
            assert live <= CONCURRENCY
            most = max(most, live)
    assert most >= 2, "no two groups ever ran at once"
    assert len({s[2] for s in spans}) == 2  # both processes took part
    # Messages that arrived while their group ran were batched together.
    assert max(len(rows) for rows in batches.values()) >= 2
    print(f"{len(batches)} batches ({len(failed)} failed once), "
          f"mean size {sum(len(b) for b in batches.values()) / len(batches):.1f}")


# -- in-process checks on both stores -------------------------------------------------------


def _drain(store: Any, fn: Any, **options: Any) -> None:
    worker = Worker(store, poll_interval=0.05, base_backoff=0, max_backoff=0)
    worker.handler("digest", grouped=True, **options)(fn)
    worker.run_until_empty(timeout=30)


def test_a_batch_is_in_arrival_order_whatever_the_priorities() -> None:
    # All jobs at one (fake) instant with mixed priorities: the store hands them over in
    # claim order (priority first); the batch must still be in arrival (id) order.
    store, _ = memory_store()
    queue = Queue(store)
    ids = [queue.add(Digest, {"group": "a", "seq": n}, scope=("Team", "a"), priority=p)
           for n, p in enumerate([0, 5, 1, 9, 0, 3])]
    seen: list[list[str]] = []
    _drain(store, lambda batch: seen.append([j.id for j in batch.jobs]))
    assert seen == [ids]


def test_a_batch_is_in_arrival_order_within_one_transaction(pg_store: PostgresStore) -> None:
    # One transaction: every job has the same created_at (now()), priorities differ.
    queue = Queue(pg_store)
    with pg_store.pool.connection() as conn, conn.transaction():
        ids = [queue.add(Digest, {"group": "a", "seq": n}, scope=("Team", "a"), priority=p,
                         connection=conn)
               for n, p in enumerate([0, 5, 1, 9, 0, 3])]
    seen: list[list[str]] = []
    _drain(pg_store, lambda batch: seen.append([j.id for j in batch.jobs]))
    assert seen == [ids]


def test_success_consumes_and_failure_retries_every_job_of_a_batch(store: Any) -> None:
    queue = Queue(store)
    ids = [queue.add(Digest, {"group": "a", "seq": n}, scope=("Team", "a")) for n in range(5)]
    calls: list[tuple[int, list[str], list[int]]] = []

    def handle(batch: BatchEvent[DigestPayload]) -> None:
        calls.append((batch.attempt, [j.id for j in batch.jobs], [j.attempt for j in batch.jobs]))
        if batch.attempt == 1:
            raise RuntimeError("downstream unavailable")

    _drain(store, handle)
    assert calls == [(1, ids, [1] * 5), (2, ids, [2] * 5)]
    for job_id in ids:
        job = queue.get(job_id)  # type: ignore[arg-type]
        assert job is not None
        assert (job.status, job.attempts) == (JobStatus.SUCCEEDED, 2)


def test_max_batch_splits_a_group_in_arrival_order(store: Any) -> None:
    queue = Queue(store)
    ids = [queue.add(Digest, {"group": "a", "seq": n}, scope=("Team", "a")) for n in range(7)]
    seen: list[list[str]] = []
    _drain(store, lambda batch: seen.append([j.id for j in batch.jobs]), max_batch=3)
    assert seen == [ids[:3], ids[3:6], ids[6:]]


def test_a_running_group_is_locked_while_other_groups_run(store: Any) -> None:
    queue = Queue(store)
    first = queue.add(Digest, {"group": "a", "seq": 0}, scope=("Team", "a"))
    release = threading.Event()
    a_started = threading.Event()
    b_done = threading.Event()
    seen: list[tuple[str, list[str]]] = []
    lock = threading.Lock()

    def handle(batch: BatchEvent[DigestPayload]) -> None:
        assert batch.scope is not None
        with lock:
            seen.append((batch.scope.id, [j.id for j in batch.jobs]))
        if batch.scope.id == "a" and len(seen) == 1:
            a_started.set()
            assert release.wait(20)
        if batch.scope.id == "b":
            b_done.set()

    worker = Worker(store, poll_interval=0.05)
    worker.handler(Digest, concurrency=2)(handle)
    worker.start()
    try:
        assert a_started.wait(20)
        late = queue.add(Digest, {"group": "a", "seq": 1}, scope=("Team", "a"))
        other = queue.add(Digest, {"group": "b", "seq": 0}, scope=("Team", "b"))
        assert b_done.wait(20)  # another group runs beside the locked one
        assert [s for s in seen if s[0] == "a"] == [("a", [first])]  # "late" waits
        release.set()
        deadline = time.monotonic() + 20
        while len(seen) < 3:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        release.set()
        worker.stop()
    assert seen == [("a", [first]), ("b", [other]), ("a", [late])]


def test_a_grouped_job_type_needs_a_scope(store: Any) -> None:
    queue = Queue(store)
    with pytest.raises(ValueError, match="grouped"):
        queue.add(Digest, {"group": "a", "seq": 0})
    with pytest.raises(ValueError, match="grouped"):
        queue.add_many(Digest, [{"group": "a", "seq": 0}])
    assert queue.count_by_status()[JobStatus.PENDING] == 0


def test_grouped_batches_deliver_each_scope_once(store: Any) -> None:
    queue = Queue(store)
    digest = JobType("digest", grouped=True)
    worker = fast_worker(store)
    batches: list[tuple[Scope | None, list[int], int]] = []

    @worker.handler(digest, concurrency=2)
    def send(batch: BatchEvent[Any]) -> None:
        batches.append((batch.scope, [j.payload["n"] for j in batch.jobs], batch.attempt))
        assert all(j.signal is batch.signal for j in batch.jobs)

    for n in range(5):
        queue.add(digest, {"n": n}, scope=("User", "u1"))
    for n in range(3):
        queue.add(digest, {"n": 10 + n}, scope=("User", "u2"))
    worker.run_until_empty(timeout=20)
    by_scope = {scope: ns for scope, ns, _ in batches}
    assert by_scope == {Scope("User", "u1"): [0, 1, 2, 3, 4], Scope("User", "u2"): [10, 11, 12]}
    assert all(attempt == 1 for _, _, attempt in batches)
    assert queue.count_by_status()[JobStatus.SUCCEEDED] == 8


def test_grouped_failure_retries_the_whole_batch_and_max_batch_splits(store: Any) -> None:
    queue = Queue(store)
    worker = fast_worker(store)
    sizes: list[tuple[int, int]] = []

    @worker.handler("bundle", grouped=True, max_batch=2)
    def bundle(batch: BatchEvent[Any]) -> None:
        sizes.append((len(batch.jobs), batch.attempt))
        if batch.attempt == 1:
            raise RuntimeError("downstream down")

    for n in range(4):
        queue.add("bundle", {"n": n}, scope=("Feed", "f"), max_attempts=3)
    worker.run_until_empty(timeout=20)
    assert all(size <= 2 for size, _ in sizes)
    assert sum(size for size, attempt in sizes if attempt == 1) == 4
    counts = queue.count_by_status()
    assert counts[JobStatus.SUCCEEDED] == 4
    for summary in queue.find(types=["bundle"]):
        assert summary.attempts == 2
        assert summary.last_error == "RuntimeError: downstream down"


def test_grouped_job_type_needs_scope(store: Any) -> None:
    queue = Queue(store)
    digest: JobType[dict[str, Any]] = JobType("digest.send", grouped=True)
    with pytest.raises(ValueError, match="scope"):
        queue.add(digest, {"x": 1})
    assert queue.add(digest, {"x": 1}, scope=("User", "u1")) is not None


def test_a_failed_batchs_retry_includes_the_late_arrivals_in_arrival_order(store: Any) -> None:
    # message-queue's unit of work: jobs that join a group while its batch runs, or while
    # the failed batch waits out its backoff, are delivered with the retry, never alone
    # before it. Each job counts its own attempts; a spent budget dead-letters alone.
    queue = Queue(store)
    spent = queue.add(Digest, {"group": "a", "seq": 0}, scope=("Team", "a"), max_attempts=1)
    kept = queue.add(Digest, {"group": "a", "seq": 1}, scope=("Team", "a"))
    running = threading.Event()
    release = threading.Event()
    calls: list[tuple[list[str], list[int]]] = []

    def handle(batch: BatchEvent[DigestPayload]) -> None:
        calls.append(([j.id for j in batch.jobs], [j.attempt for j in batch.jobs]))
        if len(calls) == 1:
            running.set()
            assert release.wait(20)
            raise RuntimeError("downstream unavailable")

    worker = Worker(store, poll_interval=0.05, base_backoff=1.0, max_backoff=1.0)
    worker.handler(Digest)(handle)
    worker.start()
    try:
        assert running.wait(20)
        during_run = queue.add(Digest, {"group": "a", "seq": 2}, scope=("Team", "a"))
        release.set()
        deadline = time.monotonic() + 20
        while (job := queue.get(kept)) is None or job.status != JobStatus.PENDING:  # type: ignore[arg-type]
            assert time.monotonic() < deadline
            time.sleep(0.01)
        during_backoff = queue.add(Digest, {"group": "a", "seq": 3}, scope=("Team", "a"))
        time.sleep(0.3)  # well inside the backoff: nothing of the group may run alone
        assert len(calls) == 1
        while len(calls) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        worker.run_until_empty(timeout=20)
    finally:
        release.set()
        worker.stop()
    assert calls == [([spent, kept], [1, 1]),
                     ([kept, during_run, during_backoff], [2, 1, 1])]
    dead = queue.get(spent)  # type: ignore[arg-type]
    assert dead is not None
    assert (dead.status, dead.attempts) == (JobStatus.FAILED, 1)
    for job_id, attempts in ((kept, 2), (during_run, 1), (during_backoff, 1)):
        done = queue.get(job_id)  # type: ignore[arg-type]
        assert done is not None
        assert (done.status, done.attempts) == (JobStatus.SUCCEEDED, attempts)


def test_a_replacing_keyed_job_moves_to_the_end_of_its_batch(store: Any) -> None:
    queue = Queue(store)
    keyed = queue.add(Digest, {"group": "a", "seq": 0}, scope=("Team", "a"), dedupe_key="k")
    behind = queue.add(Digest, {"group": "a", "seq": 1}, scope=("Team", "a"))
    time.sleep(0.01)  # a later instant than both adds
    again = queue.add(Digest, {"group": "a", "seq": 2}, scope=("Team", "a"), dedupe_key="k",
                      on_duplicate="replace")
    assert again == keyed  # the same job, with the replacing payload, now last in line
    seen: list[list[tuple[str, int]]] = []
    _drain(store, lambda batch: seen.append([(j.id, j.payload["seq"]) for j in batch.jobs]))
    assert seen == [[(behind, 1), (keyed, 2)]]
