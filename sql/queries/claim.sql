-- Claims: the lock-free fast path and the guarded (advisory-locked) path.
--
-- Lock order, global for the whole schema: advisory locks are always taken in ascending
-- order of their 64-bit key, hashtextextended(<schema>:type:<name> or
-- <schema>:resource:<pool>, 0), and a transaction takes either the fast path's SHARED type
-- locks or one guarded claim's EXCLUSIVE locks, never both. Row locks are only ever taken
-- with SKIP LOCKED by claimers, so no claimer waits on a row.
--
-- A keyed row is skipped while a RUNNING job holds its dedupe key. Each such probe ends in
-- OFFSET 0, which keeps it one descent of jobs_dedupe_running_idx per keyed row: without it
-- the planner may turn the NOT EXISTS into a "hashed SubPlan" that reads every running job
-- of the type into a hash on each claim (measured: a serialize_by_scope claim 21.5 ms
-- against 13.2 ms, a not_while_running one 19.4 ms against 7.6 ms, with 20,000 keyed jobs
-- running).


-- name: job_claim
-- Fast path, one statement for every unguarded type with free slots: claim_jobs() (migration
-- 0006, where the statement and its locking are described), whose plan is made once per
-- session instead of at every call. Returns the columns of fragment_claimed_output in claim
-- order. lock_prefix is '<schema>:type:', as for the guarded claims' locks. stamp (0015):
-- whether the claim is the handler's start (a transactional handler's); otherwise started_at
-- stays NULL until the worker writes the handler's start (reported PENDING until then).
SELECT * FROM {schema}.claim_jobs(%(owner)s::text, %(lock_prefix)s::text, %(types)s::text[],
                                  %(limits)s::int[], %(leases)s::float8[], %(stamp)s::boolean)


-- name: fragment_claimed_columns
-- What golemq_pg.store.port.ClaimedJob needs, in the order PostgresStore reads it. The trace
-- context is NULL unless the add was traced (golemq_pg.tracing): a NULL column costs the claim
-- nothing measurable, so it is always read rather than kept in a second set of statements.
j.id, j.type, j.payload::text AS payload, j.scope_type, j.scope_id, j.attempts,
j.max_attempts, j.priority, j.lease_token, j.created_at, j.lease_expires_at, j.run_at,
j.trace_context::text AS trace_context,
-- waited: due time to this claim, both from the database clock
greatest(extract(epoch FROM statement_timestamp() - j.run_at), 0)::float8 AS waited


-- name: fragment_claimed_output
-- The columns of fragment_claimed_columns a claim returns to the store, from its "upd" CTE
-- (as u): all but run_at, which only orders them. Each timestamp costs the client a parse
-- per claimed row, and the claim loop's thread is the drain's busiest. claim_jobs()
-- (migration 0006) returns the same columns under the same names (tested): a change here is
-- a new migration there.
u.id, u.type, u.payload, u.scope_type, u.scope_id, u.attempts, u.max_attempts, u.priority,
u.lease_token, u.created_at, u.lease_expires_at, u.trace_context, u.waited


-- name: claim_lock_exclusive
-- Guarded path, first statement of its own transaction: EXCLUSIVE advisory locks on the
-- claimed type (serialises its claimers), on each not_while_running type (waits for
-- in-flight fast-path claims of it, blocks new ones until commit) and on each resource pool
-- the type belongs to, in ascending key order. The claim runs as the next statement, with a
-- snapshot taken after every lock is held.
SELECT pg_advisory_xact_lock(k.key)::text
  FROM (SELECT DISTINCT hashtextextended(n, 0) AS key
          FROM unnest(%(names)s::text[]) AS n
         ORDER BY 1) k


-- name: claim_lock_exclusive_generic
-- claim_lock_exclusive for a transaction the store owns, which also sets, for the claim that
-- follows (transaction-local settings):
--  * its generic plan: the guarded claims plan in about a millisecond, longer than they
--    run, and their generic plans are as good as the custom ones (every statement is
--    written so that no parameter value changes the best plan);
--  * enable_sort off (see claim_plan_guard);
--  * jit off: on a large backlog the claim's estimated cost crosses jit_above_cost although it
--    touches ~100 rows, and compiling would cost more than the statement. Set here, not only
--    for the session: through a transaction pooler the session settings of the store's
--    connection reach one server connection, not the one this transaction runs on.
SELECT pg_advisory_xact_lock(k.key)::text,
       set_config('plan_cache_mode', 'force_generic_plan', true),
       set_config('enable_sort', 'off', true),
       set_config('jit', 'off', true)
  FROM (SELECT DISTINCT hashtextextended(n, 0) AS key
          FROM unnest(%(names)s::text[]) AS n
         ORDER BY 1) k


