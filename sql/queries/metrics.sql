-- Statements read by the Prometheus collector at scrape time (golemq_pg.metrics). Each one
-- must stay cheap on a jobs table of millions of rows: it reads indexes by descents and
-- capped ranges, never the table or the kept history.


-- name: metrics_type_gauges
-- One row per job type: due and scheduled PENDING counts, the RUNNING and WAITING counts
-- (each exact up to %(cap)s, else %(cap)s), the exact FAILED count, the oldest due job's age, whether
-- the type is paused.
--  * pairs: the distinct (type, priority) of the backlog, by a loose index scan of
--    jobs_claim_idx (type, priority DESC, run_at, id): one descent per pair, however long
--    the backlog. Per pair, run_at is the next index column, so the due rows (run_at <=
--    now()) and the scheduled ones are two ranges, each read up to the cap, and the oldest
--    due run_at is the first entry of the first range (one more descent).
--  * failed: the history's maintained counts (history_totals, 0008: exact, a few rows per
--    type whatever the history's size), plus an older release's dead letters still in
--    `jobs` (found through jobs_failed_type_idx the same way, each type's read up to the cap).
--  * running: live and expired leases, bounded by the workers' concurrency (jobs_running_idx).
--  * a type with no such rows still gets a row (zeros) while it is paused or a live
--    worker handles it, so its series drop to 0 rather than vanish.
WITH RECURSIVE pairs(type, priority) AS (
    (SELECT j.type, j.priority
       FROM {schema}.jobs j
      WHERE j.status = 'pending'
      ORDER BY j.type, j.priority DESC
      LIMIT 1)
    UNION ALL
    SELECT nx.type, nx.priority
      FROM pairs pr
     CROSS JOIN LATERAL (
            -- the next priority of the same type, else the first pair of the next type
            -- (an Append stops at the first row: the second branch runs only when needed)
            (SELECT j.type, j.priority
               FROM {schema}.jobs j
              WHERE j.status = 'pending' AND j.type = pr.type AND j.priority < pr.priority
              ORDER BY j.priority DESC
              LIMIT 1)
            UNION ALL
            (SELECT j.type, j.priority
               FROM {schema}.jobs j
              WHERE j.status = 'pending' AND j.type > pr.type
              ORDER BY j.type, j.priority DESC
              LIMIT 1)
            LIMIT 1
           ) nx
),
backlog AS (
    SELECT p.type,
           least(sum((SELECT count(*) FROM (
                        SELECT 1 FROM {schema}.jobs j
                         WHERE j.status = 'pending' AND j.type = p.type
                           AND j.priority = p.priority AND j.run_at <= now()
                         LIMIT %(cap)s::int) d)), %(cap)s::int)::bigint AS pending,
           least(sum((SELECT count(*) FROM (
                        SELECT 1 FROM {schema}.jobs j
                         WHERE j.status = 'pending' AND j.type = p.type
                           AND j.priority = p.priority AND j.run_at > now()
                         LIMIT %(cap)s::int) s)), %(cap)s::int)::bigint AS scheduled,
           min((SELECT j.run_at FROM {schema}.jobs j
                 WHERE j.status = 'pending' AND j.type = p.type
                   AND j.priority = p.priority AND j.run_at <= now()
                 ORDER BY j.run_at
                 LIMIT 1)) AS oldest_due
      FROM pairs p
     GROUP BY p.type
),
failed_types(type) AS (
    (SELECT j.type FROM {schema}.jobs j WHERE j.status = 'failed' ORDER BY j.type LIMIT 1)
    UNION ALL
    SELECT (SELECT j.type FROM {schema}.jobs j
             WHERE j.status = 'failed' AND j.type > ft.type
             ORDER BY j.type LIMIT 1)
      FROM failed_types ft
     WHERE ft.type IS NOT NULL
),
failed AS (
    -- the history's dead letters from the maintained counts (exact, 0008), plus an older
    -- release's still in `jobs`, up to the cap
    SELECT x.type, sum(x.n)::bigint AS failed
      FROM (SELECT h.type, h.n FROM {schema}.history_totals h WHERE h.status = 'failed'
            UNION ALL
            SELECT ft.type,
                   (SELECT count(*) FROM (
                        SELECT 1 FROM {schema}.jobs j
                         WHERE j.status = 'failed' AND j.type = ft.type
                         LIMIT %(cap)s::int) f)
              FROM failed_types ft
             WHERE ft.type IS NOT NULL) x
     GROUP BY x.type
),
running AS (
    -- a running row without started_at (claimed, its handler not started: 0015) is pending
    SELECT j.type,
           least(count(*) FILTER (WHERE j.started_at IS NOT NULL), %(cap)s::int)::bigint
             AS running,
           count(*) FILTER (WHERE j.started_at IS NULL) AS unstarted
      FROM {schema}.jobs j
     WHERE j.status = 'running'
     GROUP BY j.type
),
waiting_types(type) AS (
    -- the types of WAITING jobs (0016), one descent of jobs_waiting_idx each
    (SELECT j.type FROM {schema}.jobs j WHERE j.status = 'waiting' ORDER BY j.type LIMIT 1)
    UNION ALL
    SELECT (SELECT j.type FROM {schema}.jobs j
             WHERE j.status = 'waiting' AND j.type > wt.type
             ORDER BY j.type LIMIT 1)
      FROM waiting_types wt
     WHERE wt.type IS NOT NULL
),
waiting AS (
    SELECT wt.type,
           (SELECT count(*) FROM (
                SELECT 1 FROM {schema}.jobs j
                 WHERE j.status = 'waiting' AND j.type = wt.type
                 LIMIT %(cap)s::int) w)::bigint AS waiting
      FROM waiting_types wt
     WHERE wt.type IS NOT NULL
),
served(type) AS (
    -- the handler types of workers whose heartbeat is fresh (worker_list's "lost" rule)
    SELECT DISTINCT h.type
      FROM {schema}.workers w
     CROSS JOIN LATERAL jsonb_object_keys(w.handlers) AS h(type)
     WHERE w.last_seen_at
           >= now() - make_interval(secs => %(lost_after)s::float8 * w.heartbeat_seconds)
),
types(type) AS (
    SELECT b.type FROM backlog b
    UNION SELECT f.type FROM failed f
    UNION SELECT r.type FROM running r
    UNION SELECT w.type FROM waiting w
    UNION SELECT pt.type FROM {schema}.paused_types pt
    UNION SELECT s.type FROM served s
)
SELECT t.type,
       least(coalesce(b.pending, 0) + coalesce(r.unstarted, 0), %(cap)s::int),
       coalesce(b.scheduled, 0), coalesce(r.running, 0),
       coalesce(f.failed, 0),
       extract(epoch FROM now() - b.oldest_due)::float8,
       EXISTS (SELECT 1 FROM {schema}.paused_types pt WHERE pt.type = t.type),
       coalesce(w.waiting, 0)
  FROM types t
  LEFT JOIN backlog b ON b.type = t.type
  LEFT JOIN failed f ON f.type = t.type
  LEFT JOIN running r ON r.type = t.type
  LEFT JOIN waiting w ON w.type = t.type
 ORDER BY t.type
