"""Contract: pause / resume of a type on every claim path, and the per-job verbs
``job_retry`` / ``job_run_now`` / ``job_run_now_types``, fenced against racing workers."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import pytest

from golemq_pg._types import JobStatus, Resource
from golemq_pg.store.port import (
    FailItem,
    JobStore,
    Listener,
    RetryItem,
)
from tests.support.store_port import SHORT_LEASE, add, claim, ids, refs, slots

# The contract of the producer verbs holds on the async path too (AsyncPostgresStore).
pytestmark = pytest.mark.async_store_too

#: Every claim path a type can take: fast, guarded (scope, type guards), grouped, pooled.
CLAIM_PATHS: dict[str, dict[str, Any]] = {
    "fast": {},
    "serialize_by_scope": {"serialize_by_scope": True},
    "not_while_running": {"not_while_running": ("other",)},
    "waits_for": {"waits_for": ("other",)},
    "grouped": {"grouped": True, "max_batch": 10},
}


def _hint_types(listener: Listener, timeout: float = 5.0, until: str | None = None) -> set[str]:
    deadline = time.monotonic() + timeout
    seen: set[str] = set()
    while time.monotonic() < deadline and (until is None or until not in seen):
        for note in listener.wait(max(deadline - time.monotonic(), 0.01)):
            if note.kind == "jobs":
                seen.update(note.items)
    return seen


# -- pause / resume ------------------------------------------------------------------------


@pytest.mark.parametrize("path", list(CLAIM_PATHS))
def test_a_paused_type_is_claimed_by_no_path_and_not_reported_blocked(
    store: JobStore, path: str
) -> None:
    guards = CLAIM_PATHS[path]
    job_ids = [add(store, "a", {"n": n}, scope=("s", str(n % 3))) for n in range(6)]
    free = add(store, "b")
    store.type_pause("a", "maintenance")
    got = claim(store, slots("a", **guards), "b")
    assert ids(got) == [free]
    assert getattr(got, "blocked", {}) == {}  # paused means "nothing due", not blocked
    assert store.type_resume("a") is True
    assert set(ids(claim(store, slots("a", **guards)))) <= set(job_ids)
    assert {store.job_get(i).status for i in job_ids} >= {JobStatus.RUNNING}  # type: ignore[union-attr]


def test_a_paused_type_in_a_resource_pool_is_not_claimed(store: JobStore) -> None:
    add(store, "a")
    pool = {"api": Resource(types=("a",), concurrency=5)}
    store.type_pause("a", None)
    assert claim(store, slots("a"), resources=pool) == []
    store.type_resume("a")
    assert len(claim(store, slots("a"), resources=pool)) == 1


def test_pause_lets_running_jobs_finish_and_enqueue_keep_working(store: JobStore) -> None:
    add(store, "a")
    running = claim(store, "a")
    store.type_pause("a", None)
    later = add(store, "a")  # enqueue keeps working
    assert store.job_complete_many("w1", refs(running)) == {running[0].id}
    assert claim(store, "a") == []
    assert store.job_get(later).status is JobStatus.PENDING  # type: ignore[union-attr]


def test_paused_lists_types_and_pausing_again_replaces_the_reason(store: JobStore) -> None:
    assert store.type_paused() == {}
    first = store.type_pause("b", "outage")
    store.type_pause("a", None)
    again = store.type_pause("b", "still out")
    paused = store.type_paused()
    assert list(paused) == ["a", "b"]
    assert paused["b"].reason == "still out"
    assert paused["b"].paused_at == first.paused_at == again.paused_at
    assert paused["a"].reason is None
    assert store.type_resume("b") is True
    assert store.type_resume("b") is False
    assert list(store.type_paused()) == ["a"]


def test_resume_wakes_listeners_with_the_type(store: JobStore) -> None:
    store.type_pause("email.send", None)
    add(store, "email.send")
    listener = store.open_listener()
    assert listener is not None
    try:
        listener.wait(0.05)
        assert store.type_resume("email.send")
        assert "email.send" in _hint_types(listener, until="email.send")
    finally:
        listener.close()


# -- retry ---------------------------------------------------------------------------------


def _dead_letter(store: JobStore, job_type: str = "a", **kwargs: Any) -> str:
    job_id = add(store, job_type, max_attempts=1, **kwargs)
    (job,) = claim(store, job_type)
    assert store.job_fail_many("w1", [FailItem(job.id, job.lease_token, "boom")]) == {job_id}
    return job_id


def test_retry_revives_a_failed_job_due_now_with_attempts_reset(store: JobStore) -> None:
    job_id = _dead_letter(store)
    before = store.job_get(job_id)
    assert before is not None
    assert before.status is JobStatus.FAILED
    assert store.job_retry(job_id) is True
    after = store.job_get(job_id)
    assert after is not None
    assert (after.status, after.attempts, after.last_error) == (JobStatus.PENDING, 0, None)
    assert after.errors == before.errors  # the history is kept
    assert after.run_at <= store.now()
    assert ids(claim(store, "a")) == [job_id]


def test_retry_changes_nothing_unless_the_job_is_failed(store: JobStore) -> None:
    pending = add(store, "a")
    running_id = add(store, "b")
    (running,) = claim(store, "b")
    done_id = add(store, "c")
    (done,) = claim(store, "c")
    store.job_complete_many("w1", refs([done]))
    for job_id in (pending, running_id, done_id, "999999999"):
        before = store.job_get(job_id)
        assert store.job_retry(job_id) is False
        assert store.job_get(job_id) == before
    assert running.id == running_id


def test_retry_of_a_keyed_dead_letter_whose_key_is_pending_again_is_refused(
    store: JobStore,
) -> None:
    dead = _dead_letter(store, dedupe_key="k")
    add(store, "a", dedupe_key="k")
    assert store.job_retry(dead) is False
    assert store.job_get(dead).status is JobStatus.FAILED  # type: ignore[union-attr]


# -- run_now -------------------------------------------------------------------------------


def test_run_now_makes_a_parked_job_due_and_wakes_listeners(store: JobStore) -> None:
    later = add(store, "a", delay=3600)
    listener = store.open_listener()
    assert listener is not None
    try:
        listener.wait(0.05)
        assert claim(store, "a") == []
        assert store.job_run_now(later) is True
        assert "a" in _hint_types(listener, until="a")
    finally:
        listener.close()
    assert ids(claim(store, "a")) == [later]


def test_run_now_of_a_backoff_parked_job_keeps_its_attempts(store: JobStore) -> None:
    job_id = add(store, "a")
    (job,) = claim(store, "a")
    store.job_retry_many("w1", [RetryItem(job.id, job.lease_token, 3600, "later")])
    assert store.job_run_now(job_id) is True
    (again,) = claim(store, "a")
    assert again.attempt == 2


def test_run_now_changes_nothing_unless_the_job_is_parked(store: JobStore) -> None:
    due = add(store, "a")
    running_id = add(store, "b")
    claim(store, "b")
    for job_id in (due, running_id, "999999999"):
        before = store.job_get(job_id)
        assert store.job_run_now(job_id) is False
        assert store.job_get(job_id) == before


def test_run_now_types_moves_parked_jobs_of_the_listed_unpaused_types(store: JobStore) -> None:
    a = add(store, "a", delay=3600)
    b = add(store, "b", delay=3600)
    c = add(store, "c", delay=3600)
    add(store, "a")  # already due: not counted
    store.type_pause("b", None)
    assert store.job_run_now_types(["a", "b"]) == 1
    assert store.job_run_now_types([]) == 0
    assert a in ids(claim(store, slots("a")))
    store.type_resume("b")
    assert claim(store, "b", "c") == []  # still parked
    assert store.job_get(b).status is store.job_get(c).status is JobStatus.PENDING  # type: ignore[union-attr]


# -- races ---------------------------------------------------------------------------------


def _hammer(seconds: float, *loops: Any) -> None:
    """Run each loop function repeatedly in its own thread for ``seconds``."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def run(fn: Any) -> None:
        try:
            while not stop.is_set():
                fn()
        except BaseException as exc:  # reported in the test thread
            errors.append(exc)
            stop.set()

    threads = [threading.Thread(target=run, args=(fn,)) for fn in loops]
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join(30)
    if errors:
        raise errors[0]


