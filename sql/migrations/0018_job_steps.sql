-- golemq-pg 0018: durable steps. `job.step(name, fn)` stores what fn returned with the job,
-- so a later attempt of the same job gets the value back instead of running fn again.
--
-- A side table, not a column of jobs: the claim, the completion and the history move
-- functions (0008, 0012, 0015) copy jobs rows column by column and stay untouched, and a
-- finished job keeps its steps (a dead letter revived by queue.retry finds them again)
-- without them riding along into jobs_history. There is deliberately no foreign key: a
-- finishing job leaves `jobs` for `jobs_history`, which a cascade would read as a delete.
-- Steps of jobs that are gone for good (cancelled, pruned, deleted on completion, dropped
-- with a history partition) are removed by the worker's maintenance sweep
-- (`job_steps_sweep` in sql/queries/steps.sql), in bounded batches by job id.
--
-- The write is fenced like every lease write (sql/queries/steps.sql, job_step_save): the
-- holder's jobs row is locked FOR SHARE by (id, lease_owner, lease_token, status =
-- 'running') and only then is the step inserted; ON CONFLICT DO NOTHING: the first write
-- wins. A new, empty table: no lock on any existing one.
CREATE TABLE job_steps (
    job_id     bigint      NOT NULL,
    name       text        NOT NULL,
    value      jsonb       NOT NULL,
    attempt    bigint      NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, name)
);
