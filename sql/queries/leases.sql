-- Leases: the batched writes of a lease holder, and the reaper.
--
-- Every write is fenced on (id, lease_owner, lease_token, status = 'running'): a worker that
-- lost its lease (reaped, cancelled, re-claimed by someone else) changes nothing, and each
-- statement returns the ids it actually wrote. Items arrive as parallel arrays unnested in
-- one statement, so a batch of N outcomes costs one round trip.


-- name: job_complete_many
-- The hot path: no result, nothing deleted. The ids that became SUCCEEDED are announced once
-- per statement on the "done" channel (notify_jobs_done in 0002; the hint queue.wait()
-- listens for). The "hint" CTE is joined so that it runs; it yields exactly one row. The ids
-- written come back as one comma-separated text (NULL: none), not a row each: the client
-- splits it at C speed instead of building a row per job (the completer's thread).
WITH done AS (
    UPDATE {schema}.jobs j
       SET status = 'succeeded',
           finished_at = now(),
           updated_at = now(),
           lease_owner = NULL,
           lease_expires_at = NULL
      FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS t(id, token)
     WHERE j.id = t.id
       AND j.lease_token = t.token
       AND j.lease_owner = %(owner)s::text
       AND j.status = 'running'
    RETURNING j.id
),
hint AS (
    SELECT {schema}.notify_jobs_done(array_agg(d.id)) FROM done d
)
SELECT (SELECT string_agg(d.id::text, ',') FROM done d) AS ids FROM hint


-- name: fragment_completion_items
-- The items of a completion storing results: id, fencing token and result (NULL: none).
-- One unnest of three arrays, the results' made once (an InitPlan) from the JSON array in
-- its order: a join of the two function scans on their ordinality made the planner expect
-- far more rows and hash-join them against a scan of the whole table (measured: a drain
-- storing results fell to a third of the drain without).
SELECT t.id, t.token, NULLIF(t.result, 'null'::jsonb) AS result
  FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[],
              ARRAY(SELECT r.value
                      FROM jsonb_array_elements(%(results)s::jsonb) WITH ORDINALITY
                           AS r(value, n)
                     ORDER BY r.n)) AS t(id, token, result)


-- name: job_complete_many_with_results
-- job_complete_many storing each item's result: used only when a batch carries a result and
-- no type of the worker deletes on success. The results come as ONE JSON array, item by
-- item in the order of the ids (null: no result), paired with the ids by position: a text[]
-- of a few hundred results cost the client several milliseconds to send, the array's text a
-- fraction of that (measured). Ids written come back as one comma-separated text, as in
-- job_complete_many.
WITH item AS (
    {fragment_completion_items}
),
done AS (
    UPDATE {schema}.jobs j
       SET status = 'succeeded',
           result = i.result,
           finished_at = now(),
           updated_at = now(),
           lease_owner = NULL,
           lease_expires_at = NULL
      FROM item i
     WHERE j.id = i.id
       AND j.lease_token = i.token
       AND j.lease_owner = %(owner)s::text
       AND j.status = 'running'
    RETURNING j.id
),
hint AS (
    SELECT {schema}.notify_jobs_done(array_agg(d.id)) FROM done d
)
SELECT (SELECT string_agg(d.id::text, ',') FROM done d) AS ids FROM hint


-- name: job_complete_many_deleting
-- RUNNING -> SUCCEEDED with each item's result (or NULL), except that the rows of a type in
-- delete_types (delete_on "success" or "always") are deleted instead of updated, under the
-- same fence: the held rows are locked first, so the delete and the update act on exactly
-- the fenced rows. Returns the ids written either way (one comma-separated text, as in
-- job_complete_many) and announces them once on "done". The results come as one JSON
-- array paired with the ids by position (fragment_completion_items).
WITH item AS (
    {fragment_completion_items}
),
held AS MATERIALIZED (
    SELECT j.id, i.result, j.type = ANY(%(delete_types)s::text[]) AS remove
      FROM {schema}.jobs j
      JOIN item i ON i.id = j.id
     WHERE j.lease_token = i.token
       AND j.lease_owner = %(owner)s::text
       AND j.status = 'running'
       FOR UPDATE OF j
),
removed AS (
    DELETE FROM {schema}.jobs j
     USING held h
     WHERE j.id = h.id AND h.remove
    RETURNING j.id
),
done AS (
    UPDATE {schema}.jobs j
       SET status = 'succeeded',
           result = h.result,
           finished_at = now(),
           updated_at = now(),
           lease_owner = NULL,
           lease_expires_at = NULL
      FROM held h
     WHERE j.id = h.id AND NOT h.remove
    RETURNING j.id
),
finished AS (
    SELECT r.id FROM removed r
    UNION ALL
    SELECT d.id FROM done d
),
hint AS (
    SELECT {schema}.notify_jobs_done(array_agg(f.id)) FROM finished f
)
SELECT (SELECT string_agg(f.id::text, ',') FROM finished f) AS ids FROM hint


