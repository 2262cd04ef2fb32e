"""Contract: results on completion (ResultRef), the attempt history of retry, fail and the
reaper, delete_types (delete_on) in the completing statements, and the "done" hint."""

from __future__ import annotations

from golemq_pg._types import JobStatus
from golemq_pg.store.port import (
    HISTORY_LIMIT,
    FailItem,
    FindParams,
    JobStore,
    ResultRef,
    RetryItem,
)
from tests.support.store_port import SHORT_LEASE, add, claim, count_rows, refs, slots
from tests.support.waiting import wait_until


def test_a_result_is_stored_with_the_completion_and_none_leaves_it_empty(
    store: JobStore,
) -> None:
    first, second, third = add(store, "a"), add(store, "a"), add(store, "a")
    jobs = {job.id: job for job in claim(store, "a")}
    items = [
        ResultRef(first, jobs[first].lease_token, b'{"url": "s3://r1", "n": [1, 2.5]}'),
        ResultRef(second, jobs[second].lease_token, None),
        *refs([jobs[third]]),
    ]
    assert store.job_complete_many("w1", items) == {first, second, third}
    summaries = {job_id: store.job_get(job_id) for job_id in (first, second, third)}
    assert all(s is not None and s.status is JobStatus.SUCCEEDED for s in summaries.values())
    assert summaries[first].result == {"url": "s3://r1", "n": [1, 2.5]}  # type: ignore[union-attr]
    assert summaries[second].result is None  # type: ignore[union-attr]
    assert summaries[third].result is None  # type: ignore[union-attr]
    assert summaries[first].errors == ()  # type: ignore[union-attr]


def test_a_fenced_out_result_is_not_written(store: JobStore) -> None:
    job_id = add(store, "a")
    (job,) = claim(store, "a")
    assert store.job_complete_many("other", [ResultRef(job_id, job.lease_token, b"1")]) == set()
    assert store.job_complete_many("w1", [ResultRef(job_id, job.lease_token + 1, b"1")]) == set()
    summary = store.job_get(job_id)
    assert summary is not None
    assert (summary.status, summary.result) == (JobStatus.RUNNING, None)


def test_scalar_results_round_trip(store: JobStore) -> None:
    values = [b'"text"', b"42", b"1.5", b"[1,\"x\"]", b"0"]
    job_ids = [add(store, "a") for _ in values]
    jobs = {job.id: job for job in claim(store, "a")}
    items = [ResultRef(i, jobs[i].lease_token, v) for i, v in zip(job_ids, values, strict=True)]
    assert store.job_complete_many("w1", items) == set(job_ids)
    got = [store.job_get(i).result for i in job_ids]  # type: ignore[union-attr]
    assert got == ["text", 42, 1.5, [1, "x"], 0]


def test_retry_and_fail_append_the_attempt_history_in_order(store: JobStore) -> None:
    job_id = add(store, "a", max_attempts=3)
    (first,) = claim(store, "a", owner="w1")
    assert store.job_retry_many("w1", [RetryItem(job_id, first.lease_token, 0, "E: one")]) == {
        job_id
    }
    (second,) = claim(store, "a", owner="w2")
    assert store.job_retry_many("w2", [RetryItem(job_id, second.lease_token, 0, "E: two")])
    (third,) = claim(store, "a", owner="w3")
    assert store.job_fail_many("w3", [FailItem(job_id, third.lease_token, "E: three")])
    summary = store.job_get(job_id)
    assert summary is not None
    assert summary.status is JobStatus.FAILED
    assert summary.last_error == "E: three"
    history = [(e.attempt, e.error, e.worker_id) for e in summary.errors]
    assert history == [(1, "E: one", "w1"), (2, "E: two", "w2"), (3, "E: three", "w3")]
    stamps = [e.at for e in summary.errors]
    assert stamps == sorted(stamps)
    assert all(stamp.tzinfo is not None for stamp in stamps)


def test_each_recorded_attempt_keeps_when_it_started(store: JobStore) -> None:
    """Retry, failure and the reaper's lost lease each record the attempt's claim time, so
    every attempt's duration can be read back (not only the latest one's)."""
    job_id = add(store, "a", max_attempts=3)

    def claimed_at() -> object:
        summary = store.job_get(job_id)
        assert summary is not None
        assert summary.started_at is not None
        return summary.started_at

    (first,) = claim(store, "a")
    starts = [claimed_at()]
    assert store.job_retry_many("w1", [RetryItem(job_id, first.lease_token, 0, "E: one")])
    claim(store, slots("a", lease=SHORT_LEASE), owner="lost")
    starts.append(claimed_at())
    wait_until(store.lease_recover_expired)
    (third,) = claim(store, "a")
    starts.append(claimed_at())
    assert store.job_fail_many("w1", [FailItem(job_id, third.lease_token, "E: three")])
    summary = store.job_get(job_id)
    assert summary is not None
    assert [e.started_at for e in summary.errors] == starts
    assert len(set(starts)) == 3  # three claims, three starts: none copied from another
    assert all(e.started_at is not None and e.started_at <= e.at for e in summary.errors)


