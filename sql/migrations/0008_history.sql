-- golemq-pg 0008: finished jobs leave the hot table for a history partitioned by status and
-- day, with exact counts kept beside it.
--
-- Why: `jobs` held every finished row the queue kept (results, attempt history, dead
-- letters), so the table the claim walks grew with history. Measured at 10M finished rows
-- (docs/DEPLOYMENT.md): the drain fell from 46.5k jobs/s to 20.7k under autovacuum and 3.8k
-- without it (every vacuum of `jobs` reads its whole primary key), a retention sweep of 9M
-- rows took 713 s (each batch walked the index entries the batches before it had deleted),
-- and stats() counted 10M rows per call.
--
-- The layout from this release:
--  * `jobs` holds live work only (PENDING and RUNNING). A lease holder's completion or
--    failure, and the reaper's dead-lettering, delete the row from `jobs` and insert it into
--    `jobs_history` in the same statement, so a job is in exactly one of the two tables at
--    every instant, and every reader sees it in one of them.
--  * `jobs_history` is partitioned by status (succeeded, failed), then by UTC day of
--    finished_at. Retention of a day of one status is a DROP of one partition
--    (history_prune); partitions are made days ahead by the maintenance service
--    (history_upkeep) and a DEFAULT partition per status takes any row no day partition
--    covers, so an insert never fails for want of a partition.
--  * history_counts (day, type, status) holds exact counts of history rows, kept by
--    statement-level triggers on jobs_history that append one delta row per statement
--    (history_count_deltas: append-only, so concurrent completions never wait on one
--    another's counter row); history_upkeep folds the deltas into history_counts. A count
--    is history_counts plus the deltas not folded yet: exact, and read in a few ms whatever
--    the history's size. A dropped partition takes its day's counts with it.
--  * jobs_all is every job, live or finished (a UNION ALL view): readers by id, filters
--    and pages read it; the planner pushes their predicates into both branches.
--  * Finished rows already in `jobs` when this migration runs stay readable there (jobs_all
--    reads both) and are moved into the history in batches by history_upkeep, so upgrading
--    a table of millions of rows locks nothing for long.
--
-- A later migration that adds a column to `jobs` adds it to `jobs_history`, to the jobs_all
-- view, and to the moves below (complete_jobs*, fail_jobs, history_move_legacy,
-- revive_dead_letters, and the reaper in sql/queries/leases.sql), which list them in order.

-- priority, attempts and max_attempts copy the integer columns of `jobs` (values the API
-- bounds to 32 bits), so the history keeps their type (squawk-ignore on each).
CREATE TABLE jobs_history (
    id               bigint      NOT NULL,
    type             text        NOT NULL,
    payload          jsonb       NOT NULL,
    scope_type       text,
    scope_id         text,
    status           text        NOT NULL CHECK (status IN ('succeeded', 'failed')),
    -- squawk-ignore prefer-bigint-over-int
    priority         integer     NOT NULL,
    run_at           timestamptz NOT NULL,
    -- squawk-ignore prefer-bigint-over-int
    attempts         integer     NOT NULL,
    -- squawk-ignore prefer-bigint-over-int
    max_attempts     integer     NOT NULL,
    last_error       text,
    dedupe_key       text,
    lease_owner      text,
    lease_token      bigint      NOT NULL,
    lease_expires_at timestamptz,
    schedule_key     text,
    progress         jsonb,
    started_at       timestamptz,
    finished_at      timestamptz NOT NULL,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    result           jsonb,
    errors           jsonb,
    tags             text[],
    trace_context    jsonb
) PARTITION BY LIST (status);

CREATE TABLE jobs_history_succeeded PARTITION OF jobs_history
    FOR VALUES IN ('succeeded') PARTITION BY RANGE (finished_at);
CREATE TABLE jobs_history_failed PARTITION OF jobs_history
    FOR VALUES IN ('failed') PARTITION BY RANGE (finished_at);
CREATE TABLE jobs_history_succeeded_default PARTITION OF jobs_history_succeeded DEFAULT;
CREATE TABLE jobs_history_failed_default PARTITION OF jobs_history_failed DEFAULT;

-- Lookups by id (get, wait, results), the newest-first pages, per-minute throughput and
-- retention's row sweep (finished_at), scope lookups, tags. Each partition gets its own.
CREATE INDEX jobs_history_id_idx ON jobs_history (id);
CREATE INDEX jobs_history_finished_idx ON jobs_history (finished_at, id);
CREATE INDEX jobs_history_scope_idx ON jobs_history (scope_type, scope_id)
    WHERE scope_type IS NOT NULL;
CREATE INDEX jobs_history_tags_idx ON jobs_history USING gin (tags) WHERE tags IS NOT NULL;
-- Dead letters only: by type newest first (dashboard, metrics, retry_failed) and by key
-- (a retried keyed dead letter must be the newest of its key).
CREATE INDEX jobs_history_failed_type_idx ON jobs_history_failed (type, id);
CREATE INDEX jobs_history_failed_key_idx ON jobs_history_failed (type, dedupe_key)
    WHERE dedupe_key IS NOT NULL;

-- Exact counts of history rows per UTC day, type and status (see the header).
CREATE TABLE history_counts (
    day    date   NOT NULL,
    type   text   NOT NULL,
    status text   NOT NULL,
    n      bigint NOT NULL,
    PRIMARY KEY (day, type, status)
);
CREATE TABLE history_count_deltas (
    day      date        NOT NULL,
    minute   timestamptz NOT NULL,
    type     text        NOT NULL,
    status   text        NOT NULL,
    n        bigint      NOT NULL,
    -- rows that entered the history (the finishes the throughput chart counts), not rows
    -- that left it (retention, a retried dead letter)
    finishes boolean     NOT NULL
);
-- Jobs finished per minute and status over the last two days (the dashboard's throughput
-- chart), folded from the deltas of rows entering the history: a chart of an hour reads 120
-- rows however many jobs finished in it, and a job pruned or retried since still counts.
CREATE TABLE history_minutes (
    minute timestamptz NOT NULL,
    status text        NOT NULL,
    n      bigint      NOT NULL,
    PRIMARY KEY (minute, status)
);

-- The day a history row is counted under: the day partition it lives in.
CREATE FUNCTION history_day(finished timestamptz) RETURNS date
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT (finished AT TIME ZONE 'UTC')::date $$;

CREATE FUNCTION history_count_inserted() RETURNS trigger
    LANGUAGE plpgsql SET search_path FROM CURRENT
AS $$
BEGIN
    INSERT INTO history_count_deltas (day, minute, type, status, n, finishes)
    SELECT history_day(r.finished_at), date_trunc('minute', r.finished_at), r.type, r.status,
           count(*), true
      FROM new_rows r
     GROUP BY 1, 2, 3, 4;
    RETURN NULL;
END
$$;

CREATE FUNCTION history_count_deleted() RETURNS trigger
    LANGUAGE plpgsql SET search_path FROM CURRENT
AS $$
BEGIN
    INSERT INTO history_count_deltas (day, minute, type, status, n, finishes)
    SELECT history_day(r.finished_at), date_trunc('minute', r.finished_at), r.type, r.status,
           -count(*), false
      FROM old_rows r
     GROUP BY 1, 2, 3, 4;
    RETURN NULL;
END
$$;

-- Nothing in golemq-pg updates a history row; a hand-written UPDATE still keeps counts true.
CREATE FUNCTION history_count_updated() RETURNS trigger
    LANGUAGE plpgsql SET search_path FROM CURRENT
AS $$
BEGIN
    INSERT INTO history_count_deltas (day, minute, type, status, n, finishes)
    SELECT history_day(c.minute), c.minute, c.type, c.status, sum(c.n), false
      FROM (SELECT date_trunc('minute', o.finished_at) AS minute, o.type, o.status, -1 AS n
              FROM old_rows o
            UNION ALL
            SELECT date_trunc('minute', r.finished_at), r.type, r.status, 1
              FROM new_rows r) c
     GROUP BY c.minute, c.type, c.status
    HAVING sum(c.n) <> 0;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_history_count_inserted
    AFTER INSERT ON jobs_history
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION history_count_inserted();
CREATE TRIGGER jobs_history_count_deleted
    AFTER DELETE ON jobs_history
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION history_count_deleted();
CREATE TRIGGER jobs_history_count_updated
    AFTER UPDATE ON jobs_history
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION history_count_updated();

-- Every job, live or finished.
CREATE VIEW jobs_all AS
    SELECT j.id, j.type, j.payload, j.scope_type, j.scope_id, j.status, j.priority, j.run_at,
           j.attempts, j.max_attempts, j.last_error, j.dedupe_key, j.lease_owner,
           j.lease_token, j.lease_expires_at, j.schedule_key, j.progress, j.started_at,
           j.finished_at, j.created_at, j.updated_at, j.result, j.errors, j.tags,
           j.trace_context
      FROM jobs j
    UNION ALL
    SELECT h.id, h.type, h.payload, h.scope_type, h.scope_id, h.status, h.priority, h.run_at,
           h.attempts, h.max_attempts, h.last_error, h.dedupe_key, h.lease_owner,
           h.lease_token, h.lease_expires_at, h.schedule_key, h.progress, h.started_at,
           h.finished_at, h.created_at, h.updated_at, h.result, h.errors, h.tags,
           h.trace_context
      FROM jobs_history h;

-- Counts of history rows by type and status: the folded counts plus the deltas not folded.
CREATE VIEW history_totals AS
    SELECT c.type, c.status, sum(c.n)::bigint AS n
      FROM (SELECT f.type, f.status, f.n FROM history_counts f
            UNION ALL
            SELECT d.type, d.status, d.n FROM history_count_deltas d) c
     GROUP BY c.type, c.status
    HAVING sum(c.n) <> 0;

-- The partitions of one status and day: created standalone, filled with any rows of that
-- day the DEFAULT partition took meanwhile (moved partition to partition, so the counts,
-- kept per day, do not change), then attached. ATTACH takes SHARE UPDATE EXCLUSIVE on the
-- status's parent (inserts and reads go on) and scans the default partition under a short
-- lock; lock_timeout keeps a busy moment from queueing completions behind it (the caller
-- retries on the next upkeep). SECURITY DEFINER: the runtime role needs no DDL right.
CREATE FUNCTION history_ensure_partition(_status text, _day date) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path FROM CURRENT
    SET lock_timeout = '500ms'
AS $$
DECLARE
    parent  text := 'jobs_history_' || _status;
    part    text := 'jobs_history_' || _status || '_' || to_char(_day, 'YYYYMMDD');
    deflt   text := 'jobs_history_' || _status || '_default';
    low     timestamptz := _day::timestamp AT TIME ZONE 'UTC';
    high    timestamptz := (_day + 1)::timestamp AT TIME ZONE 'UTC';
BEGIN
    IF _status NOT IN ('succeeded', 'failed') THEN
        RAISE EXCEPTION 'history_ensure_partition: unknown status %', _status;
    END IF;
    IF to_regclass(quote_ident(current_schema()) || '.' || quote_ident(part)) IS NOT NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
                   part, parent);
    EXECUTE format('WITH moved AS (DELETE FROM %I WHERE finished_at >= $1 AND finished_at < $2 '
                   'RETURNING *) INSERT INTO %I SELECT * FROM moved', deflt, part)
        USING low, high;
    EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                   parent, part, low, high);
    RETURN true;
