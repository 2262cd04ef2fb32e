"""Contract: the claim guards (serialize_by_scope, not_while_running, waits_for, grouped,
resource pools) on both stores, with concurrent claimers where it matters."""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import timedelta

from golemq_pg._types import JobStatus, Resource, Scope
from golemq_pg._validation import encode_payload
from golemq_pg.store.port import (
    CancelFilter,
    ClaimBlock,
    ClaimedJob,
    EnqueueManyParams,
    FailItem,
    JobStore,
    RetryItem,
    claim_blocked,
)
from golemq_pg.testing import memory_store
from tests.support.store_port import (
    BRIEF_LEASE,
    SHORT_LEASE,
    add,
    claim,
    concurrently,
    ids,
    put,
    refs,
    slots,
)
from tests.support.waiting import wait_until

# -- serialize_by_scope -----------------------------------------------------------------------


def test_serialize_by_scope_runs_one_job_per_scope(store: JobStore) -> None:
    s1 = [add(store, "a", {"n": i}, scope=("Doc", "1")) for i in range(3)]
    s2 = add(store, "a", scope=("Doc", "2"))
    unscoped = [add(store, "a") for _ in range(2)]
    guarded = slots("a", limit=10, serialize_by_scope=True)
    first = claim(store, guarded)
    # One per scope in a single claim; unscoped jobs are not serialised.
    assert sorted(ids(first)) == sorted([s1[0], s2, *unscoped])
    assert claim(store, guarded) == []
    done = [j for j in first if j.id == s1[0]]
    store.job_complete_many("w1", refs(done))
    assert ids(claim(store, guarded)) == [s1[1]]


def test_serialize_by_scope_is_per_type(store: JobStore) -> None:
    add(store, "a", scope=("Doc", "1"))
    add(store, "b", scope=("Doc", "1"))
    got = claim(store, slots("a", serialize_by_scope=True), slots("b", serialize_by_scope=True))
    assert sorted(j.type for j in got) == ["a", "b"]


def test_serialize_by_scope_ignores_expired_leases(store: JobStore) -> None:
    add(store, "a", scope=("Doc", "1"))
    second = add(store, "a", scope=("Doc", "1"))
    (first,) = claim(store, slots("a", lease=BRIEF_LEASE, serialize_by_scope=True))
    assert claim(store, slots("a", serialize_by_scope=True)) == []
    wait_until(lambda: store.now() > first.lease_expires_at)
    assert ids(claim(store, slots("a", serialize_by_scope=True), owner="w2")) == [second]


def test_serialize_by_scope_blocks_even_a_claimer_without_the_flag_set_elsewhere(
    store: JobStore,
) -> None:
    """The guard reads rows, not the other worker's config: a live job of the scope blocks."""
    add(store, "a", scope=("Doc", "1"))
    add(store, "a", scope=("Doc", "1"))
    claim(store, slots("a", limit=1), owner="plain")
    assert claim(store, slots("a", serialize_by_scope=True), owner="careful") == []


def test_serialize_by_scope_under_concurrent_claimers(store: JobStore) -> None:
    scopes = [("Doc", str(i)) for i in range(6)]
    for _ in range(4):
        for scope in scopes:
            add(store, "a", scope=scope)
    guarded = slots("a", limit=5, serialize_by_scope=True)
    results = concurrently(8, lambda i: claim(store, guarded, owner=f"w{i}"))
    got = [job for batch in results for job in batch]
    per_scope = Counter(job.scope for job in got)
    assert len(got) == len(scopes)
    assert set(per_scope.values()) == {1}
    assert store.job_count_by_status()[JobStatus.RUNNING] == len(scopes)


# -- not_while_running ----------------------------------------------------------------------


def test_not_while_running_blocks_on_a_live_lease_only(store: JobStore) -> None:
    add(store, "x")
    guarded_id = add(store, "b")
    b = slots("b", not_while_running=("x",))
    # A pending x does not block.
    assert ids(claim(store, b)) == [guarded_id]
    add(store, "b")
    (x,) = claim(store, slots("x", lease=BRIEF_LEASE), owner="other")
    assert claim(store, b) == []
    # The x lease expires: expired leases never block.
    wait_until(lambda: store.now() > x.lease_expires_at)
    assert len(claim(store, b)) == 1


