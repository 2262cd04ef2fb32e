-- Leases: the batched writes of a lease holder, and the reaper.
--
-- Every write is fenced on (id, lease_owner, lease_token, status = 'running'): a worker that
-- lost its lease (reaped, cancelled, re-claimed by someone else) changes nothing, and each
-- statement returns the ids it actually wrote. Items arrive as parallel arrays, so a batch of
-- N outcomes costs one round trip.
--
-- The writes given a list of ids run inside functions of migration 0007 (complete_jobs and
-- the others; fail_jobs and retry_jobs with a traceback per item since 0010; the finishing
-- writes with each item's handler start, %(started)s, since 0015: seconds before now(),
-- written where the row has no start yet), which plan with their own settings so that `jobs` is only ever read through
-- the primary key, one descent per id: a statement here was planned from the partial indexes
-- on running rows whenever the statistics said nothing ran (a VACUUM ANALYZE while idle),
-- and then read every running row and every dead entry of that index on each call. The
-- calls return the same rows as the statements they replace.


-- name: job_complete_many
-- The hot path: no result, nothing deleted. The ids that became SUCCEEDED are announced once
-- per statement on the "done" channel (notify_jobs_done in 0002; the hint queue.wait()
-- listens for). The ids written come back as one comma-separated text (NULL: none), not a
-- row each: the client splits it at C speed instead of building a row per job (the
-- completer's thread).
SELECT {schema}.complete_jobs(%(owner)s::text, %(ids)s::bigint[], %(tokens)s::bigint[],
                              %(started)s::float8[]) AS ids


-- name: job_complete_many_with_results
-- job_complete_many storing each item's result: used only when a batch carries a result and
-- no type of the worker deletes on success. The results come as ONE JSON array, item by
-- item in the order of the ids (null: no result), paired with the ids by position: a text[]
-- of a few hundred results cost the client several milliseconds to send, the array's text a
-- fraction of that (measured).
SELECT {schema}.complete_jobs_with_results(
           %(owner)s::text, %(ids)s::bigint[], %(tokens)s::bigint[], %(results)s::jsonb,
           %(started)s::float8[]) AS ids


-- name: job_complete_many_deleting
-- RUNNING -> SUCCEEDED with each item's result (or NULL), except that the rows of a type in
-- delete_types (delete_on "success" or "always") are deleted instead of updated, under the
-- same fence. Returns the ids written either way (one comma-separated text).
SELECT {schema}.complete_jobs_deleting(
           %(owner)s::text, %(ids)s::bigint[], %(tokens)s::bigint[], %(results)s::jsonb,
           %(delete_types)s::text[], %(started)s::float8[]) AS ids


-- name: job_fail_many
-- RUNNING -> FAILED (dead letter) with the last error, appended to the attempt history with
-- each item's traceback (append_attempt_error and fail_jobs of 0010, the newest %(history)s
-- kept). Rows of a type in delete_types (delete_on="always") are deleted instead, under the
-- same fence. The ids written either way are announced once on the "done" channel.
SELECT f.id
  FROM {schema}.fail_jobs(%(owner)s::text, %(ids)s::bigint[], %(tokens)s::bigint[],
                          %(errors)s::text[], %(tracebacks)s::text[],
                          %(delete_types)s::text[], %(history)s::int,
                          %(started)s::float8[]) AS f(id)


-- name: job_retry_many
-- RUNNING -> PENDING after each item's delay (database clock); an attempt that should not
-- count (consume_attempt false) is refunded. A superseded keyed job (its key gained a
-- PENDING replacement while it ran) is deleted instead. Each attempt is appended to the
-- history with its traceback (retry_jobs of 0010).
SELECT r.id
  FROM {schema}.retry_jobs(%(owner)s::text, %(ids)s::bigint[], %(tokens)s::bigint[],
                           %(delays)s::float8[], %(errors)s::text[], %(tracebacks)s::text[],
                           %(consume)s::boolean[], %(history)s::int,
                           %(started)s::float8[]) AS r(id)