-- name: job_fail_many
-- RUNNING -> FAILED (dead letter) with the last error, appended to the attempt history
-- (append_attempt_error in 0002, the newest %(history)s kept). Rows of a type in
-- delete_types (delete_on="always") are deleted instead, under the same fence. The ids
-- written either way are announced once on the "done" channel.
WITH item AS (
    SELECT t.id, t.token, t.error
      FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[], %(errors)s::text[])
           AS t(id, token, error)
),
held AS MATERIALIZED (
    SELECT j.id, i.error, j.type = ANY(%(delete_types)s::text[]) AS remove
      FROM {schema}.jobs j
      JOIN item i ON i.id = j.id
     WHERE j.lease_token = i.token
       AND j.lease_owner = %(owner)s::text
       AND j.status = 'running'
       FOR UPDATE OF j
),
removed AS (
    DELETE FROM {schema}.jobs j
     USING held h
     WHERE j.id = h.id AND h.remove
    RETURNING j.id
),
failed AS (
    UPDATE {schema}.jobs j
       SET status = 'failed',
           finished_at = now(),
           updated_at = now(),
           last_error = h.error,
           errors = {schema}.append_attempt_error(
               j.errors, j.attempts, h.error, j.lease_owner, %(history)s::int),
           lease_owner = NULL,
           lease_expires_at = NULL
      FROM held h
     WHERE j.id = h.id AND NOT h.remove
    RETURNING j.id
),
finished AS (
    SELECT r.id FROM removed r
    UNION ALL
    SELECT f.id FROM failed f
),
hint AS (
    SELECT {schema}.notify_jobs_done(array_agg(f.id)) FROM finished f
)
SELECT f.id FROM finished f CROSS JOIN hint


-- name: fragment_superseded
-- Whether a held keyed job (row "j") is superseded: its key gained a PENDING replacement
-- while it ran (on_duplicate="replace"). Such a job is deleted instead of going back to
-- PENDING, because the replacement carries the newer payload and the pending-only unique
-- index admits one PENDING job per key.
(j.dedupe_key IS NOT NULL AND EXISTS (
    SELECT 1 FROM {schema}.jobs p
     WHERE p.type = j.type AND p.dedupe_key = j.dedupe_key
       AND p.status = 'pending')) AS superseded


-- name: fragment_held_and_dropped
-- The rest of the "held" CTE of job_retry_many and job_release_many (which expect a CTE
-- "item" of ids and tokens), then the "dropped" CTE deleting the superseded rows. The held
-- rows are locked first (MATERIALIZED), so the delete and the update act on exactly the
-- fenced rows.
  FROM {schema}.jobs j
  JOIN item i ON i.id = j.id
 WHERE j.lease_token = i.token
   AND j.lease_owner = %(owner)s::text
   AND j.status = 'running'
   FOR UPDATE OF j
),
dropped AS (
    DELETE FROM {schema}.jobs j
     USING held h
     WHERE j.id = h.id AND h.superseded
    RETURNING j.id
),