END
$$;

-- Folds the count deltas into history_counts. One folder at a time (a transaction-scoped
-- advisory lock; another caller returns 0 at once). The deltas are taken with DELETE ...
-- RETURNING and added in the same transaction, so a reader sees each delta exactly once.
CREATE FUNCTION history_fold_counts() RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path FROM CURRENT
AS $$
DECLARE
    folded bigint;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtextextended(current_schema() || ':history_counts', 0))
    THEN
        RETURN 0;
    END IF;
    WITH taken AS (
        DELETE FROM history_count_deltas RETURNING day, minute, type, status, n, finishes
    ),
    sums AS (
        SELECT t.day, t.type, t.status, sum(t.n) AS n, count(*) AS rows
          FROM taken t GROUP BY t.day, t.type, t.status
    ),
    added AS (
        INSERT INTO history_counts AS h (day, type, status, n)
        SELECT s.day, s.type, s.status, s.n FROM sums s
         ORDER BY s.day, s.type, s.status
        ON CONFLICT (day, type, status) DO UPDATE SET n = h.n + excluded.n
        RETURNING 1
    ),
    minutes AS (
        INSERT INTO history_minutes AS m (minute, status, n)
        SELECT t.minute, t.status, sum(t.n) FROM taken t
         WHERE t.finishes AND t.minute >= now() - interval '2 days'
         GROUP BY t.minute, t.status
         ORDER BY t.minute, t.status
        ON CONFLICT (minute, status) DO UPDATE SET n = m.n + excluded.n
        RETURNING 1
    )
    SELECT coalesce(sum(s.rows), 0) INTO folded FROM sums s;
    DELETE FROM history_counts WHERE n = 0;
    DELETE FROM history_minutes WHERE minute < now() - interval '2 days' OR n = 0;
    RETURN folded;
