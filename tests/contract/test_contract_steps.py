"""Contract: durable steps (``job_step_save``, ``job_step_get``, ``JobSummary.steps``,
``job_retry(reset_steps=)``, ``job_step_sweep``) on every store.

A step is written only under a held lease (the fencing rule of every lease write), the
first write of a name wins, every read of the job shows its steps (live or finished), a
revived dead letter keeps them unless ``reset_steps``, and a job gone for good has none."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from golemq_pg._types import JobStatus
from golemq_pg.store.port import CancelFilter, FailItem, FindParams, JobStore, LeaseRef
from tests.support.store_port import add, claim, refs, slots

# The reads and the retry are producer verbs: they hold on the async path too.
pytestmark = pytest.mark.async_store_too

LONG_LEASE = 120.0


def _save(store: JobStore, owner: str, ref: LeaseRef, name: str, value: Any) -> bool:
    return store.job_step_save(owner, ref, name, orjson.dumps(value))


def _fail(store: JobStore, job_id: str) -> None:
    """Claim ``job_id`` (type "a") and dead-letter it."""
    (held,) = claim(store, slots("a", lease=LONG_LEASE))
    assert held.id == job_id
    assert store.job_fail_many("w1", [FailItem(held.id, held.lease_token, "boom")]) == {job_id}


def test_a_held_lease_stores_a_step_and_every_read_of_the_job_shows_it(store: JobStore) -> None:
    job_id = add(store, "a")
    (held,) = claim(store, slots("a", lease=LONG_LEASE))
    (ref,) = refs([held])
    assert _save(store, "w1", ref, "fetch", {"rows": [1, 2], "ok": True}) is True
    assert _save(store, "w1", ref, "count", 3) is True
    expected = {"fetch": {"rows": [1, 2], "ok": True}, "count": 3}
    assert store.job_step_get(job_id) == expected
    live = store.job_get(job_id)
    assert live is not None
    assert live.steps == expected
    (found,) = store.job_find(FindParams(types=["a"]))
    assert found.steps == expected
    assert store.job_complete_many("w1", [ref]) == {job_id}
    # finished (in the history on PostgreSQL): still there, for get, find and wait
    done = store.job_wait(job_id, 5)
    assert (done.status, done.steps) == (JobStatus.SUCCEEDED, expected)
    finished = store.job_get(job_id)
    assert finished is not None
    assert finished.steps == expected
    assert store.job_step_get(job_id) == expected


def test_a_job_without_steps_reads_as_an_empty_dict(store: JobStore) -> None:
    job_id = add(store, "a")
    other = add(store, "a")
    (held, _) = claim(store, slots("a", lease=LONG_LEASE))
    assert _save(store, "w1", LeaseRef(held.id, held.lease_token), "only", "mine")
    bare = other if held.id == job_id else job_id
    assert store.job_step_get(bare) == {}
    summary = store.job_get(bare)
    assert summary is not None
    assert summary.steps == {}
    by_id = {s.id: s.steps for s in store.job_find(FindParams(types=["a"]))}
    assert by_id == {held.id: {"only": "mine"}, bare: {}}
    assert store.job_step_get("123456789") == {}
    assert store.job_step_get("not-an-id") == {}


def test_a_stale_lease_writes_no_step(store: JobStore) -> None:
    job_id = add(store, "a", max_attempts=3)
    (old,) = claim(store, slots("a", lease=LONG_LEASE))
    (taken,) = store.lease_requeue_stale(0, None)
    assert taken.id == job_id
    assert _save(store, "w1", LeaseRef(old.id, old.lease_token), "fetch", 1) is False
    assert store.job_step_get(job_id) == {}
    # the new holder writes; the old token (same owner name) and another owner still cannot
    (new,) = claim(store, slots("a", lease=LONG_LEASE))
    assert new.lease_token != old.lease_token
    assert _save(store, "w1", LeaseRef(old.id, old.lease_token), "fetch", 1) is False
    assert _save(store, "w2", LeaseRef(new.id, new.lease_token), "fetch", 2) is False
    assert _save(store, "w1", LeaseRef(new.id, new.lease_token), "fetch", 3) is True
    assert store.job_step_get(job_id) == {"fetch": 3}
    # a finished job's lease writes nothing either
    assert store.job_complete_many("w1", refs([new])) == {job_id}
    assert _save(store, "w1", LeaseRef(new.id, new.lease_token), "late", 4) is False
    assert store.job_step_get(job_id) == {"fetch": 3}
    assert _save(store, "w1", LeaseRef("not-an-id", 1), "x", 1) is False


def test_the_first_write_of_a_step_name_wins(store: JobStore) -> None:
    job_id = add(store, "a")
    (held,) = claim(store, slots("a", lease=LONG_LEASE))
    ref = LeaseRef(held.id, held.lease_token)
    assert _save(store, "w1", ref, "pick", "first") is True
    assert _save(store, "w1", ref, "pick", "second") is True  # held: kept, not replaced
    assert store.job_step_get(job_id) == {"pick": "first"}


def test_retry_keeps_the_steps_and_reset_steps_clears_them(store: JobStore) -> None:
    job_id = add(store, "a", max_attempts=1)
    (held,) = claim(store, slots("a", lease=LONG_LEASE))
    assert _save(store, "w1", LeaseRef(held.id, held.lease_token), "fetch", [1, 2])
    assert store.job_fail_many("w1", [FailItem(held.id, held.lease_token, "boom")]) == {job_id}
    failed = store.job_get(job_id)
    assert failed is not None
    assert (failed.status, failed.steps) == (JobStatus.FAILED, {"fetch": [1, 2]})
    assert store.job_retry(job_id) is True
    assert store.job_step_get(job_id) == {"fetch": [1, 2]}
    _fail(store, job_id)
    assert store.job_retry(job_id, reset_steps=True) is True
    assert store.job_step_get(job_id) == {}
    revived = store.job_get(job_id)
    assert revived is not None
    assert (revived.status, revived.steps) == (JobStatus.PENDING, {})


def test_a_retry_refused_clears_no_step(store: JobStore) -> None:
    job_id = add(store, "a")
    (held,) = claim(store, slots("a", lease=LONG_LEASE))
    assert _save(store, "w1", LeaseRef(held.id, held.lease_token), "fetch", 1)
    # running, not FAILED: refused, and the steps stay
    assert store.job_retry(job_id, reset_steps=True) is False
    assert store.job_step_get(job_id) == {"fetch": 1}


def test_a_cancelled_job_has_no_steps_and_the_sweep_leaves_live_ones(store: JobStore) -> None:
    gone = add(store, "a")
    kept = add(store, "a")
    held = claim(store, slots("a", lease=LONG_LEASE))
    for job in held:
        assert _save(store, "w1", LeaseRef(job.id, job.lease_token), "s", job.id)
    store.job_cancel(CancelFilter(job_ids=[gone]), None)
    assert store.job_step_get(gone) == {}
    after: str | None = None
    for _ in range(10):  # walk the whole table in passes of one job id
        after = store.job_step_sweep(after, limit=1).after
        if after is None:
            break
    assert after is None
    assert store.job_step_get(kept) == {"s": kept}
