"""Contract: honest running. A job leased with ``defer_start`` (a worker's buffer) has no
start and is reported PENDING by every reader until its handler's start is written, by
``job_mark_started`` or by the write that finishes it."""

from __future__ import annotations

from datetime import timedelta

from golemq_pg._types import JobStatus
from golemq_pg.store.dashboard import JobQuery
from golemq_pg.store.port import (
    ClaimedJob,
    ClaimRequest,
    EnqueueParams,
    FailItem,
    FindParams,
    JobStore,
    RetryItem,
)
from tests.support.store_port import add, claim, slots


def _claim_deferred(store: JobStore, job_type: str, limit: int = 10) -> list[ClaimedJob]:
    return store.job_claim(ClaimRequest(owner="w1", types=[slots(job_type, limit=limit)],
                                        defer_start=True))


def test_a_job_claimed_without_its_start_is_reported_pending(store: JobStore) -> None:
    job_id = add(store, "a")
    (job,) = _claim_deferred(store, "a")
    summary = store.job_get(job_id)
    assert summary is not None
    assert (summary.status, summary.started_at) == (JobStatus.PENDING, None)
    assert summary.attempts == 1  # leased: the attempt is counted
    assert store.job_stats()["running"] == 0
    assert store.job_stats()["pending"] == 1
    assert store.job_stats_by_type()["a"]["running"] == 0
    assert store.job_count_by_status()[JobStatus.RUNNING] == 0
    assert store.job_count_by_status()[JobStatus.PENDING] == 1
    overview = store.dashboard_overview()
    assert [(t.type, t.due, t.running) for t in overview.types] == [("a", 1, 0)]
    [gauges] = store.metrics_type_gauges(1000)
    assert (gauges.pending, gauges.running) == (1, 0)
    # Still leased: another claimer gets nothing.
    assert claim(store, "a", owner="w2") == []
    assert job.id == job_id


def test_the_marked_start_makes_it_running_from_then_on(store: JobStore) -> None:
    job_id = add(store, "a")
    (job,) = _claim_deferred(store, "a")
    before = store.now()
    assert store.job_mark_started("w1", [job], [2.0]) == {job_id}
    summary = store.job_get(job_id)
    assert summary is not None
    assert summary.started_at is not None
    assert summary.status is JobStatus.RUNNING
    assert abs((before - timedelta(seconds=2) - summary.started_at).total_seconds()) < 1.0
    assert store.job_stats()["running"] == 1
    # Written once: a second mark changes nothing; another owner's mark is fenced out.
    assert store.job_mark_started("w1", [job], [0.0]) == set()
    assert store.job_mark_started("w2", [job], [0.0]) == set()
    after = store.job_get(job_id)
    assert after is not None
    assert after.started_at == summary.started_at


def test_a_finishing_write_carries_the_start_of_a_job_never_marked(store: JobStore) -> None:
    done, retried, failed = add(store, "a"), add(store, "a"), add(store, "a")
    jobs = {j.id: j for j in _claim_deferred(store, "a")}
    now = store.now()
    assert store.job_complete_many("w1", [jobs[done]], started=[1.5]) == {done}
    assert store.job_retry_many(
        "w1", [RetryItem(retried, jobs[retried].token, 60.0, "boom")], started=[3.0]
    ) == {retried}
    assert store.job_fail_many(
        "w1", [FailItem(failed, jobs[failed].token, "dead")], started=[4.0]
    ) == {failed}
    for job_id, ago in ((done, 1.5), (retried, 3.0), (failed, 4.0)):
        summary = store.job_get(job_id)
        assert summary is not None, job_id
        assert summary.started_at is not None, job_id
        assert abs((now - timedelta(seconds=ago) - summary.started_at).total_seconds()) < 1.0
    retry_row = store.job_get(retried)
    fail_row = store.job_get(failed)
    assert retry_row is not None
    assert fail_row is not None
    assert retry_row.errors[-1].started_at == retry_row.started_at
    assert fail_row.errors[-1].started_at == fail_row.started_at


def test_a_marked_start_wins_over_the_one_the_outcome_carries(store: JobStore) -> None:
    job_id = add(store, "a")
    (job,) = _claim_deferred(store, "a")
    store.job_mark_started("w1", [job], [5.0])
    marked = store.job_get(job_id)
    assert store.job_complete_many("w1", [job], started=[0.0]) == {job_id}
    finished = store.job_get(job_id)
    assert marked is not None
    assert finished is not None
    assert finished.started_at == marked.started_at


def test_a_claim_without_defer_start_is_the_start(store: JobStore) -> None:
    job_id = add(store, "a")
    claim(store, "a")
    summary = store.job_get(job_id)
    assert summary is not None
    assert summary.status is JobStatus.RUNNING
    assert summary.started_at is not None


def test_filters_by_status_go_by_the_shown_status(store: JobStore) -> None:
    """find() and the dashboard's jobs list filter on what they show: a buffered job is
    found as PENDING, not RUNNING, until its start is written."""
    def tagged() -> str:
        result = store.job_enqueue(EnqueueParams(type="a", payload=b"{}", tags=("x",)))
        assert result.id is not None
        return result.id

    buffered, started = tagged(), tagged()
    jobs = {job.id: job for job in _claim_deferred(store, "a")}
    assert store.job_mark_started("w1", [jobs[started]], [0.0]) == {started}
    queued = tagged()

    def found(*statuses: JobStatus) -> set[str]:
        return {j.id for j in store.job_find(FindParams(statuses=list(statuses)))}

    assert found(JobStatus.PENDING) == {buffered, queued}
    assert found(JobStatus.RUNNING) == {started}
    assert found(JobStatus.PENDING, JobStatus.RUNNING) == {buffered, started, queued}
    by_tag = store.job_find(FindParams(statuses=[JobStatus.RUNNING], tags=["x"]))
    assert {j.id for j in by_tag} == {started}
    by_tag = store.job_find(FindParams(statuses=[JobStatus.PENDING], tags=["x"]))
    assert {j.id for j in by_tag} == {buffered, queued}

    def listed(status: JobStatus) -> set[str]:
        return {j.id for j in store.dashboard_jobs(JobQuery(status=status)).jobs}

    assert listed(JobStatus.PENDING) == {buffered, queued}
    assert listed(JobStatus.RUNNING) == {started}
