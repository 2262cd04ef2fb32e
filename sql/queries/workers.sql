-- The worker registry (table workers, migration 0002): written by each worker's maintenance
-- loop on its heartbeat timer, off the claim/complete path; read by queue.workers().
-- The database clock decides "last seen", "lost" and the sweep.


-- name: worker_heartbeat
-- Register or refresh one worker (an upsert: a worker whose row was swept, or that was lost
-- through an outage, simply reappears), and sweep the rows of workers lost for longer than
-- sweep_seconds (last seen that long ago, and more than lost_after of their heartbeat
-- intervals ago), in one statement. The sweep reads workers_last_seen_idx; any worker's
-- heartbeat sweeps anyone's lost rows. Returns the number of rows swept.
WITH swept AS (
    DELETE FROM {schema}.workers w
     WHERE w.last_seen_at < now() - make_interval(secs => %(sweep_seconds)s::float8)
       AND w.last_seen_at
           < now() - make_interval(secs => %(lost_after)s::float8 * w.heartbeat_seconds)
       AND w.worker_id <> %(worker_id)s::text
    RETURNING 1
), beat AS (
    INSERT INTO {schema}.workers AS w (worker_id, host, pid, handlers, running, state,
                                       heartbeat_seconds)
    VALUES (%(worker_id)s::text, %(host)s::text, %(pid)s::int, %(handlers)s::jsonb,
            %(running)s::int, %(state)s::text, %(heartbeat_seconds)s::float8)
    ON CONFLICT (worker_id) DO UPDATE
       SET last_seen_at      = now(),
           host              = EXCLUDED.host,
           pid               = EXCLUDED.pid,
           handlers          = EXCLUDED.handlers,
           running           = EXCLUDED.running,
           state             = EXCLUDED.state,
           heartbeat_seconds = EXCLUDED.heartbeat_seconds
    RETURNING 1
)
SELECT (SELECT count(*) FROM swept), (SELECT count(*) FROM beat)


-- name: worker_remove
-- A clean stop: the worker's row goes.
DELETE FROM {schema}.workers w WHERE w.worker_id = %(worker_id)s::text RETURNING 1


-- name: worker_list
-- Every registered worker; "lost" derived from the heartbeat's age at read time.
SELECT w.worker_id, w.host, w.pid, w.started_at, w.last_seen_at, w.handlers::text, w.running,
       CASE WHEN w.last_seen_at
                 < now() - make_interval(secs => %(lost_after)s::float8 * w.heartbeat_seconds)
            THEN 'lost' ELSE w.state END
  FROM {schema}.workers w
 ORDER BY w.worker_id
