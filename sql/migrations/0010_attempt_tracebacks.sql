-- golemq-pg 0010: each failed attempt keeps its traceback in the attempt history.
--
-- A worker now sends, with each failed attempt, the handler's traceback as the standard
-- library formats it (no locals), bounded to its last 16 KiB by the client
-- (golemq_pg._errortext.bounded_traceback, which both stores apply). It is kept in the
-- attempt's entry of `errors` as "traceback" and read back as AttemptError.traceback; an
-- entry without one (the reaper's, a handler that returned False, a timeout, every entry
-- written before this release) has no such key. last_error is unchanged: the bounded first
-- line, never the traceback.
--
-- The functions that take a traceback get new signatures (PostgreSQL tells functions apart
-- by their argument types, so the new ones keep their names):
--  * append_attempt_error(history, attempt, error, worker_id, keep, traceback): the entry,
--    with "traceback" when one is given. 0002's five-argument form (the reaper's, 0009)
--    now delegates to it with none, so one function defines an entry;
--  * fail_jobs(..., _errors, _tracebacks, _delete_types, _history) and
--    retry_jobs(..., _errors, _tracebacks, _consume, _history): 0008's fail_jobs and 0007's
--    retry_jobs with one more parallel array, item by item (NULL items: no traceback). The
--    same fence, moves, deletes, "done" notification and plan settings (0007's header: one
--    primary-key descent per id, the items paired with the rows by one hash join); the
--    extra array is one more column of the same unnest.
--
-- Rolling upgrade: the previous forms of fail_jobs and retry_jobs stay, rewritten to call the
-- new ones with no tracebacks, so workers of the release before keep failing and retrying
-- jobs against this schema (their attempts are recorded without a traceback). Workers of
-- this release need this migration applied first (they call the new forms). A later release
-- may drop the old forms once no worker of the release before can run; until then a
-- migration that adds a column changes only the new forms (the old ones hold no move).

-- The attempt history append (0002's, with a traceback): the history with one more
-- {attempt, at, error, worker_id[, traceback]}, keeping the newest "keep" entries, oldest
-- first. "at" is the statement's now(); worker_id is NULL when the reaper records the
-- attempt; "traceback" is left out when NULL, so such an entry is what 0002 wrote.
CREATE FUNCTION append_attempt_error(
    history jsonb, attempt integer, error text, worker_id text, keep integer, traceback text
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
                                      ELSE jsonb_build_object('traceback', $6) END))
                   WITH ORDINALITY AS a(e, n)
             ORDER BY a.n DESC
             LIMIT greatest($5, 1)) AS kept
$$;

-- 0002's form, for the reaper (0009), which has no traceback to keep.
CREATE OR REPLACE FUNCTION append_attempt_error(
    history jsonb, attempt integer, error text, worker_id text, keep integer
) RETURNS jsonb
    LANGUAGE sql STABLE
AS $$
    SELECT append_attempt_error($1, $2, $3, $4, $5, NULL::text)
$$;

-- RUNNING -> FAILED (dead letter) with the last error, the attempt (and its traceback)
-- appended to the attempt history (the newest _history entries kept), the row moved into
-- the history (0008). Rows of a type in _delete_types (delete_on "always") are deleted
-- instead, under the same fence. The ids written either way, announced on "done".
CREATE FUNCTION fail_jobs(
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
                                    g.new_traceback),
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

-- RUNNING -> PENDING after each item's delay (database clock), the attempt (and its
-- traceback) appended to the history; an attempt that should not count (_consume false) is
-- refunded. A keyed job whose key gained a PENDING replacement while it ran is deleted
-- instead (0007's retry_jobs: the probe is one descent of jobs_dedupe_pending_uq per held
-- keyed row, OFFSET 0). Returns the ids written.
CREATE FUNCTION retry_jobs(
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
                                             _history, h.traceback),
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

-- The previous forms, for workers of the release before during a rolling upgrade: the new
-- ones with no tracebacks (a NULL array pads unnest with NULLs). The planner settings are
-- the called function's own, so the old calls keep its plan.
CREATE OR REPLACE FUNCTION fail_jobs(
    _owner text, _ids bigint[], _tokens bigint[], _errors text[], _delete_types text[],
    _history int
) RETURNS SETOF bigint
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY
    SELECT f.id
      FROM fail_jobs(_owner, _ids, _tokens, _errors, NULL::text[], _delete_types, _history)
           AS f(id);
END
$$;

CREATE OR REPLACE FUNCTION retry_jobs(
    _owner text, _ids bigint[], _tokens bigint[], _delays float8[], _errors text[],
    _consume boolean[], _history int
) RETURNS SETOF bigint
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY
    SELECT r.id
      FROM retry_jobs(_owner, _ids, _tokens, _delays, _errors, NULL::text[], _consume,
                      _history) AS r(id);
END
$$;