def test_not_while_running_unblocks_when_the_other_type_finishes(store: JobStore) -> None:
    add(store, "x")
    b_id = add(store, "b")
    (x,) = claim(store, "x", owner="other")
    b = slots("b", not_while_running=("x", "y"))
    assert claim(store, b) == []
    store.job_complete_many("other", refs([x]))
    assert ids(claim(store, b)) == [b_id]


def test_not_while_running_within_one_claim(store: JobStore) -> None:
    # x is first in line; once the claim leases it, b may not come with it.
    add(store, "x", priority=5)
    add(store, "b")
    got = claim(store, slots("x"), slots("b", not_while_running=("x",)))
    assert [j.type for j in got] == ["x"]


def test_mutual_not_while_running_under_concurrent_claimers(store: JobStore) -> None:
    for _ in range(10):
        add(store, "x")
        add(store, "y")
    request = (
        slots("x", limit=3, not_while_running=("y",)),
        slots("y", limit=3, not_while_running=("x",)),
    )
    results = concurrently(8, lambda i: claim(store, *request, owner=f"w{i}"))
    types = {job.type for batch in results for job in batch}
    assert len(types) == 1, "x and y were leased at the same time"


# -- waits_for --------------------------------------------------------------------------------


def test_waits_for_blocks_on_due_pending_work(store: JobStore) -> None:
    add(store, "extract")
    add(store, "index")
    index = slots("index", waits_for=("extract",))
    assert claim(store, index) == []
    (extract,) = claim(store, "extract")
    assert claim(store, index) == []  # running extract still blocks
    store.job_complete_many("w1", refs([extract]))
    assert len(claim(store, index)) == 1


def test_waits_for_ignores_future_and_backoff_parked_work(store: JobStore) -> None:
    add(store, "extract", delay=3600)
    add(store, "extract")
    index_id = add(store, "index")
    index = slots("index", waits_for=("extract",))
    (extract,) = claim(store, "extract")
    store.job_retry_many("w1", [RetryItem(extract.id, extract.lease_token, 3600, "E")])
    assert ids(claim(store, index)) == [index_id]


def test_waits_for_ignores_expired_leases_and_finished_work(store: JobStore) -> None:
    add(store, "extract")
    add(store, "extract")
    index_id = add(store, "index")
    index = slots("index", waits_for=("extract",))
    done, lost = claim(store, slots("extract", lease=BRIEF_LEASE))
    store.job_fail_many("w1", [FailItem(done.id, done.lease_token, "E")])
    assert claim(store, index) == []
    wait_until(lambda: store.now() > lost.lease_expires_at)
    assert ids(claim(store, index)) == [index_id]


def test_waits_for_is_decided_before_the_claim_leases(store: JobStore) -> None:
    # Both due in one request: index must not ride along with extract.
    add(store, "extract")
    add(store, "index", priority=10)
    got = claim(store, slots("extract"), slots("index", waits_for=("extract",)))
    assert [j.type for j in got] == ["extract"]


def test_waits_for_under_concurrent_claimers(store: JobStore) -> None:
    for _ in range(3):
        add(store, "extract")
    for _ in range(5):
        add(store, "index")
    request = (slots("extract", limit=1), slots("index", limit=5, waits_for=("extract",)))
    results = concurrently(6, lambda i: claim(store, *request, owner=f"w{i}"))
    got = [job for batch in results for job in batch]
    assert Counter(j.type for j in got) == {"extract": 3}


# -- grouped ----------------------------------------------------------------------------------


def test_grouped_claims_every_due_job_of_one_group_in_arrival_order(store: JobStore) -> None:
    now = store.now()
    g1 = [
        add(store, "digest", {"n": i}, scope=("User", "1"), run_at=now - timedelta(seconds=10 - i))
        for i in range(3)
    ]
    g2 = [add(store, "digest", scope=("User", "2")) for _ in range(2)]
    add(store, "digest", scope=("User", "1"), delay=3600)  # not due: stays behind
    grouped = slots("digest", limit=1, grouped=True)
    first = claim(store, grouped)
    assert ids(first) == g1
    assert [j.payload["n"] for j in first] == [0, 1, 2]
    assert ids(claim(store, grouped)) == g2
    assert claim(store, grouped) == []


