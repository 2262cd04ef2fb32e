-- golemq-pg 0011: a schedule can be paused (Queue.pause_schedule / resume_schedule).
--
-- paused_at is NULL for a running schedule and the time of the pause for a paused one.
-- The scheduler (schedule_claim_due in sql/queries/schedules.sql) skips paused schedules;
-- Queue.run_schedule_now still enqueues one job for them. Resuming clears paused_at and,
-- when the schedule's pending tick passed during the pause, moves it to the next tick after
-- now (one tick, never a burst of the missed ones).
--
-- A nullable column with no default: a catalog-only change, no table rewrite; the ACCESS
-- EXCLUSIVE lock it takes lasts only as long as the catalog update (the migrator's
-- lock_timeout keeps it from queueing the scheduler behind a long transaction, and retries).
--
-- Rolling upgrade: workers of the release before do not read paused_at, so until they are
-- gone they may still fire a paused schedule's ticks.

ALTER TABLE schedules ADD COLUMN paused_at timestamptz;
