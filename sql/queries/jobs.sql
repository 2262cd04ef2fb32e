-- Jobs: enqueue, inspection and administration (cancellation is in cancel.sql).
--
-- Every statement is written against {schema}.table; the store composes the schema in with
-- psycopg.sql.Identifier once per store. Literal braces must be doubled ({{ }}) and literal
-- percent signs too (%%): prefer ARRAY[]::text[] over '{{}}' array literals.
-- Casts on parameters keep one prepared statement per verb whatever Python type arrives
-- (None, int sizes), so psycopg's automatic preparation kicks in for the hot ones.


-- name: job_enqueue
-- The plain insert (no dedupe key): one statement, one round trip on an autocommit pool
-- connection. Ids and timestamps come from server defaults; the due time from the database
-- clock. The statement-level trigger sends the wake-up hint.
INSERT INTO {schema}.jobs (type, payload, scope_type, scope_id, run_at, max_attempts, priority,
                           tags, trace_context)
VALUES (%(type)s::text, %(payload)s::jsonb, %(scope_type)s::text, %(scope_id)s::text,
        coalesce(%(run_at)s::timestamptz, now() + make_interval(secs => %(delay)s::float8)),
        %(max_attempts)s::int, %(priority)s::int, %(tags)s::text[], %(trace_context)s::jsonb)
RETURNING id


-- name: job_enqueue_key_lock
-- First statement of a keyed add's transaction: an EXCLUSIVE advisory lock on the
-- (type, dedupe_key) pair, held to commit, so the add that follows takes its snapshot after
-- every earlier add of the pair committed. Without it, an add could wait in the unique index
-- for a racing add of the same key, and find that job already claimed (no longer pending,
-- so no conflict) once it woke: a second live job of the key (measured under load on two
-- cores). Claims never take this lock. The length prefix keeps (type, key) pairs apart.
SELECT pg_advisory_xact_lock(hashtextextended(
           %(key_lock_prefix)s::text || length(%(type)s::text)::text || ':'
           || %(type)s::text || %(dedupe_key)s::text, 0))::text


-- name: job_enqueue_reject
-- on_duplicate="reject": nothing is inserted while a job with this (type, dedupe_key) is
-- PENDING, RUNNING or WAITING (a job waiting for its parents holds its key: 0016).
--  * The holder is read with FOR KEY SHARE. A claim of a pending holder takes FOR UPDATE
--    (with SKIP LOCKED) and updates it; if one is in flight, this statement waits for it and
--    then re-reads the holder's latest version, now running, so it still rejects. Without the
--    lock, a claim that committed between this statement's snapshot and its insert made the
--    holder look pending to the test and not pending to the unique index, and a second
--    pending job got in (measured: thousands of times in 10 s with three producers and a
--    worker on four keys). KEY SHARE conflicts with neither completions nor lease renewals
--    (plain updates of non-key columns); a claim skips a holder so locked until this
--    transaction ends, which inside a caller's transaction (connection=) is its commit.
--  * "status = 'pending' OR status = 'running'": the planner can probe both partial indexes
--    (a BitmapOr of the pending unique index and the running dedupe index, on current
--    statistics), and the re-read after the wait accepts the holder in either state.
--  * Runs after job_enqueue_key_lock; the unique partial index jobs_dedupe_pending_uq still
--    arbitrates against a replace-mode add or a COPY of the key.
INSERT INTO {schema}.jobs (type, payload, scope_type, scope_id, run_at, max_attempts, priority,
                           dedupe_key, tags, trace_context)
SELECT %(type)s::text, %(payload)s::jsonb, %(scope_type)s::text, %(scope_id)s::text,
       coalesce(%(run_at)s::timestamptz, now() + make_interval(secs => %(delay)s::float8)),
       %(max_attempts)s::int, %(priority)s::int, %(dedupe_key)s::text, %(tags)s::text[],
       %(trace_context)s::jsonb
 WHERE NOT EXISTS (
        SELECT 1 FROM {schema}.jobs r
         WHERE r.type = %(type)s::text AND r.dedupe_key = %(dedupe_key)s::text
           AND (r.status = 'pending' OR r.status = 'running' OR r.status = 'waiting')
           FOR KEY SHARE OF r)
ON CONFLICT (type, dedupe_key) WHERE status = 'pending' AND dedupe_key IS NOT NULL DO NOTHING
RETURNING id


