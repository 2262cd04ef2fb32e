-- golemq-pg 0017: what 0016's WAITING jobs need that cannot be done under a lock blocking
-- writes, so outside a transaction, each statement on its own.
-- golemq: no-transaction
--
--  * jobs_dedupe_waiting_uq: a WAITING job holds its dedupe key (at most one per key); the
--    keyed adds probe it as they probe the pending and running ones.
--  * jobs_waiting_idx: the WAITING rows by type (counts, the gauges, the dashboard).
--  * 0016's CHECK on jobs.status (which admits 'waiting') validated: its scan takes SHARE
--    UPDATE EXCLUSIVE, so writes go on; validating a valid constraint is a no-op, so the
--    file can run again.

CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS jobs_dedupe_waiting_uq ON jobs (type, dedupe_key)
    WHERE status = 'waiting' AND dedupe_key IS NOT NULL;

CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_waiting_idx ON jobs (type)
    WHERE status = 'waiting';

-- Re-runnable as it is: validating a constraint already valid does nothing.
-- squawk-ignore prefer-robust-stmts
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_status_known;