def test_grouped_limit_counts_groups_and_max_batch_caps_a_batch(store: JobStore) -> None:
    g1 = [add(store, "digest", scope=("User", "1")) for _ in range(3)]
    g2 = [add(store, "digest", scope=("User", "2")) for _ in range(3)]
    g3 = [add(store, "digest", scope=("User", "3")) for _ in range(3)]
    got = claim(store, slots("digest", limit=2, grouped=True, max_batch=2))
    assert ids(got) == [*g1[:2], *g2[:2]]
    # Groups 1 and 2 are locked while their batches run; group 3 is free.
    assert ids(claim(store, slots("digest", limit=5, grouped=True, max_batch=2))) == g3[:2]


def test_a_running_group_is_locked_until_its_batch_finishes(store: JobStore) -> None:
    add(store, "digest", scope=("User", "1"))
    grouped = slots("digest", limit=1, grouped=True)
    batch = claim(store, grouped)
    late = add(store, "digest", scope=("User", "1"))
    assert claim(store, grouped, owner="w2") == []
    store.job_complete_many("w1", refs(batch))
    assert ids(claim(store, grouped, owner="w2")) == [late]


def test_a_group_with_an_expired_lease_is_free(store: JobStore) -> None:
    add(store, "digest", scope=("User", "1"))
    batch = claim(store, slots("digest", lease=SHORT_LEASE, grouped=True))
    late = add(store, "digest", scope=("User", "1"))
    wait_until(lambda: store.now() > batch[0].lease_expires_at)
    assert ids(claim(store, slots("digest", grouped=True), owner="w2")) == [late]


def test_grouped_under_concurrent_claimers_never_splits_a_group(store: JobStore) -> None:
    expected: dict[Scope, set[str]] = defaultdict(set)
    for round_ in range(4):
        for user in range(5):
            job_id = add(store, "digest", {"r": round_}, scope=("User", str(user)))
            expected[Scope("User", str(user))].add(job_id)
    grouped = slots("digest", limit=2, grouped=True)
    results = concurrently(6, lambda i: claim(store, grouped, owner=f"w{i}"))
    by_scope: dict[Scope | None, list[ClaimedJob]] = defaultdict(list)
    owners: dict[Scope | None, set[int]] = defaultdict(set)
    for worker, batch in enumerate(results):
        for job in batch:
            by_scope[job.scope].append(job)
            owners[job.scope].add(worker)
    assert set(by_scope) == set(expected)
    for scope, jobs in by_scope.items():
        assert owners[scope]
        assert len(owners[scope]) == 1
        assert {j.id for j in jobs} == expected[scope]  # type: ignore[index]


# -- resource pools ---------------------------------------------------------------------------


def test_pool_concurrency_caps_live_members_across_types(store: JobStore) -> None:
    for _ in range(4):
        add(store, "sync")
        add(store, "hydrate")
    pool = {"spotify": Resource(concurrency=3, types=["sync", "hydrate"])}
    got = claim(store, slots("sync"), slots("hydrate"), resources=pool)
    assert len(got) == 3
    assert claim(store, slots("sync"), slots("hydrate"), resources=pool, owner="w2") == []
    store.job_complete_many("w1", refs(got[:2]))
    assert len(claim(store, slots("sync"), slots("hydrate"), resources=pool, owner="w2")) == 2


def test_pool_costs_weigh_members(store: JobStore) -> None:
    add(store, "heavy", priority=1)
    add(store, "light")
    add(store, "light")
    pool = {"api": Resource(concurrency=2, types=["heavy", "light"], costs={"heavy": 2})}
    got = claim(store, slots("heavy"), slots("light"), resources=pool)
    assert [j.type for j in got] == ["heavy"]
    store.job_complete_many("w1", refs(got))
    assert [j.type for j in claim(store, slots("light"), resources=pool)] == ["light", "light"]


def test_pool_members_without_a_handler_in_the_request_still_count(store: JobStore) -> None:
    add(store, "sync")
    add(store, "hydrate")
    pool = {"spotify": Resource(concurrency=1, types=["sync", "hydrate"])}
    claim(store, slots("sync"), resources=pool, owner="sync-worker")
    assert claim(store, slots("hydrate"), resources=pool, owner="hydrate-worker") == []


