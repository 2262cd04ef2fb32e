"""Dedupe by replacement (on_duplicate="replace"): a pending job is replaced in place, a
running one gets a successor; and a storm of replacing adds for one key from several
producer threads while workers claim: the handler never sees two live jobs of the key at
once, the last payload wins, nothing is lost. Rejecting duplicates is in
test_dedupe_reject.py."""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from golemq_pg import JobEvent, JobStatus, Queue, Worker
from golemq_pg.store.port import LeaseRef
from tests.support.store_port import claim
from tests.support.waiting import wait_until

KEY = "article:a1"
STORM_SECONDS = 3.0


@dataclass(frozen=True)
class Run:
    job_id: str
    payload: dict[str, Any]
    started: float
    ended: float


class Ledger:
    """Handler runs, and a live counter that trips if two runs of the key overlap."""

    def __init__(self) -> None:
        self.runs: list[Run] = []
        self.live = 0
        self.most_live = 0
        self._lock = threading.Lock()

    def handle(self, job: JobEvent[Any]) -> None:
        with self._lock:
            self.live += 1
            self.most_live = max(self.most_live, self.live)
        started = time.perf_counter()
        time.sleep(random.uniform(0.001, 0.006))
        ended = time.perf_counter()
        with self._lock:
            self.live -= 1
            self.runs.append(Run(job.id, dict(job.payload), started, ended))


def _workers(store: Any, ledger: Ledger) -> list[Worker]:
    workers = []
    for _ in range(2):
        worker = Worker(store, poll_interval=0.05)
        worker.handler("article.audio", concurrency=4)(ledger.handle)
        workers.append(worker)
    return workers


def _drain(queue: Queue, workers: list[Worker]) -> None:
    def drained() -> bool:
        counts = queue.count_by_status()
        return counts[JobStatus.PENDING] == 0 and counts[JobStatus.RUNNING] == 0

    wait_until(drained, timeout=30, what=lambda: f"drained ({queue.count_by_status()})")
    for worker in workers:
        worker.stop()


def _check_no_overlap(ledger: Ledger) -> list[Run]:
    runs = sorted(ledger.runs, key=lambda r: r.started)
    assert ledger.most_live == 1
    for earlier, later in itertools.pairwise(runs):
        assert later.started >= earlier.ended, (earlier, later)
    return runs


def test_replace_storm_keeps_one_live_job_and_the_last_payload_wins(store: Any) -> None:
    """Producers take turns per add (so "last" is well defined: the highest sequence
    number), several threads contending for the turn while two workers claim."""
    queue = Queue(store)
    ledger = Ledger()
    workers = _workers(store, ledger)
    counter = itertools.count()
    turn = threading.Lock()
    added: list[tuple[int, str | None]] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            while not stop.is_set():
                with turn:
                    seq = next(counter)
                    job_id = queue.add("article.audio", {"seq": seq}, dedupe_key=KEY,
                                       on_duplicate="replace")
                    added.append((seq, job_id))
                time.sleep(random.uniform(0, 0.002))
        except BaseException as exc:
            errors.append(exc)

    for worker in workers:
        worker.start()
    producers = [threading.Thread(target=produce) for _ in range(4)]
    try:
        for t in producers:
            t.start()
        time.sleep(STORM_SECONDS)  # the storm lasts this long
        stop.set()
        for t in producers:
            t.join()
        _drain(queue, workers)
    finally:
        stop.set()
        for worker in workers:
            worker.stop()
    assert errors == []
    assert all(job_id is not None for _, job_id in added)  # every add returned an id
    runs = _check_no_overlap(ledger)
    # Nothing lost, nothing run twice: exactly the returned ids ran, each once.
    assert Counter(r.job_id for r in runs) == dict.fromkeys({i for _, i in added}, 1)
    # The storm really raced the claims: many adds were replacements, several jobs ran.
    assert len(runs) >= 3
    assert len(added) > 2 * len(runs)
    # Every job ran with the newest payload written into it, so the payloads seen only grow
    # and the last one handled is the last one added.
    ran = {r.job_id: r.payload["seq"] for r in runs}
    for seq, job_id in added:
        assert ran[str(job_id)] >= seq
    seen = [r.payload["seq"] for r in runs]
    assert seen == sorted(seen)
    assert seen[-1] == max(seq for seq, _ in added)
    print(f"{len(added)} adds, {len(runs)} runs")


def test_unsynchronised_replace_storm_loses_nothing(store: Any) -> None:
    """Producers race each other freely; then one final add: it is what runs last."""
    queue = Queue(store)
    ledger = Ledger()
    workers = _workers(store, ledger)
    added: list[tuple[int, int, str | None]] = []
    added_lock = threading.Lock()
    stop = threading.Event()
    errors: list[BaseException] = []

    def produce(thread: int) -> None:
        try:
            for n in itertools.count():
                if stop.is_set():
                    return
                job_id = queue.add("article.audio", {"thread": thread, "n": n},
                                   dedupe_key=KEY, on_duplicate="replace")
                with added_lock:
                    added.append((thread, n, job_id))
        except BaseException as exc:
            errors.append(exc)

    for worker in workers:
        worker.start()
    producers = [threading.Thread(target=produce, args=(t,)) for t in range(6)]
    try:
        for t in producers:
            t.start()
        time.sleep(STORM_SECONDS)
        stop.set()
        for t in producers:
            t.join()
        final = queue.add("article.audio", {"thread": -1, "n": 0}, dedupe_key=KEY,
                          on_duplicate="replace")
        _drain(queue, workers)
    finally:
        stop.set()
        for worker in workers:
            worker.stop()
    assert errors == []
    assert final is not None
    assert all(job_id is not None for _, _, job_id in added)
    runs = _check_no_overlap(ledger)
    returned = {job_id for _, _, job_id in added} | {final}
    assert Counter(r.job_id for r in runs) == dict.fromkeys(returned, 1)
    assert runs[-1].job_id == final
    assert runs[-1].payload == {"thread": -1, "n": 0}
    # A producer's own later write is never undone by its earlier one.
    ran = {r.job_id: r.payload for r in runs}
    for thread, n, job_id in added:
        payload = ran[str(job_id)]
        if payload["thread"] == thread:
            assert payload["n"] >= n
    print(f"{len(added)} adds, {len(runs)} runs")


def test_dedupe_replace_while_pending_keeps_place(store: Any) -> None:
    queue = Queue(store)
    a = queue.add("t", {"v": 1}, dedupe_key="k", priority=0)
    b = queue.add("t", {"v": "other"})
    again = queue.add("t", {"v": 2}, dedupe_key="k", on_duplicate="replace", priority=0)
    assert again == a
    claimed = claim(store, "t")
    assert [j.id for j in claimed] == [a, b]
    assert claimed[0].payload == {"v": 2}


def test_dedupe_replace_while_running_enqueues_a_new_job(store: Any) -> None:
    queue = Queue(store)
    a = queue.add("t", {"v": 1}, dedupe_key="k")
    first_claim = claim(store, "t")
    assert [j.id for j in first_claim] == [a]
    b = queue.add("t", {"v": 2}, dedupe_key="k", on_duplicate="replace")
    assert b is not None
    assert b != a
    c = queue.add("t", {"v": 3}, dedupe_key="k", on_duplicate="replace")
    assert c == b
    # The new job does not run while the old one holds the key.
    assert claim(store, "t", owner="w2") == []
    store.job_complete_many("w1", [LeaseRef(a, first_claim[0].lease_token)])
    claimed = claim(store, "t", owner="w2")
    assert [(j.id, j.payload) for j in claimed] == [(b, {"v": 3})]
