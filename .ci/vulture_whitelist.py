"""Names vulture (``vulture golemq_pg .ci/vulture_whitelist.py --min-confidence 80``) reports
that are used, each with the reason. Read by vulture only, never imported."""

# The context-manager protocol: __exit__(self, exc_type, exc, tb) takes all three whether or
# not it reads them (PostgresStore, AsyncPostgresStore, the pool checkout, the tracer's span
# scope, Worker).
exc_type  # noqa: B018
tb  # noqa: B018

# The middleware protocols (golemq_pg.worker.middleware): around / around_async take
# call_next, which the protocol's own bodies (documentation only) do not call.
call_next  # noqa: B018
