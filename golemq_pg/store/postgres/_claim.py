"""The claim for PostgresStore: the lock-free fast path and the guarded path.

Unguarded types (no guard, in no resource pool) are claimed together by one statement
(``job_claim``). Each guarded type is claimed in its own transaction: first the EXCLUSIVE
advisory locks it needs, in key order (``claim_lock_exclusive``), then the claim itself as
the next statement, so its snapshot sees every claim that finished before the locks were
granted. The two kinds never share a transaction, which keeps the lock order global. Both
statements of a guarded claim travel in one pipeline: one round trip. In a transaction the
store owns, the lock statement also switches the claim to its generic plan (the guarded
statements take longer to plan than to run); the setting is transaction-local.

The guarded statements read the clock as ``statement_timestamp()``, taken after the locks:
leases, due times and rate windows are judged when the claim decides, and the rate window
of a pool moves forward in the order its lock is granted (see ``claim.sql``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
import structlog

from golemq_pg._types import Resource
from golemq_pg.store.port import (
    GROUP_HOLD_DEPTH,
    ClaimBatch,
    ClaimBlock,
    ClaimedJob,
    ClaimRequest,
    TypeSlots,
)
from golemq_pg.store.postgres._rows import claimed
from golemq_pg.store.postgres._sql import Queries, RawStatement

log = structlog.get_logger("golemq_pg.store.claim")

# serialize_by_scope and grouped claims first read a window of the due backlog in claim
# order (exact claim order for a backlog spread over many scopes), then, when that window is
# full but holds too few free scopes, walk the distinct scopes of the type (a loose index scan
# over jobs_pending_scope_idx) from where the previous walk of this type ended. Both are
# bounded, so the cost of a claim does not grow with the backlog or the number of scopes.
_WINDOW_FACTOR = 2
_WINDOW_MIN = 50
# The window is filled from at most this many due rows in claim order, however many of them
# belong to scopes that are running (their rows are skipped): a running scope with a long
# backlog at the head of the queue costs a bounded read, and the walk reaches the rest.
_SCAN_FACTOR = 8
_SCAN_MIN = 1000
_WALK_FACTOR = 4
_WALK_MIN = 64
# A window that read at least _WINDOW_MIN rows but took fewer units (free scopes, or
# unscoped jobs, which the walk cannot reach) than this share of them (a backlog bunched by
# scope: many jobs of one scope in a row) cost more per scope than the walk, which pays one
# index descent per scope. The next claim of
# the type then reads only a _WINDOW_MIN window (claim order for the first few scopes) and
# leaves the rest to the walk; a narrow window that finds its rows spread over many scopes
# widens the next one again.
_WINDOW_YIELD = 0.25
#: serialize_by_scope: a scope reached by the walk runs its highest-priority due job, oldest
#: first, among its first this-many due jobs in arrival order (when the type's pending jobs
#: have different priorities; otherwise simply its oldest due job).
SCOPE_DEPTH = 64
#: Columns before the claimed job's in a guarded claim's rows: the gate's verdict
#: (has_due, nwr_block, wf_block, conc_block, rate_block), where the walk ended, and the
#: window's rows and the units (jobs or groups) it took.
_GATE_COLUMNS = 9


def lock_prefixes(schema: str) -> tuple[str, str]:
    """Advisory-lock name prefixes (hashed in SQL with hashtextextended) for types, pools."""
    return schema + ":type:", schema + ":resource:"


def pools_of(job_type: str, resources: dict[str, Resource]) -> list[tuple[str, Resource]]:
    """The resource pools ``job_type`` belongs to, sorted by name."""
    return sorted(
        ((name, res) for name, res in resources.items() if job_type in res.types),
        key=lambda item: item[0],
    )


def most_admitted(job_type: str, pools: Sequence[tuple[str, Resource]]) -> int | None:
    """The most jobs of ``job_type`` its resource pools could admit at once (a full
    concurrency cap, a whole rate window), or None when no pool bounds it."""
    bounds: list[int] = []
    for _, res in pools:
        cost = res.cost_of(job_type)
        if res.concurrency is not None and cost > 0:
            bounds.append(res.concurrency // cost)
        rate_cost = res.rate_cost_of(job_type)
        if res.rate_per_minute is not None and rate_cost > 0:
            bounds.append(res.rate_per_minute // rate_cost)
    return min(bounds) if bounds else None


def guarded_statement(slot: TypeSlots) -> str:
    """The claim statement of a type on the guarded path: grouped, guarded by its own
    options, or guarded by resource pools only (the lean ``job_claim_pooled``)."""
    if slot.grouped:
        return "job_claim_grouped"
    if slot.guarded:
        return "job_claim_guarded"
    return "job_claim_pooled"


class Claimer:
    """Runs claims for one schema on connections the store hands it."""

    __slots__ = (
        "_cursors", "_narrow", "_pool_prefix", "_q", "_rate_window", "_type_prefix", "prepare"
    )

    def __init__(self, queries: Queries, schema: str, rate_window: float) -> None:
        self._q = queries
        self._type_prefix, self._pool_prefix = lock_prefixes(schema)
        self._rate_window = float(rate_window)
        #: Whether the guarded claims ask for a prepared statement (``connect(prepare=)``).
        self.prepare = True
        # Per type: the scope where the last scope walk ended (the next one starts after it).
        # Only fairness depends on it; a lost update between threads is harmless.
        self._cursors: dict[str, tuple[str | None, str | None]] = {}
        # Per scoped type: whether its last window paid poorly (see _WINDOW_YIELD). Like the
        # cursor, only cost depends on it.
        self._narrow: dict[str, bool] = {}

    @property
    def rate_window(self) -> float:
        """The resource pools' fixed rate window, in seconds."""
        return self._rate_window

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

    def fast_params(
        self, owner: str, slots: Sequence[TypeSlots], *, stamp: bool = True
    ) -> dict[str, Any]:
        """Parameters of ``job_claim`` for the unguarded types (``stamp``: the claim is the
        handlers' start, see ``ClaimRequest.defer_start``)."""
        return {
            "stamp": stamp,
            "owner": owner,
            "lock_prefix": self._type_prefix,
            "types": [s.type for s in slots],
            "limits": [s.limit for s in slots],
            "leases": [float(s.lease_seconds) for s in slots],
        }

    def guarded_params(
        self, owner: str, slot: TypeSlots, resources: dict[str, Resource], *, stamp: bool = True
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """(lock parameters, claim parameters) for one guarded type (``stamp`` as in
        :meth:`fast_params`)."""
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
        # Ask for no more than the pools could ever admit (e.g. 32 of the 500 free slots):
        # the window, the scan and the walk are all sized from the limit.
        limit = slot.limit
        most = most_admitted(slot.type, pools)
        if most is not None:
            limit = max(min(limit, most), 1)
        scoped = slot.serialize_by_scope or slot.grouped
        lookahead = limit
        if scoped:
            wide = max(limit * _WINDOW_FACTOR, _WINDOW_MIN)
            lookahead = _WINDOW_MIN if self._narrow.get(slot.type) else wide
        cursor_type, cursor_id = self._cursors.get(slot.type, (None, None))
        claim = {
            "stamp": stamp,
            "owner": owner,
            "type": slot.type,
            "lease": float(slot.lease_seconds),
            "limit": limit,
            "lookahead": lookahead,
            "scan_limit": max(lookahead * _SCAN_FACTOR, _SCAN_MIN),
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
            "cursor_type": cursor_type,
            "cursor_id": cursor_id,
            "walk_limit": max(limit * _WALK_FACTOR, _WALK_MIN),
            # grouped: a group is claimable when any of its jobs is due; members go by id
            "scope_depth": 1 if slot.grouped else SCOPE_DEPTH,
            # grouped: a group whose failed batch waits out its backoff is held
            "hold_groups": slot.grouped,
            "hold_depth": GROUP_HOLD_DEPTH,
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
            batch.extend(self._run_fast(conn, request.owner, fast, managed=managed,
                                        stamp=not request.defer_start))
        resources = dict(request.resources)
        for slot in guarded:
            jobs, block = self._run_guarded(conn, request.owner, slot, resources, managed=managed,
                                            stamp=not request.defer_start)
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
        stamp: bool,
    ) -> list[ClaimedJob]:
        params = self.fast_params(owner, slots, stamp=stamp)
        # Rows in the binary format: the client parses a claimed row in about two thirds
        # of the time it takes from text (timestamps and integers most of all; measured
        # on a 500-row claim), on the claim loop's thread, the drain's busiest.
        if managed and not conn.autocommit:
            with conn.transaction():
                rows = conn.execute(self._q["job_claim"], params, binary=True).fetchall()
        else:
            # Autocommit: the single statement is its own transaction (one round trip).
            rows = conn.execute(self._q["job_claim"], params, binary=True).fetchall()
        return [claimed(row) for row in rows]

    def _run_guarded(
        self,
        conn: psycopg.Connection[Any],
        owner: str,
        slot: TypeSlots,
        resources: dict[str, Resource],
        *,
        managed: bool,
        stamp: bool,
    ) -> tuple[list[ClaimedJob], ClaimBlock | None]:
        lock_params, params = self.guarded_params(owner, slot, resources, stamp=stamp)
        query = self._q.raw(guarded_statement(slot))
        rows = self._guarded_round(conn, lock_params, query, params, managed=managed)
        return self._guarded_outcome(slot, rows)

    def _guarded_outcome(
        self, slot: TypeSlots, rows: list[tuple[Any, ...]]
    ) -> tuple[list[ClaimedJob], ClaimBlock | None]:
        """The jobs a guarded claim statement leased, and why it got none (its gate row)."""
        if not rows:  # pragma: no cover - the statement always returns the gate row
            return [], None
        head = rows[0]
        if head[5] is not None:
            self._cursors[slot.type] = (head[5], head[6])
        if slot.serialize_by_scope or slot.grouped:
            window_rows, window_units = head[7], head[8]
            self._narrow[slot.type] = (
                window_rows >= _WINDOW_MIN and window_units < window_rows * _WINDOW_YIELD
            )
        jobs = [claimed(row, _GATE_COLUMNS) for row in rows if row[_GATE_COLUMNS] is not None]
        block = None if jobs else self._why_blocked(slot, head)
        return jobs, block

    def run_after_write(
        self,
        conn: psycopg.Connection[Any],
        write: tuple[bytes, dict[str, Any]],
        request: ClaimRequest,
        *,
        managed: bool,
    ) -> tuple[list[tuple[Any, ...]], ClaimBatch]:
        """A fenced write (statement and parameters), then the claim of ``request``'s first
        type with room, in one transaction: (the write's rows, the claim's batch).

        ``managed``: this call owns the transaction; with prepared statements BEGIN, the
        write, the claim (the guarded one's lock statement and claim statement, or the fast
        claim) and COMMIT travel in one pipeline. The write takes no advisory lock, so the
        transaction still takes one claim's locks and keeps the global lock order; the rows
        it locks are RUNNING ones this owner holds, which no claimer waits for (claimers
        lock PENDING rows, with SKIP LOCKED). Otherwise it runs in the caller's transaction.
        """
        statement, args = write
        fast, guarded = self.split(request)
        batch = ClaimBatch()
        if not managed:
            written = conn.execute(statement, args).fetchall()
            batch.extend(self.run(conn, request, managed=False))
            return written, batch
        if guarded:
            slot = guarded[0]
            lock_params, params = self.guarded_params(
                request.owner, slot, dict(request.resources), stamp=not request.defer_start
            )
            query = self._q.raw(guarded_statement(slot))
            cur = psycopg.RawCursor(conn)
            if self.prepare:
                with conn.pipeline(), conn.transaction():
                    wcur = conn.execute(statement, args)
                    conn.execute(self._q["claim_lock_exclusive_generic"], lock_params,
                                 prepare=True)
                    cur.execute(query.text, query.args(params), prepare=True)
                written = wcur.fetchall()
                rows = cur.fetchall()
            else:  # no pipeline behind a transaction pooler (see _guarded_round)
                with conn.transaction():
                    written = conn.execute(statement, args).fetchall()
                    conn.execute(self._q["claim_lock_exclusive_generic"], lock_params)
                    rows = cur.execute(query.text, query.args(params)).fetchall()
            jobs, block = self._guarded_outcome(slot, rows)
            batch.extend(jobs)
            if block is not None:
                batch.blocked[slot.type] = block
            return written, batch
        if fast:
            fast_params = self.fast_params(request.owner, fast[:1],
                                           stamp=not request.defer_start)
            if self.prepare:
                with conn.pipeline(), conn.transaction():
                    wcur = conn.execute(statement, args)
                    ccur = conn.execute(self._q["job_claim"], fast_params)
                written = wcur.fetchall()
                batch.extend(claimed(row) for row in ccur.fetchall())
            else:
                with conn.transaction():
                    written = conn.execute(statement, args).fetchall()
                    fast_rows = conn.execute(self._q["job_claim"], fast_params).fetchall()
                batch.extend(claimed(row) for row in fast_rows)
            return written, batch
        return conn.execute(statement, args).fetchall(), batch

    def _guarded_round(
        self,
        conn: psycopg.Connection[Any],
        lock_params: dict[str, Any],
        query: RawStatement,
        params: dict[str, Any],
        *,
        managed: bool,
    ) -> list[tuple[Any, ...]]:
        """One guarded claim: BEGIN, locks, claim, COMMIT in one pipeline (one round trip;
        four without prepared statements, see below)."""
        cur = psycopg.RawCursor(conn)
        if managed:
            # prepare=True: the claim is planned once per connection, not on each of the
            # first executions psycopg would otherwise leave unprepared (planning it takes
            # longer than running it, and claims rotate over every pooled connection).
            if self.prepare:
                with conn.pipeline(), conn.transaction():
                    conn.execute(self._q["claim_lock_exclusive_generic"], lock_params,
                                 prepare=True)
                    cur.execute(query.text, query.args(params), prepare=True)
                return cur.fetchall()
            # prepare=False: behind a transaction pooler (PgBouncer < 1.21). Nothing is
            # prepared (the connection's prepare_threshold is None), and no pipeline either:
            # PgBouncer 1.18 can lose count of a pipeline's Syncs and keep the server
            # connection linked to this client after COMMIT, so the next client of that
            # server waits until query_wait_timeout (measured; pgbouncer issue #759).
            with conn.transaction():
                conn.execute(self._q["claim_lock_exclusive_generic"], lock_params)
                return cur.execute(query.text, query.args(params)).fetchall()
        # The caller's transaction (a transactional handler runs in it): enable_sort goes
        # off for the claim only (see claim_plan_guard in claim.sql).
        conn.execute(self._q["claim_lock_exclusive"], lock_params)
        row = conn.execute(self._q["claim_plan_guard"]).fetchone()
        rows = cur.execute(query.text, query.args(params)).fetchall()
        conn.execute(self._q["claim_plan_restore"], {"was": row[0] if row else "on"})
        return rows

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
