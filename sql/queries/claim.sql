-- Claims: the lock-free fast path and the guarded (advisory-locked) path.
--
-- Lock order, global for the whole schema: advisory locks are always taken in ascending
-- order of their 64-bit key, hashtextextended(<schema>:type:<name> or
-- <schema>:resource:<pool>, 0), and a transaction takes either the fast path's SHARED type
-- locks or one guarded claim's EXCLUSIVE locks, never both. Row locks are only ever taken
-- with SKIP LOCKED by claimers, so no claimer waits on a row.


-- name: job_claim
-- Fast path, one statement for every unguarded type with free slots.
--  * req: one row per type (type, limit, lease seconds). Taking the SHARED advisory lock of
--    each type in the target list of a sorted, MATERIALIZED CTE acquires the locks in key
--    order (volatile target-list expressions are evaluated after the Sort) and before any
--    row of that type is read. A guarded claimer that must read this type's running state
--    (not_while_running) takes the EXCLUSIVE lock, so it never checks while a claim of this
--    type is in flight, and no claim of this type starts while it checks.
--  * picked: MATERIALIZED, so the LIMIT ... FOR UPDATE SKIP LOCKED subquery runs exactly
--    once and the rows leased are exactly the rows returned, whatever plan is chosen. Per
--    type via LATERAL: due PENDING rows in claim order from jobs_claim_idx. A keyed row is
--    skipped while a RUNNING job holds the same key, so two jobs of one key never overlap.
--  * the UPDATE bumps attempts and the fencing token and stamps the lease from the
--    database clock.
WITH req AS MATERIALIZED (
    SELECT t.type, t.lim, t.lease,
           pg_advisory_xact_lock_shared(
               hashtextextended(%(lock_prefix)s::text || t.type, 0))::text AS locked
      FROM unnest(%(types)s::text[], %(limits)s::int[], %(leases)s::float8[])
           AS t(type, lim, lease)
     ORDER BY hashtextextended(%(lock_prefix)s::text || t.type, 0)
),
picked AS MATERIALIZED (
    SELECT c.id
      FROM req r
     CROSS JOIN LATERAL (
            SELECT j.id
              FROM {schema}.jobs j
             WHERE j.type = r.type
               AND j.status = 'pending'
               AND j.run_at <= now()
               AND (j.dedupe_key IS NULL OR NOT EXISTS (
                        SELECT 1 FROM {schema}.jobs k
                         WHERE k.type = j.type AND k.dedupe_key = j.dedupe_key
                           AND k.status = 'running'))
             ORDER BY j.priority DESC, j.run_at, j.id
             LIMIT r.lim
               FOR UPDATE SKIP LOCKED
           ) c
),
upd AS (
    -- "= ANY(ARRAY(...))" rather than a join: the planner cannot see the per-type LIMIT and
    -- would estimate thousands of picked rows and hash-join them against a scan of the whole
    -- table; the array makes it probe the primary key once per picked row.
    UPDATE {schema}.jobs j
       SET status = 'running',
           attempts = j.attempts + 1,
           lease_owner = %(owner)s::text,
           lease_token = j.lease_token + 1,
           lease_expires_at = now() + make_interval(
               secs => (SELECT r.lease FROM req r WHERE r.type = j.type)),
           started_at = now(),
           updated_at = now()
     WHERE j.id = ANY (ARRAY(SELECT p.id FROM picked p))
    RETURNING {fragment_claimed_columns}
)
SELECT u.* FROM upd u ORDER BY u.priority DESC, u.run_at, u.id


-- name: fragment_claimed_columns
-- What golemq_pg.store.port.ClaimedJob needs, in the order PostgresStore reads it.
j.id, j.type, j.payload::text AS payload, j.scope_type, j.scope_id, j.attempts,
j.max_attempts, j.priority, j.lease_token, j.created_at, j.lease_expires_at, j.run_at


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


