-- golemq-pg 0012: each failed attempt keeps when it started, so its duration can be shown.
--
-- The attempt history (`errors`, one entry per failed attempt: 0002, with "traceback" since
-- 0010) recorded when an attempt ended ("at") but not when it began: `jobs.started_at` is
-- overwritten by the next claim, so only the newest attempt's duration could be read. The
-- entry now keeps "started" (the row's started_at while the attempt held it: when it was
-- claimed); the dashboard's attempt timeline and `golemq-pg show` show each attempt's
-- duration from it (AttemptError.started_at). Entries written before this release have no
-- such key.
--
-- append_attempt_error gets a seven-argument form (with the start); the three writers that
-- record attempts are replaced under their own signatures, each the same statement as
-- before (0010's fail_jobs and retry_jobs, 0009's reap_expired_leases, with their planner
-- settings) passing the row's started_at: no signature changes, so workers of the release
-- before keep calling the same functions during a rolling upgrade and now record starts.
-- The six- and five-argument forms stay (entries without a start).

CREATE FUNCTION append_attempt_error(
    history jsonb, attempt integer, error text, worker_id text, keep integer, traceback text,
    started timestamptz
) RETURNS jsonb
    LANGUAGE sql STABLE
AS $$
    SELECT jsonb_agg(kept.e ORDER BY kept.n)
      FROM (SELECT a.e, a.n
              FROM jsonb_array_elements(
                       coalesce($1, '[]'::jsonb)
                       || jsonb_build_array(
                              jsonb_build_object('attempt', $2, 'at', now(),
                                                 'error', coalesce($3, ''), 'worker_id', $4)
                              || CASE WHEN $6 IS NULL THEN '{}'::jsonb
                                      ELSE jsonb_build_object('traceback', $6) END
                              || CASE WHEN $7 IS NULL THEN '{}'::jsonb
                                      ELSE jsonb_build_object('started', $7) END))
                   WITH ORDINALITY AS a(e, n)
             ORDER BY a.n DESC
             LIMIT greatest($5, 1)) AS kept
$$;

-- 0010's six-argument form: the same entry without a start.
CREATE OR REPLACE FUNCTION append_attempt_error(
    history jsonb, attempt integer, error text, worker_id text, keep integer, traceback text
) RETURNS jsonb
    LANGUAGE sql STABLE
AS $$
    SELECT append_attempt_error($1, $2, $3, $4, $5, $6, NULL::timestamptz)
$$;

-- 0010's fail_jobs, recording the attempt's start.
CREATE OR REPLACE FUNCTION fail_jobs(
    _owner text, _ids bigint[], _tokens bigint[], _errors text[], _tracebacks text[],
    _delete_types text[], _history int
) RETURNS SETOF bigint
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
    SET plan_cache_mode = force_generic_plan
    SET enable_seqscan = off
    SET enable_bitmapscan = off
    SET enable_nestloop = off
    SET enable_mergejoin = off
    SET jit = off
AS $$
BEGIN
    RETURN QUERY
    WITH held AS MATERIALIZED (
        SELECT j.id, t.error, t.traceback, j.type = ANY (_delete_types) AS remove
          FROM jobs j
          JOIN unnest(_ids, _tokens, _errors, _tracebacks) AS t(id, token, error, traceback)
               ON t.id = j.id
         WHERE j.id = ANY (_ids)
           AND j.lease_token = t.token
           AND j.lease_owner = _owner
           AND j.status || '' = 'running'
           FOR UPDATE OF j
    ),
    removed AS (
        DELETE FROM jobs j
         USING held h
         WHERE j.id = ANY (_ids) AND j.id = h.id AND h.remove
        RETURNING j.id
    ),
    gone AS (
        DELETE FROM jobs j
         USING held h
         WHERE j.id = ANY (_ids) AND j.id = h.id AND NOT h.remove
        RETURNING j.*, h.error AS new_error, h.traceback AS new_traceback
    ),
    failed AS (
        INSERT INTO jobs_history
        SELECT g.id, g.type, g.payload, g.scope_type, g.scope_id, 'failed', g.priority,
               g.run_at, g.attempts, g.max_attempts, g.new_error, g.dedupe_key, NULL,
               g.lease_token, NULL, g.schedule_key, g.progress, g.started_at, now(),
               g.created_at, now(), g.result,
               append_attempt_error(g.errors, g.attempts, g.new_error, g.lease_owner, _history,
                                    g.new_traceback, g.started_at),
               g.tags, g.trace_context
          FROM gone g
        RETURNING jobs_history.id
    ),
    finished AS (
        SELECT r.id FROM removed r
        UNION ALL
        SELECT f.id FROM failed f
    ),
    hint AS (
        SELECT notify_jobs_done(array_agg(f.id)) FROM finished f
    )
    SELECT f.id FROM finished f CROSS JOIN hint;