def test_pool_ignores_expired_member_leases(store: JobStore) -> None:
    add(store, "sync")
    second = add(store, "sync")
    pool = {"p": Resource(concurrency=1, types=["sync"])}
    (first,) = claim(store, slots("sync", lease=BRIEF_LEASE), resources=pool)
    assert claim(store, slots("sync"), resources=pool) == []
    wait_until(lambda: store.now() > first.lease_expires_at)
    assert ids(claim(store, slots("sync"), resources=pool, owner="w2")) == [second]


def test_pool_concurrency_under_concurrent_claimers(store: JobStore) -> None:
    for _ in range(20):
        add(store, "sync")
        add(store, "hydrate")
    pool = {
        "spotify": Resource(
            concurrency=4, types=["sync", "hydrate"], costs={"hydrate": 1, "sync": 1}
        )
    }
    results = concurrently(
        8,
        lambda i: claim(
            store, slots("sync", 3), slots("hydrate", 3), resources=pool, owner=f"w{i}"
        ),
    )
    assert sum(len(batch) for batch in results) == 4
    assert store.job_count_by_status()[JobStatus.RUNNING] == 4


def test_rate_budget_is_spent_per_attempt_and_survives_deletion(store: JobStore) -> None:
    for _ in range(6):
        add(store, "call")
    pool = {"api": Resource(rate_per_minute=3, types=["call"])}
    got = claim(store, slots("call"), resources=pool)
    assert len(got) == 3
    # Finishing or deleting the jobs does not give the budget back.
    store.job_complete_many("w1", refs(got[:2]))
    store.job_cancel(CancelFilter(job_ids=[got[2].id]), "gone")
    store.job_prune([JobStatus.SUCCEEDED], before=store.now() + timedelta(seconds=1), age=None)
    assert claim(store, slots("call"), resources=pool, owner="w2") == []
    # A retried attempt would spend again: nothing is left for it either.
    counts = store.job_count_by_status()
    assert counts[JobStatus.PENDING] == 3
    assert counts[JobStatus.RUNNING] == 0


def test_rate_costs_weigh_attempts(store: JobStore) -> None:
    add(store, "bulk", priority=1)
    add(store, "bulk", priority=1)
    add(store, "one")
    add(store, "one")
    pool = {"api": Resource(rate_per_minute=4, types=["bulk", "one"], rate_costs={"bulk": 3})}
    got = claim(store, slots("bulk"), slots("one"), resources=pool)
    assert [j.type for j in got] == ["bulk", "one"]
    assert claim(store, slots("bulk"), slots("one"), resources=pool) == []


def test_rate_budget_under_concurrent_claimers(store: JobStore) -> None:
    for _ in range(30):
        add(store, "call")
    pool = {"api": Resource(rate_per_minute=7, types=["call"])}
    results = concurrently(
        8, lambda i: claim(store, slots("call", 4), resources=pool, owner=f"w{i}")
    )
    assert sum(len(batch) for batch in results) == 7


def test_pools_with_both_dimensions(store: JobStore) -> None:
    for _ in range(5):
        add(store, "call")
    pool = {"api": Resource(concurrency=2, rate_per_minute=3, types=["call"])}
    first = claim(store, slots("call"), resources=pool)
    assert len(first) == 2  # concurrency
    store.job_complete_many("w1", refs(first))
    assert len(claim(store, slots("call"), resources=pool)) == 1  # the rest of the rate


def test_a_job_outside_every_pool_is_not_limited(store: JobStore) -> None:
    for _ in range(3):
        add(store, "free")
    pool = {"api": Resource(concurrency=1, rate_per_minute=1, types=["call"])}
    assert len(claim(store, slots("free"), resources=pool)) == 3


def test_the_rate_window_resets_when_it_has_elapsed() -> None:
    # The fake clock drives the in-memory store only; tests/integration/test_guards_* prove
    # the window on PostgreSQL with a short injected rate_window.
    mem, clock = memory_store(rate_window=60)
    for _ in range(10):
        add(mem, "call")
    pool = {"api": Resource(rate_per_minute=3, types=["call"])}
    assert len(claim(mem, slots("call"), resources=pool)) == 3
    clock.advance(59.9)
    assert claim(mem, slots("call"), resources=pool) == []
    clock.advance(0.1)
    assert len(claim(mem, slots("call"), resources=pool)) == 3
    clock.advance(30)
    assert claim(mem, slots("call"), resources=pool) == []


# -- sequencing and blocked reasons -----------------------------------------------------------


