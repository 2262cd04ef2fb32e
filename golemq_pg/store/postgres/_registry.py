"""The worker registry verbs of PostgresStore (statements in ``sql/queries/workers.sql``).

Each worker writes its row on its maintenance loop's heartbeat timer (one small upsert that
also sweeps long-lost rows), never on the claim/complete path. "Lost" is not stored: it is
read from the heartbeat's age against the database clock.
"""

from __future__ import annotations

from typing import Any

import orjson

from golemq_pg._types import WorkerState, WorkerSummary
from golemq_pg.store.port import LOST_AFTER_BEATS, LOST_SWEEP_SECONDS, WorkerBeat
from golemq_pg.store.postgres import _rows as rows
from golemq_pg.store.postgres._connections import StoreConnections, sync_verb
from golemq_pg.store.postgres._plans import Plan, PlanContext, Rows

_STATES: dict[str, WorkerState] = {"running": "running", "stopping": "stopping", "lost": "lost"}


def worker_list(ctx: PlanContext) -> Plan[list[WorkerSummary]]:
    """Every registered worker, by id, "lost" when its heartbeat is too old."""
    found = yield Rows(ctx.queries["worker_list"], {"lost_after": float(LOST_AFTER_BEATS)})
    return [
        WorkerSummary(
            worker_id=worker_id,
            host=host,
            pid=int(pid),
            started_at=started_at,
            last_seen_at=last_seen_at,
            handlers={str(k): int(v) for k, v in (rows.decode_json(handlers) or {}).items()},
            running=int(running),
            state=_STATES.get(state, "running"),
        )
        for worker_id, host, pid, started_at, last_seen_at, handlers, running, state in found
    ]


class RegistryVerbs(StoreConnections):
    """``worker_heartbeat``, ``worker_remove``, ``worker_list`` (a plan, shared with
    AsyncPostgresStore)."""

    def worker_heartbeat(self, beat: WorkerBeat) -> int:
        """Register or refresh a worker and sweep long-lost rows; returns how many were swept."""
        args: dict[str, Any] = {
            "worker_id": beat.worker_id,
            "host": beat.host,
            "pid": int(beat.pid),
            "handlers": rows.jsonb(orjson.dumps(dict(beat.handlers))),
            "running": max(int(beat.running), 0),
            "state": beat.state,
            "heartbeat_seconds": float(beat.heartbeat_seconds),
            "sweep_seconds": LOST_SWEEP_SECONDS,
            "lost_after": float(LOST_AFTER_BEATS),
        }
        return int(self._fetch("worker_heartbeat", args)[0][0])

    def worker_remove(self, worker_id: str) -> bool:
        """Drop a worker's row (its clean stop); True when it existed."""
        return bool(self._fetch("worker_remove", {"worker_id": worker_id}))

    worker_list = sync_verb(worker_list)
