-- golemq-pg 0020: settling a job's dependents at any depth and under any crossing, and a
-- reaper pass that a row it cannot settle does not fail.
--
--  * Depth. 0016 settled children from a row trigger: a child dead-lettered or cancelled
--    because of its parent was deleted from `jobs` inside the trigger, which fired the
--    trigger again for that child's children, one trigger level (and some hundred
--    kilobytes of C stack) per generation. A chain a few hundred deep overflowed the
--    default max_stack_depth ("stack depth limit exceeded"), which failed the statement
--    that finished the root: a worker's completion batch, a cancel, or a reaper pass (and
--    then every later pass, the poisoned row being the oldest expiry). settle_dependents()
--    below walks the graph one generation per turn of a loop, as revive_and_rearm (0016)
--    already did: the depth is data in its frontier arrays, not frames on the stack. The
--    children it dead-letters or cancels are deleted once, at the end of the walk, with a
--    transaction-local flag (golemq_pg.settle_walk) set around its own DELETEs so that
--    their trigger does not start a second walk for what this one settled.
--  * Crossing. The row trigger ran once per finished parent and locked that parent's
--    children in id order; one completion statement finishes many parents, so two
--    statements whose parents share children locked them in two different orders and
--    deadlocked (and the reaper joined the cycles). The trigger is now a statement trigger
--    with the deleted rows as a transition table: all the children of all the parents one
--    statement finished are locked in one pass, in job id order, before any is changed,
--    and each later generation likewise. Every statement that settles takes node rows in
--    that one global order, so no two can wait on each other for them. The parent rows
--    themselves are held by the statement that finished them: a worker's fenced write
--    (its own leases, whose ids the store sends in job id order: _rows.in_id_order), a
--    cancel (DELETE ... WHERE id = ANY, in the index's order), or the reaper (FOR UPDATE
--    SKIP LOCKED, which never waits).
--  * The same verdicts as 0016 for each child, the parents that finished in one statement
--    (or one generation) judged together: only successes count the parents off
--    (open_parents) and release the child at zero; any other outcome applies the child's
--    policy ('fail' dead-letters it, 'cancel' deletes it, 'run' counts every parent off
--    and keeps the first failed one), naming the smallest failed or cancelled parent id.
--    The "done" hint is sent once, for every job the walk failed or cancelled.
--  * The reaper. reclaim_leases() keeps its signature and its rows; its body's statement
--    moves to reclaim_lease_rows() (ids in, the same outcome per row), which it runs for the
--    whole batch under a savepoint. Should that fail, each row is tried again under its own
--    savepoint: a row that still fails is left as it is (RUNNING, its expired lease and row
--    lock released at commit) and reported by a WARNING naming its id and the error's
--    SQLSTATE (never its text: an error raised by a trigger may quote row data), and the
--    rest of the batch is reclaimed. requeue_stale shares the function and the behaviour.
--
-- What the statement trigger costs a DELETE on jobs that finishes no parent (the completion
-- of jobs without dependents): the transition table and one trigger call per statement, where
-- the row trigger's WHEN test cost nothing. Measured on the 2-core dev machine (EXPLAIN
-- ANALYZE, median of 200): a 100-row DELETE 0.095 -> 0.14 ms, a 1-row DELETE 0.02 -> 0.045 ms,
-- against about 1.3 ms for a worker's 100-job completion round trip.
--
-- Safe on a live queue: no table is rewritten or scanned; the trigger is replaced in place
-- (CREATE OR REPLACE TRIGGER takes SHARE ROW EXCLUSIVE on jobs for the moment of the
-- catalog change, no scan), the functions are redefined.

-- The parents _parents (ids of rows that left `jobs`, with has_dependents) settle their
-- children, generation after generation: see the header.
--
-- The children a generation dead-letters or cancels are the next generation's parents. They
-- are judged (their node rows locked and marked: failed_parent set) at once, but deleted
-- only at the end of the walk, all in one statement per verdict: a row deleted per
-- generation cost a DELETE, a history INSERT and their triggers each time. Until then such a
-- child is still WAITING in `jobs`; a WAITING job whose policy is 'fail' or 'cancel' with a
-- failed_parent exists only inside a walk (link_jobs deletes its own at once, a revival
-- clears the mark), so that is how the walk knows it was judged already.
CREATE FUNCTION settle_dependents(_parents bigint[]) RETURNS void
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
    SET plan_cache_mode = force_generic_plan
    -- Every join here is an index probe per row of a small frontier: a hash or merge join
    -- would read a whole index of jobs or job_nodes once per generation. The settings are
    -- all given, not inherited from the statement that fired the trigger (the fenced
    -- writes and the reaper turn nested loops off for their own statement).
    SET enable_seqscan = off
    SET enable_bitmapscan = on
    SET enable_indexscan = on
    SET enable_sort = on
    SET enable_nestloop = on
    SET enable_mergejoin = off
    SET enable_hashjoin = off
    SET jit = off
