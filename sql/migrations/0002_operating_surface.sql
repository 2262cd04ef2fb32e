-- golemq-pg 0002: the operating surface. Job results, attempt history, tags and trace
-- context on the jobs row; paused types; the worker registry; the completion hint.
--
-- Applied like 0001 (search_path set to the target schema). Every change is one that
-- PostgreSQL makes without rewriting the jobs table: new columns have no default or a
-- constant one, so an upgrade of a table holding millions of rows is instant, and the
-- existing rows read as "no result, no history, no tags".
-- Released migrations are immutable: change the schema with a new numbered file.

-- What the handler returned (JSON), for SUCCEEDED jobs whose handler returned a value.
ALTER TABLE jobs ADD COLUMN result jsonb;
-- The failed attempts, oldest first, at most the last 20: a JSON array of
-- {"attempt": int, "at": timestamptz text, "error": bounded text, "worker_id": text|null}.
-- NULL until an attempt fails (a successful job never pays for it).
ALTER TABLE jobs ADD COLUMN errors jsonb;
-- Labels for finding jobs (at most 16, each 1-64 characters of [A-Za-z0-9_.:-]).
ALTER TABLE jobs ADD COLUMN tags text[];
-- Trace context carried from the producer to each attempt (W3C traceparent and friends),
-- kept apart from the payload so the payload stays the application's own.
ALTER TABLE jobs ADD COLUMN trace_context jsonb;

ALTER TABLE jobs ADD CONSTRAINT jobs_tags_bounded CHECK (
    tags IS NULL OR cardinality(tags) BETWEEN 1 AND 16);
ALTER TABLE jobs ADD CONSTRAINT jobs_errors_array CHECK (
    errors IS NULL OR jsonb_typeof(errors) = 'array');

-- find(tags=[...]) is "carries every listed tag": array containment, which a GIN index on
-- the tag array answers. Partial: untagged jobs (most of them) never enter it.
CREATE INDEX jobs_tags_idx ON jobs USING gin (tags) WHERE tags IS NOT NULL;

-- Types no worker may claim until resumed. Tiny (one row per paused type): every claim path
-- reads it inside its claim statement, so a pause holds in every process at once.
CREATE TABLE paused_types (
    type      text        PRIMARY KEY CHECK (length(type) BETWEEN 1 AND 255),
    paused_at timestamptz NOT NULL DEFAULT now(),
    reason    text        CHECK (length(reason) <= 1000)
);

-- The worker registry: one row per started Worker, written at start, refreshed by its
-- heartbeat, removed by a clean stop. A row whose heartbeat is older than three heartbeat
-- intervals belongs to a lost worker (it died without stopping); such rows are swept after
-- an hour. The database clock decides both.
CREATE TABLE workers (
    worker_id          text        PRIMARY KEY CHECK (length(worker_id) BETWEEN 1 AND 255),
    host               text        NOT NULL,
    pid                integer     NOT NULL,
    started_at         timestamptz NOT NULL DEFAULT now(),
    last_seen_at       timestamptz NOT NULL DEFAULT now(),
    -- type -> concurrency, as a JSON object.
    handlers           jsonb       NOT NULL DEFAULT '{}'::jsonb,
    running            integer     NOT NULL DEFAULT 0 CHECK (running >= 0),
    -- What the worker says of itself; "lost" is derived from last_seen_at when read.
    state              text        NOT NULL DEFAULT 'running'
                       CHECK (state IN ('running', 'stopping')),
    heartbeat_seconds  double precision NOT NULL CHECK (heartbeat_seconds > 0)
);
CREATE INDEX workers_last_seen_idx ON workers (last_seen_at);

-- The completion hint: at most one NOTIFY per completing statement on the "done" channel,
-- carrying the ids of the jobs that became terminal (or were deleted by delete_on) as a JSON
-- array of strings, or '' (re-check every waited job) when the list would not fit in a
-- notification. queue.wait() listens for it; correctness never depends on it (waiters poll).
CREATE FUNCTION notify_jobs_done(ids bigint[]) RETURNS void
    LANGUAGE plpgsql SET search_path FROM CURRENT
AS $$
DECLARE
    hint text;
BEGIN
    IF ids IS NULL OR cardinality(ids) = 0 THEN
        RETURN;
    END IF;
    SELECT json_agg(i::text)::text INTO hint FROM unnest(ids) AS i;
    IF octet_length(hint) > 7900 THEN
        hint := '';
    END IF;
    PERFORM pg_notify(channel_name('done'), hint);
END
$$;

-- The attempt history append every failing statement uses (job_retry_many, job_fail_many,
-- the reaper): the history with one more {attempt, at, error, worker_id}, keeping the newest
-- "keep" entries, oldest first. "at" is the statement's now(); worker_id is NULL when the
-- reaper records the attempt.
CREATE FUNCTION append_attempt_error(
    history jsonb, attempt integer, error text, worker_id text, keep integer
) RETURNS jsonb
    LANGUAGE sql STABLE
AS $$
    SELECT jsonb_agg(kept.e ORDER BY kept.n)
      FROM (SELECT a.e, a.n
              FROM jsonb_array_elements(
                       coalesce($1, '[]'::jsonb)
                       || jsonb_build_array(jsonb_build_object(
                              'attempt', $2, 'at', now(), 'error', coalesce($3, ''),
                              'worker_id', $4)))
                   WITH ORDINALITY AS a(e, n)
             ORDER BY a.n DESC
             LIMIT greatest($5, 1)) AS kept
$$;
