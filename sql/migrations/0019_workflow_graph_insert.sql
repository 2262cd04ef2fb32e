-- golemq-pg 0019: a workflow written in one statement, and a parent of the same workflow
-- cancelled at its add judged as a cancelled parent.
--
--  * insert_job_graph(): the jobs of a workflow (or of one add), their edges, node rows and
--    verdicts, in one call, so queue.add_workflow costs one round trip whatever its size
--    (0016's path cost two statements per job). The job ids are drawn from the identity
--    sequence first, sorted, so job k of the call gets the k-th smallest (children after
--    their parents, as before). Two ways through it:
--      - no job waits for a job outside the call (the common workflow): every job is
--        inserted WAITING in one INSERT, a job with children already marked has_dependents,
--        the edges and node rows (open_parents = its number of parents) in one INSERT each,
--        then the jobs without parents are released (release_waiting: PENDING and one
--        NOTIFY). Nothing can be judged at once: every parent is a fresh live job.
--      - some job waits for an outside job (which may be finished, failed, or cancelled):
--        every job is inserted WAITING in one INSERT, then each is linked in index order
--        by link_jobs(), exactly as the per-job path does, so a verdict given at the add
--        (failed or cancelled by an outside parent) reaches its children in the call.
--    Keyed jobs (on_duplicate "reject" / "replace") are not written here: they keep the
--    per-job path and its advisory lock (sql/queries/workflows.sql).
--  * link_jobs() (0016), full body again: a parent that no longer exists but has a node row
--    of the child's own workflow was a job of that workflow cancelled at its add (its
--    "cancel" policy, by a failed outside parent); it counts as a cancelled parent ("parent
--    N was cancelled", the child's policy applies), where 0016 raised "does not exist".

CREATE OR REPLACE FUNCTION link_jobs(_children bigint[], _parents bigint[], _policy text,
                                     _workflow bigint)
RETURNS TABLE (id bigint, status text)
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
    SET enable_seqscan = off
    SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    open_n    int := 0;
    failed    bigint;
    cancelled bigint;
    missing   bigint;
    ready     bigint[];
BEGIN
    _parents := coalesce(_parents, ARRAY[]::bigint[]);
    IF cardinality(_parents) > 0 THEN
        UPDATE jobs p SET has_dependents = true
         WHERE p.id = ANY (_parents) AND NOT p.has_dependents
           AND p.status IN ('pending', 'running', 'waiting');
        WITH live AS (
            SELECT j.id, j.status FROM jobs j WHERE j.id = ANY (_parents) FOR KEY SHARE
        ),
        finished AS (
            SELECT h.id, h.status FROM jobs_history h
             WHERE h.id = ANY (_parents) AND h.id NOT IN (SELECT l.id FROM live l)
        ),
        dropped AS (
            SELECT n.job_id AS id, 'cancelled'::text AS status FROM job_nodes n
             WHERE _workflow IS NOT NULL AND n.job_id = ANY (_parents)
               AND n.workflow_id = _workflow
               AND n.job_id NOT IN (SELECT l.id FROM live l)
               AND n.job_id NOT IN (SELECT f.id FROM finished f)
        ),
        known AS (
            SELECT l.id, l.status FROM live l
            UNION ALL SELECT f.id, f.status FROM finished f
            UNION ALL SELECT d.id, d.status FROM dropped d
        )
        SELECT (SELECT count(*) FROM known k WHERE k.status IN ('pending', 'running', 'waiting')),
               (SELECT min(k.id) FROM known k WHERE k.status IN ('failed', 'cancelled')),
               (SELECT min(k.id) FROM known k WHERE k.status = 'cancelled'),
               (SELECT min(p) FROM unnest(_parents) AS p
                 WHERE p NOT IN (SELECT k.id FROM known k))
          INTO open_n, failed, cancelled, missing;
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'depends_on: job % does not exist', missing
                USING ERRCODE = 'foreign_key_violation';
        END IF;
        INSERT INTO job_deps (parent_id, child_id)
        SELECT p, c FROM unnest(_parents) AS p, unnest(_children) AS c
        ON CONFLICT DO NOTHING;
    END IF;
    INSERT INTO job_nodes (job_id, workflow_id, open_parents, policy)
    SELECT c, _workflow, open_n, _policy FROM unnest(_children) AS c
    ON CONFLICT (job_id) DO NOTHING;
    IF failed IS NOT NULL AND _policy = 'fail' THEN
        PERFORM fail_waiting(_children, failed,
                             'parent ' || failed
                             || CASE WHEN failed = cancelled THEN ' was cancelled'
                                     ELSE ' failed' END);
        RETURN QUERY SELECT c, 'failed'::text FROM unnest(_children) AS c;
        RETURN;
    END IF;
    IF failed IS NOT NULL AND _policy = 'cancel' THEN
        PERFORM cancel_waiting(_children, failed);
        RETURN QUERY SELECT c, 'cancelled'::text FROM unnest(_children) AS c;
        RETURN;
    END IF;
    IF failed IS NOT NULL THEN  -- 'run': the failed parent counts as done
        UPDATE job_nodes n SET failed_parent = failed WHERE n.job_id = ANY (_children);
    END IF;
    IF open_n = 0 THEN
        ready := release_waiting(_children);
        RETURN QUERY SELECT c, CASE WHEN c = ANY (ready) THEN 'pending' ELSE 'cancelled' END
                       FROM unnest(_children) AS c;
        RETURN;
    END IF;
    RETURN QUERY SELECT c, 'waiting'::text FROM unnest(_children) AS c;
END
$$;

-- The unkeyed jobs of one call (job k: the k-th element of each column array; _tags a JSON
-- array of a text array or null per job), inserted WAITING and linked (see the header).
-- _name: the workflow record to create (NULL: none). _edge_parents[i] -> _edge_children[i]:
-- the edges between jobs of the call, as 0-based job indexes, parent first, distinct.
-- _outside_parents[i] -> _outside_children[i]: a job outside the call (an id) that job
-- _outside_children[i] (0-based) waits for; distinct, checked to exist by the caller
-- (link_jobs raises foreign_key_violation naming one pruned since). Returns the workflow id
-- (NULL without _name) and the job ids in job order.
CREATE FUNCTION insert_job_graph(
    _name text, _types text[], _payloads text[], _scope_types text[], _scope_ids text[],
    _run_ats timestamptz[], _delays float8[], _max_attempts int[], _priorities int[],
    _tags jsonb, _trace_contexts text[], _policies text[],
    _edge_parents int[], _edge_children int[],
    _outside_parents bigint[], _outside_children int[]
) RETURNS TABLE (workflow_id bigint, job_ids bigint[])
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
    SET enable_seqscan = off
    SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    wf      bigint;
    n       int := cardinality(_types);
    seq     regclass := pg_get_serial_sequence('jobs', 'id')::regclass;
    ids     bigint[];
    roots   bigint[];
    parents bigint[];
    i       int;
BEGIN
    IF n IS NULL OR n = 0 THEN
        RAISE EXCEPTION 'insert_job_graph: no jobs' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    _edge_parents := coalesce(_edge_parents, ARRAY[]::int[]);
    _edge_children := coalesce(_edge_children, ARRAY[]::int[]);
    _outside_parents := coalesce(_outside_parents, ARRAY[]::bigint[]);
    _outside_children := coalesce(_outside_children, ARRAY[]::int[]);
    IF _name IS NOT NULL THEN
        INSERT INTO workflows (name) VALUES (_name) RETURNING workflows.id INTO wf;
    END IF;
    ids := ARRAY(SELECT s.v
                   FROM (SELECT nextval(seq) AS v FROM generate_series(1, n)) s
                  ORDER BY s.v);
    -- has_dependents is set here only on the way without outside parents (link_jobs sets
    -- it on the other).
    INSERT INTO jobs (id, type, payload, scope_type, scope_id, run_at, max_attempts, priority,
                      tags, trace_context, status, has_dependents)
    SELECT ids[u.k], u.type, u.payload::jsonb, u.scope_type, u.scope_id,
           coalesce(u.run_at, now() + make_interval(secs => u.delay)),
           u.max_attempts, u.priority,
           CASE WHEN jsonb_typeof(_tags -> (u.k - 1)::int) = 'array' THEN
               ARRAY(SELECT jsonb_array_elements_text(_tags -> (u.k - 1)::int))
           END,
           u.trace::jsonb, 'waiting',
           cardinality(_outside_parents) = 0 AND m.p IS NOT NULL
      FROM unnest(_types, _payloads, _scope_types, _scope_ids, _run_ats, _delays,
                  _max_attempts, _priorities, _trace_contexts)
           WITH ORDINALITY AS u(type, payload, scope_type, scope_id, run_at, delay,
                                max_attempts, priority, trace, k)
      LEFT JOIN (SELECT DISTINCT e.p FROM unnest(_edge_parents) AS e(p)) m
             ON m.p = u.k - 1
     ORDER BY u.k;

    IF cardinality(_outside_parents) > 0 THEN
        -- Some job waits for an outside one: each linked and judged in job order.
        FOR i IN 1 .. n LOOP
            parents := ARRAY(
                SELECT ids[e.p + 1]
                  FROM unnest(_edge_parents, _edge_children) AS e(p, c) WHERE e.c = i - 1
                UNION
                SELECT o.p
                  FROM unnest(_outside_parents, _outside_children) AS o(p, c) WHERE o.c = i - 1);
            PERFORM 1 FROM link_jobs(ARRAY[ids[i]], parents, _policies[i], wf);
        END LOOP;
        RETURN QUERY SELECT wf, ids;
        RETURN;
    END IF;

    INSERT INTO job_deps (parent_id, child_id)
    SELECT ids[e.p + 1], ids[e.c + 1] FROM unnest(_edge_parents, _edge_children) AS e(p, c)
    ON CONFLICT DO NOTHING;
    WITH counts AS (
        SELECT e.c, count(DISTINCT e.p) AS open_n
          FROM unnest(_edge_parents, _edge_children) AS e(p, c)
         GROUP BY e.c
    ),
    noded AS (
        INSERT INTO job_nodes (job_id, workflow_id, open_parents, policy)
        SELECT ids[g.k], wf, coalesce(c.open_n, 0), _policies[g.k]
          FROM generate_series(1, n) AS g(k)
          LEFT JOIN counts c ON c.c = g.k - 1
        RETURNING job_nodes.job_id, job_nodes.open_parents
    )
    SELECT array_agg(d.job_id) FILTER (WHERE d.open_parents = 0) INTO roots FROM noded d;
    PERFORM release_waiting(roots);
    RETURN QUERY SELECT wf, ids;
END
$$;
