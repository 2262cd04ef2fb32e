"""The claim for PostgresStore: the lock-free fast path and the guarded path.

Unguarded types (no guard, in no resource pool) are claimed together by one statement
(``job_claim``). Each guarded type is claimed in its own transaction: first the EXCLUSIVE
advisory locks it needs, in key order (``claim_lock_exclusive``), then the claim itself as
the next statement, so its snapshot sees every claim that finished before the locks were
granted. The two kinds never share a transaction, which keeps the lock order global. Both
statements of a guarded claim travel in one pipeline: one round trip.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
import structlog

from golemq_pg._types import Resource
from golemq_pg.store._pg_rows import claimed
from golemq_pg.store._sql import Queries
from golemq_pg.store.port import ClaimBatch, ClaimBlock, ClaimedJob, ClaimRequest, TypeSlots

log = structlog.get_logger("golemq_pg.store.claim")

# How far down the due backlog (in claim order) a serialize_by_scope / grouped claim looks
# for claimable scopes: bounded so that a claim's cost does not grow with the backlog. The
# window adapts per type: it doubles while full windows yield fewer scopes than wanted (a
# backlog clustered by scope) and shrinks back once claims are full again.
_LOOKAHEAD_FACTOR = 2
_LOOKAHEAD_MIN = 50
_LOOKAHEAD_MAX = 50_000
_GATE_COLUMNS = 6


def lock_prefixes(schema: str) -> tuple[str, str]:
    """Advisory-lock name prefixes (hashed in SQL with hashtextextended) for types, pools."""
    return schema + ":type:", schema + ":resource:"


def pools_of(job_type: str, resources: dict[str, Resource]) -> list[tuple[str, Resource]]:
    """The resource pools ``job_type`` belongs to, sorted by name."""
    return sorted(
        ((name, res) for name, res in resources.items() if job_type in res.types),
        key=lambda item: item[0],
    )


class Claimer:
    """Runs claims for one schema on connections the store hands it."""

    __slots__ = ("_lookahead", "_pool_prefix", "_q", "_rate_window", "_type_prefix")

    def __init__(self, queries: Queries, schema: str, rate_window: float) -> None:
        self._q = queries
        self._type_prefix, self._pool_prefix = lock_prefixes(schema)
        self._rate_window = float(rate_window)
        self._lookahead: dict[str, int] = {}

    def _base_lookahead(self, slot: TypeSlots) -> int:
        return min(max(slot.limit * _LOOKAHEAD_FACTOR, _LOOKAHEAD_MIN), _LOOKAHEAD_MAX)

    def _adapt(self, slot: TypeSlots, window: int, cand_rows: int, claimed: int) -> None:
        """Grow the look-ahead after a full window that yielded too little; else shrink it."""
        base = self._base_lookahead(slot)
        if cand_rows >= window and claimed < slot.limit:
            self._lookahead[slot.type] = min(window * 2, _LOOKAHEAD_MAX)
        elif window > base:
            self._lookahead[slot.type] = max(window * 3 // 4, base)

    # -- planning ----------------------------------------------------------------------------
    @staticmethod
    def split(request: ClaimRequest) -> tuple[list[TypeSlots], list[TypeSlots]]:
        """(fast, guarded) type slots with free capacity."""
        pooled = {t for res in request.resources.values() for t in res.types}
        fast: list[TypeSlots] = []
        guarded: list[TypeSlots] = []
        seen: set[str] = set()
        for slot in request.types:
            # A type listed twice is claimed once, with its first entry's slots.
            if slot.limit <= 0 or slot.type in seen:
                continue
            seen.add(slot.type)
            if slot.guarded or slot.type in pooled:
                guarded.append(slot)
            else:
                fast.append(slot)
        return fast, guarded

    def fast_params(self, owner: str, slots: Sequence[TypeSlots]) -> dict[str, Any]:
        """Parameters of ``job_claim`` for the unguarded types."""
        return {
            "owner": owner,
            "lock_prefix": self._type_prefix,
            "types": [s.type for s in slots],
            "limits": [s.limit for s in slots],
            "leases": [float(s.lease_seconds) for s in slots],
        }

    def guarded_params(
        self, owner: str, slot: TypeSlots, resources: dict[str, Resource]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """(lock parameters, claim parameters) for one guarded type."""
        pools = pools_of(slot.type, resources)
        lock_names = [self._type_prefix + slot.type]
        lock_names += [self._type_prefix + other for other in slot.not_while_running]
        lock_names += [self._pool_prefix + name for name, _ in pools]
        member_pools: list[str] = []
        member_types: list[str] = []
        member_costs: list[int] = []
        for name, res in pools:
            for member in dict.fromkeys(res.types):
                member_pools.append(name)
                member_types.append(member)
                member_costs.append(res.cost_of(member))
        scoped = slot.serialize_by_scope or slot.grouped
        lookahead = (
            self._lookahead.get(slot.type) or self._base_lookahead(slot) if scoped else slot.limit
        )
        claim = {
            "owner": owner,
            "type": slot.type,
            "lease": float(slot.lease_seconds),
            "limit": slot.limit,
            "lookahead": lookahead,
            "serialize_by_scope": slot.serialize_by_scope,
            "max_batch": slot.max_batch,
            "not_while_running": list(slot.not_while_running),
            "waits_for": list(slot.waits_for),
            "pool_names": [name for name, _ in pools],
            "pool_concurrency": [res.concurrency for _, res in pools],
            "pool_rate": [res.rate_per_minute for _, res in pools],
            "pool_costs": [res.cost_of(slot.type) for _, res in pools],
            "pool_rate_costs": [res.rate_cost_of(slot.type) for _, res in pools],
            "member_pools": member_pools,
            "member_types": member_types,
            "member_costs": member_costs,
            "rate_window": self._rate_window,
        }
        return {"names": lock_names}, claim

    # -- running -----------------------------------------------------------------------------
    def run(
        self, conn: psycopg.Connection[Any], request: ClaimRequest, *, managed: bool
    ) -> ClaimBatch:
        """Claim on ``conn``. ``managed``: this call owns the transaction boundaries."""
        fast, guarded = self.split(request)
        batch = ClaimBatch()
        if fast:
            batch.extend(self._run_fast(conn, request.owner, fast, managed=managed))
        resources = dict(request.resources)
        for slot in guarded:
            jobs, block = self._run_guarded(conn, request.owner, slot, resources, managed=managed)
            batch.extend(jobs)
            if block is not None:
                batch.blocked[slot.type] = block
        return batch

    def _run_fast(
        self,
        conn: psycopg.Connection[Any],
        owner: str,
        slots: Sequence[TypeSlots],
        *,
        managed: bool,
    ) -> list[ClaimedJob]:
        params = self.fast_params(owner, slots)
        if managed and not conn.autocommit:
            with conn.transaction():
                rows = conn.execute(self._q["job_claim"], params).fetchall()
        else:
            # Autocommit: the single statement is its own transaction (one round trip).
            rows = conn.execute(self._q["job_claim"], params).fetchall()
        return [claimed(row) for row in rows]

    def _run_guarded(
        self,
        conn: psycopg.Connection[Any],
        owner: str,
        slot: TypeSlots,
        resources: dict[str, Resource],
        *,
        managed: bool,
    ) -> tuple[list[ClaimedJob], ClaimBlock | None]:
        lock_params, params = self.guarded_params(owner, slot, resources)
        query = self._q["job_claim_grouped" if slot.grouped else "job_claim_guarded"]
        scoped = slot.serialize_by_scope or slot.grouped
        jobs: list[ClaimedJob] = []
        units = 0
        while True:
            rows = self._guarded_round(conn, lock_params, query, params, managed=managed)
            found = [claimed(row, _GATE_COLUMNS) for row in rows if row[_GATE_COLUMNS] is not None]
            jobs += found
            if not scoped or not rows:
                break
            got = len({j.scope for j in found}) if slot.grouped else len(found)
            units += got
            window: int = params["lookahead"]
            self._adapt(slot, window, rows[0][5], units)
            # A full window that yielded too few scopes means a backlog clustered by scope:
            # claim again with a wider window. The scopes leased so far are live now, so the
            # next round skips them; each round claims at least one new scope or stops.
            if got == 0 or units >= slot.limit or rows[0][5] < window:
                break
            params = {
                **params,
                "limit": slot.limit - units,
                "lookahead": min(window * 2, _LOOKAHEAD_MAX),
            }
        block = None if jobs or not rows else self._why_blocked(slot, rows[0])
        return jobs, block

    def _guarded_round(
        self,
        conn: psycopg.Connection[Any],
        lock_params: dict[str, Any],
        query: bytes,
        params: dict[str, Any],
        *,
        managed: bool,
    ) -> list[tuple[Any, ...]]:
        """One guarded claim: BEGIN, locks, claim, COMMIT in one pipeline (one round trip)."""
        if managed:
            with conn.pipeline(), conn.transaction():
                conn.execute(self._q["claim_lock_exclusive"], lock_params)
                cur = conn.execute(query, params)
            return cur.fetchall()
        conn.execute(self._q["claim_lock_exclusive"], lock_params)
        return conn.execute(query, params).fetchall()

    @staticmethod
    def _why_blocked(slot: TypeSlots, gate: Sequence[Any]) -> ClaimBlock | None:
        has_due, nwr_block, wf_block, conc_block, rate_block = gate[:5]
        if not has_due:
            return None
        if nwr_block is not None:
            return ClaimBlock("type", nwr_block)
        if wf_block is not None:
            return ClaimBlock("type", wf_block)
        if conc_block is not None:
            return ClaimBlock("pool concurrency", conc_block)
        if rate_block is not None:
            return ClaimBlock("pool rate", rate_block)
        if slot.serialize_by_scope or slot.grouped:
            return ClaimBlock("scope")
        return None
