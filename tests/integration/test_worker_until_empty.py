"""run_until_empty returns only once this worker has nothing left to do: no due job of a type
it handles is pending, waiting on a parent it finished, or running, whichever kind of handler
(plain, async, grouped, transactional) made it due or runs it. Guards holding work back:
test_guards_until_empty.py; paused and parked jobs: test_pause.py."""

from __future__ import annotations

from typing import Any

from golemq_pg import JobEvent, JobStatus, PostgresStore, Queue, Worker

ROUNDS = 20


def unfinished(queue: Queue) -> dict[str, int]:
    """The jobs of the queue not finished yet, by status (only the non-zero ones)."""
    counts = queue.count_by_status()
    left = {status.value: counts.get(status, 0)
            for status in (JobStatus.PENDING, JobStatus.WAITING, JobStatus.RUNNING)}
    return {status: n for status, n in left.items() if n}


def test_children_released_by_this_workers_completions_run_before_it_returns(
    pg_store: PostgresStore,
) -> None:
    # A parent's completion releases its child from WAITING: the worker that finished the
    # parent must run the child (of every kind of handler) before it calls the queue empty.
    queue = Queue(pg_store)
    worker = Worker(pg_store)
    ran: list[str] = []

    @worker.handler("parent")
    def parent(job: JobEvent[Any]) -> None:
        ran.append(job.type)

    @worker.handler("tx_parent", transactional=True)
    def tx_parent(job: JobEvent[Any]) -> None:
        ran.append(job.type)

    @worker.handler("tx_child", transactional=True)
    def tx_child(job: JobEvent[Any]) -> None:
        ran.append(job.type)

    @worker.handler("child")
    def child(job: JobEvent[Any]) -> None:
        ran.append(job.type)

    @worker.handler("async_child")
    async def async_child(job: JobEvent[Any]) -> None:
        ran.append(job.type)

    @worker.handler("grouped_child", grouped=True)
    def grouped_child(batch: Any) -> None:
        ran.extend(job.type for job in batch.jobs)

    pairs = [("parent", "tx_child"), ("parent", "child"), ("parent", "async_child"),
             ("tx_parent", "tx_child"), ("tx_parent", "child"), ("tx_parent", "grouped_child")]
    for round_no in range(ROUNDS):
        for parent_type, child_type in pairs:
            # One pair per run: with more work in flight the NOTIFY of the released child
            # tends to arrive in time and hide a drain that does not look again.
            first = queue.add(parent_type, {"round": round_no})
            assert first is not None
            queue.add(child_type, {}, depends_on=[first], scope=("Round", str(round_no)))
            worker.run_until_empty(timeout=30)
            assert unfinished(queue) == {}, f"round {round_no}: {parent_type} -> {child_type}"
    assert sorted(ran) == sorted(
        [kind for pair in pairs for kind in pair] * ROUNDS
    )


def test_jobs_added_by_this_workers_handlers_run_before_it_returns(
    pg_store: PostgresStore,
) -> None:
    # A handler's add is due at once: plain, async and transactional handlers adding a
    # transactional job, and a transactional handler adding a plain one in its transaction.
    queue = Queue(pg_store)
    worker = Worker(pg_store)
    ran: list[str] = []

    @worker.handler("spawn")
    def spawn(job: JobEvent[Any]) -> None:
        queue.add("tx_work", {})

    @worker.handler("async_spawn")
    async def async_spawn(job: JobEvent[Any]) -> None:
        queue.add("tx_work", {})

    @worker.handler("tx_spawn", transactional=True)
    def tx_spawn(job: JobEvent[Any]) -> None:
        queue.add("work", {}, connection=job.connection)

    @worker.handler("tx_work", transactional=True)
    def tx_work(job: JobEvent[Any]) -> None:
        ran.append(job.type)

    @worker.handler("work")
    def work(job: JobEvent[Any]) -> None:
        ran.append(job.type)

    for round_no in range(ROUNDS):
        for job_type in ("spawn", "async_spawn", "tx_spawn"):
            queue.add(job_type, {"round": round_no})
            worker.run_until_empty(timeout=30)
            assert unfinished(queue) == {}, f"round {round_no}: {job_type}"
    assert sorted(ran) == ["tx_work"] * 2 * ROUNDS + ["work"] * ROUNDS
