-- The web dashboard's reads (golemq_pg.store.dashboard), and its one bulk write.
--
-- Each stays bounded on a jobs table of millions of rows: types are found by a loose index
-- scan (one index probe per distinct type) on the partial indexes, counts stop at a cap,
-- per-minute throughput reads only the last hour of jobs_finished_idx, dead letters are read
-- through jobs_failed_idx (0003) newest first, per type, up to a cap, and a jobs page looks
-- at a bounded id range below its cursor (primary key). PostgresStore runs them after
-- dashboard_timeout, in one transaction.


-- name: dashboard_timeout
-- A short statement_timeout for the rest of this transaction only (SET LOCAL, as a function
-- so the value is a parameter), and no JIT: these statements' estimated costs cross
-- jit_above_cost on a big table although they read little (on a pool the store did not
-- open, whose sessions may have JIT on, compiling would cost more than the statement).
SELECT set_config('statement_timeout', %(timeout_ms)s::text, true),
       set_config('jit', 'off', true)


-- name: dashboard_type_counts
-- One row per type with pending, running or failed jobs: capped counts of due, scheduled,
-- running and failed jobs, and the age of its oldest due job.
WITH RECURSIVE pend(type) AS (
    (SELECT j.type FROM {schema}.jobs j WHERE j.status = 'pending' ORDER BY j.type LIMIT 1)
    UNION ALL
    SELECT (SELECT j.type FROM {schema}.jobs j
             WHERE j.status = 'pending' AND j.type > p.type ORDER BY j.type LIMIT 1)
      FROM pend p WHERE p.type IS NOT NULL
),
fail(type) AS (
    -- an older release's dead letters still in `jobs` (0008 moves them out)
    (SELECT j.type FROM {schema}.jobs j WHERE j.status = 'failed' ORDER BY j.type LIMIT 1)
    UNION ALL
    SELECT (SELECT j.type FROM {schema}.jobs j
             WHERE j.status = 'failed' AND j.type > f.type ORDER BY j.type LIMIT 1)
      FROM fail f WHERE f.type IS NOT NULL
),
dead AS (
    -- the history's dead letters, counted exactly by the maintained counts (0008)
    SELECT h.type, h.n FROM {schema}.history_totals h WHERE h.status = 'failed'
),
run AS (
    -- a running row without started_at (claimed, its handler not started: 0015) is due
    SELECT j.type, count(*) FILTER (WHERE j.started_at IS NOT NULL) AS n,
           count(*) FILTER (WHERE j.started_at IS NULL) AS unstarted
      FROM {schema}.jobs j WHERE j.status = 'running' GROUP BY j.type
),
types AS (
    SELECT p.type FROM pend p WHERE p.type IS NOT NULL
    UNION SELECT f.type FROM fail f WHERE f.type IS NOT NULL
    UNION SELECT d.type FROM dead d
    UNION SELECT r.type FROM run r
)
SELECT t.type,
       CASE WHEN c.seen < %(cap)s::bigint THEN c.due
            ELSE (SELECT count(*) FROM (SELECT 1 FROM {schema}.jobs j
                                         WHERE j.status = 'pending' AND j.type = t.type
                                           AND j.run_at <= now() LIMIT %(cap)s::bigint) x)
       END + coalesce((SELECT r.unstarted FROM run r WHERE r.type = t.type), 0) AS due,
       CASE WHEN c.seen < %(cap)s::bigint THEN c.scheduled
            ELSE (SELECT count(*) FROM (SELECT 1 FROM {schema}.jobs j
                                         WHERE j.status = 'pending' AND j.type = t.type
                                           AND j.run_at > now() LIMIT %(cap)s::bigint) x)
       END AS scheduled,
       coalesce((SELECT r.n FROM run r WHERE r.type = t.type), 0) AS running,
       coalesce((SELECT d.n FROM dead d WHERE d.type = t.type), 0)
         + (SELECT count(*) FROM (SELECT 1 FROM {schema}.jobs j
                                   WHERE j.status = 'failed' AND j.type = t.type
                                   LIMIT %(cap)s::bigint) x) AS failed,
       extract(epoch FROM now() - CASE
           WHEN c.seen < %(cap)s::bigint THEN c.oldest
           -- A backlog past the cap: the oldest due run_at of each priority is the first
           -- entry of that priority in jobs_claim_idx, found by a loose scan of priorities.
           ELSE (WITH RECURSIVE prio(p) AS (
                     (SELECT j.priority FROM {schema}.jobs j
                       WHERE j.status = 'pending' AND j.type = t.type
                       ORDER BY j.priority DESC LIMIT 1)
                     UNION ALL
                     SELECT (SELECT j.priority FROM {schema}.jobs j
                              WHERE j.status = 'pending' AND j.type = t.type
                                AND j.priority < pr.p
                              ORDER BY j.priority DESC LIMIT 1)
                       FROM prio pr WHERE pr.p IS NOT NULL)
                 SELECT min(first_due.run_at)
                   FROM prio pr
                  CROSS JOIN LATERAL (
                        SELECT j.run_at FROM {schema}.jobs j
                         WHERE j.status = 'pending' AND j.type = t.type AND j.priority = pr.p
                         ORDER BY j.priority DESC, j.run_at LIMIT 1) first_due
                  WHERE pr.p IS NOT NULL AND first_due.run_at <= now())
       END)::float8 AS oldest
  FROM types t
 CROSS JOIN LATERAL (
        -- One pass over the type's backlog in jobs_claim_idx, up to the cap: exact counts
        -- and oldest due time while the backlog is below it (the usual case).
        SELECT count(*) AS seen,
               count(*) FILTER (WHERE b.run_at <= now()) AS due,
               count(*) FILTER (WHERE b.run_at > now()) AS scheduled,
               min(b.run_at) FILTER (WHERE b.run_at <= now()) AS oldest
          FROM (SELECT j.run_at FROM {schema}.jobs j
                 WHERE j.status = 'pending' AND j.type = t.type
                 LIMIT %(cap)s::bigint) b) c
 ORDER BY t.type