AS $$
DECLARE
    gen_ids   bigint[];
    gen_out   text[];
    kids      bigint[];
    ready     bigint[];
    to_fail   bigint[];
    fail_errs text[];
    to_drop   bigint[];
    all_fail  bigint[] := ARRAY[]::bigint[];
    all_errs  text[] := ARRAY[]::text[];
    all_drop  bigint[] := ARRAY[]::bigint[];
    err_by_id jsonb;
    failed    bigint[];
    dropped   bigint[];
BEGIN
    -- How each parent left: its history row, written by the same statement (a finish writes
    -- finished_at = now(), the transaction's time, so today's partitions are probed first);
    -- none: deleted while live (cancelled).
    SELECT array_agg(p.id ORDER BY p.id),
           array_agg(coalesce(
               (SELECT h.status FROM jobs_history h
                 WHERE h.id = p.id AND h.finished_at = now() LIMIT 1),
               (SELECT h.status FROM jobs_history h WHERE h.id = p.id LIMIT 1)) ORDER BY p.id)
      INTO gen_ids, gen_out
      FROM (SELECT DISTINCT u AS id FROM unnest(_parents) AS u) p;
    WHILE gen_ids IS NOT NULL LOOP
        SELECT array_agg(DISTINCT d.child_id ORDER BY d.child_id) INTO kids
          FROM job_deps d WHERE d.parent_id = ANY (gen_ids);
        EXIT WHEN kids IS NULL;
        -- The lock order: every child of this generation's parents, in job id order, before
        -- any is read or changed, so two statements sharing children queue on the first
        -- shared one, never in a cycle; and exactly one of them sees a child's last open
        -- parent go.
        PERFORM 1 FROM job_nodes n WHERE n.job_id = ANY (kids) ORDER BY n.job_id FOR UPDATE;
        -- Then those children's jobs rows still WAITING, in the same order: the walk holds
        -- what it releases, dead-letters or cancels from here on (the DELETEs come at its
        -- end), so a cancel of one of them meanwhile either waits for this transaction or
        -- has deleted it first (then it is judged no more here, and the cancel's own walk
        -- settles its children).
        -- (status || '': the ids' primary-key probes, never a walk of jobs_waiting_idx, which
        -- holds every WAITING job.)
        PERFORM 1 FROM jobs c
         WHERE c.id = ANY (kids) AND c.status || '' = 'waiting'
         ORDER BY c.id
           FOR UPDATE;
        WITH edges AS (
            SELECT d.child_id, f.id AS parent_id, f.outcome
              FROM unnest(gen_ids, gen_out) AS f(id, outcome)
              JOIN job_deps d ON d.parent_id = f.id
        ),
        per_child AS (
            SELECT e.child_id,
                   count(*) FILTER (WHERE e.outcome = 'succeeded') AS n_ok,
                   count(*) AS n_all,
                   min(e.parent_id) FILTER (WHERE e.outcome IS DISTINCT FROM 'succeeded') AS bad,
                   (array_agg(e.outcome ORDER BY e.parent_id)
                      FILTER (WHERE e.outcome IS DISTINCT FROM 'succeeded'))[1] AS bad_outcome
              FROM edges e
             GROUP BY e.child_id
        ),
        -- Only a child still WAITING and not judged by this walk is judged by a failure or
        -- released (one already failed or cancelled by another parent keeps that verdict).
        judged AS (
            SELECT p.child_id, p.n_ok, p.n_all, p.bad, p.bad_outcome, n.policy,
                   (coalesce(c.status = 'waiting', false)
                    AND NOT (n.policy <> 'run' AND n.failed_parent IS NOT NULL)) AS waiting
              FROM per_child p
              JOIN job_nodes n ON n.job_id = p.child_id
              LEFT JOIN jobs c ON c.id = p.child_id
        ),
        counted AS (
            UPDATE job_nodes n
               SET open_parents = n.open_parents
                       - CASE WHEN j.bad IS NOT NULL AND j.waiting AND j.policy = 'run'
                              THEN j.n_all ELSE j.n_ok END,
                   failed_parent = CASE WHEN j.bad IS NULL OR NOT j.waiting THEN n.failed_parent
                                        WHEN j.policy = 'run'
                                            THEN coalesce(n.failed_parent, j.bad)
                                        ELSE j.bad END
              FROM judged j
             WHERE n.job_id = j.child_id
            RETURNING n.job_id, n.open_parents, j.bad, j.bad_outcome, j.policy, j.waiting
        )
        SELECT array_agg(c.job_id ORDER BY c.job_id)
                   FILTER (WHERE c.waiting AND c.open_parents <= 0
                             AND (c.bad IS NULL OR c.policy = 'run')),
               array_agg(c.job_id ORDER BY c.job_id)
                   FILTER (WHERE c.waiting AND c.bad IS NOT NULL AND c.policy = 'fail'),
               array_agg('parent ' || c.bad
                         || CASE WHEN c.bad_outcome = 'failed' THEN ' failed'
                                 ELSE ' was cancelled' END ORDER BY c.job_id)
                   FILTER (WHERE c.waiting AND c.bad IS NOT NULL AND c.policy = 'fail'),
               array_agg(c.job_id ORDER BY c.job_id)
                   FILTER (WHERE c.waiting AND c.bad IS NOT NULL AND c.policy = 'cancel')
          INTO ready, to_fail, fail_errs, to_drop
          FROM counted c;
        IF ready IS NOT NULL THEN
            PERFORM release_waiting(ready);
        END IF;
        all_fail := all_fail || coalesce(to_fail, ARRAY[]::bigint[]);
        all_errs := all_errs || coalesce(fail_errs, ARRAY[]::text[]);
        all_drop := all_drop || coalesce(to_drop, ARRAY[]::bigint[]);
        -- The next generation: the children dead-lettered ('failed') or cancelled (NULL) here.
        gen_ids := coalesce(to_fail, ARRAY[]::bigint[]) || coalesce(to_drop, ARRAY[]::bigint[]);
        gen_out := array_fill('failed'::text, ARRAY[coalesce(cardinality(to_fail), 0)])
                   || array_fill(NULL::text, ARRAY[coalesce(cardinality(to_drop), 0)]);
        IF cardinality(gen_ids) = 0 THEN
            gen_ids := NULL;
        END IF;
    END LOOP;
    IF cardinality(all_fail) = 0 AND cardinality(all_drop) = 0 THEN
        RETURN;
    END IF;
    -- The walk settled their children already: the trigger of these DELETEs must not start
    -- another walk for them (it would count their 'run' children off twice). The flag is
    -- transaction-local and reset at once; an error rolls it back with the statement.
    PERFORM set_config('golemq_pg.settle_walk', 'on', true);
    -- Each job's error text by id (a lookup, not a join: joins are index probes here).
    SELECT jsonb_object_agg(u.id::text, u.error) INTO err_by_id
      FROM unnest(all_fail, all_errs) AS u(id, error);
    -- Dead-lettered (0016's fail_waiting, one error text per job): moved to the history
    -- FAILED, no attempt added (none ran). Rows in job id order (the index's).
    WITH gone AS (
        DELETE FROM jobs j
         WHERE j.id = ANY (all_fail) AND j.status || '' = 'waiting'
        RETURNING j.*
    ),
    kept AS (
        INSERT INTO jobs_history
        SELECT g.id, g.type, g.payload, g.scope_type, g.scope_id, 'failed', g.priority,
               g.run_at, g.attempts, g.max_attempts, err_by_id ->> g.id::text, g.dedupe_key, NULL,
               g.lease_token, NULL, g.schedule_key, g.progress, g.started_at, now(),
               g.created_at, now(), g.result, g.errors, g.tags, g.trace_context
          FROM gone g
        RETURNING jobs_history.id
    )
    SELECT array_agg(k.id) INTO failed FROM kept k;
    WITH d AS (
        DELETE FROM jobs j WHERE j.id = ANY (all_drop) AND j.status || '' = 'waiting'
        RETURNING j.id
    )
    SELECT array_agg(d.id) INTO dropped FROM d;
    PERFORM set_config('golemq_pg.settle_walk', '', true);
    PERFORM notify_jobs_done(coalesce(failed, ARRAY[]::bigint[])
                             || coalesce(dropped, ARRAY[]::bigint[]));
END
$$;

-- The statement trigger on jobs (AFTER DELETE): the rows a statement deleted that had
-- dependents settle them, all at once. A statement deleting no such row pays one scan of its
-- transition table and nothing else; the walk's own DELETEs (the flag) are skipped.
CREATE FUNCTION jobs_settle_deleted() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $$
DECLARE
    parents bigint[];
BEGIN
    IF current_setting('golemq_pg.settle_walk', true) = 'on' THEN
        RETURN NULL;
    END IF;
    SELECT array_agg(g.id) INTO parents FROM gone_jobs g WHERE g.has_dependents;
    IF parents IS NOT NULL THEN
        PERFORM settle_dependents(parents);
    END IF;
    RETURN NULL;
END
$$;

-- Replaces 0016's row trigger of the same name in place (see the header).
CREATE OR REPLACE TRIGGER jobs_settle_dependents
    AFTER DELETE ON jobs
    REFERENCING OLD TABLE AS gone_jobs
    FOR EACH STATEMENT
    EXECUTE FUNCTION jobs_settle_deleted();

-- 0016's row trigger function and its per-parent step: only that trigger called them (no
-- client, no worker of any release), and keeping them would keep the recursion in the schema.
-- squawk-ignore ban-drop-function
DROP FUNCTION jobs_settle_dependents();
-- squawk-ignore ban-drop-function
DROP FUNCTION settle_children(bigint, text);

-- The statement of 0016's reclaim_leases(), for the RUNNING rows among _ids (locked by the
-- caller): within budget due again now, past it dead-lettered, a superseded keyed job
-- deleted; one row per job settled.
CREATE FUNCTION reclaim_lease_rows(
    _ids bigint[], _delete_types text[], _expired_error text, _exhausted_error text,
    _history int
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
BEGIN
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
           AND j.type = ANY (_delete_types) AND NOT j.has_dependents
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
           AND NOT (j.type = ANY (_delete_types) AND NOT j.has_dependents)
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

-- 0016's reclaim_leases(), same signature and rows: the rows are chosen as before, then
-- settled by reclaim_lease_rows() under a savepoint, row by row should the batch fail (see
-- the header). The rows are gathered before they are returned: a statement's rows already
-- returned could not be taken back when its AFTER triggers then fail.
CREATE OR REPLACE FUNCTION reclaim_leases(
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
    _ids    bigint[];
    one     bigint;
    settled jsonb := '[]'::jsonb;
    got     jsonb;
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
    BEGIN
        SELECT jsonb_agg(to_jsonb(r)) INTO got
          FROM reclaim_lease_rows(_ids, _delete_types, _expired_error, _exhausted_error,
                                  _history) r;
        settled := coalesce(got, '[]'::jsonb);
    EXCEPTION WHEN OTHERS THEN
        -- One row (or more) cannot be settled: each on its own, so only those stay.
        FOREACH one IN ARRAY _ids LOOP
            BEGIN
                SELECT jsonb_agg(to_jsonb(r)) INTO got
                  FROM reclaim_lease_rows(ARRAY[one], _delete_types, _expired_error,
                                          _exhausted_error, _history) r;
                settled := settled || coalesce(got, '[]'::jsonb);
            EXCEPTION WHEN OTHERS THEN
                RAISE WARNING 'golemq-pg reaper: job % set aside, not settled (SQLSTATE %)',
                    one, SQLSTATE;
            END;
        END LOOP;
    END;
    RETURN QUERY
    SELECT r.id, r.type, r.scope_type, r.scope_id, r.attempts, r.outcome, r.lease_owner,
           r.stuck_for, r.last_error
      FROM jsonb_to_recordset(settled)
           AS r(id bigint, type text, scope_type text, scope_id text, attempts int,
                outcome text, lease_owner text, stuck_for float8, last_error text);
END
$$;

-- 0016's revive_and_rearm() (queue.retry down a chain) walks one generation per turn too,
-- but its statements were planned afresh per turn and, on small frontiers, as hash joins
-- over whole indexes: a 10,000-deep chain took about 20 s to re-arm. One generic plan of
-- index probes, as in settle_dependents(): about 3 s. The body is unchanged.
ALTER FUNCTION revive_and_rearm(bigint[])
    SET plan_cache_mode = force_generic_plan
    SET enable_nestloop = on
    SET enable_mergejoin = off
    SET enable_hashjoin = off;
