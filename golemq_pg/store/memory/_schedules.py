"""Recurring schedules of the in-memory store (the ``schedules`` table and its statements).

Private to :mod:`golemq_pg.store.memory`, always called with the store's lock held.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from golemq_pg._types import JobStatus, ScheduleSummary
from golemq_pg.store.memory._rows import JobTable, ScheduleRow
from golemq_pg.store.port import DueSchedule, NextTick, ScheduleParams


class ScheduleBook:
    """Schedules by key, with the upsert, resume and due-selection rules of PostgreSQL."""

    def __init__(self) -> None:
        self._rows: dict[str, ScheduleRow] = {}

    def get(self, key: str) -> ScheduleRow | None:
        """The schedule with this key, if any."""
        return self._rows.get(key)

    def upsert(self, params: ScheduleParams, now: datetime) -> None:
        """Create or update by key.

        An update keeps the pending tick unless the timing (cron, every, timezone,
        repeat_from) changed, so N processes declaring one schedule at start-up neither
        skip nor repeat a tick.
        """
        first = params.first_run_at.astimezone(UTC) if params.first_run_at else now
        existing = self._rows.get(params.key)
        if existing is None:
            self._rows[params.key] = ScheduleRow(
                key=params.key,
                type=params.type,
                payload=bytes(params.payload),
                scope=params.scope,
                priority=params.priority,
                max_attempts=params.max_attempts,
                cron=params.cron,
                every_seconds=params.every_seconds,
                timezone=params.timezone,
                repeat_from=params.repeat_from,
                next_run_at=first,
                created_at=now,
                updated_at=now,
            )
            return
        old_timing = (existing.cron, existing.every_seconds, existing.timezone)
        new_timing = (params.cron, params.every_seconds, params.timezone)
        retimed = (*old_timing, existing.repeat_from) != (*new_timing, params.repeat_from)
        existing.type = params.type
        existing.payload = bytes(params.payload)
        existing.scope = params.scope
        existing.priority = params.priority
        existing.max_attempts = params.max_attempts
        existing.cron, existing.every_seconds, existing.timezone = new_timing
        existing.repeat_from = params.repeat_from
        if retimed:
            existing.next_run_at = first
        existing.updated_at = now

    def delete(self, key: str) -> bool:
        """Remove a schedule; True when it existed."""
        return self._rows.pop(key, None) is not None

    def pause(self, key: str, now: datetime) -> bool:
        """Pause a schedule (a paused one keeps its ``paused_at``); False: unknown key."""
        schedule = self._rows.get(key)
        if schedule is None:
            return False
        if schedule.paused_at is None:
            schedule.paused_at = now
        schedule.updated_at = now
        return True

    def resume(self, key: str, next_tick: NextTick, now: datetime) -> bool:
        """Resume a paused schedule; a tick that passed during the pause is replaced by
        ``next_tick``'s. False: unknown key."""
        schedule = self._rows.get(key)
        if schedule is None:
            return False
        if schedule.paused_at is None:
            return True
        following = schedule.next_run_at
        if following is not None and following <= now:
            following = next_tick(self.tick(schedule), now)
        schedule.next_run_at = None if following is None else following.astimezone(UTC)
        schedule.paused_at = None
        schedule.updated_at = now
        return True

    @staticmethod
    def ran_now(schedule: ScheduleRow, job_id: int, now: datetime) -> None:
        """Record a job enqueued by run-now: the cadence is kept, but a ``finished``
        schedule waits for this job to finish before its next tick."""
        if schedule.repeat_from == "finished" and schedule.every_seconds is not None:
            schedule.next_run_at = None
        schedule.last_run_at = now
        schedule.last_job_id = job_id
        schedule.updated_at = now

    def summaries(self) -> list[ScheduleSummary]:
        """Every schedule, by key."""
        return [self._rows[key].summary() for key in sorted(self._rows)]

    def resume_finished(self, jobs: JobTable, now: datetime) -> None:
        """Give a tick back to schedules waiting for their last job (repeat_from finished).

        Once that job is finished (succeeded or failed) the next run is its finish time plus
        the interval; once it is gone (cancelled, pruned) the schedule is due now.
        """
        for schedule in self._rows.values():
            if schedule.next_run_at is not None or schedule.every_seconds is None:
                continue
            job = None if schedule.last_job_id is None else jobs.rows.get(schedule.last_job_id)
            if job is not None and job.status in (JobStatus.PENDING, JobStatus.RUNNING):
                continue
            if job is not None and job.finished_at is not None:
                schedule.next_run_at = job.finished_at + timedelta(seconds=schedule.every_seconds)
            else:
                schedule.next_run_at = now
            schedule.updated_at = now

    def due(self, now: datetime, limit: int) -> list[ScheduleRow]:
        """Schedules whose tick is due, earliest first, at most ``limit``."""
        ready = [
            s for s in self._rows.values() if s.next_run_at is not None and s.paused_at is None
        ]
        ready = [s for s in ready if s.next_run_at is not None and s.next_run_at <= now]
        ready.sort(key=lambda s: (s.next_run_at or now, s.key))
        return ready[: max(limit, 0)]

    @staticmethod
    def tick(schedule: ScheduleRow) -> DueSchedule:
        """What the scheduler's next-tick function is told about a due schedule."""
        assert schedule.next_run_at is not None  # noqa: S101 - only due schedules get here
        return DueSchedule(
            key=schedule.key,
            type=schedule.type,
            cron=schedule.cron,
            every_seconds=schedule.every_seconds,
            timezone=schedule.timezone,
            repeat_from=schedule.repeat_from,
            next_run_at=schedule.next_run_at,
        )

    @staticmethod
    def advance(
        schedule: ScheduleRow, job_id: int, following: datetime | None, now: datetime
    ) -> None:
        """Record a fired tick: the job it produced and the next tick (None: wait)."""
        schedule.next_run_at = None if following is None else following.astimezone(UTC)
        schedule.last_run_at = now
        schedule.last_job_id = job_id
        schedule.updated_at = now