-- name: dashboard_waiting_count
-- WAITING jobs (held until their parents finish): each type's counted up to the cap (as the
-- other per-type counts), summed; types found by a loose index scan of their partial index
-- (jobs_waiting_idx, 0017), the counts read from it too.
WITH RECURSIVE w(type) AS (
    (SELECT j.type FROM {schema}.jobs j WHERE j.status = 'waiting' ORDER BY j.type LIMIT 1)
    UNION ALL
    SELECT (SELECT j.type FROM {schema}.jobs j
             WHERE j.status = 'waiting' AND j.type > w.type ORDER BY j.type LIMIT 1)
      FROM w WHERE w.type IS NOT NULL
)
SELECT coalesce(sum((SELECT count(*) FROM (SELECT 1 FROM {schema}.jobs j
                                            WHERE j.status = 'waiting' AND j.type = w.type
                                            LIMIT %(cap)s::bigint) x)), 0)::bigint
  FROM w WHERE w.type IS NOT NULL


-- name: dashboard_estimated_rows
-- The planner's estimate of how many jobs there are, live and kept (no scan): `jobs` and
-- the history's partitions; -1 before the first ANALYZE.
SELECT CASE WHEN bool_or(c.reltuples >= 0)
            THEN sum(greatest(c.reltuples, 0)) ELSE -1 END::float8
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = %(schema)s::text AND c.relkind = 'r'
   AND (c.relname = 'jobs' OR c.relname LIKE 'jobs\_history\_%%')


