-- golemq-pg 0005: the NOTIFY hints without a channel_name() call per statement.
--
-- The insert hint (notify_jobs_inserted, the jobs_notify_inserted trigger of 0001) and the
-- completion hint (notify_jobs_done, 0002) called channel_name(kind), an SQL function with
-- its own SET search_path: such a function is never inlined, and PL/pgSQL keeps the state
-- of its simple expressions only for one transaction, so every single-row add (its own
-- transaction) parsed and planned channel_name's body again. Measured on the backend: about
-- 55 us of the trigger's 100 us on each add (the insert itself is about 120 us). The same
-- name is now computed inline: the functions keep SET search_path FROM CURRENT, so
-- current_schema() inside them is the queue's schema, exactly as inside channel_name().
-- channel_name() stays (clients read the channel names through it). Same channels, same
-- payloads, still at most one notification per statement; the trigger is unchanged.

CREATE OR REPLACE FUNCTION notify_jobs_inserted() RETURNS trigger
    LANGUAGE plpgsql SET search_path FROM CURRENT
AS $$
DECLARE
    due_types text;
BEGIN
    SELECT json_agg(DISTINCT n.type)::text INTO due_types
      FROM new_rows n WHERE n.run_at <= now();
    IF due_types IS NOT NULL THEN
        -- pg_notify payloads must stay under 8000 bytes; an empty hint means "any type".
        IF octet_length(due_types) > 7900 THEN
            due_types := '';
        END IF;
        -- channel_name('jobs'), inline (see the top of this file).
        PERFORM pg_notify(
            CASE WHEN length(current_schema()) <= 48 THEN current_schema()
                 ELSE left(current_schema(), 39) || '_' || left(md5(current_schema()), 8)
            END || '.jobs',
            due_types);
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION notify_jobs_done(ids bigint[]) RETURNS void
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
    -- channel_name('done'), inline (see the top of this file).
    PERFORM pg_notify(
        CASE WHEN length(current_schema()) <= 48 THEN current_schema()
             ELSE left(current_schema(), 39) || '_' || left(md5(current_schema()), 8)
        END || '.done',
        hint);
END
$$;
