"""Contract: job_complete_and_claim writes completions exactly like job_complete_many and
claims the capacity they free in the same transaction, on both stores."""

from __future__ import annotations

from golemq_pg._types import JobStatus, Resource
from golemq_pg.store.port import (
    ClaimBlock,
    CompleteAndClaimParams,
    JobStore,
    LeaseRef,
    ResultRef,
    claim_blocked,
)
from tests.support.store_port import add, claim, ids, refs, slots

POOL = {"api": Resource(concurrency=2, types=["call", "lookup"])}


def _complete_and_claim(
    store: JobStore,
    items: list[LeaseRef],
    job_type: str,
    limit: int = 10,
    *,
    owner: str = "w1",
    resources: dict[str, Resource] | None = None,
    delete_types: tuple[str, ...] = (),
    **guards: object,
) -> tuple[set[str], list[str], dict[str, ClaimBlock]]:
    result = store.job_complete_and_claim(
        CompleteAndClaimParams(
            owner=owner,
            items=items,
            claim=slots(job_type, limit, **guards),
            resources=POOL if resources is None else resources,
            delete_types=delete_types,
        )
    )
    return result.written, ids(result.claimed), dict(claim_blocked(result.claimed))


def test_the_claim_counts_the_completed_rows_as_freed_pool_capacity(store: JobStore) -> None:
    jobs = [add(store, "call") for _ in range(5)]
    first = claim(store, slots("call"), resources=POOL)
    assert ids(first) == jobs[:2]
    written, got, blocked = _complete_and_claim(store, refs(first), "call")
    assert written == set(jobs[:2])
    assert got == jobs[2:4]  # the pool admits two again, no more
    assert blocked == {}
    for job_id in jobs[:2]:
        row = store.job_get(job_id)
        assert row is not None
        assert row.status is JobStatus.SUCCEEDED
    assert store.job_stats()["running"] == 2


def test_only_the_freed_capacity_is_claimed_when_other_leases_hold_the_pool(
    store: JobStore,
) -> None:
    jobs = [add(store, "call") for _ in range(4)]
    mine = claim(store, slots("call", 1), resources=POOL)
    other = claim(store, slots("call", 1), resources=POOL, owner="w2")
    assert ids(mine + other) == jobs[:2]
    written, got, _ = _complete_and_claim(store, refs(mine), "call")
    assert written == {jobs[0]}
    assert got == [jobs[2]]  # w2's live lease still holds one unit of the pool


def test_a_lost_lease_is_not_written_and_frees_nothing(store: JobStore) -> None:
    jobs = [add(store, "call") for _ in range(3)]
    held = claim(store, slots("call"), resources=POOL)
    stale = LeaseRef(held[0].id, held[0].lease_token + 1)
    written, got, blocked = _complete_and_claim(store, [stale], "call")
    assert written == set()
    assert got == []
    assert blocked == {"call": ClaimBlock("pool concurrency", "api")}
    row = store.job_get(jobs[0])
    assert row is not None
    assert row.status is JobStatus.RUNNING
    # another owner's completion of w1's leases is fenced out too
    assert _complete_and_claim(store, refs(held), "call", owner="w2")[0] == set()


def test_the_completion_stores_results_and_deletes_like_job_complete_many(
    store: JobStore,
) -> None:
    kept, dropped, waiting = add(store, "call"), add(store, "lookup"), add(store, "call")
    held = claim(store, slots("call", 1), slots("lookup", 1), resources=POOL)
    assert sorted(ids(held)) == sorted([kept, dropped])
    tokens = {job.id: job.lease_token for job in held}
    items = [ResultRef(kept, tokens[kept], b'{"ok": 1}'), LeaseRef(dropped, tokens[dropped])]
    written, got, _ = _complete_and_claim(store, items, "call", delete_types=("lookup",))
    assert written == {kept, dropped}
    assert got == [waiting]
    row = store.job_get(kept)
    assert row is not None
    assert row.result == {"ok": 1}
    assert store.job_get(dropped) is None


def test_nothing_is_claimed_for_a_paused_type(store: JobStore) -> None:
    jobs = [add(store, "call") for _ in range(3)]
    held = claim(store, slots("call"), resources=POOL)
    store.type_pause("call", None)
    written, got, blocked = _complete_and_claim(store, refs(held), "call")
    assert written == set(jobs[:2])
    assert got == []
    assert blocked == {}  # paused is not blocked: it counts as having nothing due
    store.type_resume("call")
    assert ids(claim(store, slots("call"), resources=POOL)) == [jobs[2]]


def test_nothing_is_claimed_when_the_type_has_no_room(store: JobStore) -> None:
    jobs = [add(store, "call") for _ in range(3)]
    held = claim(store, slots("call", 1), resources=POOL)
    written, got, _ = _complete_and_claim(store, refs(held), "call", limit=0)
    assert written == {jobs[0]}
    assert got == []
    assert store.job_stats()["running"] == 0


def test_a_full_pool_blocks_the_claim_but_the_completion_is_written(store: JobStore) -> None:
    jobs = [add(store, "call") for _ in range(2)] + [add(store, "lookup")]
    held = claim(store, slots("call"), resources=POOL, owner="w2")
    assert ids(held) == jobs[:2]
    other = add(store, "other")
    (mine,) = claim(store, "other")
    written, got, blocked = _complete_and_claim(store, refs([mine]), "lookup")
    assert written == {other}
    assert got == []
    assert blocked == {"lookup": ClaimBlock("pool concurrency", "api")}


def test_an_unguarded_type_is_claimed_after_the_completion(store: JobStore) -> None:
    first, second = add(store, "plain"), add(store, "plain")
    (held,) = claim(store, slots("plain", 1))
    assert held.id == first
    written, got, _ = _complete_and_claim(store, refs([held]), "plain", resources={})
    assert written == {first}
    assert got == [second]


def test_a_scoped_type_claims_the_scope_its_completion_freed(store: JobStore) -> None:
    a1 = add(store, "doc", scope=("Doc", "1"))
    a2 = add(store, "doc", scope=("Doc", "1"))
    (held,) = claim(store, slots("doc", serialize_by_scope=True))
    assert held.id == a1
    written, got, _ = _complete_and_claim(
        store, refs([held]), "doc", resources={}, serialize_by_scope=True
    )
    assert written == {a1}
    assert got == [a2]