-- name: claim_plan_guard
-- enable_sort off for the guarded claim that follows in the caller's transaction; returns
-- the setting it replaced, for claim_plan_restore. Every ORDER BY ... LIMIT in the guarded
-- claims is meant to read an index in its order: the scope walk's step in particular takes
-- one entry of jobs_pending_scope_idx. On a table whose statistics are stale (a backlog
-- loaded since the last ANALYZE) every path looks like one row, and the planner may pick
-- "jobs_claim_idx, then sort" instead: each walk step then reads and sorts the type's whole
-- backlog (measured: 15 ms a step, 164 jobs/s). With sorts disabled only the index order
-- qualifies where one exists; the sorts that have no alternative (the result's order, the
-- walk's end) are still planned.
SELECT s.was, set_config('enable_sort', 'off', true)
  FROM (SELECT current_setting('enable_sort') AS was OFFSET 0) s


-- name: claim_plan_restore
-- Puts back what claim_plan_guard replaced, so the caller's transaction plans as before.
SELECT set_config('enable_sort', %(was)s::text, true)


-- name: fragment_claim_gate
-- Guard checks shared by the guarded claims (expects CTE "pools" and the guard parameters).
-- Each *_block column names what blocks the type, NULL when nothing does; "room" is the most
-- jobs the resource pools admit now (NULL: unbounded). Expired leases never block. A paused
-- type (paused_types) has no due work here and a quota of 0.
-- The guarded claims read the clock as statement_timestamp(): the start of the claim
-- statement, which runs after every advisory lock is granted. So a claimer that waited for
-- the locks judges leases, due times and the rate window at the time it actually decides,
-- and successive holders of one lock see non-decreasing clocks (the rate window of a pool
-- moves forward in lock order, and each claim is charged to the window its started_at falls in).
pool_use AS MATERIALIZED (
    SELECT p.name, p.conc, p.rate, p.cost, p.rate_cost,
           -- concurrency in use: summed cost of every live-leased member job, of any type
           (SELECT coalesce(sum(m.cost * (
                       SELECT count(*) FROM {schema}.jobs r
                        WHERE r.type = m.type AND r.status = 'running'
                          AND r.lease_expires_at > statement_timestamp())), 0)::bigint
              FROM unnest(%(member_pools)s::text[], %(member_types)s::text[],
                          %(member_costs)s::int[]) AS m(pool, type, cost)
             WHERE m.pool = p.name) AS used,
           -- rate spent in the current fixed window (an elapsed window counts as empty)
           coalesce((SELECT b.spent FROM {schema}.resource_budgets b
                      WHERE b.name = p.name
                        AND b.window_start + make_interval(secs => %(rate_window)s::float8)
                            > statement_timestamp()), 0) AS spent
      FROM pools p
),
pool_room AS MATERIALIZED (
    SELECT u.name,
           CASE WHEN u.conc IS NULL OR u.cost <= 0 THEN NULL
                ELSE greatest((u.conc - u.used) / u.cost, 0) END AS conc_room,
           CASE WHEN u.rate IS NULL OR u.rate_cost <= 0 THEN NULL
                ELSE greatest((u.rate - u.spent) / u.rate_cost, 0) END AS rate_room
      FROM pool_use u
),
listed_live AS MATERIALIZED (
    -- The not_while_running and waits_for types that hold a live lease, one probe per listed
    -- type as a correlated scalar subquery (which the planner cannot turn into a join): the
    -- generic plan of "type = ANY($n)" walks jobs_lease_idx over the live leases of every
    -- type, and an empty list (most types) would still pay that walk on each claim.
    SELECT lt.type, lt.ord
      FROM unnest(%(not_while_running)s::text[] || %(waits_for)s::text[])
           WITH ORDINALITY AS lt(type, ord)
     WHERE (SELECT true FROM {schema}.jobs r
             WHERE r.type = lt.type AND r.status = 'running'
               AND r.lease_expires_at > statement_timestamp()
             LIMIT 1)
),
paused AS MATERIALIZED (
    -- A paused type claims nothing and counts as having nothing due (not as blocked).
    SELECT EXISTS (SELECT 1 FROM {schema}.paused_types pt
                    WHERE pt.type = %(type)s::text) AS is_paused
),
gate AS MATERIALIZED (
    SELECT
        (SELECT ps.is_paused FROM paused ps) AS paused,
        -- ORDER BY ... LIMIT 1 keeps this on the claim index: a bare EXISTS may be planned
        -- as a sequential scan that first wades through every finished row.
        NOT (SELECT ps.is_paused FROM paused ps) AND (SELECT true FROM {schema}.jobs d
          WHERE d.type = %(type)s::text AND d.status = 'pending'
            AND d.run_at <= statement_timestamp()
          ORDER BY d.priority DESC, d.run_at, d.id
          LIMIT 1) IS NOT NULL AS has_due,
        (SELECT l.type FROM listed_live l
          WHERE l.ord <= cardinality(%(not_while_running)s::text[])
          ORDER BY l.ord LIMIT 1) AS nwr_block,
        coalesce(
            (SELECT l.type FROM listed_live l
              WHERE l.ord > cardinality(%(not_while_running)s::text[])
              ORDER BY l.ord LIMIT 1),
            -- future-scheduled and backoff-parked jobs do not block: only due ones. One
            -- claim-index probe per listed type.
            (SELECT wt.type
               FROM unnest(%(waits_for)s::text[]) AS wt(type)
              WHERE (SELECT true FROM {schema}.jobs w
                      WHERE w.type = wt.type AND w.status = 'pending'
                        AND w.run_at <= statement_timestamp()
                      ORDER BY w.priority DESC, w.run_at, w.id
                      LIMIT 1)
              LIMIT 1)) AS wf_block,
        (SELECT pr.name FROM pool_room pr WHERE pr.conc_room = 0
          ORDER BY pr.name LIMIT 1) AS conc_block,
        (SELECT pr.name FROM pool_room pr WHERE pr.rate_room = 0
          ORDER BY pr.name LIMIT 1) AS rate_block,
        -- least() and min() skip NULLs: NULL only when no pool bounds this type
        (SELECT min(least(pr.conc_room, pr.rate_room)) FROM pool_room pr) AS room
),
quota AS MATERIALIZED (
    -- Most units (jobs; groups for a grouped claim) this claim may lease: nothing while the
    -- type is paused or a not_while_running or waits_for type blocks.
    SELECT CASE WHEN g.nwr_block IS NULL AND g.wf_block IS NULL AND NOT g.paused
                THEN least(%(limit)s::int, coalesce(g.room, %(limit)s::int))
                ELSE 0 END AS n
      FROM gate g
)


-- name: fragment_due_beyond_scan
-- A row when the type has more than "scan_limit" due jobs, i.e. the window's scan stopped
-- before the end of the due backlog (index-only, read only when the window came up short).
(SELECT true FROM {schema}.jobs x
  WHERE x.type = %(type)s::text AND x.status = 'pending'
    AND x.run_at <= statement_timestamp()
  ORDER BY x.priority DESC, x.run_at, x.id
 OFFSET %(scan_limit)s::int LIMIT 1) beyond


-- name: fragment_due_window
-- The window every guarded claim reads first: the first "scan_limit" due PENDING rows of the
-- type in claim order (one bounded range of jobs_claim_idx, no sort), as a derived table the
-- statement names. fragment_due_beyond_scan tells whether the due backlog goes on past it.
(SELECT d.id, d.type, d.scope_type, d.scope_id, d.priority, d.run_at, d.dedupe_key
   FROM {schema}.jobs d
  WHERE d.type = %(type)s::text
    AND d.status = 'pending'
    AND d.run_at <= statement_timestamp()
  ORDER BY d.priority DESC, d.run_at, d.id
  LIMIT %(scan_limit)s::int)


-- name: fragment_key_free
-- Job j (the alias every use gives it) is not a keyed row whose key a RUNNING job holds: one
-- descent of jobs_dedupe_running_idx per keyed row (OFFSET 0: see the top of this file).
(j.dedupe_key IS NULL OR NOT EXISTS (
     SELECT 1 FROM {schema}.jobs k
      WHERE k.type = j.type AND k.dedupe_key = j.dedupe_key
        AND k.status = 'running'
      OFFSET 0))


-- name: fragment_live_scopes
-- The scopes of the claimed type with a live lease (expects the guard parameters), read once
-- per claim. While the type has at most "scan_limit" such jobs ("live_all"), the window and
-- the scope walk test a scope against a hash of this set (NOT IN an uncorrelated subquery)
-- instead of probing jobs_running_idx once per row or step: a scope whose backlog heads the
-- claim order while it runs would otherwise be probed once per pending row. A larger running
-- set (the leases of many workers) falls back to the probes, so the read stays bounded. Each
-- probe ends in OFFSET 0: with statistics that say nothing runs (a VACUUM ANALYZE while
-- idle) the planner otherwise made it a "hashed SubPlan" that read every running row of the
-- type, and every dead entry of jobs_running_idx, on each claim.
live AS MATERIALIZED (
    SELECT r.scope_type, r.scope_id
      FROM {schema}.jobs r
     WHERE r.type = %(type)s::text AND r.status = 'running'
       AND r.scope_type IS NOT NULL
       AND r.lease_expires_at > statement_timestamp()
     LIMIT %(scan_limit)s::int + 1
),
live_all AS MATERIALIZED (
    SELECT (SELECT count(*) FROM live) <= %(scan_limit)s::int AS ok
)


-- name: fragment_claim_walk
-- The scope walk of serialize_by_scope and grouped claims (expects CTEs "taken": the scopes
-- already claimed from the claim-order window, and "walk_need": how many more to find).
-- When the window holds too few free scopes (a backlog bunched by scope), further free
-- scopes are found by a loose index scan over jobs_pending_scope_idx: one index descent per
-- distinct scope, starting after the caller's cursor (the scope where its previous walk
-- ended) and wrapping around once, so successive claims visit the scopes in turn. That
-- descent lands on the scope's oldest pending job. A scope with a live lease, or already
-- taken, is skipped. Otherwise its head is its highest-priority due job, oldest first, among
-- its first "scope_depth" due jobs in arrival order; when every pending job of the type has
-- one priority (two probes at the ends of the claim index) that is its oldest due job,
-- usually the very row the descent landed on, so nothing more is read.
-- The walk stops after "walk_need" heads or "walk_limit" scopes, whichever is first.
-- With "hold_groups" (grouped claims) a held group (see job_claim_grouped) is not free.
depth AS MATERIALIZED (
    SELECT CASE WHEN (SELECT x.priority FROM {schema}.jobs x
                       WHERE x.type = %(type)s::text AND x.status = 'pending'
                       ORDER BY x.priority DESC, x.run_at, x.id LIMIT 1)
                   = (SELECT x.priority FROM {schema}.jobs x
                       WHERE x.type = %(type)s::text AND x.status = 'pending'
                       ORDER BY x.priority, x.run_at DESC, x.id DESC LIMIT 1)
                THEN 1 ELSE %(scope_depth)s::int END AS n
),
walk (step, scope_type, scope_id, first_type, first_id, head, found) AS (
    SELECT 0, %(cursor_type)s::text, %(cursor_id)s::text, NULL::text, NULL::text,
           NULL::bigint, 0
    UNION ALL
    SELECT w.step + 1, n.scope_type, n.scope_id,
           CASE WHEN w.step = 0 THEN n.scope_type ELSE w.first_type END,
           CASE WHEN w.step = 0 THEN n.scope_id ELSE w.first_id END,
           h.id, w.found + (h.id IS NOT NULL)::int
      FROM walk w
     CROSS JOIN LATERAL (
            -- the next scope after w's, wrapping around: its oldest pending job
            (SELECT s.scope_type, s.scope_id, s.id, s.run_at, s.dedupe_key
               FROM {schema}.jobs s
              WHERE s.type = %(type)s::text AND s.status = 'pending'
                AND s.scope_type IS NOT NULL
                AND (s.scope_type, s.scope_id) > (w.scope_type, w.scope_id)
              ORDER BY s.scope_type, s.scope_id, s.id
              LIMIT 1)
            UNION ALL
            (SELECT s.scope_type, s.scope_id, s.id, s.run_at, s.dedupe_key
               FROM {schema}.jobs s
              WHERE s.type = %(type)s::text AND s.status = 'pending'
                AND s.scope_type IS NOT NULL
              ORDER BY s.scope_type, s.scope_id, s.id
              LIMIT 1)
            LIMIT 1
           ) n
     CROSS JOIN LATERAL (
            SELECT CASE WHEN (SELECT la.ok FROM live_all la)
                        THEN (n.scope_type, n.scope_id) NOT IN (
                                 SELECT l.scope_type, l.scope_id FROM live l)
                        ELSE NOT EXISTS (
                                 SELECT 1 FROM {schema}.jobs r
                                  WHERE r.type = %(type)s::text AND r.status = 'running'
                                    AND r.scope_type = n.scope_type
                                    AND r.scope_id = n.scope_id
                                    AND r.lease_expires_at > statement_timestamp()
                                 OFFSET 0) END
                   -- NOT IN an uncorrelated subquery: one hash of "taken" for the whole walk
                   -- (a correlated NOT EXISTS rescans it at every step). No NULLs on either
                   -- side: "taken" and the walk only hold scoped rows (jobs_scope_pair).
                   AND (n.scope_type, n.scope_id) NOT IN (
                       SELECT t.scope_type, t.scope_id FROM taken t)
                   -- grouped: a group whose failed batch waits out its backoff is held
                   -- (see job_claim_grouped)
                   AND (NOT %(hold_groups)s::boolean OR (
                       SELECT true
                         FROM (SELECT p.run_at, p.last_error
                                 FROM {schema}.jobs p
                                WHERE p.type = %(type)s::text AND p.status = 'pending'
                                  AND p.scope_type IS NOT NULL
                                  AND p.scope_type = n.scope_type
                                  AND p.scope_id = n.scope_id
                                ORDER BY p.id
                                LIMIT %(hold_depth)s::int) p
                        WHERE p.run_at > statement_timestamp() AND p.last_error IS NOT NULL
                        LIMIT 1) IS NULL)
                   AS free
           ) f
     CROSS JOIN LATERAL (
            SELECT CASE
                WHEN NOT f.free THEN NULL
                WHEN (SELECT dp.n FROM depth dp) = 1
                     AND n.run_at <= statement_timestamp()
                     AND (n.dedupe_key IS NULL OR NOT EXISTS (
                              SELECT 1 FROM {schema}.jobs k
                               WHERE k.type = %(type)s::text AND k.dedupe_key = n.dedupe_key
                                 AND k.status = 'running'
                               OFFSET 0))
                THEN n.id
                ELSE (SELECT d.id
                        FROM (SELECT j.id, j.priority
                                FROM {schema}.jobs j
                               WHERE j.type = %(type)s::text AND j.status = 'pending'
                                 AND j.scope_type IS NOT NULL
                                 AND j.scope_type = n.scope_type AND j.scope_id = n.scope_id
                                 AND j.run_at <= statement_timestamp()
                                 AND (j.dedupe_key IS NULL OR NOT EXISTS (
                                          SELECT 1 FROM {schema}.jobs k
                                           WHERE k.type = j.type
                                             AND k.dedupe_key = j.dedupe_key
                                             AND k.status = 'running'
                                           OFFSET 0))
                               ORDER BY j.id
                               LIMIT (SELECT dp.n FROM depth dp)) d
                       ORDER BY d.priority DESC, d.id
                       LIMIT 1)
                END AS id
             -- OFFSET 0: computed once per step (inlined, the CASE would run once per use of h.id)
             OFFSET 0
           ) h
     WHERE w.found < (SELECT wn.n FROM walk_need wn)
       AND w.step < %(walk_limit)s::int
       -- once around: stop on coming back to the first scope visited
       AND (w.step = 0 OR n.scope_type <> w.first_type OR n.scope_id <> w.first_id)
),
walk_end AS (
    SELECT w.scope_type, w.scope_id FROM walk w ORDER BY w.step DESC LIMIT 1
)


