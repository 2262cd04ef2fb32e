"""The worker registry: every started Worker is listed by queue.workers() with its handlers
and held jobs, reads "stopping" while it stops, is gone after a clean stop, reads "lost"
within three heartbeat intervals of a SIGKILL, and lost rows are swept after an hour. A
registry that fails (its table gone) never stops a worker."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from typing import Any

import psycopg
from psycopg import sql

from golemq_pg import InMemoryStore, JobEvent, PostgresStore, Queue
from golemq_pg.store.port import LOST_AFTER_BEATS, LOST_SWEEP_SECONDS, WorkerBeat
from golemq_pg.worker.maintenance import DEREGISTER_WAIT, heartbeat_interval
from tests.support.in_process import fast_worker
from tests.support.waiting import wait_until
from tests.support.workers import kill_leftovers, spawn_worker, stop_gracefully

#: The heartbeat of a worker polling every 50 ms (the subprocess workers' poll): 1 s.
POLL = 0.05


def states(queue: Queue) -> dict[str, str]:
    """worker id -> state, as queue.workers() reports it."""
    return {w.worker_id: w.state for w in queue.workers()}


def test_a_started_worker_is_listed_with_its_handlers_and_held_jobs(store: Any) -> None:
    queue = Queue(store)
    worker = fast_worker(store, worker_id="reg-1")
    release = threading.Event()

    @worker.handler("block", concurrency=3)
    def block(job: JobEvent[Any]) -> None:
        release.wait(30)

    @worker.handler("other", concurrency=2)
    def other(job: JobEvent[Any]) -> None:
        """Never runs here."""

    worker.start()
    try:
        [listed] = wait_until(queue.workers, timeout=10, what="worker registered")
        assert listed.worker_id == "reg-1"
        assert (listed.host, listed.pid) == (socket.gethostname(), os.getpid())
        assert listed.handlers == {"block": 3, "other": 2}
        assert listed.state == "running"
        assert listed.running == 0
        for i in range(2):
            queue.add("block", {"i": i})
        wait_until(lambda: queue.workers()[0].running == 2, timeout=10,
                   what="two held jobs reported")
        release.set()
        wait_until(lambda: queue.workers()[0].running == 0, timeout=10,
                   what="no held job reported")
    finally:
        release.set()
        worker.stop()
    assert queue.workers() == []


def test_a_stopping_worker_reads_stopping_then_its_row_is_removed(store: Any) -> None:
    queue = Queue(store)
    worker = fast_worker(store, worker_id="reg-stop", shutdown_grace=30)
    started = threading.Event()
    release = threading.Event()

    @worker.handler("slow")
    def slow(job: JobEvent[Any]) -> None:
        started.set()
        release.wait(30)

    queue.add("slow", {})
    worker.start()
    assert started.wait(10)
    stopper = threading.Thread(target=worker.stop)
    stopper.start()
    try:
        wait_until(lambda: states(queue) == {"reg-stop": "stopping"}, timeout=10,
                   what="state stopping")
    finally:
        release.set()
        stopper.join(30)
    assert queue.workers() == []


def test_run_until_empty_leaves_no_row(store: Any) -> None:
    queue = Queue(store)
    worker = fast_worker(store)

    @worker.handler("t")
    def handle(job: JobEvent[Any]) -> None:
        """Succeeds."""

    queue.add("t", {})
    worker.run_until_empty(timeout=20)
    assert queue.workers() == []


def test_a_sigkilled_worker_process_reads_lost_within_three_heartbeats(
    pg_dsn: str, schema: str, pg_store: PostgresStore,
) -> None:
    queue = Queue(pg_store)
    beat = heartbeat_interval(fast_worker(InMemoryStore(), poll_interval=POLL).config)
    proc = spawn_worker(pg_dsn, schema, "victim", poll=POLL, concurrency=2)
    try:
        wait_until(lambda: states(queue).get("victim") == "running", timeout=30,
                   what="victim registered")
        [listed] = queue.workers()
        assert listed.pid == proc.pid
        assert listed.handlers == {"work": 2}
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        killed = time.monotonic()
        wait_until(lambda: states(queue) == {"victim": "lost"},
                   timeout=LOST_AFTER_BEATS * beat + 10, interval=0.05, what="victim lost")
        elapsed = time.monotonic() - killed
    finally:
        kill_leftovers([proc])
    # Lost once its last heartbeat (before the kill) is three intervals old: within three
    # intervals of the kill (plus a generous margin for a loaded host's reads).
    assert elapsed <= LOST_AFTER_BEATS * beat + 3.0, elapsed
    # The row stays (a lost worker is visible) until swept an hour later.
    assert states(queue) == {"victim": "lost"}


def test_a_worker_process_stopped_cleanly_leaves_no_row(
    pg_dsn: str, schema: str, pg_store: PostgresStore,
) -> None:
    queue = Queue(pg_store)
    procs = [spawn_worker(pg_dsn, schema, f"clean-{i}", poll=POLL) for i in range(2)]
    try:
        wait_until(lambda: states(queue) == {"clean-0": "running", "clean-1": "running"},
                   timeout=30, what="both registered")
        stop_gracefully(procs)
    finally:
        kill_leftovers(procs)
    assert queue.workers() == []


def _age(store: PostgresStore, worker_id: str, seconds: float) -> None:
    with psycopg.connect(store.dsn or "", autocommit=True) as conn:
        conn.execute(
            sql.SQL("UPDATE {}.workers SET last_seen_at = now() - make_interval(secs => %s) "
                    "WHERE worker_id = %s").format(sql.Identifier(store.schema)),
            [seconds, worker_id],
        )


def test_a_running_workers_maintenance_sweeps_rows_lost_for_an_hour(
    pg_store: PostgresStore,
) -> None:
    queue = Queue(pg_store)
    for worker_id in ("gone", "recent"):
        pg_store.worker_heartbeat(WorkerBeat(worker_id=worker_id, host="h", pid=1,
                                             handlers={}, heartbeat_seconds=1.0))
    _age(pg_store, "gone", LOST_SWEEP_SECONDS + 5)
    _age(pg_store, "recent", LOST_SWEEP_SECONDS - 600)
    assert states(queue) == {"gone": "lost", "recent": "lost"}
    worker = fast_worker(pg_store, worker_id="sweeper")
    with worker:
        wait_until(lambda: states(queue) == {"recent": "lost", "sweeper": "running"},
                   timeout=10, what="the hour-old lost row swept")


def test_a_failing_registry_never_stops_the_worker(pg_store: PostgresStore) -> None:
    queue = Queue(pg_store)
    with pg_store.pool.connection() as conn:
        conn.execute(sql.SQL("DROP TABLE {}.workers").format(sql.Identifier(pg_store.schema)))
    worker = fast_worker(pg_store)
    done: list[str] = []

    @worker.handler("t")
    def handle(job: JobEvent[Any]) -> None:
        done.append(job.id)

    ids = [queue.add("t", {"i": i}) for i in range(3)]
    worker.run_until_empty(timeout=30)
    assert sorted(done) == sorted(i for i in ids if i)
    assert not worker.running


def test_a_hanging_registry_holds_a_stop_up_only_briefly() -> None:
    release = threading.Event()

    class HangingRegistry(InMemoryStore):
        def worker_remove(self, worker_id: str) -> bool:
            release.wait(60)  # a database that does not answer
            return super().worker_remove(worker_id)

    store = HangingRegistry()
    worker = fast_worker(store, worker_id="hung")
    worker.start()
    wait_until(lambda: states(Queue(store)) == {"hung": "running"}, timeout=10,
               what="registered")
    started = time.monotonic()
    worker.stop()
    took = time.monotonic() - started
    release.set()
    assert took < DEREGISTER_WAIT + 5, took
    wait_until(lambda: Queue(store).workers() == [], timeout=10, what="row removed late")