-- name: dashboard_throughput
-- Jobs finished per minute over the last "minutes" minutes (the current one last), zeros
-- included: the history's per-minute counts (history_minutes and the deltas not folded yet,
-- 0008; a few rows a minute however many jobs finished), plus an older release's finished
-- rows still in `jobs` (jobs_finished_idx's recent range).
WITH since AS (
    SELECT date_trunc('minute', now()) - make_interval(mins => %(minutes)s::int - 1) AS t
),
f AS (
    SELECT c.minute AS at,
           sum(c.n) FILTER (WHERE c.status = 'succeeded') AS ok,
           sum(c.n) FILTER (WHERE c.status = 'failed') AS bad
      FROM (SELECT m.minute, m.status, m.n FROM {schema}.history_minutes m, since
             WHERE m.minute >= since.t
            UNION ALL
            SELECT d.minute, d.status, d.n FROM {schema}.history_count_deltas d, since
             WHERE d.finishes AND d.minute >= since.t
            UNION ALL
            SELECT date_trunc('minute', j.finished_at), j.status, 1 FROM {schema}.jobs j, since
             WHERE j.status IN ('succeeded', 'failed') AND j.finished_at >= since.t) c
     GROUP BY c.minute
)
SELECT m.at, coalesce(f.ok, 0)::bigint, coalesce(f.bad, 0)::bigint
  FROM since, generate_series(since.t, date_trunc('minute', now()), interval '1 minute') AS m(at)
  LEFT JOIN f ON f.at = m.at
 ORDER BY m.at


-- name: fragment_dashboard_jobs_filter
-- The jobs page's filters on `j` (jobs_all) in the id range [floor, last]: the range bounds
-- the scan however rare the filter's matches are. NULL filters are no filters;
-- "status" is the shown one (a running row whose handler has not started is pending, 0015);
-- "scheduled" keeps PENDING jobs whose run_at is in the future; "q" is a case-insensitive
-- substring of the type or of last_error (strpos: no LIKE pattern characters to escape).
j.id <= %(last)s::bigint AND j.id >= %(floor)s::bigint
   AND (%(type)s::text IS NULL OR j.type = %(type)s::text)
   AND (%(status)s::text IS NULL OR j.status = %(status)s::text
        OR (%(status)s::text = 'pending' AND j.status = 'running' AND j.started_at IS NULL))
   AND (%(status)s::text IS DISTINCT FROM 'running' OR j.started_at IS NOT NULL)
   AND (NOT %(scheduled)s::bool OR j.run_at > now())
   AND (%(scope_type)s::text IS NULL OR j.scope_type = %(scope_type)s::text)
   AND (%(scope_id)s::text IS NULL OR j.scope_id = %(scope_id)s::text)
   AND (%(tag)s::text IS NULL OR j.tags @> ARRAY[%(tag)s::text])
   AND (%(q)s::text IS NULL
        OR strpos(lower(j.type), lower(%(q)s::text)) > 0
        OR strpos(lower(coalesce(j.last_error, '')), lower(%(q)s::text)) > 0)


-- name: dashboard_jobs_page
-- One page of jobs newest first, in the id range [floor, last] (the upper bound is
-- inclusive so that the largest bigint id is a range of its own without an overflow).
SELECT {fragment_summary_columns}
  FROM {schema}.jobs_all j
 WHERE {fragment_dashboard_jobs_filter}
 ORDER BY j.id DESC
 LIMIT %(limit)s::bigint


-- name: dashboard_jobs_page_up
-- One page of jobs oldest first in the id range [floor, last]: the page just above a
-- "before" cursor (the caller shows it newest first).
SELECT {fragment_summary_columns}
  FROM {schema}.jobs_all j
 WHERE {fragment_dashboard_jobs_filter}
 ORDER BY j.id
 LIMIT %(limit)s::bigint


-- name: dashboard_job_ids
-- The ids of the jobs page's matches in the id range [floor, last], newest first, at most
-- "limit": what a bulk action with all=1 acts on.
SELECT j.id
  FROM {schema}.jobs_all j
 WHERE {fragment_dashboard_jobs_filter}
 ORDER BY j.id DESC
 LIMIT %(limit)s::bigint


-- name: dashboard_jobs_top
-- The id the first page starts below (the newest id + 1), and whether any id lies below
-- "floor" (the next page's range is not empty). Two primary-key probes.
SELECT coalesce((SELECT max(j.id) FROM {schema}.jobs_all j), 0) + 1,
       EXISTS (SELECT 1 FROM {schema}.jobs_all j WHERE j.id < %(floor)s::bigint)


-- name: dashboard_dead_letters
-- FAILED jobs grouped by (type, last_error): each type's newest "cap" dead letters (through
-- jobs_failed_idx), and whether a type had more.
WITH RECURSIVE fail(type) AS (
    (SELECT j.type FROM {schema}.jobs_all j WHERE j.status = 'failed' ORDER BY j.type LIMIT 1)
    UNION ALL
    SELECT (SELECT j.type FROM {schema}.jobs_all j
             WHERE j.status = 'failed' AND j.type > f.type ORDER BY j.type LIMIT 1)
      FROM fail f WHERE f.type IS NOT NULL
),
picked AS (
    SELECT d.id, d.type, d.last_error, d.finished_at,
           row_number() OVER (PARTITION BY d.type ORDER BY d.id DESC) AS rn
      FROM fail f
     CROSS JOIN LATERAL (
            SELECT j.id, j.type, j.last_error, j.finished_at
              FROM {schema}.jobs_all j
             WHERE j.status = 'failed' AND j.type = f.type
             ORDER BY j.id DESC
             LIMIT %(cap)s::bigint + 1) d
     WHERE f.type IS NOT NULL
)
SELECT p.type, p.last_error, count(*) FILTER (WHERE p.rn <= %(cap)s::bigint),
       max(p.id) FILTER (WHERE p.rn <= %(cap)s::bigint),
       max(p.finished_at) FILTER (WHERE p.rn <= %(cap)s::bigint),
       bool_or(p.rn > %(cap)s::bigint)
  FROM picked p
 GROUP BY p.type, p.last_error


-- name: dashboard_retry_dead_letters
-- Every dead letter of one type with one last_error (NULL matches NULL) back to PENDING, due
-- now, attempts reset, as job_retry_failed does (revive_dead_letters; keyed ones skipped when
-- a PENDING job holds their key; of one key's dead letters only the newest). One hint names
-- the type.
WITH picked AS (
    SELECT j.id
      FROM {schema}.jobs_all j
     WHERE j.status = 'failed' AND j.type = %(type)s::text
       AND j.last_error IS NOT DISTINCT FROM %(error)s::text
       AND (j.dedupe_key IS NULL OR NOT EXISTS (
                SELECT 1 FROM {schema}.jobs_all o
                 WHERE o.type = j.type AND o.dedupe_key = j.dedupe_key
                   AND (o.status = 'pending' OR (o.status = 'failed' AND o.id > j.id))))
),
upd AS (
    SELECT r.id FROM {schema}.revive_dead_letters(ARRAY(SELECT p.id FROM picked p)) r
),
agg AS (SELECT count(*) AS n FROM upd)
SELECT a.n,
       CASE WHEN a.n > 0 THEN pg_notify({schema}.channel_name('jobs'),
                                        json_build_array(%(type)s::text)::text)::text END
  FROM agg a


-- name: dashboard_pools
-- Every pool with a rate budget row or named by the caller: its spend in the current window
-- (0 once elapsed, as the claim counts it) and the summed cost of its live-leased members.
WITH members AS (
    SELECT * FROM unnest(%(member_pools)s::text[], %(member_types)s::text[],
                         %(member_costs)s::int[]) AS m(pool, type, cost)
),
names AS (
    SELECT b.name FROM {schema}.resource_budgets b
    UNION SELECT unnest(%(names)s::text[])
)
SELECT n.name,
       CASE WHEN b.window_start + make_interval(secs => %(rate_window)s::float8) > now()
            THEN b.spent ELSE 0 END,
       b.window_start,
       (SELECT coalesce(sum(m.cost * (SELECT count(*) FROM {schema}.jobs r
                                       WHERE r.type = m.type AND r.status = 'running'
                                         AND r.lease_expires_at > now())), 0)::bigint
          FROM members m WHERE m.pool = n.name)
  FROM names n
  LEFT JOIN {schema}.resource_budgets b ON b.name = n.name
 ORDER BY n.name


-- name: dashboard_type_finishes
-- The types with the most jobs finished today (UTC) and still kept, most first: the
-- history's exact per-day counts (history_counts by its primary key's leading "day", plus
-- the deltas not folded yet; 0008), one row per type and status however many jobs finished.
SELECT c.type,
       coalesce(sum(c.n) FILTER (WHERE c.status = 'succeeded'), 0)::bigint AS ok,
       coalesce(sum(c.n) FILTER (WHERE c.status = 'failed'), 0)::bigint AS bad
  FROM (SELECT f.type, f.status, f.n FROM {schema}.history_counts f
         WHERE f.day = {schema}.history_day(now())
        UNION ALL
        SELECT d.type, d.status, d.n FROM {schema}.history_count_deltas d
         WHERE d.day = {schema}.history_day(now())) c
 GROUP BY c.type
HAVING sum(c.n) > 0
 ORDER BY sum(c.n) DESC, c.type
 LIMIT %(limit)s::bigint