def test_retry_racing_the_reaper_and_a_claim_runs_each_attempt_once(store: JobStore) -> None:
    """A dead letter is retried while claimers lease it (and let the lease expire, or fail
    it) and the reaper recovers expired leases: every claim is of a job that a retry had
    revived, one attempt each, and no state is skipped."""
    job_id = _dead_letter(store)
    lock = threading.Lock()
    ledger: list[tuple[int, int]] = []  # (attempt, lease_token) of each claim
    counts: Counter[str] = Counter()

    def claimer() -> None:
        for job in claim(store, slots("a", lease=SHORT_LEASE / 4)):
            with lock:
                ledger.append((job.attempt, job.lease_token))
            if job.lease_token % 2:  # half the runs fail, the others are lost (lease expires)
                written = store.job_fail_many("w1", [FailItem(job.id, job.lease_token, "x")])
                with lock:
                    counts["failed_by_worker"] += len(written)

    def reaper() -> None:
        for item in store.lease_recover_expired():
            with lock:
                counts[item.outcome] += 1
        time.sleep(0.005)

    def retrier() -> None:
        if store.job_retry(job_id):
            with lock:
                counts["retried"] += 1

    _hammer(3.0, claimer, claimer, reaper, retrier, retrier)
    tokens = [token for _, token in ledger]
    assert len(tokens) == len(set(tokens))  # each claim is its own lease
    assert {attempt for attempt, _ in ledger} <= {1}  # max_attempts=1, attempts reset
    assert counts["retried"] >= 3  # the race happened
    assert counts["reclaimed"] == 0  # with one attempt, an expired lease dead-letters
    dead_lettered = counts["failed_by_worker"] + counts["failed-terminal"]
    # every revival is claimed at most once, and every claim follows a revival (the first
    # claim, in _dead_letter, is not in the ledger)
    assert len(ledger) in (counts["retried"], counts["retried"] - 1)
    # every claim ended dead-lettered (by the worker or the reaper), but the last may be live
    assert dead_lettered in (len(ledger), len(ledger) - 1)
    row = store.job_get(job_id)
    assert row is not None
    assert row.attempts in (0, 1)


