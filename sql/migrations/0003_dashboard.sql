-- golemq-pg 0003: the web dashboard's index.
--
-- Applied like 0001 (search_path set to the target schema). Released migrations are
-- immutable: change the schema with a new numbered file.

-- Dead letters by type, newest first: the dashboard's dead-letter groups, its per-type
-- failed counts and its "failed" jobs filter read only these rows, however many finished rows
-- the table keeps. Partial, so it holds the dead letters alone (a queue keeps few).
CREATE INDEX jobs_failed_idx ON jobs (type, id) WHERE status = 'failed';
