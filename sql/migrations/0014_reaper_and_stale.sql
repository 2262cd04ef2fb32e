-- golemq-pg 0014: the reaper says how long a lease went unwritten, keeps the previous handler
-- error of a job it dead-letters, never exhausts an unlimited budget, and takes stale leases
-- back on demand (queue.requeue_stale).
--
-- reclaim_leases() is 0012's reap_expired_leases() with four changes:
-- * It selects its rows one of two ways. With _older_than NULL (the reaper): RUNNING rows
--   whose lease expired, oldest expiry first, exactly as before (same statement, same plan
--   settings). With _older_than set (requeue_stale): RUNNING rows whose lease was last
--   written (claimed or renewed) at least _older_than seconds ago, of _types (NULL: every
--   type), read through jobs_lease_idx in expiry order. Either way at most _limit rows,
--   FOR UPDATE SKIP LOCKED, and the same outcome for each: due again now within budget,
--   dead-lettered past it, a superseded keyed job deleted. The lease owner is cleared and a
--   later claim bumps lease_token, so the old holder's late completion, failure, renewal or
--   progress is refused (every fenced write tests owner, token and status).
-- * A row's updated_at is when its lease was last written: on a RUNNING row only a claim and
--   a renewal write it (since this release a progress report no longer does: see
--   sql/queries/leases.sql, job_progress). Each row comes back with stuck_for, the seconds
--   from that write to now: the reclaimed Transition's stuck_for. No new column was needed.
-- * A dead letter's last_error keeps the previous handler error (the newest attempt in the
--   history written by a worker, i.e. with a worker_id; the reaper's own entries have none)
--   next to the lease expiry: "<exhausted text>; previous error: <error>", the previous error
--   cut to 300 characters (the length of an error text the worker writes). The attempt's own
--   history entry keeps the plain exhausted text. Each row comes back with the last_error
--   written, which the worker reports to its observers.
-- * max_attempts IS NULL (an unlimited budget) is never exhausted: the test was
--   `attempts >= max_attempts`, NULL for such a row, which matched neither the revive nor the
--   dead letter and left the row RUNNING with its expired lease for ever.
--
-- reap_expired_leases() keeps its signature and its result columns and now returns
-- reclaim_leases()'s rows (NULL-safe, keeping previous errors), so a worker of the release
-- before keeps reaping correctly during a rolling upgrade.

CREATE FUNCTION reclaim_leases(
    _limit int, _older_than float8, _types text[], _delete_types text[], _expired_error text,
    _exhausted_error text, _history int
) RETURNS TABLE (id bigint, type text, scope_type text, scope_id text, attempts int,
                 outcome text, lease_owner text, stuck_for float8, last_error text)
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
    SET plan_cache_mode = force_generic_plan
    SET enable_seqscan = off
    SET enable_bitmapscan = off
    SET enable_sort = off
    SET enable_nestloop = off
    SET enable_mergejoin = off
    SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    _ids bigint[];
