-- Schedules: keyed recurring jobs. Any number of processes may declare the same key and run
-- the scheduler; row locks (FOR UPDATE SKIP LOCKED) plus advancing next_run_at in the same
-- transaction make exactly one job per due tick.


-- name: schedule_upsert
-- Redeclaring a key updates its definition; next_run_at is recomputed only when the timing
-- (cron, interval, timezone, repeat_from) changed, so restarting N processes that declare
-- the same schedule neither skips nor repeats a tick.
INSERT INTO {schema}.schedules AS s (key, type, payload, scope_type, scope_id, priority,
                                     max_attempts, cron, every_seconds, timezone,
                                     repeat_from, next_run_at)
VALUES (%(key)s::text, %(type)s::text, %(payload)s::jsonb, %(scope_type)s::text,
        %(scope_id)s::text, %(priority)s::int, %(max_attempts)s::int, %(cron)s::text,
        %(every_seconds)s::float8, %(timezone)s::text, %(repeat_from)s::text,
        coalesce(%(first_run_at)s::timestamptz, now()))
ON CONFLICT (key) DO UPDATE
   SET type = EXCLUDED.type,
       payload = EXCLUDED.payload,
       scope_type = EXCLUDED.scope_type,
       scope_id = EXCLUDED.scope_id,
       priority = EXCLUDED.priority,
       max_attempts = EXCLUDED.max_attempts,
       cron = EXCLUDED.cron,
       every_seconds = EXCLUDED.every_seconds,
       timezone = EXCLUDED.timezone,
       repeat_from = EXCLUDED.repeat_from,
       next_run_at = CASE
           WHEN (s.cron, s.every_seconds, s.timezone, s.repeat_from)
                IS DISTINCT FROM
                (EXCLUDED.cron, EXCLUDED.every_seconds, EXCLUDED.timezone,
                 EXCLUDED.repeat_from)
           THEN EXCLUDED.next_run_at
           ELSE s.next_run_at END,
       updated_at = now()


-- name: schedule_delete
DELETE FROM {schema}.schedules s WHERE s.key = %(key)s::text RETURNING s.key


-- name: schedule_list
SELECT s.key, s.type, s.cron, s.every_seconds, s.timezone, s.repeat_from, s.next_run_at,
       s.last_run_at, s.paused_at IS NOT NULL
  FROM {schema}.schedules s
 ORDER BY s.key


-- name: schedule_resume_finished
-- repeat_from="finished": a schedule whose tick left next_run_at NULL waits for the job it
-- produced; once that job is finished (succeeded or failed) the next run is its finish
-- time plus the interval; once it is gone (cancelled, pruned) the schedule is due now.
WITH waiting AS MATERIALIZED (
    SELECT s.key
      FROM {schema}.schedules s
     WHERE s.next_run_at IS NULL
       AND s.every_seconds IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM {schema}.jobs j
                        WHERE j.id = s.last_job_id AND j.status IN ('pending', 'running'))
       FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.schedules s
   SET next_run_at = coalesce((SELECT j.finished_at + make_interval(secs => s.every_seconds)
                                 FROM {schema}.jobs_all j
                                WHERE j.id = s.last_job_id), now()),
       updated_at = now()
  FROM waiting w
 WHERE s.key = w.key AND s.next_run_at IS NULL
RETURNING s.key


-- name: schedule_claim_due
-- Due schedules, locked for this transaction; another scheduler skips them, and after this
-- one commits the advanced next_run_at no longer matches. Paused schedules (0011) wait.
SELECT s.key, s.type, s.cron, s.every_seconds, s.timezone, s.repeat_from, s.next_run_at,
       now() AS db_now
  FROM {schema}.schedules s
 WHERE s.next_run_at <= now()
   AND s.paused_at IS NULL
 ORDER BY s.next_run_at
 LIMIT %(limit)s::int
   FOR UPDATE SKIP LOCKED