END
$$;

-- 0010's retry_jobs, recording the attempt's start.
CREATE OR REPLACE FUNCTION retry_jobs(
    _owner text, _ids bigint[], _tokens bigint[], _delays float8[], _errors text[],
    _tracebacks text[], _consume boolean[], _history int
) RETURNS SETOF bigint
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
    SET plan_cache_mode = force_generic_plan
    SET enable_seqscan = off
    SET enable_bitmapscan = off
    SET enable_nestloop = off
    SET enable_mergejoin = off
    SET jit = off
AS $$
BEGIN
    RETURN QUERY
    WITH held AS MATERIALIZED (
        SELECT j.id, t.delay, t.error, t.traceback, t.consume,
               (j.dedupe_key IS NOT NULL AND EXISTS (
                   SELECT 1 FROM jobs p
                    WHERE p.type = j.type AND p.dedupe_key = j.dedupe_key
                      AND p.status = 'pending'
                   OFFSET 0)) AS superseded
          FROM jobs j
          JOIN unnest(_ids, _tokens, _delays, _errors, _tracebacks, _consume)
               AS t(id, token, delay, error, traceback, consume) ON t.id = j.id
         WHERE j.id = ANY (_ids)
           AND j.lease_token = t.token
           AND j.lease_owner = _owner
           AND j.status || '' = 'running'
           FOR UPDATE OF j
    ),
    dropped AS (
        DELETE FROM jobs j
         USING held h
         WHERE j.id = ANY (_ids) AND j.id = h.id AND h.superseded
        RETURNING j.id
    ),
    moved AS (
        UPDATE jobs j
           SET status = 'pending',
               run_at = now() + make_interval(secs => h.delay),
               last_error = h.error,
               errors = append_attempt_error(j.errors, j.attempts, h.error, j.lease_owner,
                                             _history, h.traceback, j.started_at),
               attempts = CASE WHEN h.consume THEN j.attempts
                               ELSE greatest(j.attempts - 1, 0) END,
               lease_owner = NULL,
               lease_expires_at = NULL,
               updated_at = now()
          FROM held h
         WHERE j.id = ANY (_ids) AND j.id = h.id AND NOT h.superseded
        RETURNING j.id
    )
    SELECT d.id FROM dropped d
    UNION ALL
    SELECT m.id FROM moved m;
END
$$;

-- 0009's reaper, recording the start of the attempt whose lease expired.
CREATE OR REPLACE FUNCTION reap_expired_leases(
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
        RETURNING j.*
    ),
    dead AS (
        INSERT INTO jobs_history
        SELECT b.id, b.type, b.payload, b.scope_type, b.scope_id, 'failed', b.priority,
               b.run_at, b.attempts, b.max_attempts, _exhausted_error, b.dedupe_key, NULL,
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
    SELECT d.id, d.type, d.scope_type, d.scope_id, d.attempts, d.outcome, e.lease_owner
      FROM done d
      JOIN expired e ON e.id = d.id
     CROSS JOIN hint;
END
$$;