END
$$;

-- Finished rows left in `jobs` by releases before this one (and by a worker of such a
-- release during a rolling upgrade) move into the history, oldest finish first, at most
-- _limit a call. Rows another transaction holds are skipped (SKIP LOCKED).
CREATE FUNCTION history_move_legacy(_limit int) RETURNS bigint
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $$
DECLARE
    moved bigint;
BEGIN
    WITH gone AS (
        DELETE FROM jobs j
         WHERE j.id IN (SELECT d.id FROM jobs d
                         WHERE d.status IN ('succeeded', 'failed')
                         ORDER BY d.finished_at
                         LIMIT _limit
                           FOR UPDATE SKIP LOCKED)
           AND j.status IN ('succeeded', 'failed')
        RETURNING j.*
    ),
    kept AS (
        INSERT INTO jobs_history
        SELECT g.id, g.type, g.payload, g.scope_type, g.scope_id, g.status, g.priority,
               g.run_at, g.attempts, g.max_attempts, g.last_error, g.dedupe_key, NULL,
               g.lease_token, NULL, g.schedule_key, g.progress, g.started_at,
               coalesce(g.finished_at, g.updated_at), g.created_at, g.updated_at, g.result,
               g.errors, g.tags, g.trace_context
          FROM gone g
        RETURNING 1
    )
    SELECT count(*) INTO moved FROM kept;
    RETURN moved;
