-- golemq-pg 0013: an attempt budget can be unlimited (max_attempts=UNLIMITED), and a schedule
-- can have no budget of its own.
--
-- * jobs.max_attempts and jobs_history.max_attempts may be NULL: a job retried until it
--   succeeds, fails terminally or is cancelled. Their CHECK (max_attempts > 0) and jobs'
--   CHECK (attempts <= max_attempts) pass for NULL as they are. The DEFAULT 3 stays (a row
--   inserted without the column keeps the old budget). jobs_history is partitioned (by status,
--   then by day): DROP NOT NULL on the parent recurses into every partition, the DEFAULT ones
--   included, and the day partitions made later (history_ensure_partition: CREATE TABLE ...
--   LIKE the status's parent) copy the parent's nullability.
-- * schedules.max_attempts: NULL is unlimited too (every job of the schedule is), and 0 now
--   means "no budget of its own": each job a tick enqueues takes the default of whoever
--   enqueues it (the firing worker's default_max_attempts; for Queue.run_schedule_now the
--   queue's). Its CHECK (max_attempts > 0) becomes (max_attempts >= 0).
--
-- Each DROP NOT NULL is a catalog change (no scan, no rewrite) under a brief ACCESS EXCLUSIVE
-- lock; the migrator's lock_timeout keeps it from queueing the queue's writes behind a long
-- transaction. The schedules CHECK is validated in the same transaction: the table holds one
-- row per declared schedule (a handful), so the scan under the lock is short.
--
-- Rolling upgrade: workers of the release before cannot handle a NULL budget (nor a schedule
-- whose budget is 0: their tick's insert is refused by jobs' CHECK, and the tick is retried
-- on the next pass). Upgrade every worker before enqueueing with UNLIMITED or declaring a
-- schedule without max_attempts.

-- The clients that assumed a budget are this package's own (the rolling upgrade note above).
-- squawk-ignore ban-drop-not-null
ALTER TABLE jobs ALTER COLUMN max_attempts DROP NOT NULL;

-- squawk-ignore ban-drop-not-null
ALTER TABLE jobs_history ALTER COLUMN max_attempts DROP NOT NULL;

-- squawk-ignore ban-drop-not-null
ALTER TABLE schedules ALTER COLUMN max_attempts DROP NOT NULL;

-- Replaced at once by the looser check below (0 allowed), in the same transaction.
-- squawk-ignore ban-drop-constraint
ALTER TABLE schedules DROP CONSTRAINT schedules_max_attempts_check;

ALTER TABLE schedules
    ADD CONSTRAINT schedules_max_attempts_check CHECK (max_attempts >= 0) NOT VALID;

-- squawk-ignore constraint-missing-not-valid
ALTER TABLE schedules VALIDATE CONSTRAINT schedules_max_attempts_check;