-- name: job_enqueue_replace
-- on_duplicate="replace": an upsert on the pending-only unique index. While a PENDING job
-- holds the key its payload, scope and priority are replaced in place (same id, same run_at
-- and created_at, so the same place in line); if the only live holder is RUNNING there is no
-- conflict and a new PENDING row is inserted. A holder being claimed concurrently makes
-- PostgreSQL wait for that claim and retry the arbiter check, so it is race-free.
-- The tags describe the payload, so they are replaced with it (an add without tags clears
-- them); so is the trace context (the replacing add's send span is the one that sent this
-- payload). (xmax = 0) is true only for a freshly inserted row version.
-- A grouped type's replace (grouped: the add named a JobType(grouped=True)) also moves the
-- job to the end of its group: a grouped batch is in arrival order, (created_at, id), and the
-- replacing add is the job's new arrival (its id, run_at and claim place are kept).
-- A WAITING holder (0016: a job waiting for its parents holds its key) is replaced in place
-- the same way, and stays WAITING (first CTE); the upsert then inserts nothing.
WITH held AS (
    UPDATE {schema}.jobs w
       SET payload       = %(payload)s::jsonb,
           scope_type    = %(scope_type)s::text,
           scope_id      = %(scope_id)s::text,
           priority      = %(priority)s::int,
           tags          = %(tags)s::text[],
           trace_context = %(trace_context)s::jsonb,
           created_at    = CASE WHEN %(grouped)s::boolean THEN now() ELSE w.created_at END,
           updated_at    = now()
     WHERE w.type = %(type)s::text AND w.dedupe_key = %(dedupe_key)s::text
       AND w.status = 'waiting'
    RETURNING w.id
),
upserted AS (
    INSERT INTO {schema}.jobs AS j (type, payload, scope_type, scope_id, run_at, max_attempts,
                                    priority, dedupe_key, tags, trace_context)
    SELECT %(type)s::text, %(payload)s::jsonb, %(scope_type)s::text, %(scope_id)s::text,
           coalesce(%(run_at)s::timestamptz, now() + make_interval(secs => %(delay)s::float8)),
           %(max_attempts)s::int, %(priority)s::int, %(dedupe_key)s::text, %(tags)s::text[],
           %(trace_context)s::jsonb
     WHERE NOT EXISTS (SELECT 1 FROM held)
    ON CONFLICT (type, dedupe_key) WHERE status = 'pending' AND dedupe_key IS NOT NULL
    DO UPDATE SET payload       = EXCLUDED.payload,
                  scope_type    = EXCLUDED.scope_type,
                  scope_id      = EXCLUDED.scope_id,
                  priority      = EXCLUDED.priority,
                  tags          = EXCLUDED.tags,
                  trace_context = EXCLUDED.trace_context,
                  created_at    = CASE WHEN %(grouped)s::boolean THEN now()
                                       ELSE j.created_at END,
                  updated_at    = now()
    RETURNING j.id, (j.xmax = 0) AS inserted
)
SELECT h.id, false FROM held h
UNION ALL
SELECT u.id, u.inserted FROM upserted u


-- name: job_due_at
-- The due time of a delayed add_many, from the database clock (COPY cannot compute it).
SELECT now() + make_interval(secs => %(delay)s::float8)


-- name: job_copy_in
-- Bulk enqueue: COPY in text format, one row per payload; ids and timestamps from server
-- defaults. COPY fires the statement-level trigger once, so one NOTIFY per add_many. It is
-- sent on its own, without BEGIN/COMMIT: one statement is atomic by itself, and their two
-- round trips were an eighth of a 100-job add_many (912 -> 790 us).
COPY {schema}.jobs (type, payload, scope_type, scope_id, run_at, max_attempts, priority)
FROM STDIN


-- name: job_copy_in_now
-- As job_copy_in, for jobs due at once: run_at takes its default, now().
COPY {schema}.jobs (type, payload, scope_type, scope_id, max_attempts, priority)
FROM STDIN


-- name: job_copy_in_tagged
-- As job_copy_in, with the tags column (an array literal of quoted tags); used only by an
-- add_many that has tags, so an untagged COPY carries no extra field per row.
COPY {schema}.jobs (type, payload, scope_type, scope_id, run_at, max_attempts, priority, tags)
FROM STDIN