def test_the_history_keeps_the_newest_attempts(store: JobStore) -> None:
    attempts = HISTORY_LIMIT + 5
    job_id = add(store, "a", max_attempts=attempts)
    for number in range(1, attempts + 1):
        (job,) = claim(store, "a")
        assert job.attempt == number
        store.job_retry_many("w1", [RetryItem(job_id, job.lease_token, 0, f"E: {number}")])
    summary = store.job_get(job_id)
    assert summary is not None
    assert [e.attempt for e in summary.errors] == list(range(6, attempts + 1))
    assert summary.errors[-1].error == f"E: {attempts}"


def test_a_success_after_failures_keeps_the_history(store: JobStore) -> None:
    job_id = add(store, "a")
    (job,) = claim(store, "a")
    store.job_retry_many("w1", [RetryItem(job_id, job.lease_token, 0, "E: once")])
    (job,) = claim(store, "a")
    assert store.job_complete_many("w1", [ResultRef(job_id, job.lease_token, b'"ok"')])
    summary = store.job_get(job_id)
    assert summary is not None
    assert summary.result == "ok"
    assert [(e.attempt, e.error) for e in summary.errors] == [(1, "E: once")]


def test_the_reaper_records_the_lost_attempts_without_a_worker(store: JobStore) -> None:
    job_id = add(store, "a", max_attempts=2)
    claim(store, slots("a", lease=SHORT_LEASE), owner="lost")
    wait_until(store.lease_recover_expired)
    claim(store, slots("a", lease=SHORT_LEASE), owner="lost-again")
    (exhausted,) = wait_until(store.lease_recover_expired)
    assert exhausted.outcome == "failed-terminal"
    summary = store.job_get(job_id)
    assert summary is not None
    assert [(e.attempt, e.worker_id) for e in summary.errors] == [(1, None), (2, None)]
    assert summary.errors[0].error.startswith("LeaseExpired: lease expired")
    assert summary.errors[1].error == summary.last_error


def test_retry_failed_keeps_the_history(store: JobStore) -> None:
    job_id = add(store, "a", max_attempts=1)
    (job,) = claim(store, "a")
    store.job_fail_many("w1", [FailItem(job_id, job.lease_token, "E: dead")])
    assert store.job_retry_failed(FindParams(types=["a"], limit=None)) == 1
    summary = store.job_get(job_id)
    assert summary is not None
    assert summary.status is JobStatus.PENDING
    assert [e.error for e in summary.errors] == ["E: dead"]


def test_delete_types_delete_succeeded_rows_in_the_completion(store: JobStore) -> None:
    kept = add(store, "keep")
    gone = add(store, "drop")
    other = add(store, "drop")
    jobs = {job.id: job for job in claim(store, "keep", "drop")}
    items = [ResultRef(kept, jobs[kept].lease_token, b"1"),
             ResultRef(gone, jobs[gone].lease_token, b"2"), *refs([jobs[other]])]
    assert store.job_complete_many("w1", items, delete_types=["drop"]) == {kept, gone, other}
    assert store.job_get(gone) is None
    assert store.job_get(other) is None
    summary = store.job_get(kept)
    assert summary is not None
    assert (summary.status, summary.result) == (JobStatus.SUCCEEDED, 1)
    assert count_rows(store) == 1


def test_delete_types_are_fenced_like_the_update(store: JobStore) -> None:
    job_id = add(store, "drop")
    (job,) = claim(store, "drop")
    assert store.job_complete_many("other", refs([job]), delete_types=["drop"]) == set()
    assert store.job_fail_many("other", [FailItem(job_id, job.lease_token, "E")],
                               delete_types=["drop"]) == set()
    summary = store.job_get(job_id)
    assert summary is not None
    assert summary.status is JobStatus.RUNNING


def test_delete_types_delete_dead_letters_in_the_failure(store: JobStore) -> None:
    kept = add(store, "keep", max_attempts=1)
    gone = add(store, "drop", max_attempts=1)
    jobs = {job.id: job for job in claim(store, "keep", "drop")}
    items = [FailItem(job_id, jobs[job_id].lease_token, "E: x") for job_id in (kept, gone)]
    assert store.job_fail_many("w1", items, delete_types=["drop"]) == {kept, gone}
    assert store.job_get(gone) is None
    summary = store.job_get(kept)
    assert summary is not None
    assert summary.status is JobStatus.FAILED
    assert [e.error for e in summary.errors] == ["E: x"]


def test_delete_types_delete_the_dead_letters_the_reaper_makes(store: JobStore) -> None:
    kept = add(store, "keep", max_attempts=1)
    gone = add(store, "drop", max_attempts=1)
    revived = add(store, "drop", max_attempts=2)
    claimed = claim(store, slots("keep", lease=SHORT_LEASE), slots("drop", lease=SHORT_LEASE),
                    owner="lost")
    assert len(claimed) == 3
    recovered = wait_until(lambda: store.lease_recover_expired(delete_types=["drop"]))
    assert {(r.id, r.outcome) for r in recovered} == {
        (kept, "failed-terminal"), (gone, "failed-terminal"), (revived, "reclaimed")}
    assert store.job_get(gone) is None
    statuses = {job_id: getattr(store.job_get(job_id), "status", None)
                for job_id in (kept, revived)}
    assert statuses == {kept: JobStatus.FAILED, revived: JobStatus.PENDING}