def test_unguarded_types_are_claimed_before_guarded_ones(store: JobStore) -> None:
    # Both stores claim every unguarded type first, then each guarded type in request
    # order: b (higher priority, but guarded) sees the x that the fast path just leased.
    add(store, "x")
    add(store, "b", priority=10)
    got = claim(store, slots("b", not_while_running=("x",)), slots("x"))
    assert [j.type for j in got] == ["x"]
    assert claim_blocked(got) == {"b": ClaimBlock("type", "x")}


def test_a_claim_names_what_blocks_each_guarded_type(store: JobStore) -> None:
    add(store, "x")
    add(store, "extract")
    add(store, "serial", scope=("Doc", "1"))
    add(store, "serial", scope=("Doc", "1"))
    add(store, "pooled")
    add(store, "pooled")
    add(store, "rated")
    add(store, "rated")
    add(store, "plain", dedupe_key="k")
    claim(store, "x", "plain", owner="other")
    add(store, "plain", dedupe_key="k", on_duplicate="replace")
    claim(store, slots("serial", limit=1, serialize_by_scope=True), owner="other")
    pools = {
        "conc": Resource(concurrency=1, types=["pooled"]),
        "rate": Resource(rate_per_minute=1, types=["rated"]),
    }
    claim(store, slots("pooled", limit=1), slots("rated", limit=1), resources=pools, owner="other")
    add(store, "nwr")
    add(store, "wf")
    got = claim(
        store,
        slots("nwr", not_while_running=("x",)),
        slots("wf", waits_for=("extract",)),
        slots("serial", serialize_by_scope=True),
        slots("pooled"),
        slots("rated"),
        slots("idle", serialize_by_scope=True),  # guarded, but nothing is due
        slots("plain"),  # unguarded: its key is running, but the fast path reports nothing
        resources=pools,
    )
    assert list(got) == []
    assert claim_blocked(got) == {
        "nwr": ClaimBlock("type", "x"),
        "wf": ClaimBlock("type", "extract"),
        "serial": ClaimBlock("scope"),
        "pooled": ClaimBlock("pool concurrency", "conc"),
        "rated": ClaimBlock("pool rate", "rate"),
    }
    assert str(ClaimBlock("pool rate", "rate")) == "pool rate rate"


def test_a_grouped_type_whose_groups_are_all_running_is_blocked_by_scope(
    store: JobStore,
) -> None:
    add(store, "digest", scope=("User", "1"))
    claim(store, slots("digest", grouped=True))
    add(store, "digest", scope=("User", "1"))
    got = claim(store, slots("digest", grouped=True), owner="w2")
    assert list(got) == []
    assert claim_blocked(got) == {"digest": ClaimBlock("scope")}


# -- a long backlog in one scope must not hide the other scopes -------------------------------


def _backlog(store: JobStore, job_type: str, scope: Scope, n: int) -> None:
    payloads = [encode_payload(job_type, {"i": i}) for i in range(n)]
    store.job_enqueue_many(EnqueueManyParams(type=job_type, payloads=payloads, scope=scope))


def test_serialize_by_scope_reaches_scopes_behind_a_long_backlog(store: JobStore) -> None:
    _backlog(store, "a", Scope("Doc", "busy"), 300)
    quiet = add(store, "a", scope=("Doc", "quiet"))
    got = claim(store, slots("a", limit=2, serialize_by_scope=True))
    assert sorted(j.scope.id for j in got if j.scope) == ["busy", "quiet"]
    assert quiet in ids(got)


def test_grouped_reaches_groups_behind_a_long_backlog(store: JobStore) -> None:
    _backlog(store, "digest", Scope("User", "busy"), 300)
    quiet = add(store, "digest", scope=("User", "quiet"))
    got = claim(store, slots("digest", limit=2, grouped=True, max_batch=5))
    assert Counter(j.scope.id for j in got if j.scope) == {"busy": 5, "quiet": 1}
    assert quiet in ids(got)


# -- grouped: a failed batch retries with the late arrivals -----------------------------------

#: A failed batch's backoff in these tests: long enough to claim during it, short to wait out.
_BACKOFF = 1.0


def _arrived(jobs: list[ClaimedJob]) -> list[ClaimedJob]:
    """A grouped claim's jobs as the worker hands them over: in arrival order (the store
    returns claim order)."""
    return sorted(jobs, key=lambda j: (j.enqueued_at, int(j.id)))


