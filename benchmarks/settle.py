"""The settle path, per job: what a completion costs when it finishes parents.

``python -m benchmarks.settle [--dsn DSN] [--rounds 3]``: on a fresh schema each round, one
connection, the store's own completion verb (``job_complete_many``, the worker's fenced
write), wall clock around each statement, medians over the rounds:

* ``plain``: 1,000 jobs without dependents completed in one statement (the baseline);
* ``fan-out``: one parent with 1,000 children completed alone (the children released);
* ``fan-in``: 100 workflows of 10 parents and one child; batch k completes the k-th parent
  of every workflow (100 parents a statement): batches 1-9 count their children's open
  parents off, batch 10 releases the 100 children; against 100 plain jobs a statement.

A profile, not a target: it says where a workflow's time goes between the claim and the
next claim (docs: benchmarks/RESULTS.md, "Workflows at speed").
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from benchmarks.sandbox import fresh_schema
from golemq_pg import PostgresStore, Queue, Workflow
from golemq_pg.store.port import ClaimedJob, ClaimRequest, TypeSlots

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
OWNER = "settle-profile"


def _claim(store: PostgresStore, job_type: str, n: int) -> list[ClaimedJob]:
    jobs = store.job_claim(ClaimRequest(
        owner=OWNER, types=[TypeSlots(type=job_type, limit=n, lease_seconds=600)]))
    if len(jobs) != n:
        raise RuntimeError(f"claimed {len(jobs)} of {n} {job_type} jobs")
    return sorted(jobs, key=lambda job: int(job.id))


def _timed(write: Callable[[], Any]) -> float:
    start = time.perf_counter()
    write()
    return time.perf_counter() - start


def plain(store: PostgresStore, n: int) -> float:
    """Seconds to complete ``n`` jobs without dependents in one statement."""
    Queue(store).add_many("plain", [{"n": k} for k in range(n)])
    jobs = _claim(store, "plain", n)
    return _timed(lambda: store.job_complete_many(OWNER, jobs))


def fan_out(store: PostgresStore, children: int) -> float:
    """Seconds to complete one parent that releases ``children`` children."""
    wf = Workflow("fan-out")
    parent = wf.add("fo.parent", {})
    for k in range(children):
        wf.add("fo.child", {"k": k}, after=[parent])
    Queue(store).add_workflow(wf)
    jobs = _claim(store, "fo.parent", 1)
    return _timed(lambda: store.job_complete_many(OWNER, jobs))


def fan_in(store: PostgresStore, workflows: int, parents: int) -> list[float]:
    """Seconds of each of ``parents`` statements, statement k completing the k-th parent of
    each of ``workflows`` fan-ins (the last one releases the children)."""
    queue = Queue(store)
    for w in range(workflows):  # one call each: the adds are not timed
        wf = Workflow(f"fan-in {w}")
        tops = [wf.add(f"fi.parent{k}", {"w": w}) for k in range(parents)]
        wf.add("fi.child", {"w": w}, after=tops)
        queue.add_workflow(wf)
    seconds = []
    for k in range(parents):
        jobs = _claim(store, f"fi.parent{k}", workflows)
        seconds.append(_timed(lambda jobs=jobs: store.job_complete_many(OWNER, jobs)))
    return seconds


def main(argv: list[str] | None = None) -> None:
    """Print each figure per job, medians over ``--rounds`` fresh schemas."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.settle")
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    figures: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        with fresh_schema(args.dsn, "settle") as box, PostgresStore.connect(
                args.dsn, schema=box.schema_name, max_size=2) as store:
            store.migrate()
            figures.setdefault("plain 1,000: us a job", []).append(plain(store, 1000) / 1000)
            figures.setdefault("plain 100: us a job", []).append(plain(store, 100) / 100)
            figures.setdefault("fan-out 1,000: us a child", []).append(
                fan_out(store, 1000) / 1000)
            batches = fan_in(store, 100, 10)
            figures.setdefault("fan-in, batches 1-9: us a parent", []).append(
                statistics.median(batches[:-1]) / 100)
            figures.setdefault("fan-in, batch 10: us a parent", []).append(batches[-1] / 100)
    for name, values in figures.items():
        print(f"{name:36} {statistics.median(values) * 1e6:9.1f}   "
              f"(rounds: {', '.join(f'{v * 1e6:.1f}' for v in values)})")


if __name__ == "__main__":
    main()