-- name: job_copy_in_now_tagged
-- As job_copy_in_now, with the tags column.
COPY {schema}.jobs (type, payload, scope_type, scope_id, max_attempts, priority, tags)
FROM STDIN


-- name: job_copy_in_traced
-- As job_copy_in_tagged (tags \N when the call has none), with the trace context of the
-- call's send span (golemq_pg.tracing): used only by a traced add_many, so an untraced COPY
-- carries no extra field per row.
COPY {schema}.jobs (type, payload, scope_type, scope_id, run_at, max_attempts, priority, tags,
                    trace_context)
FROM STDIN


-- name: job_copy_in_now_traced
-- As job_copy_in_now_tagged, with the trace context (see job_copy_in_traced).
COPY {schema}.jobs (type, payload, scope_type, scope_id, max_attempts, priority, tags,
                    trace_context)
FROM STDIN


-- name: fragment_summary_columns
-- The columns of golemq_pg.JobSummary, in the order PostgresStore reads them.
j.id, j.type, j.scope_type, j.scope_id, j.status, j.attempts, j.max_attempts, j.last_error,
j.priority, j.progress::text, j.run_at, j.created_at, j.updated_at, j.started_at,
j.finished_at, j.result::text, j.errors::text, j.tags


-- name: job_get
SELECT {fragment_summary_columns}
  FROM {schema}.jobs_all j
 WHERE j.id = %(id)s::bigint


-- name: job_get_many
-- The jobs among these ids that exist (any order): queue.wait()'s listener checks every
-- waited job with this one statement, a missing id meaning the job was deleted. Each id is
-- one LATERAL ... LIMIT 1 descent of each table's id index (see job_links, workflows.sql):
-- "id = ANY" of an array of unknown length was planned as a scan of every job on tables
-- without statistics.
SELECT {fragment_summary_columns}
  FROM unnest(%(ids)s::bigint[]) AS i(id)
 CROSS JOIN LATERAL (SELECT * FROM {schema}.jobs_all a WHERE a.id = i.id LIMIT 1) j


-- name: job_find
-- Newest first (ids are monotonic). NULL filters are no filters. Statuses are the shown
-- ones: a running row whose handler has not started (started_at NULL, 0015) is PENDING, so
-- "statuses" lists the stored statuses to read and "running_started" which running rows of
-- them to keep (rows.status_args).
SELECT {fragment_summary_columns}
  FROM {schema}.jobs_all j
 WHERE (%(types)s::text[] IS NULL OR j.type = ANY(%(types)s::text[]))
   AND (%(statuses)s::text[] IS NULL OR j.status = ANY(%(statuses)s::text[]))
   AND (%(running_started)s::boolean IS NULL OR j.status <> 'running'
        OR (j.started_at IS NOT NULL) = %(running_started)s::boolean)
   AND (%(scope_type)s::text IS NULL OR j.scope_type = %(scope_type)s::text)
   AND (%(scope_id)s::text IS NULL OR j.scope_id = %(scope_id)s::text)
 ORDER BY j.id DESC
 LIMIT %(limit)s::bigint OFFSET %(skip)s::bigint