BEGIN
    IF _older_than IS NULL THEN
        SELECT array_agg(x.id) INTO _ids
          FROM (SELECT j.id
                  FROM jobs j
                 WHERE j.status = 'running'
                   AND j.lease_expires_at < now()
                 ORDER BY j.lease_expires_at
                 LIMIT _limit
                   FOR UPDATE OF j SKIP LOCKED) x;
    ELSE
        SELECT array_agg(x.id) INTO _ids
          FROM (SELECT j.id
                  FROM jobs j
                 WHERE j.status = 'running'
                   AND j.updated_at <= now() - make_interval(secs => _older_than)
                   AND (_types IS NULL OR j.type = ANY (_types))
                 ORDER BY j.lease_expires_at
                 LIMIT _limit
                   FOR UPDATE OF j SKIP LOCKED) x;
    END IF;
    IF _ids IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH found AS MATERIALIZED (
        SELECT j.id, j.lease_owner,
               coalesce(j.attempts >= j.max_attempts, false) AS exhausted,
               greatest(extract(epoch FROM now() - j.updated_at), 0)::float8 AS stuck_for,
               -- one descent of jobs_dedupe_pending_uq per keyed row (OFFSET 0: never a
               -- hashed SubPlan reading every pending keyed job)
               (j.dedupe_key IS NOT NULL AND EXISTS (
                   SELECT 1 FROM jobs p
                    WHERE p.type = j.type AND p.dedupe_key = j.dedupe_key
                      AND p.status = 'pending'
                   OFFSET 0)) AS superseded,
               -- the newest attempt a worker recorded (at most _history entries to read)
               CASE WHEN coalesce(j.attempts >= j.max_attempts, false) THEN
                   (SELECT a.e ->> 'error'
                      FROM jsonb_array_elements(j.errors) WITH ORDINALITY AS a(e, n)
                     WHERE a.e ->> 'worker_id' IS NOT NULL
                       AND coalesce(a.e ->> 'error', '') <> ''
                     ORDER BY a.n DESC
                     LIMIT 1)
               END AS previous
          FROM jobs j
         WHERE j.id = ANY (_ids)
           AND j.status || '' = 'running'
    ),
    expired AS MATERIALIZED (
        SELECT f.id, f.lease_owner, f.exhausted, f.superseded, f.stuck_for,
               CASE WHEN NOT f.exhausted THEN _expired_error
                    WHEN f.previous IS NULL THEN _exhausted_error
                    ELSE _exhausted_error || '; previous error: ' || left(f.previous, 300)
               END AS error
          FROM found f
    ),
    dropped AS (
        DELETE FROM jobs j
         USING expired e
         WHERE j.id = ANY (_ids) AND j.id = e.id AND e.superseded AND NOT e.exhausted
        RETURNING j.id, j.type, j.scope_type, j.scope_id, j.attempts,
                  'reclaimed'::text AS outcome
    ),
    erased AS (
        DELETE FROM jobs j
         USING expired e
         WHERE j.id = ANY (_ids) AND j.id = e.id AND e.exhausted
           AND j.type = ANY (_delete_types)
        RETURNING j.id, j.type, j.scope_type, j.scope_id, j.attempts,
                  'failed-terminal'::text AS outcome
    ),
    revived AS (
        UPDATE jobs j
           SET status = 'pending',
               run_at = now(),
               last_error = _expired_error,
               errors = append_attempt_error(j.errors, j.attempts, _expired_error, NULL,
                                             _history, NULL, j.started_at),
               lease_owner = NULL,
               lease_expires_at = NULL,
               updated_at = now()
          FROM expired e
         WHERE j.id = ANY (_ids) AND j.id = e.id AND NOT e.exhausted AND NOT e.superseded
        RETURNING j.id, j.type, j.scope_type, j.scope_id, j.attempts,
                  'reclaimed'::text AS outcome
    ),
    buried AS (
        DELETE FROM jobs j
         USING expired e
         WHERE j.id = ANY (_ids) AND j.id = e.id AND e.exhausted
           AND NOT j.type = ANY (_delete_types)
        RETURNING j.*, e.error AS new_error
    ),
    dead AS (
        INSERT INTO jobs_history
        SELECT b.id, b.type, b.payload, b.scope_type, b.scope_id, 'failed', b.priority,
               b.run_at, b.attempts, b.max_attempts, b.new_error, b.dedupe_key, NULL,
               b.lease_token, NULL, b.schedule_key, b.progress, b.started_at, now(),
               b.created_at, now(), b.result,
               append_attempt_error(b.errors, b.attempts, _exhausted_error, NULL, _history, NULL,
                                    b.started_at),
               b.tags, b.trace_context
          FROM buried b
        RETURNING jobs_history.id, jobs_history.type, jobs_history.scope_type,
                  jobs_history.scope_id, jobs_history.attempts,
                  'failed-terminal'::text AS outcome
    ),
    done AS (
        SELECT * FROM dropped
        UNION ALL
        SELECT * FROM erased
        UNION ALL
        SELECT * FROM revived
        UNION ALL
        SELECT * FROM dead
    ),
    hint AS (
        SELECT notify_jobs_done(array_agg(d.id))
          FROM done d WHERE d.outcome = 'failed-terminal'
    )
    SELECT d.id, d.type, d.scope_type, d.scope_id, d.attempts, d.outcome, e.lease_owner,
           e.stuck_for, e.error
      FROM done d
      JOIN expired e ON e.id = d.id
     CROSS JOIN hint;
END
$$;

-- 0012's reaper, for workers of the release before: the same signature and result columns,
-- now reclaim_leases()'s selection by expiry and its outcomes.
CREATE OR REPLACE FUNCTION reap_expired_leases(
    _limit int, _delete_types text[], _expired_error text, _exhausted_error text,
    _history int
) RETURNS TABLE (id bigint, type text, scope_type text, scope_id text, attempts int,
                 outcome text, lease_owner text)
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY
    SELECT r.id, r.type, r.scope_type, r.scope_id, r.attempts, r.outcome, r.lease_owner
      FROM reclaim_leases(_limit, NULL, NULL, _delete_types, _expired_error,
                          _exhausted_error, _history) r;
END
$$;