def _fail_batch(store: JobStore, batch: list[ClaimedJob], delay: float = _BACKOFF) -> None:
    written = store.job_retry_many(
        "w1", [RetryItem(j.id, j.lease_token, delay, "RuntimeError: down") for j in batch])
    assert written == {j.id for j in batch}


def test_a_late_arrival_waits_out_its_groups_backoff_and_joins_the_retry(
    store: JobStore,
) -> None:
    grouped = slots("digest", limit=5, grouped=True)
    first = [add(store, "digest", {"n": n}, scope=("User", "1")) for n in range(2)]
    batch = claim(store, grouped)
    assert ids(batch) == first
    during_run = add(store, "digest", {"n": 2}, scope=("User", "1"))
    _fail_batch(store, batch)
    during_backoff = add(store, "digest", {"n": 3}, scope=("User", "1"))
    other = add(store, "digest", scope=("User", "2"))
    # Held: the late arrivals are due, but not delivered before the retry; other groups run.
    assert ids(claim(store, grouped)) == [other]
    assert claim(store, grouped, owner="w2") == []
    retry = _arrived(wait_until(lambda: claim(store, grouped, owner="w2"), timeout=10))
    # One batch: the retried jobs and the late arrivals, in arrival order, each counting
    # its own deliveries.
    assert ids(retry) == [*first, during_run, during_backoff]
    assert [j.attempt for j in retry] == [2, 2, 1, 1]


def test_a_held_group_behind_a_long_backlog_is_skipped_by_the_scope_walk(
    store: JobStore,
) -> None:
    grouped = slots("digest", limit=2, grouped=True, max_batch=5)
    parked = add(store, "digest", scope=("User", "quiet"))
    _fail_batch(store, claim(store, grouped), delay=3600)
    _backlog(store, "digest", Scope("User", "busy"), 300)
    late = add(store, "digest", scope=("User", "quiet"))  # behind the backlog: the walk's
    got = claim(store, grouped)
    assert Counter(j.scope.id for j in got if j.scope) == {"busy": 5}
    assert late not in ids(got)
    assert store.job_run_now(parked)  # the backoff is cut short: the group is free again
    assert ids(_arrived(claim(store, grouped, owner="w2"))) == [parked, late]


def test_a_job_added_with_its_own_delay_never_holds_its_group(store: JobStore) -> None:
    grouped = slots("digest", limit=1, grouped=True)
    add(store, "digest", scope=("User", "1"), delay=3600)
    due = add(store, "digest", scope=("User", "1"))
    assert ids(claim(store, grouped)) == [due]


def test_a_retry_due_again_frees_its_group_and_a_spent_budget_dead_letters_alone(
    store: JobStore,
) -> None:
    grouped = slots("digest", limit=1, grouped=True)
    old = add(store, "digest", scope=("User", "1"), max_attempts=1)
    keeps = add(store, "digest", scope=("User", "1"), max_attempts=3)
    batch = claim(store, grouped)
    # The worker's split of a failed batch: the spent job dead-letters alone, the other
    # waits out the backoff (here none) and runs again with the group.
    store.job_fail_many("w1", [FailItem(batch[0].id, batch[0].lease_token, "E")])
    _fail_batch(store, batch[1:], delay=0)
    late = add(store, "digest", scope=("User", "1"))
    assert ids(_arrived(claim(store, grouped))) == [keeps, late]
    dead = store.job_get(old)
    assert dead is not None
    assert dead.status == JobStatus.FAILED


def test_a_grouped_replace_moves_the_job_to_the_end_of_its_group(store: JobStore) -> None:
    keyed = add(store, "digest", {"v": 1}, scope=("User", "1"), dedupe_key="k")
    behind = add(store, "digest", {"v": 2}, scope=("User", "1"))
    wait_until(lambda: store.now() > store.job_get(behind).created_at)  # type: ignore[union-attr]
    replaced = put(store, "digest", {"v": 3}, scope=("User", "1"), dedupe_key="k",
                   on_duplicate="replace", grouped=True)
    assert (replaced.id, replaced.replaced) == (keyed, True)
    got = claim(store, slots("digest", grouped=True))
    # The replacing add is the job's new arrival.
    assert [(j.id, j.payload) for j in _arrived(got)] == [(behind, {"v": 2}), (keyed, {"v": 3})]