-- name: job_find_tagged
-- job_find with find(tags=[...]): jobs carrying every listed tag. The containment test is
-- unconditional (not "IS NULL OR"), so even a generic plan can use the partial GIN indexes
-- (jobs_tags_idx, jobs_history_tags_idx: a strict @> implies tags IS NOT NULL); a separate
-- statement keeps job_find's plans as they were. Each table is read, newest first, up to
-- the page's end on its own (the GIN index, then a top-N sort), then the two are merged: a
-- single ordered read of the view would walk the primary keys newest first instead. The
-- columns are named: the two tables' column lists differ (jobs.has_dependents, 0016).
SELECT {fragment_summary_columns}
  FROM ((SELECT t.id, t.type, t.scope_type, t.scope_id, t.status, t.attempts, t.max_attempts,
                t.last_error, t.priority, t.progress, t.run_at, t.created_at, t.updated_at,
                t.started_at, t.finished_at, t.result, t.errors, t.tags
           FROM {schema}.jobs t
          WHERE t.tags @> %(tags)s::text[]
            AND (%(types)s::text[] IS NULL OR t.type = ANY(%(types)s::text[]))
            AND (%(statuses)s::text[] IS NULL OR t.status = ANY(%(statuses)s::text[]))
            AND (%(running_started)s::boolean IS NULL OR t.status <> 'running'
                 OR (t.started_at IS NOT NULL) = %(running_started)s::boolean)
            AND (%(scope_type)s::text IS NULL OR t.scope_type = %(scope_type)s::text)
            AND (%(scope_id)s::text IS NULL OR t.scope_id = %(scope_id)s::text)
          ORDER BY t.id DESC
          LIMIT %(limit)s::bigint + %(skip)s::bigint)
        UNION ALL
        (SELECT t.id, t.type, t.scope_type, t.scope_id, t.status, t.attempts, t.max_attempts,
                t.last_error, t.priority, t.progress, t.run_at, t.created_at, t.updated_at,
                t.started_at, t.finished_at, t.result, t.errors, t.tags
           FROM {schema}.jobs_history t
          WHERE t.tags @> %(tags)s::text[]
            AND (%(types)s::text[] IS NULL OR t.type = ANY(%(types)s::text[]))
            AND (%(statuses)s::text[] IS NULL OR t.status = ANY(%(statuses)s::text[]))
            AND (%(running_started)s::boolean IS NULL OR t.status <> 'running'
                 OR (t.started_at IS NOT NULL) = %(running_started)s::boolean)
            AND (%(scope_type)s::text IS NULL OR t.scope_type = %(scope_type)s::text)
            AND (%(scope_id)s::text IS NULL OR t.scope_id = %(scope_id)s::text)
          ORDER BY t.id DESC
          LIMIT %(limit)s::bigint + %(skip)s::bigint)) j
 ORDER BY j.id DESC
 LIMIT %(limit)s::bigint OFFSET %(skip)s::bigint


-- name: job_payload
-- One job's payload (golemq-pg show --payload), as JSON text.
SELECT j.payload::text FROM {schema}.jobs_all j WHERE j.id = %(id)s::bigint