END
$$;

-- The maintenance service's upkeep of the history, every few seconds from any worker:
-- partitions for yesterday (or the oldest day of an older release's rows still in `jobs`)
-- to _days_ahead days ahead (both statuses), the count deltas folded, up to _legacy rows of
-- an older release's finished rows moved. Returns what it did
-- as JSON ({"created": n, "folded": n, "moved": n}).
CREATE FUNCTION history_upkeep(_days_ahead int, _legacy int) RETURNS jsonb
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path FROM CURRENT
AS $$
DECLARE
    created int := 0;
    today   date := history_day(now());
    first   date := today - 1;
    oldest  date;
    d       date;
    s       text;
BEGIN
    -- An older release's finished rows still in `jobs` get their days' partitions before
    -- they move (else the DEFAULT partitions take them and retention sweeps them by rows);
    -- at most a year back (older days stay in DEFAULT).
    SELECT history_day(min(j.finished_at)) INTO oldest
      FROM jobs j WHERE j.status IN ('succeeded', 'failed');
    IF oldest IS NOT NULL THEN
        first := least(first, greatest(oldest, today - 366));
    END IF;
    FOR d IN SELECT first + g.k
               FROM generate_series(0, today + greatest(_days_ahead, 0) - first) AS g(k) LOOP
        FOREACH s IN ARRAY ARRAY['succeeded', 'failed'] LOOP
            BEGIN
                IF history_ensure_partition(s, d) THEN
                    created := created + 1;
                END IF;
            EXCEPTION WHEN lock_not_available OR duplicate_table THEN
                -- Busy (or another worker made it just now): the next upkeep tries again.
                NULL;
            END;
        END LOOP;
    END LOOP;
    RETURN jsonb_build_object('created', created,
                              'folded', history_fold_counts(),
                              'moved', history_move_legacy(greatest(_legacy, 0)));
END
$$;

-- Retention: removes finished jobs of the given statuses that finished before _cutoff.
-- A call drops at most one day partition wholly before the cut-off (its rows and its counts
-- go together; no row is visited) and returns (its row count, true) at once, so the lock
-- the DROP takes on the status's history table (ACCESS EXCLUSIVE: completions and readers
-- wait) is held only until this call commits; the caller calls again while it reports a
-- drop. With no partition left to drop, it sweeps by rows the partition holding the cut-off,
-- the DEFAULT partitions and an older release's rows still in `jobs`, at most _limit rows
-- each (NULL: no limit), and returns (rows, false). The DROP waits at most 100 ms for its
-- lock (a long read of the history in the way): the partition is then swept by rows, or
-- dropped by a later call. It takes the counts' fold lock first, so no fold of that day's
-- deltas runs beside it.
CREATE FUNCTION history_prune(_statuses text[], _cutoff timestamptz, _limit bigint)
RETURNS TABLE (removed bigint, dropped boolean)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path FROM CURRENT
    SET lock_timeout = '100ms'
