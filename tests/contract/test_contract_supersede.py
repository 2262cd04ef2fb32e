"""Contract: a running job whose key was re-enqueued ("replace") meanwhile.

While job A of key k runs, ``on_duplicate="replace"`` inserts a PENDING job B with the new
payload. If A then goes back to the line (retry, release, reaper), two PENDING jobs would
hold k, which the unique index on pending keys forbids. The rule both stores follow: B
already carries the newer payload of that unit of work, so A is superseded (deleted) and
the write still reports A as written (its lease was held). ``retry_failed`` likewise leaves
a FAILED job whose key is held by a PENDING one where it is.
"""

from __future__ import annotations

from golemq_pg._types import JobStatus
from golemq_pg.store.port import ClaimedJob, FailItem, FindParams, JobStore, RetryItem
from tests.support.store_port import SHORT_LEASE, add, claim, put, refs, slots
from tests.support.waiting import wait_until


def _running_with_pending_replacement(
    store: JobStore, lease: float = 30.0
) -> tuple[str, str, ClaimedJob]:
    first = add(store, "a", {"v": 1}, dedupe_key="k")
    (running,) = claim(store, slots("a", lease=lease))
    second = put(store, "a", {"v": 2}, dedupe_key="k", on_duplicate="replace").id
    assert second is not None
    return first, second, running


def test_retry_of_a_superseded_job_leaves_only_the_replacement(store: JobStore) -> None:
    first, second, running = _running_with_pending_replacement(store)
    written = store.job_retry_many("w1", [RetryItem(first, running.lease_token, 0.0, "E")])
    assert written == {first}
    assert store.job_get(first) is None
    (nxt,) = claim(store, "a")
    assert (nxt.id, nxt.payload) == (second, {"v": 2})


def test_release_of_a_superseded_job_leaves_only_the_replacement(store: JobStore) -> None:
    first, second, running = _running_with_pending_replacement(store)
    assert store.job_release_many("w1", refs([running])) == {first}
    assert store.job_get(first) is None
    assert [j.id for j in claim(store, "a")] == [second]


def test_reaper_on_a_superseded_job_leaves_only_the_replacement(store: JobStore) -> None:
    first, second, _ = _running_with_pending_replacement(store, lease=SHORT_LEASE)
    reclaimed = wait_until(store.lease_recover_expired)
    assert [r.id for r in reclaimed] == [first]
    assert store.job_get(first) is None
    assert [j.id for j in claim(store, "a")] == [second]


def test_retry_failed_skips_a_failed_job_whose_key_is_pending_again(store: JobStore) -> None:
    first = add(store, "a", dedupe_key="k")
    (running,) = claim(store, "a")
    assert store.job_fail_many("w1", [FailItem(first, running.lease_token, "E")]) == {first}
    second = add(store, "a", dedupe_key="k")
    assert store.job_retry_failed(FindParams(limit=None)) == 0
    job = store.job_get(first)
    assert job is not None
    assert job.status is JobStatus.FAILED
    assert [j.id for j in claim(store, "a")] == [second]


def test_retry_failed_revives_only_the_newest_dead_letter_of_a_key(store: JobStore) -> None:
    older = add(store, "a", {"v": 1}, dedupe_key="k")
    (job,) = claim(store, "a")
    store.job_fail_many("w1", [FailItem(older, job.lease_token, "E")])
    newer = add(store, "a", {"v": 2}, dedupe_key="k")
    (job,) = claim(store, "a")
    store.job_fail_many("w1", [FailItem(newer, job.lease_token, "E")])
    assert store.job_retry_failed(FindParams(limit=None)) == 1
    row = store.job_get(older)
    assert row is not None
    assert row.status is JobStatus.FAILED
    (again,) = claim(store, "a")
    assert (again.id, again.payload) == (newer, {"v": 2})
