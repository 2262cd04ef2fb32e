-- Plumbing: the clock, channel names and explicit notifications.


-- name: now
SELECT now()


-- name: session_settings
-- Once on every connection the store opens, instead of an `options` startup parameter (which
-- PgBouncer refuses unless told to ignore it, and then drops). Session-level: a direct
-- connection keeps them for its life. Through a transaction pooler they reach one server
-- connection only, so correctness never rests on them: timestamps are decoded to UTC on the
-- client, and the guarded claims set jit per transaction. Values are text (milliseconds).
SELECT set_config('TimeZone', 'UTC', false),
       set_config('jit', 'off', false),
       set_config('statement_timeout', %(statement_timeout)s::text, false),
       set_config('lock_timeout', %(lock_timeout)s::text, false),
       set_config('idle_in_transaction_session_timeout', %(idle_timeout)s::text, false),
       -- The server's end of a partition (PostgresStore.connect(tcp_user_timeout=)): a NULL
       -- keeps the current value.
       set_config('tcp_keepalives_idle',
                  coalesce(%(ka_idle)s::text, current_setting('tcp_keepalives_idle')), false),
       set_config('tcp_keepalives_interval',
                  coalesce(%(ka_interval)s::text, current_setting('tcp_keepalives_interval')),
                  false),
       set_config('tcp_keepalives_count',
                  coalesce(%(ka_count)s::text, current_setting('tcp_keepalives_count')), false),
       set_config('tcp_user_timeout',
                  coalesce(%(user_timeout)s::text, current_setting('tcp_user_timeout')), false)


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


-- name: history_upkeep
-- The maintenance service's upkeep of the history (migration 0008): day partitions made
-- ahead, count deltas folded, an older release's finished rows moved out of `jobs`. JSON.
SELECT {schema}.history_upkeep(%(days_ahead)s::int, %(legacy)s::int)