AS $$
#variable_conflict use_column
DECLARE
    swept   bigint;
    legacy  bigint;
    part    record;
    rows_in bigint;
    _day    date;
    _status text;
BEGIN
    FOR part IN
        SELECT c.relname, p.relname AS parent
          FROM pg_inherits i
          JOIN pg_class c ON c.oid = i.inhrelid
          JOIN pg_class p ON p.oid = i.inhparent
         WHERE p.relnamespace = current_schema()::regnamespace
           AND p.relname IN ('jobs_history_succeeded', 'jobs_history_failed')
           AND substr(p.relname, length('jobs_history_') + 1) = ANY (_statuses)
           AND c.relname ~ '_[0-9]{8}$'
         ORDER BY right(c.relname, 8), c.relname
    LOOP
        _day := to_date(right(part.relname, 8), 'YYYYMMDD');
        _status := substr(part.parent, length('jobs_history_') + 1);
        -- The partition of day D holds finished_at in [D, D+1) UTC.
        EXIT WHEN (_day + 1)::timestamp AT TIME ZONE 'UTC' > _cutoff;
        BEGIN
            PERFORM pg_advisory_xact_lock(
                hashtextextended(current_schema() || ':history_counts', 0));
            SELECT coalesce(sum(t.n), 0) INTO rows_in
              FROM (SELECT f.n FROM history_counts f
                     WHERE f.day = _day AND f.status = _status
                    UNION ALL
                    SELECT x.n FROM history_count_deltas x
                     WHERE x.day = _day AND x.status = _status) t;
            EXECUTE format('DROP TABLE %I', part.relname);
            DELETE FROM history_counts f WHERE f.day = _day AND f.status = _status;
            DELETE FROM history_count_deltas x WHERE x.day = _day AND x.status = _status;
            RETURN QUERY SELECT rows_in, true;
            RETURN;
        EXCEPTION WHEN lock_not_available THEN
            NULL;  -- swept by rows below, or dropped by a later call
        END;
    END LOOP;

    WITH picked AS (
        SELECT h.status, h.finished_at, h.id
          FROM jobs_history h
         WHERE h.status = ANY (_statuses)
           AND h.finished_at < _cutoff
         ORDER BY h.finished_at, h.id
         LIMIT _limit
           FOR UPDATE SKIP LOCKED
    )
    DELETE FROM jobs_history h
     USING picked p
     WHERE h.status = p.status AND h.finished_at = p.finished_at AND h.id = p.id;
    GET DIAGNOSTICS swept = ROW_COUNT;

    DELETE FROM jobs j
     WHERE j.id IN (SELECT d.id FROM jobs d
                     WHERE d.status IN ('succeeded', 'failed')
                       AND d.status = ANY (_statuses)
                       AND d.finished_at < _cutoff
                     ORDER BY d.finished_at
                     LIMIT _limit
                       FOR UPDATE SKIP LOCKED);
    GET DIAGNOSTICS legacy = ROW_COUNT;
    RETURN QUERY SELECT swept + legacy, false;
END
$$;

