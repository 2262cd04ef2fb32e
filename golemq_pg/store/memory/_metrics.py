"""The metrics verb of the in-memory store: ``metrics_type_gauges``.

Private to :mod:`golemq_pg.store.memory`; a base of :class:`InMemoryStore`, whose lock, jobs
table, paused types and worker registry it reads. Same semantics as
``sql/queries/metrics.sql``: backlog, running and waiting counts capped at ``cap`` (dead
letters exact: PostgreSQL reads them from the history's maintained counts), a type listed when
it has backlog, running, waiting or failed rows, is paused, or a live worker handles it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime

from golemq_pg._types import JobStatus, PausedType
from golemq_pg.store.memory._rows import JobTable
from golemq_pg.store.memory._workers import WorkerBook
from golemq_pg.store.port import TypeGauges

_PENDING, _SCHEDULED, _RUNNING, _FAILED = range(4)


class MetricsVerbs:
    """``metrics_type_gauges`` (see the module docstring)."""

    _lock: threading.Lock
    _jobs: JobTable
    _paused: dict[str, PausedType]
    _workers: WorkerBook
    _read_clock: Callable[[], datetime]

    def metrics_type_gauges(self, cap: int) -> list[TypeGauges]:
        """Per type, by name: capped counts, oldest due age, paused."""
        with self._lock:
            now = self._read_clock()
            counts: dict[str, list[int]] = {}
            oldest: dict[str, datetime] = {}
            for row in self._jobs.pending.values():
                slot = counts.setdefault(row.type, [0, 0, 0, 0])
                if row.run_at <= now:
                    slot[_PENDING] += 1
                    if row.type not in oldest or row.run_at < oldest[row.type]:
                        oldest[row.type] = row.run_at
                else:
                    slot[_SCHEDULED] += 1
            for row in self._jobs.running.values():
                # claimed, its handler not started: counted pending, as on PostgreSQL
                counts.setdefault(row.type, [0, 0, 0, 0])[
                    _RUNNING if row.started_at is not None else _PENDING] += 1
            for row in self._jobs.rows.values():
                if row.status is JobStatus.FAILED:
                    counts.setdefault(row.type, [0, 0, 0, 0])[_FAILED] += 1
            waiting: dict[str, int] = {}
            for row in self._jobs.waiting.values():
                waiting[row.type] = waiting.get(row.type, 0) + 1
                counts.setdefault(row.type, [0, 0, 0, 0])
            listed = set(counts) | set(self._paused)
            for worker in self._workers.rows.values():
                if not worker.lost(now):
                    listed.update(worker.beat.handlers)
            found: list[TypeGauges] = []
            for name in sorted(listed):
                pending, scheduled, running = (
                    min(n, cap) for n in counts.get(name, [0, 0, 0, 0])[:_FAILED]
                )
                failed = counts.get(name, [0, 0, 0, 0])[_FAILED]
                due = oldest.get(name)
                found.append(TypeGauges(
                    type=name, pending=pending, scheduled=scheduled, running=running,
                    failed=failed,
                    oldest_due_age=None if due is None else max((now - due).total_seconds(), 0.0),
                    paused=name in self._paused, waiting=min(waiting.get(name, 0), cap),
                ))
            return found


__all__ = ["MetricsVerbs"]
