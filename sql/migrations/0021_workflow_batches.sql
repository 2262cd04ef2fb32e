-- golemq-pg 0021: many workflows written in one statement (queue.add_workflows).
--
--  * insert_job_graphs(): the unkeyed jobs of several groups (each a workflow, or the jobs
--    of one add without a workflow), their edges, node rows and verdicts, in one call, so
--    queue.add_workflows costs one round trip whatever the number of workflows: each
--    INSERT of insert_job_graph() (0019) is made once for every group. The job ids are
--    drawn from the identity sequence first, sorted, so job k of the call gets the k-th
--    smallest (children after their parents, every workflow's jobs after the previous
--    workflow's); each named group gets a workflow record, its id drawn in group order.
--    The two ways through it are 0019's: without an outside parent every row is written by
--    one statement per table and the jobs without parents are released at once; with one,
--    each job is linked in job order by link_jobs().
--  * insert_job_graph() (0019) becomes a thin wrapper over it (one group), kept for the
--    workers of the previous release during a rolling upgrade.

-- The unkeyed jobs of one call (job k: the k-th element of each column array; _tags a JSON
-- array of a text array or null per job), inserted WAITING and linked. _names: one element
-- per group, the workflow record to create (NULL: none); _groups[k]: the group of job k
-- (0-based), the jobs of a group contiguous. _edge_parents[i] -> _edge_children[i]: the
-- edges between jobs of the call, as 0-based job indexes, parent first, distinct, inside one
-- group. _outside_parents[i] -> _outside_children[i]: a job outside the call (an id) that
-- job _outside_children[i] (0-based) waits for; distinct, checked to exist by the caller
-- (link_jobs raises foreign_key_violation naming one pruned since). Returns the workflow ids
-- by group (NULL for a group without a name) and the job ids in job order.
CREATE FUNCTION insert_job_graphs(
    _names text[], _groups int[], _types text[], _payloads text[], _scope_types text[],
    _scope_ids text[], _run_ats timestamptz[], _delays float8[], _max_attempts int[],
    _priorities int[], _tags jsonb, _trace_contexts text[], _policies text[],
    _edge_parents int[], _edge_children int[],
    _outside_parents bigint[], _outside_children int[]
) RETURNS TABLE (workflow_ids bigint[], job_ids bigint[])
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
    SET enable_seqscan = off
    SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    n       int := cardinality(_types);
    seq     regclass := pg_get_serial_sequence('jobs', 'id')::regclass;
    wf_seq  regclass := pg_get_serial_sequence('workflows', 'id')::regclass;
    wfs     bigint[];
    ids     bigint[];
    roots   bigint[];
    parents bigint[];
    i       int;
BEGIN
    IF n IS NULL OR n = 0 THEN
        RAISE EXCEPTION 'insert_job_graphs: no jobs' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF cardinality(_groups) IS DISTINCT FROM n
       OR EXISTS (SELECT 1 FROM unnest(_groups) AS g(v)
                   WHERE g.v IS NULL OR g.v < 0 OR g.v >= cardinality(_names)) THEN
        RAISE EXCEPTION 'insert_job_graphs: every job needs the index of its group'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    _edge_parents := coalesce(_edge_parents, ARRAY[]::int[]);
    _edge_children := coalesce(_edge_children, ARRAY[]::int[]);
    _outside_parents := coalesce(_outside_parents, ARRAY[]::bigint[]);
    _outside_children := coalesce(_outside_children, ARRAY[]::int[]);
    -- nextval is volatile: evaluated once per group, in group order (after the sort)
    wfs := ARRAY(SELECT CASE WHEN g.name IS NOT NULL THEN nextval(wf_seq) END
                   FROM unnest(_names) WITH ORDINALITY AS g(name, k)
                  ORDER BY g.k);
    INSERT INTO workflows (id, name)
    SELECT wfs[g.k], g.name
      FROM unnest(_names) WITH ORDINALITY AS g(name, k)
     WHERE g.name IS NOT NULL
     ORDER BY g.k;
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
            PERFORM 1 FROM link_jobs(ARRAY[ids[i]], parents, _policies[i],
                                     wfs[_groups[i] + 1]);
        END LOOP;
        RETURN QUERY SELECT wfs, ids;
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
        SELECT ids[g.k], wfs[_groups[g.k] + 1], coalesce(c.open_n, 0), _policies[g.k]
          FROM generate_series(1, n) AS g(k)
          LEFT JOIN counts c ON c.c = g.k - 1
        RETURNING job_nodes.job_id, job_nodes.open_parents
    )
    SELECT array_agg(d.job_id) FILTER (WHERE d.open_parents = 0) INTO roots FROM noded d;
    PERFORM release_waiting(roots);
    RETURN QUERY SELECT wfs, ids;
END
$$;

-- 0019's signature, one group: the workers of the previous release call it.
CREATE OR REPLACE FUNCTION insert_job_graph(
    _name text, _types text[], _payloads text[], _scope_types text[], _scope_ids text[],
    _run_ats timestamptz[], _delays float8[], _max_attempts int[], _priorities int[],
    _tags jsonb, _trace_contexts text[], _policies text[],
    _edge_parents int[], _edge_children int[],
    _outside_parents bigint[], _outside_children int[]
) RETURNS TABLE (workflow_id bigint, job_ids bigint[])
    LANGUAGE sql
    SET search_path FROM CURRENT
AS $$
    SELECT g.workflow_ids[1], g.job_ids
      FROM insert_job_graphs(ARRAY[_name], array_fill(0, ARRAY[coalesce(cardinality(_types), 0)]),
                             _types, _payloads, _scope_types, _scope_ids, _run_ats, _delays,
                             _max_attempts, _priorities, _tags, _trace_contexts, _policies,
                             _edge_parents, _edge_children, _outside_parents,
                             _outside_children) g
$$;
