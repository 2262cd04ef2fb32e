-- golemq-pg 0006: the fast-path claim as a function whose plan is made once per session.
--
-- The claim statement (job_claim in sql/queries/claim.sql until this release) was planned
-- afresh at every call: PostgreSQL kept custom plans for it, and planning cost more than
-- running it. Measured on a small table (EXPLAIN ANALYZE, PostgreSQL 15): 0.30-0.50 ms of
-- planning against 0.30-0.43 ms of execution. `jobs` has twelve indexes, ten of them partial,
-- and the statement names it three times; every mention makes the planner weigh every index
-- and prove every partial predicate. An idle worker pays that between a job's NOTIFY and its
-- handler, and a drain pays it on every batch.
--
-- claim_jobs() runs the same statement, with the same locks, order and results. Its plan is
-- generic (plan_cache_mode) and cached by PL/pgSQL for the life of the session, so a claim
-- costs its execution only (measured: 0.68 ms per call against 1.15 ms for the statement,
-- three jobs claimed from a small table). A generic plan is made without the parameter values
-- and kept until the table's statistics change; one made while the table was small must not
-- turn into a sequential scan or a sort of the whole backlog once the table has grown (with
-- autovacuum off, no ANALYZE ever replaces it). So the function plans with sequential
-- scans, bitmap scans and sorts disabled: each read of `jobs` walks an index in the order
-- the claim needs (jobs_claim_idx for the due rows, the primary key for the update), the
-- plan that is right at every size. The sorts with no alternative (the lock order of the
-- requested types, the order of the result) are still made. jit is off for the same reason
-- as in session_settings, here also through a transaction pooler.
--
-- The settings are the function's own (SET clauses): they apply while it runs and are
-- restored when it returns, whatever connection, pooler or session it runs on.
--
--  * req: one row per type (type, limit, lease seconds). Taking the SHARED advisory lock of
--    each type in the target list of a sorted, MATERIALIZED CTE acquires the locks in key
--    order (volatile target-list expressions are evaluated after the Sort) and before any
--    row of that type is read. A guarded claimer that must read this type's running state
--    (not_while_running) takes the EXCLUSIVE lock, so it never checks while a claim of this
--    type is in flight, and no claim of this type starts while it checks. lock_prefix is
--    '<schema>:type:', the prefix the guarded claims hash too.
--  * picked: MATERIALIZED, so the LIMIT ... FOR UPDATE SKIP LOCKED subquery runs exactly
--    once and the rows leased are exactly the rows returned, whatever plan is chosen. Per
--    type via LATERAL: due PENDING rows in claim order from jobs_claim_idx, none for a
--    paused type (paused_types, probed once per type as a one-time filter of its scan). A
--    keyed row is skipped while a RUNNING job holds the same key, so two jobs of one key
--    never overlap. That probe is one descent of jobs_dedupe_running_idx per keyed row:
--    its OFFSET 0 keeps the planner from turning it into a "hashed SubPlan", which read
--    every running job of every type into a hash on each claim that met a keyed row (the
--    statement before this release did: 7.7-9.6 ms a claim with 20,000 keyed jobs running,
--    0.75-0.93 ms with the probe).
--  * the UPDATE bumps attempts and the fencing token and stamps the lease from the
--    database clock. "= ANY(ARRAY(...))" rather than a join: the planner cannot see the
--    per-type LIMIT and would estimate thousands of picked rows; the array makes it probe
--    the primary key once per picked row.
--  * The result: the columns of fragment_claimed_output (golemq_pg.store.port.ClaimedJob,
--    read by golemq_pg.store.postgres._rows.claimed), in claim order.

CREATE FUNCTION claim_jobs(
    owner text, lock_prefix text, types text[], limits int[], leases float8[]
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
               started_at = now(),
               updated_at = now()
         WHERE j.id = ANY (ARRAY(SELECT p.id FROM picked p))
        RETURNING j.id, j.type, j.payload::text AS payload, j.scope_type, j.scope_id,
                  j.attempts, j.max_attempts, j.priority, j.lease_token, j.created_at,
                  j.lease_expires_at, j.run_at, j.trace_context::text AS trace_context,
                  -- waited: due time to this claim, both from the database clock
                  greatest(extract(epoch FROM j.started_at - j.run_at), 0)::float8 AS waited
    )
    SELECT u.id, u.type, u.payload, u.scope_type, u.scope_id, u.attempts, u.max_attempts,
           u.priority, u.lease_token, u.created_at, u.lease_expires_at, u.trace_context,
           u.waited
      FROM upd u
     ORDER BY u.priority DESC, u.run_at, u.id;
END
$$;