-- name: fragment_claim_gate
-- Guard checks shared by the guarded claims (expects CTE "pools" and the guard parameters).
-- Each *_block column names what blocks the type, NULL when nothing does; "room" is the most
-- jobs the resource pools admit now (NULL: unbounded). Expired leases never block.
pool_use AS MATERIALIZED (
    SELECT p.name, p.conc, p.rate, p.cost, p.rate_cost,
           -- concurrency in use: summed cost of every live-leased member job, of any type
           (SELECT coalesce(sum(m.cost * (
                       SELECT count(*) FROM {schema}.jobs r
                        WHERE r.type = m.type AND r.status = 'running'
                          AND r.lease_expires_at > now())), 0)::bigint
              FROM unnest(%(member_pools)s::text[], %(member_types)s::text[],
                          %(member_costs)s::int[]) AS m(pool, type, cost)
             WHERE m.pool = p.name) AS used,
           -- rate spent in the current fixed window (an elapsed window counts as empty)
           coalesce((SELECT b.spent FROM {schema}.resource_budgets b
                      WHERE b.name = p.name
                        AND b.window_start + make_interval(secs => %(rate_window)s::float8)
                            > now()), 0) AS spent
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
gate AS MATERIALIZED (
    SELECT
        EXISTS (SELECT 1 FROM {schema}.jobs d
                 WHERE d.type = %(type)s::text AND d.status = 'pending'
                   AND d.run_at <= now()) AS has_due,
        (SELECT r.type FROM {schema}.jobs r
          WHERE r.type = ANY(%(not_while_running)s::text[]) AND r.status = 'running'
            AND r.lease_expires_at > now()
          LIMIT 1) AS nwr_block,
        coalesce(
            (SELECT w.type FROM {schema}.jobs w
              WHERE w.type = ANY(%(waits_for)s::text[]) AND w.status = 'running'
                AND w.lease_expires_at > now()
              LIMIT 1),
            -- future-scheduled and backoff-parked jobs do not block: only due ones
            (SELECT w.type FROM {schema}.jobs w
              WHERE w.type = ANY(%(waits_for)s::text[]) AND w.status = 'pending'
                AND w.run_at <= now()
              LIMIT 1)) AS wf_block,
        (SELECT pr.name FROM pool_room pr WHERE pr.conc_room = 0
          ORDER BY pr.name LIMIT 1) AS conc_block,
        (SELECT pr.name FROM pool_room pr WHERE pr.rate_room = 0
          ORDER BY pr.name LIMIT 1) AS rate_block,
        -- least() and min() skip NULLs: NULL only when no pool bounds this type
        (SELECT min(least(pr.conc_room, pr.rate_room)) FROM pool_room pr) AS room
)


-- name: fragment_claim_finish
-- Lease the picked rows and charge the rate budgets (expects CTEs "pools", "gate", "cand",
-- "pick"). cand_rows tells the caller whether the look-ahead window was full.
-- The picked ids are locked in a MATERIALIZED CTE, so the rows leased are exactly the rows
-- returned. The budget row of each rate-limited pool is charged rate_cost per claimed
-- attempt; an elapsed window restarts at now(). The final LEFT JOIN returns one row even
-- when nothing is claimed, carrying the gate's verdict.
locked AS MATERIALIZED (
    SELECT j.id
      FROM {schema}.jobs j
     WHERE j.id = ANY (ARRAY(SELECT pk.id FROM pick pk))
       AND j.status = 'pending'
       FOR UPDATE SKIP LOCKED
),
upd AS (
    -- ANY(ARRAY(...)): primary-key probes, whatever the planner guesses about "locked".
    UPDATE {schema}.jobs j
       SET status = 'running',
           attempts = j.attempts + 1,
           lease_owner = %(owner)s::text,
           lease_token = j.lease_token + 1,
           lease_expires_at = now() + make_interval(secs => %(lease)s::float8),
           started_at = now(),
           updated_at = now()
     WHERE j.id = ANY (ARRAY(SELECT l.id FROM locked l))
    RETURNING {fragment_claimed_columns}
),
charge AS (
    INSERT INTO {schema}.resource_budgets AS b (name, window_start, spent)
    SELECT p.name, now(), p.rate_cost * (SELECT count(*) FROM upd)
      FROM pools p
     WHERE p.rate IS NOT NULL AND p.rate_cost > 0 AND EXISTS (SELECT 1 FROM upd)
    ON CONFLICT (name) DO UPDATE
       SET spent = CASE WHEN b.window_start + make_interval(secs => %(rate_window)s::float8)
                             <= now()
                        THEN EXCLUDED.spent ELSE b.spent + EXCLUDED.spent END,
           window_start = CASE WHEN b.window_start
                                    + make_interval(secs => %(rate_window)s::float8) <= now()
                               THEN now() ELSE b.window_start END
)
SELECT g.has_due, g.nwr_block, g.wf_block, g.conc_block, g.rate_block,
       (SELECT count(*) FROM cand) AS cand_rows, u.*
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
--  * cand: due PENDING rows of the type in claim order, minus keyed rows whose key is
--    running and, with serialize_by_scope, rows whose scope already has a live lease; only a
--    bounded look-ahead window is read, so the cost does not grow with the backlog.
--  * pick: at most one row per scope (unscoped rows are unaffected), up to the limit and
--    the pools' room, and nothing at all when not_while_running or waits_for blocks.
WITH {fragment_claim_pools},
{fragment_claim_gate},
cand AS (
    SELECT j.id, j.scope_type, j.scope_id, j.priority, j.run_at
      FROM {schema}.jobs j
     WHERE j.type = %(type)s::text
       AND j.status = 'pending'
       AND j.run_at <= now()
       AND (j.dedupe_key IS NULL OR NOT EXISTS (
                SELECT 1 FROM {schema}.jobs k
                 WHERE k.type = j.type AND k.dedupe_key = j.dedupe_key
                   AND k.status = 'running'))
       AND (NOT %(serialize_by_scope)s::boolean OR j.scope_type IS NULL OR NOT EXISTS (
                SELECT 1 FROM {schema}.jobs r
                 WHERE r.type = j.type AND r.status = 'running'
                   AND r.scope_type = j.scope_type AND r.scope_id = j.scope_id
                   AND r.lease_expires_at > now()))
     ORDER BY j.priority DESC, j.run_at, j.id
     LIMIT %(lookahead)s::int
),
ranked AS (
    SELECT c.id, c.priority, c.run_at,
           CASE WHEN %(serialize_by_scope)s::boolean AND c.scope_type IS NOT NULL
                THEN row_number() OVER (PARTITION BY c.scope_type, c.scope_id
                                        ORDER BY c.priority DESC, c.run_at, c.id)
                ELSE 1 END AS nth_in_scope
      FROM cand c
),
pick AS (
    SELECT rk.id
      FROM ranked rk, gate g
     WHERE rk.nth_in_scope = 1
       AND g.nwr_block IS NULL AND g.wf_block IS NULL
     ORDER BY rk.priority DESC, rk.run_at, rk.id
     LIMIT least(%(limit)s::int, (SELECT g2.room FROM gate g2))
),
{fragment_claim_finish}


-- name: job_claim_grouped
-- Guarded path for a grouped type: each (type, scope) with due work and no live lease is a
-- group; the first "limit" groups in claim order (by their head job) are leased whole, in
-- arrival order (id), up to max_batch jobs each, and within the pools' room. Unscoped jobs
-- of a grouped type form one group. Jobs added while a group runs wait for the next batch,
-- because the group then has a live lease.
WITH {fragment_claim_pools},
{fragment_claim_gate},
cand AS (
    SELECT j.scope_type, j.scope_id,
           row_number() OVER (ORDER BY j.priority DESC, j.run_at, j.id) AS ord
      FROM (SELECT j0.*
              FROM {schema}.jobs j0
             WHERE j0.type = %(type)s::text
               AND j0.status = 'pending'
               AND j0.run_at <= now()
               AND NOT EXISTS (
                    SELECT 1 FROM {schema}.jobs r
                     WHERE r.type = j0.type AND r.status = 'running'
                       AND r.lease_expires_at > now()
                       AND ((r.scope_type = j0.scope_type AND r.scope_id = j0.scope_id)
                            OR (j0.scope_type IS NULL AND r.scope_type IS NULL)))
             ORDER BY j0.priority DESC, j0.run_at, j0.id
             LIMIT %(lookahead)s::int) j
),
grp AS (
    SELECT c.scope_type, c.scope_id, min(c.ord) AS first_ord
      FROM cand c, gate g
     WHERE g.nwr_block IS NULL AND g.wf_block IS NULL
     GROUP BY c.scope_type, c.scope_id
     ORDER BY first_ord
     LIMIT %(limit)s::int
),
member AS (
    SELECT m.id, row_number() OVER (ORDER BY gr.first_ord, m.id) AS nth
      FROM grp gr
     CROSS JOIN LATERAL (
            -- the group's due jobs in arrival order: jobs_pending_scope_idx for a scope,
            -- the claim index for the (rare) group of unscoped jobs
            SELECT j.id
              FROM {schema}.jobs j
             WHERE gr.scope_type IS NOT NULL
               AND j.type = %(type)s::text
               AND j.status = 'pending'
               AND j.scope_type IS NOT NULL
               AND j.scope_type = gr.scope_type
               AND j.scope_id = gr.scope_id
               AND j.run_at <= now()
               AND (j.dedupe_key IS NULL OR NOT EXISTS (
                        SELECT 1 FROM {schema}.jobs k
                         WHERE k.type = j.type AND k.dedupe_key = j.dedupe_key
                           AND k.status = 'running'))
            UNION ALL
            SELECT j.id
              FROM {schema}.jobs j
             WHERE gr.scope_type IS NULL
               AND j.type = %(type)s::text
               AND j.status = 'pending'
               AND j.scope_type IS NULL
               AND j.run_at <= now()
               AND (j.dedupe_key IS NULL OR NOT EXISTS (
                        SELECT 1 FROM {schema}.jobs k
                         WHERE k.type = j.type AND k.dedupe_key = j.dedupe_key
                           AND k.status = 'running'))
             ORDER BY 1
             LIMIT %(max_batch)s::int
           ) m
),
pick AS (
    SELECT mb.id
      FROM member mb
     WHERE (SELECT g2.room FROM gate g2) IS NULL OR mb.nth <= (SELECT g3.room FROM gate g3)
),
{fragment_claim_finish}
