-- golemq-pg 0007: the fenced writes of a lease holder as functions that always probe the
-- primary key, one descent per id, whatever the statistics say.
--
-- The statements of sql/queries/leases.sql (until this release) joined the given ids with
-- `jobs` under the fence `status = 'running'`, which every partial index on running rows
-- (jobs_lease_idx, jobs_running_idx, jobs_dedupe_running_idx) can serve. After a VACUUM
-- ANALYZE taken while nothing ran (autovacuum during an idle period), the statistics say no
-- row is running and those indexes are empty, so the planner drove the statements from a
-- walk of jobs_running_idx into a hash join with the ids: each completion of 500 ids read
-- every running row, and every dead entry the drain had left behind in that index
-- (measured: a drain of 30,000 no-op jobs at 1,333 jobs/s instead of 21,000). With the
-- status test written so that no partial index can serve it, the planner picked other
-- plans as bad: a nested loop over the ids for every row of a scan, or a sequential scan,
-- because the fence (`lease_owner = owner`, NULL in every row when the table was analysed)
-- looks like it matches one row. Any plan in which `jobs` is read other than through the
-- given ids is one of these.
--
-- So each function plans its statement with only one way to read `jobs` left:
--  * the ids are an index condition on the primary key (`j.id = ANY(_ids)`): one descent of
--    jobs_pkey per id, rows read only for the given ids;
--  * the status test reads `j.status || '' = 'running'`, an expression no partial index
--    predicate is proven by, so no partial index on running rows is ever a candidate;
--  * sequential scans and bitmap scans are off, so nothing reads the whole table; nested
--    loops and merge joins are off, so the ids are paired with their rows (id, fencing
--    token, per-item values) by one hash join, never a loop of ids x rows;
--  * the plan is generic (plan_cache_mode) and cached by PL/pgSQL for the session, as
--    claim_jobs() (0006) is: no planning per call.
-- The settings are the function's own (SET clauses): they apply while it runs and are
-- restored when it returns, whatever connection, pooler or prepared statement calls it.
-- PostgreSQL has no shared SET list, so each function spells out the same one.
-- Each function writes exactly what its statement did: the same fence, columns, deletes
-- and "done" notification; the statements that call them are in sql/queries/leases.sql.
--
-- Arguments are parallel arrays, item by item (ids, fencing tokens, per-item values), and
-- the lease holder's owner id; results (complete_jobs_with_results, complete_jobs_deleting)
-- come as one JSON array in the order of the ids, JSON null for none.

-- RUNNING -> SUCCEEDED, nothing stored, nothing deleted: the hot path. Returns the ids
-- written as one comma-separated text (NULL: none), announced once on "done".
CREATE FUNCTION complete_jobs(_owner text, _ids bigint[], _tokens bigint[]) RETURNS text
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
        UPDATE jobs j
           SET status = 'succeeded',
               finished_at = now(),
               updated_at = now(),
               lease_owner = NULL,
               lease_expires_at = NULL
          FROM unnest(_ids, _tokens) AS t(id, token)
         WHERE j.id = ANY (_ids)
           AND j.id = t.id
           AND j.lease_token = t.token
           AND j.lease_owner = _owner
           AND j.status || '' = 'running'
        RETURNING j.id
    ),
    hint AS (
        SELECT notify_jobs_done(array_agg(d.id)) FROM done d
    )
    SELECT (SELECT string_agg(d.id::text, ',') FROM done d) INTO written FROM hint;
    RETURN written;
END
$$;

-- complete_jobs storing each item's result (NULL for a JSON null).
CREATE FUNCTION complete_jobs_with_results(
    _owner text, _ids bigint[], _tokens bigint[], _results jsonb
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
        UPDATE jobs j
           SET status = 'succeeded',
               result = NULLIF(t.result, 'null'::jsonb),
               finished_at = now(),
               updated_at = now(),
               lease_owner = NULL,
               lease_expires_at = NULL
          FROM unnest(_ids, _tokens,
                      ARRAY(SELECT r.value
                              FROM jsonb_array_elements(_results) WITH ORDINALITY AS r(value, n)
                             ORDER BY r.n)) AS t(id, token, result)
         WHERE j.id = ANY (_ids)
           AND j.id = t.id
           AND j.lease_token = t.token
           AND j.lease_owner = _owner
           AND j.status || '' = 'running'
        RETURNING j.id
    ),
    hint AS (
        SELECT notify_jobs_done(array_agg(d.id)) FROM done d
    )
    SELECT (SELECT string_agg(d.id::text, ',') FROM done d) INTO written FROM hint;
    RETURN written;
END
$$;