-- name: job_count_by_status
-- Live rows counted in `jobs` (the backlog: history left it, migration 0008), each status
-- through its partial index (index-only where the visibility map allows), finished ones
-- read from the maintained counts (plus an older release's rows not moved yet): exact, and
-- as fast at 10M finished rows as at none.
-- A running row without started_at (claimed, its handler not started: 0015) counts as
-- pending.
SELECT c.status, sum(c.n)::bigint
  FROM (SELECT 'pending' AS status, count(*) AS n
          FROM {schema}.jobs j WHERE j.status = 'pending'
        UNION ALL
        SELECT CASE WHEN j.started_at IS NULL THEN 'pending' ELSE 'running' END, count(*)
          FROM {schema}.jobs j WHERE j.status = 'running'
         GROUP BY j.started_at IS NULL
        UNION ALL
        SELECT j.status, count(*) FROM {schema}.jobs j
         WHERE j.status IN ('succeeded', 'failed') GROUP BY j.status
        UNION ALL
        SELECT 'waiting', count(*) FROM {schema}.jobs j WHERE j.status = 'waiting'
        UNION ALL
        SELECT t.status, t.n FROM {schema}.history_totals t) c
 GROUP BY c.status


-- name: job_stats
-- Mutually exclusive buckets: a PENDING job is either due (pending) or in the future
-- (scheduled, which includes retry backoff). Live rows are counted in `jobs`, finished ones
-- (and an older release's finished rows not moved yet) added from the maintained counts.
-- A running row without started_at (claimed, its handler not started: 0015) is pending.
-- WAITING rows (parents not all finished, 0016) are their own bucket.
SELECT p.pending + r.unstarted, p.scheduled, r.running,
       f.succeeded + coalesce((SELECT sum(t.n) FROM {schema}.history_totals t
                                WHERE t.status = 'succeeded'), 0) AS succeeded,
       f.failed + coalesce((SELECT sum(t.n) FROM {schema}.history_totals t
                             WHERE t.status = 'failed'), 0) AS failed,
       (SELECT count(*) FROM {schema}.jobs w WHERE w.status = 'waiting') AS waiting
  FROM (SELECT count(*) FILTER (WHERE j.run_at <= now()) AS pending,
               count(*) FILTER (WHERE j.run_at > now()) AS scheduled
          FROM {schema}.jobs j WHERE j.status = 'pending') p,
       (SELECT count(*) FILTER (WHERE j.started_at IS NOT NULL) AS running,
               count(*) FILTER (WHERE j.started_at IS NULL) AS unstarted
          FROM {schema}.jobs j WHERE j.status = 'running') r,
       (SELECT count(*) FILTER (WHERE j.status = 'succeeded') AS succeeded,
               count(*) FILTER (WHERE j.status = 'failed') AS failed
          FROM {schema}.jobs j WHERE j.status IN ('succeeded', 'failed')) f


-- name: job_stats_by_type
-- The same buckets as job_stats, per type: the live rows of `jobs` and the history's
-- maintained counts.
SELECT c.type, sum(c.pending)::bigint, sum(c.scheduled)::bigint, sum(c.running)::bigint,
       sum(c.succeeded)::bigint, sum(c.failed)::bigint, sum(c.waiting)::bigint
  FROM (SELECT j.type,
               count(*) FILTER (WHERE j.run_at <= now()) AS pending,
               count(*) FILTER (WHERE j.run_at > now()) AS scheduled,
               0 AS running, 0 AS succeeded, 0 AS failed, 0 AS waiting
          FROM {schema}.jobs j WHERE j.status = 'pending'
         GROUP BY j.type
        UNION ALL
        SELECT j.type, count(*) FILTER (WHERE j.started_at IS NULL), 0,
               count(*) FILTER (WHERE j.started_at IS NOT NULL), 0, 0, 0
          FROM {schema}.jobs j WHERE j.status = 'running'
         GROUP BY j.type
        UNION ALL
        SELECT j.type, 0, 0, 0,
               count(*) FILTER (WHERE j.status = 'succeeded'),
               count(*) FILTER (WHERE j.status = 'failed'), 0
          FROM {schema}.jobs j WHERE j.status IN ('succeeded', 'failed')
         GROUP BY j.type
        UNION ALL
        SELECT j.type, 0, 0, 0, 0, 0, count(*)
          FROM {schema}.jobs j WHERE j.status = 'waiting'
         GROUP BY j.type
        UNION ALL
        SELECT t.type, 0, 0, 0,
               CASE WHEN t.status = 'succeeded' THEN t.n ELSE 0 END,
               CASE WHEN t.status = 'failed' THEN t.n ELSE 0 END, 0
          FROM {schema}.history_totals t) c
 GROUP BY c.type


-- name: job_oldest_due_age
-- How long the oldest due job has waited: the backlog-age signal of a stuck or slow queue.
-- Reads only the pending partial index's rows.
SELECT extract(epoch FROM now() - min(j.run_at))::float8
  FROM {schema}.jobs j
 WHERE j.status = 'pending' AND j.run_at <= now()


-- name: job_retry_failed
-- Dead letters back to PENDING, due now, attempts reset (revive_dead_letters, 0008: out of
-- the history, or in place for an older release's rows). A keyed dead letter is skipped when
-- a PENDING job already holds its key (that job supersedes it) and, among dead letters of one
-- key, only the newest is revived: the pending-only unique index allows one.
WITH picked AS (
    SELECT j.id
      FROM {schema}.jobs_all j
     WHERE j.status = 'failed'
       AND (%(types)s::text[] IS NULL OR j.type = ANY(%(types)s::text[]))
       AND (%(scope_type)s::text IS NULL OR j.scope_type = %(scope_type)s::text)
       AND (%(scope_id)s::text IS NULL OR j.scope_id = %(scope_id)s::text)
       AND (j.dedupe_key IS NULL OR NOT EXISTS (
                SELECT 1 FROM {schema}.jobs_all o
                 WHERE o.type = j.type AND o.dedupe_key = j.dedupe_key
                   AND (o.status = 'pending' OR (o.status = 'failed' AND o.id > j.id))))
     ORDER BY j.id
     LIMIT %(limit)s::bigint OFFSET %(skip)s::bigint
)
SELECT r.id, r.type
  FROM {schema}.revive_and_rearm(ARRAY(SELECT p.id FROM picked p)) r


-- name: job_prune
-- Retention: finished rows older than the cut-off (history_prune, 0008): one whole day
-- partition dropped (dropped = true: call again), else the rest swept oldest first, at most
-- "limit" rows a call when given.
SELECT p.removed, p.dropped
  FROM {schema}.history_prune(
    %(statuses)s::text[],
    coalesce(%(before)s::timestamptz, now() - make_interval(secs => %(age)s::float8)),
    %(limit)s::bigint) p
