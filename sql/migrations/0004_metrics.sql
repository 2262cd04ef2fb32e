-- golemq-pg 0004: what the Prometheus collector (golemq_pg.metrics.QueueCollector) reads at
-- every scrape without scanning the jobs table.
--
-- Dead letters by type: golemq_jobs{status="failed"} counts them per type, and the rows are
-- kept (often by the million on a long-lived queue) next to the succeeded history. Partial on
-- FAILED rows only, so a succeeding job never touches it: only a terminal failure (and its
-- revival by retry) writes an entry.
CREATE INDEX jobs_failed_type_idx ON jobs (type) WHERE status = 'failed';