-- Dead letters back to PENDING, due now, attempts reset, last_error cleared (the attempt
-- history in "errors" is kept): from the history (moved back into `jobs` with their ids)
-- or, for an older release's rows, in place. A keyed one whose key a PENDING job holds is
-- left alone (the unique pending index admits one). Inserting into `jobs` announces the
-- types on the "jobs" channel (its insert trigger). Returns the ids and types revived.
CREATE FUNCTION revive_dead_letters(_ids bigint[])
RETURNS TABLE (id bigint, type text)
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY
    WITH legacy AS (
        UPDATE jobs j
           SET status = 'pending', attempts = 0, last_error = NULL, run_at = now(),
               finished_at = NULL, updated_at = now()
         WHERE j.id = ANY (_ids) AND j.status = 'failed'
           AND (j.dedupe_key IS NULL OR NOT EXISTS (
                    SELECT 1 FROM jobs o
                     WHERE o.type = j.type AND o.dedupe_key = j.dedupe_key
                       AND o.status = 'pending'))
        RETURNING j.id, j.type
    ),
    gone AS (
        DELETE FROM jobs_history h
         WHERE h.id = ANY (_ids) AND h.status = 'failed'
           AND (h.dedupe_key IS NULL OR NOT EXISTS (
                    SELECT 1 FROM jobs o
                     WHERE o.type = h.type AND o.dedupe_key = h.dedupe_key
                       AND o.status = 'pending'))
        RETURNING h.*
    ),
    back AS (
        INSERT INTO jobs (id, type, payload, scope_type, scope_id, status, priority, run_at,
                          attempts, max_attempts, last_error, dedupe_key, lease_owner,
                          lease_token, lease_expires_at, schedule_key, progress, started_at,
                          finished_at, created_at, updated_at, result, errors, tags,
                          trace_context)
        SELECT g.id, g.type, g.payload, g.scope_type, g.scope_id, 'pending', g.priority,
               now(), 0, g.max_attempts, NULL, g.dedupe_key, NULL, g.lease_token, NULL,
               g.schedule_key, g.progress, g.started_at, NULL, g.created_at, now(),
               g.result, g.errors, g.tags, g.trace_context
          FROM gone g
        RETURNING jobs.id, jobs.type
    )
    SELECT l.id, l.type FROM legacy l
    UNION ALL
    SELECT b.id, b.type FROM back b;
END
$$;

-- The lease holder's writes that finish a job, now moving it (0007's, otherwise unchanged:
-- the same fence, plan settings, deletes and "done" notification).

CREATE OR REPLACE FUNCTION complete_jobs(_owner text, _ids bigint[], _tokens bigint[])
RETURNS text
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
    SET plan_cache_mode = force_generic_plan
    SET enable_seqscan = off
    SET enable_bitmapscan = off
    SET enable_nestloop = off
    SET enable_mergejoin = off
    SET jit = off
AS $$
DECLARE
    written text;
BEGIN
    WITH done AS (
        DELETE FROM jobs j
         USING unnest(_ids, _tokens) AS t(id, token)
         WHERE j.id = ANY (_ids)
           AND j.id = t.id
           AND j.lease_token = t.token
           AND j.lease_owner = _owner
           AND j.status || '' = 'running'
        RETURNING j.*
    ),
    kept AS (
        INSERT INTO jobs_history
        SELECT d.id, d.type, d.payload, d.scope_type, d.scope_id, 'succeeded', d.priority,
               d.run_at, d.attempts, d.max_attempts, d.last_error, d.dedupe_key, NULL,
               d.lease_token, NULL, d.schedule_key, d.progress, d.started_at, now(),
               d.created_at, now(), d.result, d.errors, d.tags, d.trace_context
          FROM done d
        RETURNING jobs_history.id
    ),
    hint AS (
        SELECT notify_jobs_done(array_agg(k.id)) FROM kept k
    )
    SELECT (SELECT string_agg(k.id::text, ',') FROM kept k) INTO written FROM hint;
    RETURN written;
END
$$;

CREATE OR REPLACE FUNCTION complete_jobs_with_results(
    _owner text, _ids bigint[], _tokens bigint[], _results jsonb
) RETURNS text
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
    SET plan_cache_mode = force_generic_plan
    SET enable_seqscan = off
    SET enable_bitmapscan = off
    SET enable_nestloop = off
    SET enable_mergejoin = off
    SET jit = off
AS $$
DECLARE
    written text;