-- name: fragment_claim_finish
-- Lease the picked rows and charge the rate budgets (expects CTEs "pools", "gate", "pick",
-- "walk_end", and "cand" and "window_units": the window's rows and the units it took, whose
-- counts tell the caller how well the window paid). The picked ids are locked in a
-- MATERIALIZED CTE, so the rows leased are exactly the rows returned. The budget row of each
-- rate-limited pool is charged rate_cost per claimed attempt; an elapsed window restarts now.
-- The final LEFT JOIN returns one row even when nothing is claimed, carrying the gate's
-- verdict and where the scope walk ended.
locked AS MATERIALIZED (
    -- No status test in this scan: with one, the partial indexes on pending rows qualify,
    -- and the planner may pick jobs_claim_idx (id is its last column), whose "id = ANY"
    -- scan reads the whole index once per picked id. Without it only the primary key
    -- serves the scan; the status of each locked row (its latest version, the lock having
    -- followed any concurrent update) is tested by the UPDATE's id list below.
    SELECT j.id, j.status
      FROM {schema}.jobs j
     WHERE j.id = ANY (ARRAY(SELECT pk.id FROM pick pk))
       FOR UPDATE SKIP LOCKED
),
upd AS (
    -- ANY(ARRAY(...)): primary-key probes, whatever the planner guesses about "locked".
    UPDATE {schema}.jobs j
       SET status = 'running',
           attempts = j.attempts + 1,
           lease_owner = %(owner)s::text,
           lease_token = j.lease_token + 1,
           lease_expires_at = statement_timestamp() + make_interval(secs => %(lease)s::float8),
           -- the handler's start, written by the worker (0015), unless the claim is it
           started_at = CASE WHEN %(stamp)s::boolean THEN statement_timestamp() END,
           updated_at = statement_timestamp()
     WHERE j.id = ANY (ARRAY(SELECT l.id FROM locked l WHERE l.status = 'pending'))
    RETURNING {fragment_claimed_columns}
),
charge AS (
    INSERT INTO {schema}.resource_budgets AS b (name, window_start, spent)
    SELECT p.name, statement_timestamp(), p.rate_cost * (SELECT count(*) FROM upd)
      FROM pools p
     WHERE p.rate IS NOT NULL AND p.rate_cost > 0 AND EXISTS (SELECT 1 FROM upd)
    ON CONFLICT (name) DO UPDATE
       SET spent = CASE WHEN b.window_start + make_interval(secs => %(rate_window)s::float8)
                             <= statement_timestamp()
                        THEN EXCLUDED.spent ELSE b.spent + EXCLUDED.spent END,
           window_start = CASE WHEN b.window_start
                                    + make_interval(secs => %(rate_window)s::float8)
                                    <= statement_timestamp()
                               THEN statement_timestamp() ELSE b.window_start END
)
SELECT g.has_due, g.nwr_block, g.wf_block, g.conc_block, g.rate_block,
       (SELECT we.scope_type FROM walk_end we) AS walk_type,
       (SELECT we.scope_id FROM walk_end we) AS walk_id,
       (SELECT count(*) FROM cand) AS window_rows,
       (SELECT wu.n FROM window_units wu) AS window_units,
       {fragment_claimed_output}
  FROM gate g
  LEFT JOIN upd u ON true
 ORDER BY u.priority DESC, u.run_at, u.id


