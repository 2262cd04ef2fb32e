"""Contract: ``job_wait`` (what ``queue.wait`` stands on): returns a finished job's summary,
wakes when another thread finishes it (completion, failure, the reaper), raises
``LookupError`` for a job that does not exist or is deleted while waited for and
``TimeoutError`` past its timeout, and keeps waiting through changes that do not finish it.

Every waiter runs on its own thread; before the change that should wake it, the test checks
that it is still blocked (the job cannot be finished yet), which also gives it time to block.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from golemq_pg._types import JobStatus, JobSummary
from golemq_pg.store.port import CancelFilter, FailItem, JobStore, RetryItem
from tests.support.store_port import SHORT_LEASE, add, claim, refs, slots
from tests.support.waiting import wait_until

# The contract of the producer verbs holds on the async path too (AsyncPostgresStore).
pytestmark = pytest.mark.async_store_too

#: How long a waiter must stay blocked before the test wakes it (it is not yet terminal).
STILL_BLOCKED = 0.3


class Waiting:
    """``store.job_wait(job_id, timeout)`` running on its own thread."""

    def __init__(self, store: JobStore, job_id: str, timeout: float | None = 30.0) -> None:
        self.summary: JobSummary | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(store, job_id, timeout))
        self._thread.start()

    def _run(self, store: JobStore, job_id: str, timeout: float | None) -> None:
        try:
            self.summary = store.job_wait(job_id, timeout)
        except BaseException as exc:  # reported by outcome(), in the test thread
            self.error = exc

    def still_blocked(self) -> bool:
        """Whether the wait has not returned after :data:`STILL_BLOCKED` seconds."""
        self._thread.join(STILL_BLOCKED)
        return self._thread.is_alive()

    def outcome(self, timeout: float = 15.0) -> JobSummary | BaseException:
        """The summary returned or the exception raised (the thread must end in time)."""
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "job_wait did not return"
        if self.error is not None:
            return self.error
        assert self.summary is not None
        return self.summary


def test_wait_returns_a_finished_job_at_once(store: JobStore) -> None:
    job_id = add(store, "a")
    store.job_complete_many("w1", refs(claim(store, "a")))
    summary = store.job_wait(job_id, 0)
    assert (summary.id, summary.status) == (job_id, JobStatus.SUCCEEDED)
    assert store.job_wait(job_id, None).status is JobStatus.SUCCEEDED


def test_wait_returns_a_dead_letter_with_its_error(store: JobStore) -> None:
    job_id = add(store, "a")
    (job,) = claim(store, "a")
    store.job_fail_many("w1", [FailItem(job.id, job.lease_token, "ValueError: bad input")])
    summary = store.job_wait(job_id, 5)
    assert (summary.status, summary.last_error) == (JobStatus.FAILED, "ValueError: bad input")


def test_wait_wakes_when_another_thread_completes_the_job(store: JobStore) -> None:
    job_id = add(store, "a")
    (job,) = claim(store, "a")
    waiting = Waiting(store, job_id)
    assert waiting.still_blocked()
    assert store.job_complete_many("w1", refs([job])) == {job_id}
    summary = waiting.outcome()
    assert isinstance(summary, JobSummary)
    assert (summary.id, summary.status) == (job_id, JobStatus.SUCCEEDED)


def test_wait_wakes_when_the_reaper_fails_an_exhausted_job(store: JobStore) -> None:
    job_id = add(store, "a", max_attempts=1)
    claim(store, slots("a", lease=SHORT_LEASE))
    waiting = Waiting(store, job_id)
    assert waiting.still_blocked()
    wait_until(store.lease_recover_expired, timeout=10, what="lease expired")
    summary = waiting.outcome()
    assert isinstance(summary, JobSummary)
    assert summary.status is JobStatus.FAILED


def test_wait_keeps_waiting_through_a_retry_and_returns_the_final_outcome(
    store: JobStore,
) -> None:
    job_id = add(store, "a")
    (first,) = claim(store, "a")
    waiting = Waiting(store, job_id)
    assert waiting.still_blocked()
    store.job_retry_many("w1", [RetryItem(first.id, first.lease_token, 0.0, "boom")])
    assert waiting.still_blocked()  # back to PENDING: not finished
    (second,) = claim(store, "a")
    store.job_complete_many("w1", refs([second]))
    summary = waiting.outcome()
    assert isinstance(summary, JobSummary)
    assert (summary.status, summary.attempts) == (JobStatus.SUCCEEDED, 2)


def test_every_waiter_of_one_job_gets_its_summary(store: JobStore) -> None:
    job_id = add(store, "a")
    (job,) = claim(store, "a")
    waiters = [Waiting(store, job_id) for _ in range(5)]
    assert waiters[-1].still_blocked()
    store.job_complete_many("w1", refs([job]))
    outcomes: list[Any] = [w.outcome() for w in waiters]
    assert {(o.id, o.status) for o in outcomes} == {(job_id, JobStatus.SUCCEEDED)}


@pytest.mark.parametrize("job_id", ["999999", "-1", "abc", "99999999999999999999"])
def test_wait_for_a_job_that_does_not_exist_raises_lookup_error(
    store: JobStore, job_id: str
) -> None:
    with pytest.raises(LookupError, match="does not exist"):
        store.job_wait(job_id, 5)


@pytest.mark.parametrize("running", [False, True], ids=["pending", "running"])
def test_wait_for_a_job_cancelled_meanwhile_raises_lookup_error(
    store: JobStore, running: bool
) -> None:
    job_id = add(store, "a")
    if running:
        claim(store, "a")
    waiting = Waiting(store, job_id)
    assert waiting.still_blocked()
    assert len(store.job_cancel(CancelFilter(job_ids=[job_id]), "no longer needed")) == 1
    error = waiting.outcome()
    assert isinstance(error, LookupError)
    assert job_id in str(error)


def test_wait_past_its_timeout_raises_timeout_error(store: JobStore) -> None:
    job_id = add(store, "a")
    with pytest.raises(TimeoutError, match="did not finish"):
        store.job_wait(job_id, 0)
    with pytest.raises(TimeoutError, match=r"did not finish within 0\.3 seconds"):
        store.job_wait(job_id, 0.3)
    summary = store.job_get(job_id)
    assert summary is not None
    assert summary.status is JobStatus.PENDING  # waiting changed nothing