-- complete_jobs_with_results, except that rows of a type in _delete_types (delete_on
-- "success" or "always") are deleted instead of updated, under the same fence: the held rows
-- are locked first (MATERIALIZED), so the delete and the update act on exactly the fenced
-- rows. Returns the ids written either way as one comma-separated text.
CREATE FUNCTION complete_jobs_deleting(
    _owner text, _ids bigint[], _tokens bigint[], _results jsonb, _delete_types text[]
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
        SELECT j.id, NULLIF(t.result, 'null'::jsonb) AS result,
               j.type = ANY (_delete_types) AS remove
          FROM jobs j
          JOIN unnest(_ids, _tokens,
                      ARRAY(SELECT r.value
                              FROM jsonb_array_elements(_results) WITH ORDINALITY AS r(value, n)
                             ORDER BY r.n)) AS t(id, token, result) ON t.id = j.id
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
        UPDATE jobs j
           SET status = 'succeeded',
               result = h.result,
               finished_at = now(),
               updated_at = now(),
               lease_owner = NULL,
               lease_expires_at = NULL
          FROM held h
         WHERE j.id = ANY (_ids) AND j.id = h.id AND NOT h.remove
        RETURNING j.id
    ),
    finished AS (
        SELECT r.id FROM removed r
        UNION ALL
        SELECT d.id FROM done d
    ),
    hint AS (
        SELECT notify_jobs_done(array_agg(f.id)) FROM finished f
    )
    SELECT (SELECT string_agg(f.id::text, ',') FROM finished f) INTO written FROM hint;
    RETURN written;
END
$$;

-- RUNNING -> FAILED (dead letter) with the last error, appended to the attempt history (the
-- newest _history entries kept). Rows of a type in _delete_types (delete_on "always") are
-- deleted instead, under the same fence. The ids written either way, announced on "done".
CREATE FUNCTION fail_jobs(
    _owner text, _ids bigint[], _tokens bigint[], _errors text[], _delete_types text[],
    _history int
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
        SELECT j.id, t.error, j.type = ANY (_delete_types) AS remove
          FROM jobs j
          JOIN unnest(_ids, _tokens, _errors) AS t(id, token, error) ON t.id = j.id
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
    failed AS (
        UPDATE jobs j
           SET status = 'failed',
               finished_at = now(),
               updated_at = now(),
               last_error = h.error,
               errors = append_attempt_error(j.errors, j.attempts, h.error, j.lease_owner,
                                             _history),
               lease_owner = NULL,
               lease_expires_at = NULL
          FROM held h
         WHERE j.id = ANY (_ids) AND j.id = h.id AND NOT h.remove
        RETURNING j.id
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

-- RUNNING -> PENDING after each item's delay (database clock); an attempt that should not
-- count (_consume false) is refunded. A keyed job whose key gained a PENDING replacement
-- while it ran (on_duplicate="replace") is deleted instead: the replacement carries the
-- newer payload, and the pending-only unique index admits one PENDING job per key. That
-- probe is one descent of jobs_dedupe_pending_uq per held keyed row (OFFSET 0: never a
-- hashed SubPlan reading every pending keyed job). Returns the ids written.
CREATE FUNCTION retry_jobs(
    _owner text, _ids bigint[], _tokens bigint[], _delays float8[], _errors text[],
    _consume boolean[], _history int
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
        SELECT j.id, t.delay, t.error, t.consume,
               (j.dedupe_key IS NOT NULL AND EXISTS (
                   SELECT 1 FROM jobs p
                    WHERE p.type = j.type AND p.dedupe_key = j.dedupe_key
                      AND p.status = 'pending'
                   OFFSET 0)) AS superseded
          FROM jobs j
          JOIN unnest(_ids, _tokens, _delays, _errors, _consume)
               AS t(id, token, delay, error, consume) ON t.id = j.id
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
                                             _history),
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

-- RUNNING -> PENDING, due now, attempt refunded: the job was claimed but never started
-- (shutdown, prefetch dropped). Superseded keyed jobs are deleted as in retry_jobs.
CREATE FUNCTION release_jobs(_owner text, _ids bigint[], _tokens bigint[])
RETURNS SETOF bigint
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
        SELECT j.id,
               (j.dedupe_key IS NOT NULL AND EXISTS (
                   SELECT 1 FROM jobs p
                    WHERE p.type = j.type AND p.dedupe_key = j.dedupe_key
                      AND p.status = 'pending'
                   OFFSET 0)) AS superseded
          FROM jobs j
          JOIN unnest(_ids, _tokens) AS t(id, token) ON t.id = j.id
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
               run_at = now(),
               attempts = greatest(j.attempts - 1, 0),
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

-- Extends the leases that have not expired yet: once expired, the reaper may already own the
-- row's future, and the holder must treat the lease as lost. Returns the ids renewed.
CREATE FUNCTION renew_leases(_owner text, _ids bigint[], _tokens bigint[], _seconds float8)
RETURNS SETOF bigint
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
       SET lease_expires_at = now() + make_interval(secs => _seconds),
           updated_at = now()
      FROM unnest(_ids, _tokens) AS t(id, token)
     WHERE j.id = ANY (_ids)
       AND j.id = t.id
       AND j.lease_token = t.token
       AND j.lease_owner = _owner
       AND j.status || '' = 'running'
       AND j.lease_expires_at > now()
    RETURNING j.id;
END
$$;

-- The ids among the given leases that are still held (read only).
CREATE FUNCTION held_leases(_owner text, _ids bigint[], _tokens bigint[])
RETURNS SETOF bigint
    LANGUAGE plpgsql STABLE
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
    SELECT j.id
      FROM jobs j
      JOIN unnest(_ids, _tokens) AS t(id, token) ON t.id = j.id
     WHERE j.id = ANY (_ids)
       AND j.lease_token = t.token
       AND j.lease_owner = _owner
       AND j.status || '' = 'running';
END
$$;