-- name: fragment_claim_pools
-- The resource pools the claimed type belongs to, with its cost in each.
pools AS MATERIALIZED (
    SELECT p.name, p.conc, p.rate, p.cost, p.rate_cost
      FROM unnest(%(pool_names)s::text[], %(pool_concurrency)s::int[], %(pool_rate)s::int[],
                  %(pool_costs)s::int[], %(pool_rate_costs)s::int[])
           AS p(name, conc, rate, cost, rate_cost)
)


-- name: job_claim_guarded
-- Guarded path for one non-grouped type (serialize_by_scope, not_while_running, waits_for,
-- resource pools), run right after claim_lock_exclusive in the same transaction.
--  * cand: a window of the first "lookahead" due PENDING rows of the type in claim order
--    (without serialize_by_scope the first "quota": no more could be picked), minus keyed
--    rows whose key is running and, with serialize_by_scope, rows whose scope has a live
--    lease, taken from the first "scan_limit" due rows (so that a running scope
--    with a long backlog at the head costs a bounded read); numbered in claim order (the
--    index order, so no sort).
--  * window_pick: up to the quota in claim order; with serialize_by_scope only the first row
--    of each scope (found by hashing, not by sorting the window on its text columns).
--  * with serialize_by_scope, when the window left quota unused but did not see the whole
--    due backlog (a backlog bunched by scope), the scope walk finds further free scopes.
WITH RECURSIVE {fragment_claim_pools},
{fragment_claim_gate},
{fragment_live_scopes},
cand AS MATERIALIZED (
    SELECT c.id, c.scope_type, c.scope_id,
           row_number() OVER (ORDER BY c.priority DESC, c.run_at, c.id) AS ord
      FROM (SELECT j.id, j.scope_type, j.scope_id, j.priority, j.run_at
              FROM {fragment_due_window} j
             WHERE {fragment_key_free}
               AND (NOT %(serialize_by_scope)s::boolean OR j.scope_type IS NULL OR CASE
                    WHEN (SELECT la.ok FROM live_all la)
                    THEN (j.scope_type, j.scope_id) NOT IN (
                             SELECT l.scope_type, l.scope_id FROM live l)
                    ELSE NOT EXISTS (
                             SELECT 1 FROM {schema}.jobs r
                              WHERE r.type = j.type AND r.status = 'running'
                                AND r.scope_type = j.scope_type AND r.scope_id = j.scope_id
                                AND r.lease_expires_at > statement_timestamp()
                             OFFSET 0) END)
             ORDER BY j.priority DESC, j.run_at, j.id
             -- without serialize_by_scope the window's first "quota" rows are the pick:
             -- reading further (e.g. a pool with room for 32 of the 500 asked) is wasted
             LIMIT CASE WHEN %(serialize_by_scope)s::boolean THEN %(lookahead)s::int
                        ELSE (SELECT q.n FROM quota q) END) c
),
scope_first AS (
    SELECT min(c.ord) AS ord
      FROM cand c
     WHERE c.scope_type IS NOT NULL
     GROUP BY c.scope_type, c.scope_id
),
window_pick AS MATERIALIZED (
    SELECT c.id, c.scope_type, c.scope_id
      FROM cand c
     WHERE NOT %(serialize_by_scope)s::boolean OR c.scope_type IS NULL
        OR c.ord IN (SELECT f.ord FROM scope_first f)
     ORDER BY c.ord
     LIMIT (SELECT q.n FROM quota q)
),
taken AS (
    SELECT wp.scope_type, wp.scope_id FROM window_pick wp WHERE wp.scope_type IS NOT NULL
),
window_units AS (
    -- jobs the window took, scoped or not (an unscoped job is a unit of its own)
    SELECT count(*) AS n FROM window_pick
),
walk_need AS MATERIALIZED (
    SELECT CASE WHEN NOT %(serialize_by_scope)s::boolean
                  OR (SELECT count(*) FROM window_pick) >= (SELECT q.n FROM quota q)
                THEN 0
                WHEN (SELECT count(*) FROM cand) >= %(lookahead)s::int
                  OR (SELECT true FROM {fragment_due_beyond_scan}) IS NOT NULL
                THEN (SELECT q.n FROM quota q) - (SELECT count(*) FROM window_pick)
                ELSE 0 END AS n
),
{fragment_claim_walk},
pick AS (
    SELECT wp.id FROM window_pick wp
    UNION ALL
    SELECT w.head FROM walk w WHERE w.head IS NOT NULL
),
{fragment_claim_finish}


