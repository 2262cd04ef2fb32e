-- Cancellation: every statement of Queue.cancel (PostgresStore.job_cancel).
--
-- job_cancel_ids / _scope / _keys delete the live rows of a selector (by ids, by scope, by
-- dedupe keys) and return them; the store NOTIFYs the ids of the running ones on the cancel
-- channel in the same transaction. The rest of this file deals with transactional handlers.
--
-- A transactional handler's claim is an open transaction: it holds the job's row lock until
-- the handler finishes, and every other session reads the row as it was before the claim
-- ("pending"). A plain DELETE of such a row would wait on that lock for the whole handler
-- (and fail at lock_timeout). So:
--
-- * cancel_brief_lock_wait: the cancel's DELETE first runs with a short lock_timeout (for
--   its transaction only). Row locks of claims and batch writes last milliseconds; one that
--   outlasts it is most likely a transactional handler's open claim.
-- * job_cancel_locked_*: then, the live rows of the cancel's selector that another
--   transaction holds locked right now. The store NOTIFYs their ids on the cancel channel,
--   committed at once, and runs the DELETE again, waiting for the locks: the worker running
--   such a handler aborts it and cancels its statement, its transaction ends, and the
--   DELETE goes through. FOR SHARE SKIP LOCKED skips exactly the rows someone else has
--   locked for update; the locks it takes itself last only for this statement.
-- * job_cancel_pending_*: pending-only cancels skip locked rows instead of waiting: a locked
--   "pending" row is being claimed or is held by a transactional handler, that is, it is
--   running work, which a pending-only cancel leaves alone.


-- name: fragment_cancelled_columns
j.id, j.type, j.scope_type, j.scope_id, j.status, j.lease_owner, j.attempts


-- name: job_cancel_ids
-- Cancellation deletes live (pending, running or waiting) rows; finished rows are history
-- and stay. A cancelled parent's waiting children get their policy (the settle trigger:
-- 0016, 0020).
-- The caller then NOTIFYs the ids of deleted RUNNING rows in the same transaction.
DELETE FROM {schema}.jobs j
 WHERE j.id = ANY(%(ids)s::bigint[])
   AND j.status IN ('pending', 'running', 'waiting')
   AND (NOT %(pending_only)s::boolean OR j.status IN ('pending', 'waiting'))
RETURNING {fragment_cancelled_columns}


-- name: job_cancel_scope
DELETE FROM {schema}.jobs j
 WHERE j.scope_type = %(scope_type)s::text AND j.scope_id = %(scope_id)s::text
   AND j.status IN ('pending', 'running', 'waiting')
   AND (NOT %(pending_only)s::boolean OR j.status IN ('pending', 'waiting'))
RETURNING {fragment_cancelled_columns}


-- name: job_cancel_keys
DELETE FROM {schema}.jobs j
 WHERE j.type = %(type)s::text AND j.dedupe_key = ANY(%(keys)s::text[])
   AND j.status IN ('pending', 'running', 'waiting')
   AND (NOT %(pending_only)s::boolean OR j.status IN ('pending', 'waiting'))
RETURNING {fragment_cancelled_columns}


-- name: cancel_brief_lock_wait
SELECT set_config('lock_timeout', %(ms)s::text, true)


-- name: fragment_locked_of_live
-- The end of every job_cancel_locked_* statement (which expect a CTE "live": the ids of the
-- selector's live rows): of those, the ids another transaction holds locked right now.
, free AS (
    SELECT j.id
      FROM {schema}.jobs j
     WHERE j.id IN (SELECT l.id FROM live l)
       FOR SHARE OF j SKIP LOCKED
)
SELECT l.id FROM live l WHERE l.id NOT IN (SELECT f.id FROM free f)


-- name: job_cancel_locked_ids
WITH live AS (
    SELECT j.id
      FROM {schema}.jobs j
     WHERE j.id = ANY(%(ids)s::bigint[])
       AND j.status IN ('pending', 'running', 'waiting')
){fragment_locked_of_live}


-- name: job_cancel_locked_scope
WITH live AS (
    SELECT j.id
      FROM {schema}.jobs j
     WHERE j.scope_type = %(scope_type)s::text AND j.scope_id = %(scope_id)s::text
       AND j.status IN ('pending', 'running', 'waiting')
){fragment_locked_of_live}


-- name: job_cancel_locked_keys
WITH live AS (
    SELECT j.id
      FROM {schema}.jobs j
     WHERE j.type = %(type)s::text AND j.dedupe_key = ANY(%(keys)s::text[])
       AND j.status IN ('pending', 'running', 'waiting')
){fragment_locked_of_live}


-- name: job_cancel_pending_ids
DELETE FROM {schema}.jobs j
 WHERE j.id IN (SELECT d.id
                  FROM {schema}.jobs d
                 WHERE d.id = ANY(%(ids)s::bigint[])
                   AND d.status IN ('pending', 'waiting')
                   FOR UPDATE SKIP LOCKED)
RETURNING {fragment_cancelled_columns}


-- name: job_cancel_pending_scope
DELETE FROM {schema}.jobs j
 WHERE j.id IN (SELECT d.id
                  FROM {schema}.jobs d
                 WHERE d.scope_type = %(scope_type)s::text AND d.scope_id = %(scope_id)s::text
                   AND d.status IN ('pending', 'waiting')
                   FOR UPDATE SKIP LOCKED)
RETURNING {fragment_cancelled_columns}


-- name: job_cancel_pending_keys
DELETE FROM {schema}.jobs j
 WHERE j.id IN (SELECT d.id
                  FROM {schema}.jobs d
                 WHERE d.type = %(type)s::text AND d.dedupe_key = ANY(%(keys)s::text[])
                   AND d.status IN ('pending', 'waiting')
                   FOR UPDATE SKIP LOCKED)
RETURNING {fragment_cancelled_columns}
