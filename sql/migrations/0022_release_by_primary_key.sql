-- golemq-pg 0022: a released child is found by its primary key, never by a walk of every
-- WAITING job.
--
-- release_waiting() (0016) moves the children whose last parent succeeded from WAITING to
-- PENDING (and first deletes a keyed one whose key a pending job took meanwhile). Its two
-- statements selected them with `id = ANY (_ids) AND status = 'waiting'`: the second test is
-- jobs_waiting_idx's predicate (0017), so on a queue whose statistics were not taken yet, or
-- say nothing is waiting (an idle VACUUM ANALYZE), the planner read that partial index whole
-- and filtered the ids out of it: one read of every WAITING job per settling statement,
-- O(waiting jobs) each time a parent finishes. Written `status || ''`, the test no longer
-- matches the index's predicate, so the ids are probed on the primary key in every
-- statistics state and under both plan cache modes (the settle walk of 0020 reads its
-- children the same way). Same signature, same rows, same notification.
--
-- Safe on a live queue: a function body replaced, nothing scanned or rewritten.

CREATE OR REPLACE FUNCTION release_waiting(_ids bigint[]) RETURNS bigint[]
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
    SET enable_seqscan = off
    SET jit = off
AS $$
DECLARE
    due_types text;
    released  bigint[];
BEGIN
    IF _ids IS NULL OR cardinality(_ids) = 0 THEN
        RETURN ARRAY[]::bigint[];
    END IF;
    DELETE FROM jobs j
     WHERE j.id = ANY (_ids) AND j.status || '' = 'waiting' AND j.dedupe_key IS NOT NULL
       AND EXISTS (SELECT 1 FROM jobs p
                    WHERE p.type = j.type AND p.dedupe_key = j.dedupe_key
                      AND p.status = 'pending');
    WITH upd AS (
        UPDATE jobs j
           SET status = 'pending', run_at = greatest(j.run_at, now()), updated_at = now()
         WHERE j.id = ANY (_ids) AND j.status || '' = 'waiting'
        RETURNING j.id, j.type, j.run_at
    )
    SELECT array_agg(u.id),
           json_agg(DISTINCT u.type) FILTER (WHERE u.run_at <= now())::text
      INTO released, due_types
      FROM upd u;
    IF due_types IS NOT NULL THEN
        IF octet_length(due_types) > 7900 THEN
            due_types := '';
        END IF;
        PERFORM pg_notify(
            CASE WHEN length(current_schema()) <= 48 THEN current_schema()
                 ELSE left(current_schema(), 39) || '_' || left(md5(current_schema()), 8)
            END || '.jobs',
            due_types);
    END IF;
    RETURN coalesce(released, ARRAY[]::bigint[]);
END
$$;