-- name: job_claim_pooled
-- Guarded path for a type guarded by resource pools only (no serialize_by_scope,
-- not_while_running or waits_for; not grouped), run right after claim_lock_exclusive in the
-- same transaction, as job_claim_guarded is: the same gate (pause, the pools' room and rate
-- budgets, charged by the same finish), the same window of the first "scan_limit" due rows
-- minus keyed rows whose key is running, but none of the scope machinery (live scopes,
-- scope_first, the scope walk), which a pool-only type never needs. Its plan is about a
-- third of job_claim_guarded's, whose executor start-up and unused branches each claim of a
-- binding pool paid (a pool as wide as the handler leases at most that many jobs per commit).
WITH {fragment_claim_pools},
{fragment_claim_gate},
cand AS MATERIALIZED (
    SELECT j.id
      FROM {fragment_due_window} j
     WHERE {fragment_key_free}
     ORDER BY j.priority DESC, j.run_at, j.id
     LIMIT (SELECT q.n FROM quota q)
),
window_units AS (
    SELECT count(*) AS n FROM cand
),
walk_end AS (
    -- no scope walk: the finish's walk columns stay NULL
    SELECT NULL::text AS scope_type, NULL::text AS scope_id
),
pick AS (
    SELECT c.id FROM cand c
),
{fragment_claim_finish}


