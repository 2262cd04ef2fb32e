"""The in-memory claim, sequenced exactly like the PostgreSQL claim.

Private to :mod:`golemq_pg.store.memory`; it runs with the store's lock held, which plays
the part of the advisory locks. Like ``PostgresStore`` it works in two phases:

1. the fast path: every unguarded type (no guard, in no resource pool) at once, due jobs in
   claim order (priority DESC, run_at, id) up to each type's limit;
2. then each guarded type on its own, in request order, against the state left by the
   claims before it. Its gate (not_while_running, waits_for, pool room) is read once before
   it leases anything, as the SQL reads it in one snapshot.

A paused type (``InMemoryStore.type_pause``) is left out of both phases, as the SQL leaves
it out of every claim statement: it gets nothing and is not reported as blocked.

A keyed job is never claimed while a RUNNING job (live lease or not) holds its key; every
other guard ignores expired leases. Results come back as a :class:`ClaimBatch`: the fast
jobs in claim order, then each guarded type's jobs in claim order, with ``blocked`` naming
what held back a guarded type that had due work and got nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

import orjson

from golemq_pg._types import JobStatus, Resource, Scope
from golemq_pg.store.memory._rows import JobRow, JobTable, RateBudget, copy_trace
from golemq_pg.store.port import (
    GROUP_HOLD_DEPTH,
    ClaimBatch,
    ClaimBlock,
    ClaimedJob,
    ClaimRequest,
    TypeSlots,
)


def claim_order(row: JobRow) -> tuple[int, datetime, int]:
    """The order of the claim index: priority DESC, run_at, id."""
    return (-row.priority, row.run_at, row.id)


@dataclass(frozen=True, slots=True)
class _Gate:
    """A guarded type's verdict before it leases: what blocks it, and how many jobs fit."""

    has_due: bool
    block: ClaimBlock | None  # a type-level block (not_while_running / waits_for) or a pool
    room: int | None  # most jobs the pools admit now; None when no pool bounds the type


