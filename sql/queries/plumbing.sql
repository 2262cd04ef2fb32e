-- Plumbing: the clock, channel names and explicit notifications.


-- name: now
SELECT now()


-- name: channel_names
-- NOTIFY channels derive from the schema (see channel_name() in 0001): fetched once per store.
SELECT {schema}.channel_name('jobs'), {schema}.channel_name('cancel')


-- name: channel_done
-- The completion hint's channel (notify_jobs_done() in 0002), for queue.wait()'s listener.
SELECT {schema}.channel_name('done')


-- name: template_listen
-- The worker's LISTEN connection, once per channel after each (re)connect. The channel is an
-- identifier (composed with psycopg.sql.Identifier by the listener), not a parameter.
LISTEN {channel}


-- name: notify
SELECT pg_notify(%(channel)s::text, %(payload)s::text)


-- name: notify_jobs_done
-- The completion hint for jobs a statement deleted (a cancel): waiters on them raise at once
-- instead of at their next poll. One NOTIFY, sent when the transaction commits.
SELECT {schema}.notify_jobs_done(%(ids)s::bigint[])
