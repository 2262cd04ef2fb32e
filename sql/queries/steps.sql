-- Durable steps (migration 0018): job.step(name, fn)'s stored values, one row per job and
-- step name in job_steps, beside the job (live in jobs or finished in jobs_history).


-- name: job_step_save
-- Fenced like every lease write: the holder's row is found by (id, lease_owner,
-- lease_token, status = 'running') and locked FOR SHARE, so a reaper, a requeue_stale or a
-- cancel cannot take the lease back between the check and the insert (they wait for this
-- statement, or skip the row); a stale attempt finds no row and inserts nothing. The first
-- write wins (ON CONFLICT DO NOTHING). Returns one row (the held job's id) when the lease is
-- held, whether this write stored the value or an earlier one was kept; none when it is not.
WITH held AS (
    SELECT j.id, j.attempts
      FROM {schema}.jobs j
     WHERE j.id = %(id)s::bigint
       AND j.lease_token = %(token)s::bigint
       AND j.lease_owner = %(owner)s::text
       AND j.status || '' = 'running'
       FOR SHARE
), saved AS (
    INSERT INTO {schema}.job_steps (job_id, name, value, attempt)
    SELECT h.id, %(name)s::text, %(value)s::jsonb, h.attempts
      FROM held h
    ON CONFLICT (job_id, name) DO NOTHING
    RETURNING job_id
)
SELECT h.id, (SELECT count(*) FROM saved) FROM held h


-- name: job_step_get
-- One job's steps as one JSON object (name -> value; NULL when it has none). Only while the
-- job exists (live or finished): a gone job's steps, left for the sweep, are not its.
SELECT jsonb_object_agg(s.name, s.value)::text
  FROM {schema}.job_steps s
 WHERE s.job_id = %(id)s::bigint
   AND (EXISTS (SELECT 1 FROM {schema}.jobs j WHERE j.id = %(id)s::bigint)
        OR EXISTS (SELECT 1 FROM {schema}.jobs_history h WHERE h.id = %(id)s::bigint))


-- name: job_step_get_many
-- The steps of several jobs (the summaries of a find or a wait), one JSON object per job
-- that has any: a descent of the primary key per id.
SELECT s.job_id, jsonb_object_agg(s.name, s.value)::text
  FROM {schema}.job_steps s
 WHERE s.job_id = ANY(%(ids)s::bigint[])
 GROUP BY s.job_id


-- name: job_step_reset
-- queue.retry(job_id, reset_steps=True): the revived job runs every step again.
DELETE FROM {schema}.job_steps s
 WHERE s.job_id = %(id)s::bigint


-- name: job_steps_sweep
-- The maintenance sweep: the steps of jobs that are gone for good (cancelled, pruned,
-- deleted on completion, dropped with a history partition), among the next `limit` job
-- ids after `after` that have steps (a walk of the primary key, so each pass is bounded and
-- a long run of live jobs cannot hide the orphans after it). One statement, one snapshot: a
-- job moving from jobs to jobs_history is seen on one side of the move or the other, never
-- neither. Returns how many rows were removed and the last id looked at (NULL: the walk
-- reached the end and starts again from the beginning).
WITH batch AS (
    SELECT DISTINCT s.job_id
      FROM {schema}.job_steps s
     WHERE s.job_id > %(after)s::bigint
     ORDER BY s.job_id
     LIMIT %(limit)s::int
), gone AS (
    SELECT b.job_id
      FROM batch b
     WHERE NOT EXISTS (SELECT 1 FROM {schema}.jobs j WHERE j.id = b.job_id)
       AND NOT EXISTS (SELECT 1 FROM {schema}.jobs_history h WHERE h.id = b.job_id)
), removed AS (
    DELETE FROM {schema}.job_steps s
     USING gone g
     WHERE s.job_id = g.job_id
    RETURNING 1
)
SELECT (SELECT count(*) FROM removed),
       CASE WHEN (SELECT count(*) FROM batch) < %(limit)s::int THEN NULL
            ELSE (SELECT max(b.job_id) FROM batch b) END