-- name: schedule_fire
-- One job per claimed schedule, and the schedule advanced to its next tick (NULL: wait for
-- the job to finish), in one statement. The job's run_at is the tick it stands for (the
-- schedule's next_run_at as this statement's snapshot sees it: at or before now()), so the
-- jobs of a schedule carry its exact cadence whichever worker fired them, and when.
WITH fire AS (
    SELECT f.key, f.next_run_at
      FROM unnest(%(keys)s::text[], %(next_run_ats)s::timestamptz[]) AS f(key, next_run_at)
),
ins AS (
    INSERT INTO {schema}.jobs (type, payload, scope_type, scope_id, priority, max_attempts,
                               schedule_key, run_at)
    SELECT s.type, s.payload, s.scope_type, s.scope_id, s.priority,
           -- 0: no budget of its own, the enqueuer's default (NULL: unlimited; 0013)
           CASE WHEN s.max_attempts = 0 THEN %(default_max_attempts)s::int
                ELSE s.max_attempts END,
           s.key,
           least(s.next_run_at, now())
      FROM {schema}.schedules s
      JOIN fire f ON f.key = s.key
    RETURNING id, schedule_key
),
advanced AS (
    UPDATE {schema}.schedules s
       SET next_run_at = f.next_run_at,
           last_run_at = now(),
           last_job_id = i.id,
           updated_at = now()
      FROM fire f
      JOIN ins i ON i.schedule_key = f.key
     WHERE s.key = f.key
)
SELECT i.id FROM ins i


-- name: schedule_pause
-- Pause a schedule (0011): the scheduler fires none of its ticks until it is resumed.
-- Pausing a paused schedule keeps its paused_at. No row: the key is unknown.
UPDATE {schema}.schedules s
   SET paused_at = coalesce(s.paused_at, now()), updated_at = now()
 WHERE s.key = %(key)s::text
RETURNING s.key


-- name: schedule_lock
-- The schedule to resume, locked until the resume commits (a scheduler pass skips it
-- meanwhile), with what the next-tick rule needs and the database's now().
SELECT s.key, s.type, s.cron, s.every_seconds, s.timezone, s.repeat_from, s.next_run_at,
       now() AS db_now, s.paused_at IS NOT NULL
  FROM {schema}.schedules s
 WHERE s.key = %(key)s::text
   FOR UPDATE


-- name: schedule_resume
-- Resume a locked schedule with the pending tick the store computed (NULL: wait for the
-- last job to finish, as repeat_from="finished" does).
UPDATE {schema}.schedules s
   SET paused_at = NULL,
       next_run_at = %(next_run_at)s::timestamptz,
       updated_at = now()
 WHERE s.key = %(key)s::text


-- name: schedule_run_now
-- One job of the schedule now, enqueued as a tick enqueues it (schedule_fire), paused or
-- not; the schedule's own cadence is kept. A repeat_from="finished" schedule then waits for
-- this job to finish before its next tick (next_run_at NULL, schedule_resume_finished), so
-- it does not fire again right behind it. The row lock (FOR UPDATE) serialises it with a
-- scheduler firing the same schedule. No row: the key is unknown.
WITH target AS MATERIALIZED (
    SELECT s.key FROM {schema}.schedules s WHERE s.key = %(key)s::text FOR UPDATE
),
ins AS (
    INSERT INTO {schema}.jobs (type, payload, scope_type, scope_id, priority, max_attempts,
                               schedule_key, run_at)
    SELECT s.type, s.payload, s.scope_type, s.scope_id, s.priority,
           -- 0: no budget of its own, the enqueuer's default (NULL: unlimited; 0013)
           CASE WHEN s.max_attempts = 0 THEN %(default_max_attempts)s::int
                ELSE s.max_attempts END,
           s.key,
           now()
      FROM {schema}.schedules s
      JOIN target t ON t.key = s.key
    RETURNING id, schedule_key
),
advanced AS (
    UPDATE {schema}.schedules s
       SET next_run_at = CASE WHEN s.repeat_from = 'finished' AND s.every_seconds IS NOT NULL
                              THEN NULL ELSE s.next_run_at END,
           last_run_at = now(),
           last_job_id = i.id,
           updated_at = now()
      FROM ins i
     WHERE s.key = i.schedule_key
)
SELECT i.id FROM ins i