-- name: job_claim_grouped
-- Guarded path for a grouped type: each (type, scope) with due work and no live lease is a
-- group; up to "limit" groups are leased whole, in arrival order (id), up to max_batch jobs
-- each, and within the pools' room. Groups come first from the claim-order window (by their
-- head job), then, when the window left room but did not see the whole due backlog, from
-- the scope walk (the window is read like job_claim_guarded's). Unscoped
-- jobs of a grouped type form one group. Jobs added while a group runs wait for the next
-- batch, because the group then has a live lease.
-- A failed batch retries as one unit with every job that joined its group meanwhile: while
-- a retried job of the group waits out its backoff (PENDING, run_at in the future and a
-- last_error: only a retry leaves a pending job so), the group is held, and its due jobs
-- (late arrivals) wait with it; when the backoff ends they are due together, and the batch
-- takes them in arrival order. A retried batch holds the oldest pending jobs of its group,
-- so a group is tested by its first "hold_depth" pending jobs in id order (one bounded read
-- of jobs_pending_scope_idx per group tested). A job added with its own delay has no
-- last_error: it never holds its group, and joins the first batch claimed once it is due.
-- The group of unscoped jobs is never held.
WITH RECURSIVE {fragment_claim_pools},
{fragment_claim_gate},
{fragment_live_scopes},
cand AS MATERIALIZED (
    SELECT c.scope_type, c.scope_id,
           row_number() OVER (ORDER BY c.priority DESC, c.run_at, c.id) AS ord
      FROM (SELECT j0.scope_type, j0.scope_id, j0.priority, j0.run_at, j0.id
              FROM {fragment_due_window} j0
             WHERE true
               -- the group has no live lease; two plain equality tests rather than one
               -- OR-ed one, so the scoped test is a hashed lookup, not a nested loop
               AND (j0.scope_type IS NULL OR CASE
                    WHEN (SELECT la.ok FROM live_all la)
                    THEN (j0.scope_type, j0.scope_id) NOT IN (
                             SELECT l.scope_type, l.scope_id FROM live l)
                    ELSE NOT EXISTS (
                             SELECT 1 FROM {schema}.jobs r
                              WHERE r.type = %(type)s::text AND r.status = 'running'
                                AND r.scope_type = j0.scope_type AND r.scope_id = j0.scope_id
                                AND r.lease_expires_at > statement_timestamp()
                             OFFSET 0) END)
               AND (j0.scope_type IS NOT NULL OR NOT EXISTS (
                    SELECT 1 FROM {schema}.jobs r
                     WHERE r.type = %(type)s::text AND r.status = 'running'
                       AND r.scope_type IS NULL
                       AND r.lease_expires_at > statement_timestamp()))
             ORDER BY j0.priority DESC, j0.run_at, j0.id
             LIMIT %(lookahead)s::int) c
),
window_grp AS MATERIALIZED (
    -- the window's groups in claim order (by their head job), held ones skipped; the hold
    -- test runs under the LIMIT, so only until the quota is met
    SELECT g.scope_type, g.scope_id, g.first_ord
      FROM (SELECT c.scope_type, c.scope_id, min(c.ord) AS first_ord
              FROM cand c
             GROUP BY c.scope_type, c.scope_id
             ORDER BY first_ord) g
     WHERE g.scope_type IS NULL OR (
           SELECT true
             FROM (SELECT p.run_at, p.last_error
                     FROM {schema}.jobs p
                    WHERE p.type = %(type)s::text AND p.status = 'pending'
                      AND p.scope_type IS NOT NULL
                      AND p.scope_type = g.scope_type AND p.scope_id = g.scope_id
                    ORDER BY p.id
                    LIMIT %(hold_depth)s::int) p
            WHERE p.run_at > statement_timestamp() AND p.last_error IS NOT NULL
            LIMIT 1) IS NULL
     ORDER BY g.first_ord
     LIMIT (SELECT q.n FROM quota q)
),
taken AS (
    SELECT wg.scope_type, wg.scope_id FROM window_grp wg WHERE wg.scope_type IS NOT NULL
),
window_units AS (
    -- groups the window took, the group of unscoped jobs included
    SELECT count(*) AS n FROM window_grp
),
walk_need AS MATERIALIZED (
    SELECT CASE WHEN (SELECT count(*) FROM window_grp) >= (SELECT q.n FROM quota q)
                THEN 0
                WHEN (SELECT count(*) FROM cand) >= %(lookahead)s::int
                  OR (SELECT true FROM {fragment_due_beyond_scan}) IS NOT NULL
                THEN (SELECT q.n FROM quota q) - (SELECT count(*) FROM window_grp)
                ELSE 0 END AS n
),
{fragment_claim_walk},
grp AS (
    SELECT wg.scope_type, wg.scope_id, wg.first_ord FROM window_grp wg
    UNION ALL
    SELECT w.scope_type, w.scope_id, %(lookahead)s::bigint + w.step
      FROM walk w WHERE w.head IS NOT NULL
),
member AS (
    SELECT m.id, row_number() OVER (ORDER BY gr.first_ord, m.id) AS nth
      FROM grp gr
     CROSS JOIN LATERAL (
            -- the group's due jobs in arrival order, each branch limited on its own so that
            -- a scope's branch stops after max_batch entries of jobs_pending_scope_idx; the
            -- (rare) group of unscoped jobs reads the claim index
            (SELECT j.id
              FROM {schema}.jobs j
             WHERE gr.scope_type IS NOT NULL
               AND j.type = %(type)s::text
               AND j.status = 'pending'
               AND j.scope_type IS NOT NULL
               AND j.scope_type = gr.scope_type
               AND j.scope_id = gr.scope_id
               AND j.run_at <= statement_timestamp()
               AND {fragment_key_free}
             ORDER BY j.id
             LIMIT %(max_batch)s::int)
            UNION ALL
            (SELECT j.id
              FROM {schema}.jobs j
             WHERE gr.scope_type IS NULL
               AND j.type = %(type)s::text
               AND j.status = 'pending'
               AND j.scope_type IS NULL
               AND j.run_at <= statement_timestamp()
               AND {fragment_key_free}
             ORDER BY j.id
             LIMIT %(max_batch)s::int)
           ) m
),
pick AS (
    SELECT mb.id
      FROM member mb
     WHERE (SELECT g2.room FROM gate g2) IS NULL OR mb.nth <= (SELECT g3.room FROM gate g3)
),
{fragment_claim_finish}
