"""The worker registry of the in-memory store: the ``workers`` table and its verbs.

Private to :mod:`golemq_pg.store.memory`. Same semantics as ``sql/queries/workers.sql``: a
heartbeat is an upsert stamped with the store's clock that also sweeps rows of workers lost
for longer than ``LOST_SWEEP_SECONDS``; "lost" is derived at read time.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime, timedelta

from golemq_pg._types import WorkerSummary
from golemq_pg.store.port import LOST_AFTER_BEATS, LOST_SWEEP_SECONDS, WorkerBeat


@dataclass(slots=True)
class WorkerRow:
    """One registered worker, as the ``workers`` table stores it."""

    beat: WorkerBeat
    started_at: datetime
    last_seen_at: datetime

    def lost(self, now: datetime) -> bool:
        """Whether the heartbeat is older than ``LOST_AFTER_BEATS`` intervals."""
        limit = timedelta(seconds=LOST_AFTER_BEATS * self.beat.heartbeat_seconds)
        return self.last_seen_at < now - limit

    def summary(self, now: datetime) -> WorkerSummary:
        """The row as ``queue.workers()`` shows it at ``now``."""
        beat = self.beat
        return WorkerSummary(
            worker_id=beat.worker_id,
            host=beat.host,
            pid=beat.pid,
            started_at=self.started_at,
            last_seen_at=self.last_seen_at,
            handlers=dict(beat.handlers),
            running=beat.running,
            state="lost" if self.lost(now) else beat.state,
        )


class WorkerBook:
    """The registry rows, by worker id (the store's lock guards it)."""

    def __init__(self) -> None:
        self.rows: dict[str, WorkerRow] = {}

    def beat(self, beat: WorkerBeat, now: datetime) -> int:
        """Upsert ``beat`` at ``now``; sweep long-lost rows; returns how many were swept."""
        sweep_before = now - timedelta(seconds=LOST_SWEEP_SECONDS)
        swept = [
            key for key, row in self.rows.items()
            if key != beat.worker_id and row.last_seen_at < sweep_before and row.lost(now)
        ]
        for key in swept:
            del self.rows[key]
        stored = WorkerBeat(
            worker_id=beat.worker_id, host=beat.host, pid=int(beat.pid),
            handlers=dict(beat.handlers), heartbeat_seconds=float(beat.heartbeat_seconds),
            running=max(int(beat.running), 0), state=beat.state,
        )
        row = self.rows.get(beat.worker_id)
        if row is None:
            self.rows[beat.worker_id] = WorkerRow(stored, started_at=now, last_seen_at=now)
        else:
            row.beat = stored
            row.last_seen_at = now
        return len(swept)


class RegistryVerbs:
    """``worker_heartbeat``, ``worker_remove``, ``worker_list`` of the InMemoryStore."""

    _lock: threading.Lock
    _workers: WorkerBook

    def _read_clock(self) -> datetime:
        raise NotImplementedError

    def worker_heartbeat(self, beat: WorkerBeat) -> int:
        """Register or refresh a worker and sweep long-lost rows; returns how many were swept."""
        with self._lock:
            return self._workers.beat(beat, self._read_clock())

    def worker_remove(self, worker_id: str) -> bool:
        """Drop a worker's row (its clean stop); True when it existed."""
        with self._lock:
            return self._workers.rows.pop(worker_id, None) is not None

    def worker_list(self) -> list[WorkerSummary]:
        """Every registered worker, by id, "lost" when its heartbeat is too old."""
        with self._lock:
            now = self._read_clock()
            return [self._workers.rows[key].summary(now) for key in sorted(self._workers.rows)]
