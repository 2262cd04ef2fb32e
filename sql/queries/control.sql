-- Control of single jobs and of types: pause / resume a type, retry one dead letter, run one
-- parked job now. Each write is one statement fenced on the row's current state, so it
-- cannot race a worker (a claim, a completion, the reaper) into a wrong state: under READ
-- COMMITTED an UPDATE that finds its row changed re-checks its WHERE on the new version.
-- Whatever becomes claimable is announced on the jobs channel with its type name, as the
-- insert trigger does (notify_jobs_inserted in 0001); the NOTIFY is sent at commit.


-- name: type_pause
-- Pause a type (again: the reason is replaced, paused_at kept). Every claim statement reads
-- paused_types (see claim.sql), so this holds in every worker process from the next claim.
INSERT INTO {schema}.paused_types AS p (type, reason)
VALUES (%(type)s::text, %(reason)s::text)
ON CONFLICT (type) DO UPDATE SET reason = EXCLUDED.reason
RETURNING p.type, p.paused_at, p.reason


-- name: type_resume
-- Resume a type; when it was paused, wake the idle workers that handle it.
WITH gone AS (
    DELETE FROM {schema}.paused_types p WHERE p.type = %(type)s::text RETURNING p.type
)
SELECT g.type, pg_notify({schema}.channel_name('jobs'), json_build_array(g.type)::text)::text
  FROM gone g


-- name: type_paused
SELECT p.type, p.paused_at, p.reason FROM {schema}.paused_types p ORDER BY p.type


-- name: job_retry
-- One dead letter back to PENDING, due now, attempts reset, last_error cleared (the attempt
-- history in "errors" is kept): revive_dead_letters (0008). A keyed one stays FAILED while a
-- PENDING job holds its key (that job supersedes it; the pending-only unique index allows one).
-- retry_job (0016) also re-arms the job's dependents that failed because of it, and refuses
-- (returns nothing) a job whose parent is FAILED now or was cancelled.
SELECT r.id, pg_notify({schema}.channel_name('jobs'), json_build_array(r.type)::text)::text
  FROM {schema}.retry_job(%(id)s::bigint) r
 WHERE r.id = %(id)s::bigint


-- name: job_run_now
-- One PENDING job parked in the future (scheduled, retry backoff) becomes due now. A job
-- already due, running, finished or gone is left alone. "Future" is judged on the clock
-- when the row is checked (clock_timestamp()), not at the transaction's start (now()): a
-- run_now that waited for another one's row lock re-checks the new row version, whose
-- run_at (the other's now()) may be later than its own now() although already due.
WITH upd AS (
    UPDATE {schema}.jobs j
       SET run_at = now(), updated_at = now()
     WHERE j.id = %(id)s::bigint AND j.status = 'pending' AND j.run_at > clock_timestamp()
    RETURNING j.id, j.type
)
SELECT u.id, pg_notify({schema}.channel_name('jobs'), json_build_array(u.type)::text)::text
  FROM upd u


-- name: job_run_now_types
-- Every PENDING job of the listed types parked in the future becomes due now, except those
-- of paused types (worker.run_until_empty(with_scheduled=True)); returns how many, with one
-- hint for them all ('' = any type, when the list of types would not fit).
WITH upd AS (
    UPDATE {schema}.jobs j
       SET run_at = now(), updated_at = now()
     WHERE j.type = ANY (%(types)s::text[]) AND j.status = 'pending'
       AND j.run_at > clock_timestamp()  -- as in job_run_now
       AND NOT EXISTS (SELECT 1 FROM {schema}.paused_types pt WHERE pt.type = j.type)
    RETURNING j.type
),
agg AS (
    SELECT count(*) AS n, json_agg(DISTINCT u.type)::text AS hint FROM upd u
)
SELECT a.n,
       CASE WHEN a.n > 0 THEN pg_notify({schema}.channel_name('jobs'),
                                        CASE WHEN octet_length(a.hint) > 7900 THEN ''
                                             ELSE a.hint END)::text END
  FROM agg a


-- name: job_delete_finished
-- Delete one finished job (Queue.delete): its row in the history (0008), or an older
-- release's finished row still in `jobs` (not moved yet). The history's count triggers
-- record the delete (history_count_deleted), so the maintained counts stay exact, as they do
-- for retention's sweep. Live rows are not touched here (Queue.delete cancels them).
WITH hist AS (
    DELETE FROM {schema}.jobs_history h WHERE h.id = %(id)s::bigint RETURNING h.id
),
legacy AS (
    DELETE FROM {schema}.jobs j
     WHERE j.id = %(id)s::bigint AND j.status IN ('succeeded', 'failed')
    RETURNING j.id
)
SELECT h.id FROM hist h
UNION ALL
SELECT l.id FROM legacy l