def test_run_now_racing_a_claim_runs_each_attempt_once(store: JobStore) -> None:
    """A parked job is made due by racing run_now calls while claimers lease it and park it
    again (a retry with a long backoff): each attempt is claimed exactly once, in order."""
    job_id = add(store, "a", delay=3600, max_attempts=1_000_000)
    lock = threading.Lock()
    attempts: list[int] = []
    moved = Counter[str]()

    def claimer() -> None:
        for job in claim(store, "a"):
            with lock:
                attempts.append(job.attempt)
            store.job_retry_many("w1", [RetryItem(job.id, job.lease_token, 3600, "later")])

    def runner() -> None:
        if store.job_run_now(job_id):
            with lock:
                moved["run_now"] += 1

    _hammer(3.0, claimer, claimer, runner, runner)
    assert moved["run_now"] >= 3  # the race happened
    assert sorted(attempts) == list(range(1, len(attempts) + 1))  # each attempt once
    # every claim follows one run_now; the last run_now may not have been claimed yet
    assert len(attempts) in (moved["run_now"], moved["run_now"] - 1)
    row = store.job_get(job_id)
    assert row is not None
    assert row.attempts == len(attempts)
    assert row.status is JobStatus.PENDING


# -- job_delete ------------------------------------------------------------------------------


def test_delete_removes_finished_jobs_and_keeps_the_counts_exact(store: JobStore) -> None:
    done_id, failed_id, kept_id = (add(store, "a", {"n": n}) for n in range(3))
    jobs = {j.id: j for j in claim(store, "a")}
    store.job_complete_many("w1", refs([jobs[done_id], jobs[kept_id]]))
    store.job_fail_many("w1", [FailItem(failed_id, jobs[failed_id].lease_token, "E")])
    before = store.job_count_by_status()
    assert (before[JobStatus.SUCCEEDED], before[JobStatus.FAILED]) == (2, 1)
    assert store.job_delete(done_id) is True
    assert store.job_delete(failed_id) is True
    assert store.job_get(done_id) is None
    assert store.job_get(failed_id) is None
    assert store.job_delete(done_id) is False  # gone
    after = store.job_count_by_status()
    assert (after[JobStatus.SUCCEEDED], after[JobStatus.FAILED]) == (1, 0)
    stats = store.job_stats()
    assert (stats["succeeded"], stats["failed"]) == (1, 0)
    assert store.job_get(kept_id) is not None


def test_delete_leaves_live_and_unknown_jobs_alone(store: JobStore) -> None:
    pending = add(store, "a")
    running = add(store, "b")
    claim(store, "b")
    assert store.job_delete(pending) is False
    assert store.job_delete(running) is False
    assert store.job_delete("999999999") is False
    assert store.job_delete("not-an-id") is False
    assert store.job_get(pending).status is JobStatus.PENDING  # type: ignore[union-attr]
    assert store.job_get(running).status is JobStatus.RUNNING  # type: ignore[union-attr]