BEGIN
    WITH done AS (
        DELETE FROM jobs j
         USING unnest(_ids, _tokens,
                      ARRAY(SELECT r.value
                              FROM jsonb_array_elements(_results) WITH ORDINALITY AS r(value, n)
                             ORDER BY r.n)) AS t(id, token, result)
         WHERE j.id = ANY (_ids)
           AND j.id = t.id
           AND j.lease_token = t.token
           AND j.lease_owner = _owner
           AND j.status || '' = 'running'
        RETURNING j.*, NULLIF(t.result, 'null'::jsonb) AS new_result
    ),
    kept AS (
        INSERT INTO jobs_history
        SELECT d.id, d.type, d.payload, d.scope_type, d.scope_id, 'succeeded', d.priority,
               d.run_at, d.attempts, d.max_attempts, d.last_error, d.dedupe_key, NULL,
               d.lease_token, NULL, d.schedule_key, d.progress, d.started_at, now(),
               d.created_at, now(), d.new_result, d.errors, d.tags, d.trace_context
          FROM done d
        RETURNING jobs_history.id
    ),
    hint AS (
        SELECT notify_jobs_done(array_agg(k.id)) FROM kept k
    )
    SELECT (SELECT string_agg(k.id::text, ',') FROM kept k) INTO written FROM hint;
    RETURN written;
END
$$;

CREATE OR REPLACE FUNCTION complete_jobs_deleting(
    _owner text, _ids bigint[], _tokens bigint[], _results jsonb, _delete_types text[]
) RETURNS text
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
    SET plan_cache_mode = force_generic_plan
    SET enable_seqscan = off
    SET enable_bitmapscan = off
    SET enable_nestloop = off
    SET enable_mergejoin = off
    SET jit = off
AS $$
DECLARE
    written text;
BEGIN
    WITH held AS MATERIALIZED (
        SELECT j.id, NULLIF(t.result, 'null'::jsonb) AS result,
               j.type = ANY (_delete_types) AS remove
          FROM jobs j
          JOIN unnest(_ids, _tokens,
                      ARRAY(SELECT r.value
                              FROM jsonb_array_elements(_results) WITH ORDINALITY AS r(value, n)
                             ORDER BY r.n)) AS t(id, token, result) ON t.id = j.id
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
    done AS (
        DELETE FROM jobs j
         USING held h
         WHERE j.id = ANY (_ids) AND j.id = h.id AND NOT h.remove
        RETURNING j.*, h.result AS new_result
    ),
    kept AS (
        INSERT INTO jobs_history
        SELECT d.id, d.type, d.payload, d.scope_type, d.scope_id, 'succeeded', d.priority,
               d.run_at, d.attempts, d.max_attempts, d.last_error, d.dedupe_key, NULL,
               d.lease_token, NULL, d.schedule_key, d.progress, d.started_at, now(),
               d.created_at, now(), d.new_result, d.errors, d.tags, d.trace_context
          FROM done d
        RETURNING jobs_history.id
    ),
    finished AS (
        SELECT r.id FROM removed r
        UNION ALL
        SELECT k.id FROM kept k
    ),
    hint AS (
        SELECT notify_jobs_done(array_agg(f.id)) FROM finished f
    )
    SELECT (SELECT string_agg(f.id::text, ',') FROM finished f) INTO written FROM hint;
    RETURN written;
END
$$;

CREATE OR REPLACE FUNCTION fail_jobs(
    _owner text, _ids bigint[], _tokens bigint[], _errors text[], _delete_types text[],
    _history int
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
        SELECT j.id, t.error, j.type = ANY (_delete_types) AS remove
          FROM jobs j
          JOIN unnest(_ids, _tokens, _errors) AS t(id, token, error) ON t.id = j.id
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
        RETURNING j.*, h.error AS new_error
    ),
    failed AS (
        INSERT INTO jobs_history
        SELECT g.id, g.type, g.payload, g.scope_type, g.scope_id, 'failed', g.priority,
               g.run_at, g.attempts, g.max_attempts, g.new_error, g.dedupe_key, NULL,
               g.lease_token, NULL, g.schedule_key, g.progress, g.started_at, now(),
               g.created_at, now(), g.result,
               append_attempt_error(g.errors, g.attempts, g.new_error, g.lease_owner, _history),
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

-- Yesterday's to three days ahead's partitions now; history_upkeep keeps them coming.
SELECT history_ensure_partition(s.status, history_day(now()) + g.k)
  FROM unnest(ARRAY['succeeded', 'failed']) AS s(status),
       generate_series(-1, 3) AS g(k);
