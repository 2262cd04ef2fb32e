-- Dependencies and workflows: enqueueing with parents, workflow_create / workflow_get /
-- workflow_cancel, job_links. The release of children is not here: the settle trigger on
-- jobs (0016; a statement trigger with a loop over generations since 0020, whose header
-- says how and in which lock order) does it in the transaction that finishes a parent.
--
-- A job with parents is inserted WAITING, then link_jobs() (0016) records its edges, marks
-- and locks its live parents and judges it at once (pending, waiting, failed or cancelled),
-- all in the add's transaction. Unkeyed jobs are written by one call of insert_job_graphs()
-- (0021, job_graphs_insert below), whole workflows included, several at once.


-- name: job_parents_missing
-- The ids among the parents that name no job, live or finished: checked before any write,
-- so an add naming one writes nothing (link_jobs checks again under its locks). Each id is
-- looked up by a LATERAL ... LIMIT 1 (a descent of each table's id index, see job_links):
-- a NOT EXISTS was planned as an anti-join over a scan of every job.
SELECT p.id
  FROM unnest(%(ids)s::bigint[]) AS p(id)
  LEFT JOIN LATERAL (SELECT a.id FROM {schema}.jobs_all a WHERE a.id = p.id LIMIT 1) a
         ON true
 WHERE a.id IS NULL
 ORDER BY p.id


-- name: job_insert_waiting
-- One WAITING job (no dedupe check: an unkeyed add, or a keyed one after job_replace_held
-- found no holder to replace). The insert trigger announces nothing for it (0016).
INSERT INTO {schema}.jobs (type, payload, scope_type, scope_id, run_at, max_attempts, priority,
                           dedupe_key, tags, trace_context, status)
VALUES (%(type)s::text, %(payload)s::jsonb, %(scope_type)s::text, %(scope_id)s::text,
        coalesce(%(run_at)s::timestamptz, now() + make_interval(secs => %(delay)s::float8)),
        %(max_attempts)s::int, %(priority)s::int, %(dedupe_key)s::text, %(tags)s::text[],
        %(trace_context)s::jsonb, 'waiting')
RETURNING id


-- name: job_insert_waiting_reject
-- on_duplicate="reject" with parents: as job_enqueue_reject (jobs.sql), the holder read
-- FOR KEY SHARE, WAITING holders included; the waiting unique index arbitrates.
INSERT INTO {schema}.jobs (type, payload, scope_type, scope_id, run_at, max_attempts, priority,
                           dedupe_key, tags, trace_context, status)
SELECT %(type)s::text, %(payload)s::jsonb, %(scope_type)s::text, %(scope_id)s::text,
       coalesce(%(run_at)s::timestamptz, now() + make_interval(secs => %(delay)s::float8)),
       %(max_attempts)s::int, %(priority)s::int, %(dedupe_key)s::text, %(tags)s::text[],
       %(trace_context)s::jsonb, 'waiting'
 WHERE NOT EXISTS (
        SELECT 1 FROM {schema}.jobs r
         WHERE r.type = %(type)s::text AND r.dedupe_key = %(dedupe_key)s::text
           AND (r.status = 'pending' OR r.status = 'running' OR r.status = 'waiting')
           FOR KEY SHARE OF r)
ON CONFLICT (type, dedupe_key) WHERE status = 'waiting' AND dedupe_key IS NOT NULL DO NOTHING
RETURNING id


-- name: job_replace_held
-- on_duplicate="replace" with parents: the WAITING or PENDING holder of the key takes the
-- payload, tags and options (it keeps its id, place and parents: the add's depends_on is not
-- applied to it). Runs under the key's advisory lock (job_enqueue_key_lock); a holder being
-- claimed or released meanwhile is re-read as it now is.
UPDATE {schema}.jobs j
   SET payload       = %(payload)s::jsonb,
       scope_type    = %(scope_type)s::text,
       scope_id      = %(scope_id)s::text,
       priority      = %(priority)s::int,
       tags          = %(tags)s::text[],
       trace_context = %(trace_context)s::jsonb,
       created_at    = CASE WHEN %(grouped)s::boolean THEN now() ELSE j.created_at END,
       updated_at    = now()
 WHERE j.type = %(type)s::text AND j.dedupe_key = %(dedupe_key)s::text
   AND (j.status = 'waiting' OR j.status = 'pending')
RETURNING j.id


-- name: job_node_join_workflow
-- A workflow job whose key a live job held: that job (replaced) joins the workflow, unless it
-- belongs to one already; its parents and its state are its own.
INSERT INTO {schema}.job_nodes AS n (job_id, workflow_id)
VALUES (%(id)s::bigint, %(workflow)s::bigint)
ON CONFLICT (job_id) DO UPDATE SET workflow_id = coalesce(n.workflow_id, EXCLUDED.workflow_id)
RETURNING n.job_id


-- name: job_insert_waiting_many
-- add_many with parents: every payload one WAITING job, ids in the order of the payloads.
INSERT INTO {schema}.jobs (type, payload, scope_type, scope_id, run_at, max_attempts, priority,
                           tags, trace_context, status)
SELECT %(type)s::text, p.payload::jsonb, %(scope_type)s::text, %(scope_id)s::text,
       coalesce(%(run_at)s::timestamptz, now() + make_interval(secs => %(delay)s::float8)),
       %(max_attempts)s::int, %(priority)s::int, %(tags)s::text[], %(trace_context)s::jsonb,
       'waiting'
  FROM unnest(%(payloads)s::text[]) WITH ORDINALITY AS p(payload, n)
 ORDER BY p.n
RETURNING id


-- name: job_link
-- The fresh WAITING jobs linked to their parents and judged (link_jobs, 0016): one row per
-- job with its status now ('waiting', 'pending', 'failed', 'cancelled').
SELECT l.id, l.status
  FROM {schema}.link_jobs(%(children)s::bigint[], %(parents)s::bigint[], %(policy)s::text,
                          %(workflow)s::bigint) l


-- name: job_graphs_insert
-- Unkeyed jobs in groups (a workflow each, or one add's jobs), their edges and verdicts,
-- and a workflow record per named group, in one call (insert_job_graphs, 0021): the
-- workflow ids by group (NULL for a group without a name) and the job ids in job order.
-- Column arrays hold one element per job; "groups" the 0-based group of each job; edges
-- are 0-based job indexes of the call.
SELECT g.workflow_ids, g.job_ids
  FROM {schema}.insert_job_graphs(
        %(names)s::text[], %(groups)s::int[], %(types)s::text[], %(payloads)s::text[],
        %(scope_types)s::text[], %(scope_ids)s::text[], %(run_ats)s::timestamptz[],
        %(delays)s::float8[], %(max_attempts)s::int[], %(priorities)s::int[], %(tags)s::jsonb,
        %(trace_contexts)s::text[], %(policies)s::text[], %(edge_parents)s::int[],
        %(edge_children)s::int[], %(outside_parents)s::bigint[],
        %(outside_children)s::int[]) g


-- name: workflow_insert
INSERT INTO {schema}.workflows (name) VALUES (%(name)s::text) RETURNING id


-- name: workflow_get
-- A workflow's record, its jobs still existing (live or finished) and its edges, in one
-- statement: the record's columns on every row, then a job's summary columns (NULL on edge
-- rows) or an edge (parent, child). The members come from job_nodes' workflow index; each
-- member's job, and each edge's parent node, is then one LATERAL ... LIMIT 1 descent by id
-- (see job_links), never a join the planner may turn into a scan of every job.
WITH wf AS (
    SELECT w.id, w.name, w.created_at, w.cancelled_at
      FROM {schema}.workflows w WHERE w.id = %(id)s::bigint
),
members AS MATERIALIZED (
    SELECT n.job_id FROM {schema}.job_nodes n WHERE n.workflow_id = %(id)s::bigint
)
SELECT wf.id, wf.name, wf.created_at, wf.cancelled_at, 'job' AS kind,
       NULL::bigint AS parent_id, NULL::bigint AS child_id, {fragment_summary_columns}
  FROM wf
 CROSS JOIN members m
 CROSS JOIN LATERAL (SELECT * FROM {schema}.jobs_all a WHERE a.id = m.job_id LIMIT 1) j
UNION ALL
SELECT wf.id, wf.name, wf.created_at, wf.cancelled_at, 'edge', d.parent_id, d.child_id,
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL
  FROM wf
 CROSS JOIN members m
  JOIN {schema}.job_deps d ON d.child_id = m.job_id
 CROSS JOIN LATERAL (SELECT 1 FROM {schema}.job_nodes o
                      WHERE o.job_id = d.parent_id AND o.workflow_id = wf.id LIMIT 1) o
UNION ALL
SELECT wf.id, wf.name, wf.created_at, wf.cancelled_at, 'record', NULL, NULL,
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL
  FROM wf


-- name: workflow_members_live
-- The live jobs of a workflow (workflow_cancel cancels them): each member probed by id
-- (LATERAL ... LIMIT 1, see job_links).
SELECT j.id
  FROM {schema}.job_nodes n
 CROSS JOIN LATERAL (SELECT l.id FROM {schema}.jobs l
                      WHERE l.id = n.job_id AND l.status IN ('waiting', 'pending', 'running')
                      LIMIT 1) j
 WHERE n.workflow_id = %(id)s::bigint
 ORDER BY j.id


-- name: workflow_mark_cancelled
UPDATE {schema}.workflows w SET cancelled_at = now()
 WHERE w.id = %(id)s::bigint AND w.cancelled_at IS NULL
RETURNING w.id


-- name: job_links
-- A job's links in one statement: its workflow and children (on every row), and one row
-- per parent that still exists with its summary columns (one row of NULLs when none).
-- The edges are read by job_deps' keys, then each job by its id in a LATERAL subquery that
-- stops at the first row (LIMIT 1: it cannot be flattened into a join): a descent of the
-- primary key of `jobs` and of the id index of each history partition per edge, whatever
-- the statistics say. An IN or a join of the jobs with the edges was planned, on tables
-- without statistics, as a scan of every job, live and finished, per read (job.parents in
-- each handler: O(jobs)). A partition that was empty when the statement was planned may be
-- read by a sequential scan (of nothing); a later ANALYZE of it replans.
SELECT (SELECT n.workflow_id FROM {schema}.job_nodes n WHERE n.job_id = %(id)s::bigint),
       ARRAY(SELECT d.child_id
               FROM {schema}.job_deps d
              CROSS JOIN LATERAL (SELECT c.id FROM {schema}.jobs_all c
                                   WHERE c.id = d.child_id LIMIT 1) c
              WHERE d.parent_id = %(id)s::bigint
              ORDER BY d.child_id),
       p.*
  FROM (SELECT 1) one
  LEFT JOIN LATERAL (
        SELECT {fragment_summary_columns}
          FROM {schema}.job_deps d
         CROSS JOIN LATERAL (SELECT * FROM {schema}.jobs_all a
                              WHERE a.id = d.parent_id LIMIT 1) j
         WHERE d.child_id = %(id)s::bigint
       ) p ON true
 ORDER BY p.id


-- name: job_parents_many
-- The workflow and parents of each of the given jobs that has a node row (jobs without one
-- have no parents and no workflow: no row): one "edge" row per job and parent (parent NULL
-- for a job without parents), then one "parent" row per distinct parent still existing,
-- with its summary columns: a parent shared by the jobs of a claim (a fan-out's) is read
-- once. Each lookup is a descent by id (LATERAL ... LIMIT 1, see job_links): the node by
-- its key, the edges by job_deps_child_idx (an ARRAY() subquery per job, which cannot be
-- flattened into a join the planner may make a scan of every edge), each parent by id.
WITH edges AS MATERIALIZED (
    SELECT i.id AS child_id, n.workflow_id, d.parent_id
      FROM unnest(%(ids)s::bigint[]) AS i(id)
     CROSS JOIN LATERAL (SELECT o.workflow_id FROM {schema}.job_nodes o
                          WHERE o.job_id = i.id LIMIT 1) n
      LEFT JOIN LATERAL unnest(ARRAY(SELECT e.parent_id FROM {schema}.job_deps e
                                      WHERE e.child_id = i.id)) AS d(parent_id) ON true
)
SELECT 'edge' AS kind, e.child_id, e.workflow_id, e.parent_id,
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL
  FROM edges e
UNION ALL
SELECT 'parent', NULL, NULL, NULL, {fragment_summary_columns}
  FROM (SELECT DISTINCT e.parent_id FROM edges e WHERE e.parent_id IS NOT NULL) p
 CROSS JOIN LATERAL (SELECT * FROM {schema}.jobs_all a WHERE a.id = p.parent_id LIMIT 1) j


-- name: job_nodes_prune
-- Retention of the graph (job_prune), first step: the node rows of jobs that no longer
-- exist, outside a workflow or in a workflow created before the cut-off none of whose jobs
-- exists any more, and those workflows' records; at most "limit" node rows a call. Every
-- node row is a candidate (job_nodes is read whole), but each job, and each workflow
-- record, is looked up by id (LATERAL ... LIMIT 1, see job_links): a NOT EXISTS over
-- jobs_all was planned as an anti-join over a scan of every job, the history included.
WITH gone_nodes AS (
    DELETE FROM {schema}.job_nodes n
     WHERE n.job_id IN (
            SELECT m.job_id
              FROM {schema}.job_nodes m
              LEFT JOIN LATERAL (SELECT a.id FROM {schema}.jobs_all a
                                  WHERE a.id = m.job_id LIMIT 1) a ON true
              LEFT JOIN LATERAL (SELECT w.created_at FROM {schema}.workflows w
                                  WHERE w.id = m.workflow_id LIMIT 1) w ON true
             WHERE a.id IS NULL
               AND (m.workflow_id IS NULL OR (
                    w.created_at < coalesce(%(before)s::timestamptz,
                                            now() - make_interval(secs => %(age)s::float8))
                    AND NOT EXISTS (
                        SELECT 1
                          FROM {schema}.job_nodes o
                         CROSS JOIN LATERAL (SELECT l.id FROM {schema}.jobs_all l
                                              WHERE l.id = o.job_id LIMIT 1) l
                         WHERE o.workflow_id = m.workflow_id)))
             LIMIT %(limit)s::bigint)
    RETURNING n.workflow_id
),
gone_workflows AS (
    DELETE FROM {schema}.workflows w
     WHERE w.id IN (SELECT g.workflow_id FROM gone_nodes g)
    RETURNING 1
)
SELECT (SELECT count(*) FROM gone_nodes) + (SELECT count(*) FROM gone_workflows)


-- name: job_deps_prune
-- Then the edges whose two jobs no longer exist and whose child has no node row left (the
-- step above removed it, so no workflow reads the edge); at most "limit" a call. Each job
-- looked up by id, as above.
DELETE FROM {schema}.job_deps d
 WHERE (d.parent_id, d.child_id) IN (
        SELECT e.parent_id, e.child_id
          FROM {schema}.job_deps e
          LEFT JOIN LATERAL (SELECT c.id FROM {schema}.jobs_all c
                              WHERE c.id = e.child_id LIMIT 1) c ON true
          LEFT JOIN LATERAL (SELECT p.id FROM {schema}.jobs_all p
                              WHERE p.id = e.parent_id LIMIT 1) p ON true
         WHERE c.id IS NULL AND p.id IS NULL
           AND NOT EXISTS (SELECT 1 FROM {schema}.job_nodes n WHERE n.job_id = e.child_id)
         LIMIT %(limit)s::bigint)


-- name: workflow_savepoint
-- workflow_create inside a caller's open transaction: its writes under a savepoint, so a
-- job rejected as a duplicate (or any error) leaves none of them in the caller's transaction.
SAVEPOINT golemq_workflow


-- name: workflow_savepoint_rollback
ROLLBACK TO SAVEPOINT golemq_workflow


-- name: workflow_savepoint_release
RELEASE SAVEPOINT golemq_workflow
