-- golemq-pg 0009: the reaper as a function that reads expired leases by expiry whatever the
-- statistics say.
--
-- Why: the reaper's statement (sql/queries/leases.sql until this release) selected
-- `status = 'running' AND lease_expires_at < now() ORDER BY lease_expires_at LIMIT n`, which
-- two partial indexes can serve: jobs_lease_idx (lease_expires_at), in the order asked for,
-- and jobs_running_idx (type, scope), which then needs a sort. Once finished rows leave
-- `jobs` (0008) the table holds only the backlog, and after a VACUUM ANALYZE taken while
-- idle the statistics say no row runs: the planner then costs both walks at nothing and
-- picked jobs_running_idx, reading every running row and every dead entry the drain had left
-- in that index on every reaper pass (tests/integration/test_pg_plans.py caught it).
--
-- So, as the fenced writes of 0007 do, the reaper runs inside a function with its own
-- planner settings: sorting off, so only the index that gives the order by expiry is left
-- (no plan reads every running row to sort it); sequential and bitmap scans off; nested
-- loops and merge joins off, so the expired rows are paired with `jobs` by one hash join
-- over primary-key probes (`j.id = ANY(ids)`, an index condition); a generic plan, cached.
-- What it writes is the statement's: expired leases, oldest expiry first, at most _limit,
-- locked with SKIP LOCKED (a row whose holder is writing its outcome is left alone; the lock
-- re-checks status and expiry on the newest row version, so a job completed meanwhile is
-- never revived); within budget the job is due again now; past it, it moves into the
-- history as FAILED (0008), or is deleted for a type of _delete_types; a keyed job whose
-- key gained a PENDING replacement is deleted. Dead-lettered ids are announced on "done".

CREATE FUNCTION reap_expired_leases(
    _limit int, _delete_types text[], _expired_error text, _exhausted_error text,
    _history int
) RETURNS TABLE (id bigint, type text, scope_type text, scope_id text, attempts int,
                 outcome text, lease_owner text)
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
    SELECT array_agg(x.id) INTO _ids
      FROM (SELECT j.id
              FROM jobs j
             WHERE j.status = 'running'
               AND j.lease_expires_at < now()
             ORDER BY j.lease_expires_at
             LIMIT _limit
               FOR UPDATE OF j SKIP LOCKED) x;
    IF _ids IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH expired AS MATERIALIZED (
        SELECT j.id, j.lease_owner,
               j.attempts >= j.max_attempts AS exhausted,
               -- one descent of jobs_dedupe_pending_uq per keyed row (OFFSET 0: never a
               -- hashed SubPlan reading every pending keyed job)
               (j.dedupe_key IS NOT NULL AND EXISTS (
                   SELECT 1 FROM jobs p
                    WHERE p.type = j.type AND p.dedupe_key = j.dedupe_key
                      AND p.status = 'pending'
                   OFFSET 0)) AS superseded
          FROM jobs j
         WHERE j.id = ANY (_ids)
           AND j.status || '' = 'running'
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
                                             _history),
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
        RETURNING j.*
    ),
    dead AS (
        INSERT INTO jobs_history
        SELECT b.id, b.type, b.payload, b.scope_type, b.scope_id, 'failed', b.priority,
               b.run_at, b.attempts, b.max_attempts, _exhausted_error, b.dedupe_key, NULL,
               b.lease_token, NULL, b.schedule_key, b.progress, b.started_at, now(),
               b.created_at, now(), b.result,
               append_attempt_error(b.errors, b.attempts, _exhausted_error, NULL, _history),
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
    SELECT d.id, d.type, d.scope_type, d.scope_id, d.attempts, d.outcome, e.lease_owner
      FROM done d
      JOIN expired e ON e.id = d.id
     CROSS JOIN hint;
END
$$;
