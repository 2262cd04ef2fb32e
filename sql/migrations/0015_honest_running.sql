-- golemq-pg 0015: honest running. A job claimed ahead of a free handler thread is not
-- running yet, and `started_at` is when its handler started.
--
-- Until this release every claim stamped `started_at = now()`, so a job a worker leased
-- into its in-process buffer (prefetch) was shown and counted as RUNNING, with a start
-- minutes before its handler began (seen with concurrency=2 and 30 s jobs: four "running",
-- two of them waiting). Now the worker's claims leave `started_at` NULL and the status
-- 'running' (so guards, fencing, the reaper and cancel treat the leased row as before);
-- every reader reports a running row without a start as PENDING. The start is written by
-- the worker when the handler begins: for jobs still running a moment later by one batched,
-- fenced statement (mark_jobs_started), and for jobs that finish sooner by the write that
-- finishes them, which carries it (no extra statement for fast jobs).
--
-- New forms, beside the old ones (a rolling upgrade keeps calling those, unchanged: an older
-- worker's claims still stamp the start at the claim):
--  * claim_jobs(..., stamp): 0006's claim; `stamp` false leaves started_at NULL (a
--    transactional handler's claim, which starts at once, stamps it). waited is now from
--    now() (the claim's time) instead of the new started_at.
--  * complete_jobs, complete_jobs_with_results, complete_jobs_deleting (0008), fail_jobs and
--    retry_jobs (0012) with `_started`: per item, how many seconds before now() its handler
--    started (NULL, or a NULL array: unknown). A row's own started_at wins (written by
--    mark_jobs_started already); otherwise the item's start is written, to the history row,
--    the attempt's history entry ("started") and, on a retry, the row.
--  * mark_jobs_started: the batched "started" write of jobs still running, fenced like
--    every lease write, writing only rows without a start.

-- 0006's claim with the stamp choice.
CREATE FUNCTION claim_jobs(
    owner text, lock_prefix text, types text[], limits int[], leases float8[], stamp boolean
) RETURNS TABLE (
    id bigint, type text, payload text, scope_type text, scope_id text, attempts int,
    max_attempts int, priority int, lease_token bigint, created_at timestamptz,
    lease_expires_at timestamptz, trace_context text, waited float8
)
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
    SET plan_cache_mode = force_generic_plan
    SET enable_seqscan = off
    SET enable_bitmapscan = off
    SET enable_sort = off
    SET jit = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH req AS MATERIALIZED (
        SELECT t.type, t.lim, t.lease,
               pg_advisory_xact_lock_shared(
                   hashtextextended(claim_jobs.lock_prefix || t.type, 0))::text AS locked
          FROM unnest(claim_jobs.types, claim_jobs.limits, claim_jobs.leases)
               AS t(type, lim, lease)
         ORDER BY hashtextextended(claim_jobs.lock_prefix || t.type, 0)
    ),
    picked AS MATERIALIZED (
        SELECT c.id
          FROM req r
         CROSS JOIN LATERAL (
                SELECT j.id
                  FROM jobs j
                 WHERE j.type = r.type
                   AND j.status = 'pending'
                   AND j.run_at <= now()
                   AND NOT EXISTS (SELECT 1 FROM paused_types pt WHERE pt.type = r.type)
                   AND (j.dedupe_key IS NULL OR NOT EXISTS (
                            SELECT 1 FROM jobs k
                             WHERE k.type = j.type AND k.dedupe_key = j.dedupe_key
                               AND k.status = 'running'
                            OFFSET 0))
                 ORDER BY j.priority DESC, j.run_at, j.id
                 LIMIT r.lim
                   FOR UPDATE SKIP LOCKED
               ) c
    ),
    upd AS (
        UPDATE jobs j
           SET status = 'running',
               attempts = j.attempts + 1,
               lease_owner = claim_jobs.owner,
               lease_token = j.lease_token + 1,
               lease_expires_at = now() + make_interval(
                   secs => (SELECT r.lease FROM req r WHERE r.type = j.type)),
               started_at = CASE WHEN claim_jobs.stamp THEN now() END,
               updated_at = now()
         WHERE j.id = ANY (ARRAY(SELECT p.id FROM picked p))
        RETURNING j.id, j.type, j.payload::text AS payload, j.scope_type, j.scope_id,
                  j.attempts, j.max_attempts, j.priority, j.lease_token, j.created_at,
                  j.lease_expires_at, j.run_at, j.trace_context::text AS trace_context,
                  -- waited: due time to this claim, both from the database clock
                  greatest(extract(epoch FROM now() - j.run_at), 0)::float8 AS waited
    )
    SELECT u.id, u.type, u.payload, u.scope_type, u.scope_id, u.attempts, u.max_attempts,
           u.priority, u.lease_token, u.created_at, u.lease_expires_at, u.trace_context,
           u.waited
      FROM upd u
     ORDER BY u.priority DESC, u.run_at, u.id;
END
$$;


CREATE FUNCTION complete_jobs(
    _owner text, _ids bigint[], _tokens bigint[], _started float8[]
) RETURNS text
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
    SET plan_cache_mode = force_generic_plan
    SET enable_seqscan = off
    SET enable_bitmapscan = off
    SET enable_nestloop = off
    SET enable_mergejoin = off
    SET jit = off
AS $$
DECLARE
    written text;
BEGIN
    WITH done AS (
        DELETE FROM jobs j
         USING unnest(_ids, _tokens, _started) AS t(id, token, ago)
         WHERE j.id = ANY (_ids)
           AND j.id = t.id
           AND j.lease_token = t.token
           AND j.lease_owner = _owner
           AND j.status || '' = 'running'
        RETURNING j.*, t.ago AS new_ago
    ),
    kept AS (
        INSERT INTO jobs_history
        SELECT d.id, d.type, d.payload, d.scope_type, d.scope_id, 'succeeded', d.priority,
               d.run_at, d.attempts, d.max_attempts, d.last_error, d.dedupe_key, NULL,
               d.lease_token, NULL, d.schedule_key, d.progress,
               coalesce(d.started_at, now() - make_interval(secs => d.new_ago)), now(),
               d.created_at, now(), d.result, d.errors, d.tags, d.trace_context
          FROM done d
        RETURNING jobs_history.id
    ),
    hint AS (
        SELECT notify_jobs_done(array_agg(k.id)) FROM kept k
    )
    SELECT (SELECT string_agg(k.id::text, ',') FROM kept k) INTO written FROM hint;
    RETURN written;
END
$$;

CREATE FUNCTION complete_jobs_with_results(
    _owner text, _ids bigint[], _tokens bigint[], _results jsonb, _started float8[]
) RETURNS text
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
    SET plan_cache_mode = force_generic_plan
    SET enable_seqscan = off
    SET enable_bitmapscan = off
    SET enable_nestloop = off
    SET enable_mergejoin = off
    SET jit = off
AS $$
DECLARE
    written text;
BEGIN
    WITH done AS (
        DELETE FROM jobs j
         USING unnest(_ids, _tokens,
                      ARRAY(SELECT r.value
                              FROM jsonb_array_elements(_results) WITH ORDINALITY AS r(value, n)
                             ORDER BY r.n), _started) AS t(id, token, result, ago)
         WHERE j.id = ANY (_ids)
           AND j.id = t.id
           AND j.lease_token = t.token
           AND j.lease_owner = _owner
           AND j.status || '' = 'running'
        RETURNING j.*, NULLIF(t.result, 'null'::jsonb) AS new_result,
                  t.ago AS new_ago
    ),
    kept AS (
        INSERT INTO jobs_history
        SELECT d.id, d.type, d.payload, d.scope_type, d.scope_id, 'succeeded', d.priority,
               d.run_at, d.attempts, d.max_attempts, d.last_error, d.dedupe_key, NULL,
               d.lease_token, NULL, d.schedule_key, d.progress,
               coalesce(d.started_at, now() - make_interval(secs => d.new_ago)), now(),
               d.created_at, now(), d.new_result, d.errors, d.tags, d.trace_context
          FROM done d
        RETURNING jobs_history.id
    ),
    hint AS (
        SELECT notify_jobs_done(array_agg(k.id)) FROM kept k
    )
    SELECT (SELECT string_agg(k.id::text, ',') FROM kept k) INTO written FROM hint;
    RETURN written;
END
$$;

CREATE FUNCTION complete_jobs_deleting(
    _owner text, _ids bigint[], _tokens bigint[], _results jsonb, _delete_types text[],
    _started float8[]
) RETURNS text
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
    SET plan_cache_mode = force_generic_plan
    SET enable_seqscan = off
    SET enable_bitmapscan = off
    SET enable_nestloop = off
    SET enable_mergejoin = off
    SET jit = off
AS $$
DECLARE
    written text;
BEGIN
    WITH held AS MATERIALIZED (
        SELECT j.id, NULLIF(t.result, 'null'::jsonb) AS result, t.ago,
               j.type = ANY (_delete_types) AS remove
          FROM jobs j
          JOIN unnest(_ids, _tokens,
                      ARRAY(SELECT r.value
                              FROM jsonb_array_elements(_results) WITH ORDINALITY AS r(value, n)
                             ORDER BY r.n), _started) AS t(id, token, result, ago)
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
    done AS (
        DELETE FROM jobs j
         USING held h
         WHERE j.id = ANY (_ids) AND j.id = h.id AND NOT h.remove
        RETURNING j.*, h.result AS new_result, h.ago AS new_ago
    ),
    kept AS (
        INSERT INTO jobs_history
        SELECT d.id, d.type, d.payload, d.scope_type, d.scope_id, 'succeeded', d.priority,
               d.run_at, d.attempts, d.max_attempts, d.last_error, d.dedupe_key, NULL,
               d.lease_token, NULL, d.schedule_key, d.progress,
               coalesce(d.started_at, now() - make_interval(secs => d.new_ago)), now(),
               d.created_at, now(), d.new_result, d.errors, d.tags, d.trace_context
          FROM done d
        RETURNING jobs_history.id
    ),
    finished AS (
        SELECT r.id FROM removed r
        UNION ALL
        SELECT k.id FROM kept k
    ),
    hint AS (
        SELECT notify_jobs_done(array_agg(f.id)) FROM finished f
    )
    SELECT (SELECT string_agg(f.id::text, ',') FROM finished f) INTO written FROM hint;
    RETURN written;
END
$$;

CREATE FUNCTION fail_jobs(
    _owner text, _ids bigint[], _tokens bigint[], _errors text[], _tracebacks text[],
    _delete_types text[], _history int, _started float8[]
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
        SELECT j.id, t.error, t.traceback, t.ago, j.type = ANY (_delete_types) AS remove
          FROM jobs j
          JOIN unnest(_ids, _tokens, _errors, _tracebacks, _started)
               AS t(id, token, error, traceback, ago)
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
        RETURNING j.*, h.error AS new_error, h.traceback AS new_traceback,
               coalesce(j.started_at, now() - make_interval(secs => h.ago)) AS new_started
    ),
    failed AS (
        INSERT INTO jobs_history
        SELECT g.id, g.type, g.payload, g.scope_type, g.scope_id, 'failed', g.priority,
               g.run_at, g.attempts, g.max_attempts, g.new_error, g.dedupe_key, NULL,
               g.lease_token, NULL, g.schedule_key, g.progress, g.new_started, now(),
               g.created_at, now(), g.result,
               append_attempt_error(g.errors, g.attempts, g.new_error, g.lease_owner, _history,
                                    g.new_traceback, g.new_started),
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

CREATE FUNCTION retry_jobs(
    _owner text, _ids bigint[], _tokens bigint[], _delays float8[], _errors text[],
    _tracebacks text[], _consume boolean[], _history int,
    _started float8[]
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
               coalesce(j.started_at, now() - make_interval(secs => t.ago)) AS started,
               (j.dedupe_key IS NOT NULL AND EXISTS (
                   SELECT 1 FROM jobs p
                    WHERE p.type = j.type AND p.dedupe_key = j.dedupe_key
                      AND p.status = 'pending'
                   OFFSET 0)) AS superseded
          FROM jobs j
          JOIN unnest(_ids, _tokens, _delays, _errors, _tracebacks, _consume, _started)
               AS t(id, token, delay, error, traceback, consume, ago) ON t.id = j.id
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
                                             _history, h.traceback, h.started),
               attempts = CASE WHEN h.consume THEN j.attempts
                               ELSE greatest(j.attempts - 1, 0) END,
               started_at = h.started,
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

-- The starts of jobs whose handlers are still running (see the header).
CREATE FUNCTION mark_jobs_started(
    _owner text, _ids bigint[], _tokens bigint[], _started float8[]
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
    UPDATE jobs j
       SET started_at = now() - make_interval(secs => t.ago)
      FROM unnest(_ids, _tokens, _started) AS t(id, token, ago)
     WHERE j.id = ANY (_ids)
       AND j.id = t.id
       AND j.lease_token = t.token
       AND j.lease_owner = _owner
       AND j.status || '' = 'running'
       AND j.started_at IS NULL
       AND t.ago IS NOT NULL
    RETURNING j.id;
END
$$;