-- name: job_retry_many
-- RUNNING -> PENDING after each item's delay (database clock); an attempt that should not
-- count (consume_attempt false) is refunded. A superseded keyed job is deleted instead
-- (fragment_superseded).
WITH item AS (
    SELECT t.id, t.token, t.delay, t.error, t.consume
      FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[], %(delays)s::float8[],
                  %(errors)s::text[], %(consume)s::boolean[])
           AS t(id, token, delay, error, consume)
),
held AS MATERIALIZED (
    SELECT j.id, i.delay, i.error, i.consume,
           {fragment_superseded}
      {fragment_held_and_dropped}
moved AS (
    UPDATE {schema}.jobs j
       SET status = 'pending',
           run_at = now() + make_interval(secs => h.delay),
           last_error = h.error,
           errors = {schema}.append_attempt_error(
               j.errors, j.attempts, h.error, j.lease_owner, %(history)s::int),
           attempts = CASE WHEN h.consume THEN j.attempts ELSE greatest(j.attempts - 1, 0) END,
           lease_owner = NULL,
           lease_expires_at = NULL,
           updated_at = now()
      FROM held h
     WHERE j.id = h.id AND NOT h.superseded
    RETURNING j.id
)
SELECT d.id FROM dropped d
UNION ALL
SELECT m.id FROM moved m


-- name: job_release_many
-- RUNNING -> PENDING, due now, attempt refunded: the job was claimed but never started
-- (shutdown, prefetch dropped). Superseded keyed jobs are deleted as in job_retry_many.
WITH item AS (
    SELECT t.id, t.token
      FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS t(id, token)
),
held AS MATERIALIZED (
    SELECT j.id,
           {fragment_superseded}
      {fragment_held_and_dropped}
moved AS (
    UPDATE {schema}.jobs j
       SET status = 'pending',
           run_at = now(),
           attempts = greatest(j.attempts - 1, 0),
           lease_owner = NULL,
           lease_expires_at = NULL,
           updated_at = now()
      FROM held h
     WHERE j.id = h.id AND NOT h.superseded
    RETURNING j.id
)
SELECT d.id FROM dropped d
UNION ALL
SELECT m.id FROM moved m


-- name: lease_renew
-- Only a lease that has not expired yet is extended: once expired, the reaper may already
-- own the row's future, and the holder must treat the lease as lost.
UPDATE {schema}.jobs j
   SET lease_expires_at = now() + make_interval(secs => %(seconds)s::float8),
       updated_at = now()
  FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS t(id, token)
 WHERE j.id = t.id
   AND j.lease_token = t.token
   AND j.lease_owner = %(owner)s::text
   AND j.status = 'running'
   AND j.lease_expires_at > now()
RETURNING j.id


-- name: lease_held
SELECT j.id
  FROM {schema}.jobs j
  JOIN unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS t(id, token) ON t.id = j.id
 WHERE j.lease_token = t.token
   AND j.lease_owner = %(owner)s::text
   AND j.status = 'running'


-- name: job_progress
UPDATE {schema}.jobs j
   SET progress = %(progress)s::jsonb,
       updated_at = now()
 WHERE j.id = %(id)s::bigint
   AND j.lease_token = %(token)s::bigint
   AND j.lease_owner = %(owner)s::text
   AND j.status = 'running'
RETURNING j.id


-- name: lease_recover_expired
-- The reaper. Expired RUNNING leases, oldest expiry first, bounded by the limit, locked with
-- SKIP LOCKED: a row whose holder is writing its outcome right now is left alone, and the
-- lock re-checks status and expiry on the newest row version, so a job that completed after
-- this statement's snapshot is never revived. The claim already counted the lost attempt:
-- within budget the job is due again now; past it, it is dead-lettered without running
-- again. A keyed job superseded by a PENDING replacement is deleted. The last_error texts
-- arrive as parameters (golemq_pg.store.port.LEASE_EXPIRED_ERROR / LEASE_EXHAUSTED_ERROR),
-- so the two stores and the worker share one definition of them. A dead-lettered job of a
-- type in delete_types (the reaping worker's handlers with delete_on "always") is deleted
-- instead of kept as FAILED, as its completion would have been; it is still reported as
-- failed-terminal and announced on the "done" channel.
WITH expired AS MATERIALIZED (
    SELECT j.id, j.lease_owner,
           j.attempts >= j.max_attempts AS exhausted,
           {fragment_superseded}
      FROM {schema}.jobs j
     WHERE j.status = 'running'
       AND j.lease_expires_at < now()
     ORDER BY j.lease_expires_at
     LIMIT %(limit)s::int
       FOR UPDATE SKIP LOCKED
),
dropped AS (
    DELETE FROM {schema}.jobs j
     USING expired e
     WHERE j.id = e.id AND e.superseded AND NOT e.exhausted
    RETURNING j.id, j.type, j.scope_type, j.scope_id, j.attempts, 'reclaimed'::text AS outcome
),
erased AS (
    DELETE FROM {schema}.jobs j
     USING expired e
     WHERE j.id = e.id AND e.exhausted AND j.type = ANY(%(delete_types)s::text[])
    RETURNING j.id, j.type, j.scope_type, j.scope_id, j.attempts,
              'failed-terminal'::text AS outcome
),
moved AS (
    UPDATE {schema}.jobs j
       SET status = CASE WHEN e.exhausted THEN 'failed' ELSE 'pending' END,
           run_at = CASE WHEN e.exhausted THEN j.run_at ELSE now() END,
           finished_at = CASE WHEN e.exhausted THEN now() END,
           last_error = CASE
               WHEN e.exhausted THEN %(exhausted_error)s::text
               ELSE %(expired_error)s::text END,
           errors = {schema}.append_attempt_error(
               j.errors, j.attempts,
               CASE WHEN e.exhausted THEN %(exhausted_error)s::text
                    ELSE %(expired_error)s::text END,
               NULL, %(history)s::int),
           lease_owner = NULL,
           lease_expires_at = NULL,
           updated_at = now()
      FROM expired e
     WHERE j.id = e.id AND NOT (e.superseded AND NOT e.exhausted)
       AND NOT (e.exhausted AND j.type = ANY(%(delete_types)s::text[]))
    RETURNING j.id, j.type, j.scope_type, j.scope_id, j.attempts,
              CASE WHEN e.exhausted THEN 'failed-terminal' ELSE 'reclaimed' END AS outcome
),
hint AS (
    SELECT {schema}.notify_jobs_done(array_agg(t.id))
      FROM (SELECT m.id FROM moved m WHERE m.outcome = 'failed-terminal'
            UNION ALL
            SELECT r.id FROM erased r) t
)
SELECT x.id, x.type, x.scope_type, x.scope_id, x.attempts, x.outcome, e.lease_owner
  FROM (SELECT * FROM dropped UNION ALL SELECT * FROM erased UNION ALL SELECT * FROM moved) x
  JOIN expired e ON e.id = x.id
 CROSS JOIN hint