-- name: job_release_many
-- RUNNING -> PENDING, due now, attempt refunded: the job was claimed but never started
-- (shutdown, prefetch dropped). Superseded keyed jobs are deleted as in job_retry_many.
SELECT r.id
  FROM {schema}.release_jobs(%(owner)s::text, %(ids)s::bigint[], %(tokens)s::bigint[])
       AS r(id)


-- name: lease_renew
-- Only a lease that has not expired yet is extended: once expired, the reaper may already
-- own the row's future, and the holder must treat the lease as lost.
SELECT r.id
  FROM {schema}.renew_leases(%(owner)s::text, %(ids)s::bigint[], %(tokens)s::bigint[],
                             %(seconds)s::float8) AS r(id)


-- name: job_mark_started
-- The handler starts of jobs still running (mark_jobs_started of 0015): each item's start,
-- seconds before now(), written to a held row that has none (claimed, not started until
-- now it is reported PENDING). Returns the ids written.
SELECT m.id
  FROM {schema}.mark_jobs_started(%(owner)s::text, %(ids)s::bigint[], %(tokens)s::bigint[],
                                  %(started)s::float8[]) AS m(id)


-- name: lease_held
SELECT h.id
  FROM {schema}.held_leases(%(owner)s::text, %(ids)s::bigint[], %(tokens)s::bigint[]) AS h(id)


-- name: job_progress
-- One id: its primary-key descent is the only index the fence leaves (the status test is an
-- expression no partial index on running rows can serve, as in the functions of 0007).
-- updated_at is left alone: on a RUNNING row it is when the lease was last written (claimed
-- or renewed), which the reaper and requeue_stale read (migration 0014).
UPDATE {schema}.jobs j
   SET progress = %(progress)s::jsonb
 WHERE j.id = %(id)s::bigint
   AND j.lease_token = %(token)s::bigint
   AND j.lease_owner = %(owner)s::text
   AND j.status || '' = 'running'
RETURNING j.id


-- name: lease_recover_expired
-- The reaper: reclaim_leases() of migration 0014 (0012's reaper, NULL-safe for unlimited
-- budgets; its header says what it writes and why it is a function). Expired RUNNING
-- leases, oldest expiry first, at most the limit, SKIP LOCKED: within budget due again now,
-- past it dead-lettered into the history (deleted for a type in delete_types, still
-- reported failed-terminal and announced on "done"); a keyed job superseded by a PENDING
-- replacement deleted. The last_error texts arrive as parameters
-- (golemq_pg.store.port.LEASE_EXPIRED_ERROR / LEASE_EXHAUSTED_ERROR), so the two stores and
-- the worker share one definition of them. Each row also says how long its lease went
-- unwritten (stuck_for) and the last_error written (a dead letter's keeps the previous
-- handler error).
SELECT r.id, r.type, r.scope_type, r.scope_id, r.attempts, r.outcome, r.lease_owner,
       r.stuck_for, r.last_error
  FROM {schema}.reclaim_leases(%(limit)s::int, NULL::float8, NULL::text[],
                               %(delete_types)s::text[], %(expired_error)s::text,
                               %(exhausted_error)s::text, %(history)s::int) r


-- name: lease_requeue_stale
-- queue.requeue_stale: the reaper's outcomes (reclaim_leases() of migration 0014) for RUNNING
-- jobs whose lease was last written (claimed or renewed: updated_at) at least older_than
-- seconds ago, expired or not, of the given types (NULL: all), at most the limit per call.
SELECT r.id, r.type, r.scope_type, r.scope_id, r.attempts, r.outcome, r.lease_owner,
       r.stuck_for, r.last_error
  FROM {schema}.reclaim_leases(%(limit)s::int, %(older_than)s::float8, %(types)s::text[],
                               %(delete_types)s::text[], %(expired_error)s::text,
                               %(exhausted_error)s::text, %(history)s::int) r