class ClaimPass:
    """Lease up to the requested number of due jobs for one :class:`ClaimRequest`."""

    def __init__(
        self,
        table: JobTable,
        budgets: dict[str, RateBudget],
        request: ClaimRequest,
        now: datetime,
        rate_window: float,
        paused: Collection[str] = (),
    ) -> None:
        self._paused = frozenset(paused)
        self._table = table
        self._budgets = budgets
        self._request = request
        self._now = now
        self._rate_window = timedelta(seconds=rate_window)

    def run(self) -> ClaimBatch:
        """Both phases; see the module docstring."""
        pooled = {t for pool in self._request.resources.values() for t in pool.types}
        fast: dict[str, TypeSlots] = {}
        guarded: list[TypeSlots] = []
        for slots in self._request.types:
            if slots.limit <= 0 or slots.type in self._paused:
                continue  # a paused type claims nothing and counts as having nothing due
            if slots.guarded or slots.type in pooled:
                guarded.append(slots)
            else:
                fast.setdefault(slots.type, slots)
        batch = ClaimBatch(self._claim_fast(list(fast.values())))
        for slots in guarded:
            jobs, block = self._claim_guarded(slots)
            batch.extend(jobs)
            if block is not None:
                batch.blocked[slots.type] = block
        return batch

    # -- phase 1 ---------------------------------------------------------------------------
    def _claim_fast(self, fast: list[TypeSlots]) -> list[ClaimedJob]:
        leased: list[tuple[JobRow, TypeSlots]] = []
        for slots in fast:
            picked = [r for r in self._due(slots.type) if not self._key_running(r)]
            leased.extend((row, slots) for row in picked[: slots.limit])
        for row, slots in leased:
            self._lease(row, slots)
        return [self._claimed(row) for row, _ in sorted(leased, key=lambda p: claim_order(p[0]))]

    # -- phase 2 ---------------------------------------------------------------------------
    def _claim_guarded(self, slots: TypeSlots) -> tuple[list[ClaimedJob], ClaimBlock | None]:
        gate = self._gate(slots)
        if gate.block is not None and gate.block.kind == "type":
            picked: list[JobRow] = []
        elif slots.grouped:
            picked = self._pick_groups(slots)
        else:
            picked = self._pick_rows(slots)
        if gate.room is not None:
            picked = picked[: gate.room]
        for row in picked:
            self._lease(row, slots)
        self._charge(slots.type, len(picked))
        jobs = [self._claimed(row) for row in sorted(picked, key=claim_order)]
        if jobs or not gate.has_due:
            return jobs, None
        if gate.block is not None:
            return jobs, gate.block
        return jobs, ClaimBlock("scope") if slots.serialize_by_scope or slots.grouped else None

    def _pick_rows(self, slots: TypeSlots) -> list[JobRow]:
        """Due rows in claim order; with serialize_by_scope at most one per free scope."""
        live_scopes = self._live_scopes(slots.type)
        picked: list[JobRow] = []
        for row in self._due(slots.type):
            if len(picked) >= slots.limit:
                break
            if self._key_running(row):
                continue
            if slots.serialize_by_scope and row.scope is not None:
                if row.scope in live_scopes:
                    continue
                live_scopes.add(row.scope)  # one new job per scope per claim
            picked.append(row)
        return picked

    def _pick_groups(self, slots: TypeSlots) -> list[JobRow]:
        """The first ``limit`` free groups (by their head job in claim order), each whole.

        A group is one (type, scope); unscoped jobs of the type form one group. A group with
        a live lease is locked, and so is one whose failed batch waits out its backoff
        (``_held_scopes``). Members go in arrival (id) order, up to ``max_batch``.
        """
        locked = self._live_scopes(slots.type)
        held = self._held_scopes(slots.type)
        members: dict[Scope | None, list[JobRow]] = {}
        for row in self._due(slots.type):
            if row.scope in locked or row.scope in held:
                continue
            if row.scope not in members and len(members) >= slots.limit:
                continue
            members.setdefault(row.scope, []).append(row)
        picked: list[JobRow] = []
        for rows in members.values():
            free = [r for r in sorted(rows, key=lambda r: r.id) if not self._key_running(r)]
            picked.extend(free if slots.max_batch is None else free[: slots.max_batch])
        return picked

    def _held_scopes(self, job_type: str) -> set[Scope]:
        """The groups of ``job_type`` held while a retried job waits out its backoff: one
        of the group's first ``GROUP_HOLD_DEPTH`` pending jobs in id order is in the future
        with a ``last_error`` (only a retry leaves a pending job so; a job added with its
        own delay has none). Like the SQL, the group of unscoped jobs is never held."""
        by_scope: dict[Scope, list[JobRow]] = {}
        for row in self._table.pending.values():
            if row.type == job_type and row.scope is not None:
                by_scope.setdefault(row.scope, []).append(row)
        held: set[Scope] = set()
        for scope, rows in by_scope.items():
            first = sorted(rows, key=lambda r: r.id)[:GROUP_HOLD_DEPTH]
            if any(r.last_error is not None and r.run_at > self._now for r in first):
                held.add(scope)
        return held

    def _gate(self, slots: TypeSlots) -> _Gate:
        has_due = any(
            r.type == slots.type and r.run_at <= self._now for r in self._table.pending.values()
        )
        live_types = {r.type for r in self._live()}
        for other in slots.not_while_running:
            if other in live_types:
                return _Gate(has_due, ClaimBlock("type", other), None)
        for other in slots.waits_for:
            if other in live_types or any(
                r.type == other and r.run_at <= self._now for r in self._table.pending.values()
            ):
                return _Gate(has_due, ClaimBlock("type", other), None)
        # Like the SQL gate: the first full pool by name, concurrency before rate.
        rooms = [
            (
                name,
                self._concurrency_room(pool, slots.type),
                self._rate_room(name, pool, slots.type),
            )
            for name, pool in self._pools(slots.type)
        ]
        block: ClaimBlock | None = None
        full_concurrency = [name for name, conc, _ in rooms if conc == 0]
        full_rate = [name for name, _, rate in rooms if rate == 0]
        if full_concurrency:
            block = ClaimBlock("pool concurrency", full_concurrency[0])
        elif full_rate:
            block = ClaimBlock("pool rate", full_rate[0])
        bounds = [left for _, conc, rate in rooms for left in (conc, rate) if left is not None]
        return _Gate(has_due, block, min(bounds) if bounds else None)

    def _concurrency_room(self, pool: Resource, job_type: str) -> int | None:
        cost = pool.cost_of(job_type)
        if pool.concurrency is None or cost <= 0:
            return None
        used = sum(pool.cost_of(r.type) for r in self._live() if r.type in pool.types)
        return max((pool.concurrency - used) // cost, 0)

    def _rate_room(self, name: str, pool: Resource, job_type: str) -> int | None:
        cost = pool.rate_cost_of(job_type)
        if pool.rate_per_minute is None or cost <= 0:
            return None
        return max((pool.rate_per_minute - self._spent(name)) // cost, 0)

    def _spent(self, name: str) -> int:
        """Rate spent in the pool's current window (an elapsed window counts as empty)."""
        budget = self._budgets.get(name)
        if budget is None or budget.window_start + self._rate_window <= self._now:
            return 0
        return budget.spent

    def _charge(self, job_type: str, attempts: int) -> None:
        """Every claimed attempt spends its rate cost; an elapsed window restarts now."""
        if attempts == 0:
            return
        for name, pool in self._pools(job_type):
            cost = pool.rate_cost_of(job_type)
            if pool.rate_per_minute is None or cost <= 0:
                continue
            budget = self._budgets.get(name)
            if budget is None or budget.window_start + self._rate_window <= self._now:
                self._budgets[name] = RateBudget(window_start=self._now, spent=cost * attempts)
            else:
                budget.spent += cost * attempts

    # -- reading the table -----------------------------------------------------------------
    def _due(self, job_type: str) -> Iterable[JobRow]:
        """Due PENDING rows of one type, in claim order."""
        return sorted(
            (
                r
                for r in self._table.pending.values()
                if r.type == job_type and r.run_at <= self._now
            ),
            key=claim_order,
        )

    def _live(self) -> Iterable[JobRow]:
        return (r for r in self._table.running.values() if r.is_live(self._now))

    def _live_scopes(self, job_type: str) -> set[Scope | None]:
        return {r.scope for r in self._live() if r.type == job_type}

    def _key_running(self, row: JobRow) -> bool:
        return row.dedupe_key is not None and self._table.running_with_key(row.type, row.dedupe_key)

    def _pools(self, job_type: str) -> list[tuple[str, Resource]]:
        pools = [(n, p) for n, p in self._request.resources.items() if job_type in p.types]
        return sorted(pools, key=lambda item: item[0])

    # -- the lease -------------------------------------------------------------------------
    def _lease(self, row: JobRow, slots: TypeSlots) -> None:
        now = self._now
        self._table.set_status(row, JobStatus.RUNNING)
        row.attempts += 1
        row.lease_owner = self._request.owner
        row.lease_token += 1
        row.lease_expires_at = now + timedelta(seconds=slots.lease_seconds)
        # The handler's start, unless it is written later (ClaimRequest.defer_start).
        row.started_at = None if self._request.defer_start else now
        row.updated_at = now

    @staticmethod
    def _claimed(row: JobRow) -> ClaimedJob:
        assert row.lease_expires_at is not None  # noqa: S101 - set by _lease just before
        return ClaimedJob(
            id=str(row.id),
            type=row.type,
            payload=orjson.loads(row.payload),
            scope=row.scope,
            attempt=row.attempts,
            max_attempts=row.max_attempts,
            priority=row.priority,
            token=row.lease_token,
            enqueued_at=row.created_at,
            lease_expires_at=row.lease_expires_at,
            trace_context=copy_trace(row.trace_context),
            # due time to this claim (updated_at: the claim's), like PostgreSQL's
            # fragment_claimed_columns
            waited=max((row.updated_at - row.run_at).total_seconds(), 0.0),
        )
