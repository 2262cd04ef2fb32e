"""The JobStore port on PostgreSQL: :class:`PostgresStore`, the only code that issues SQL.

This package is the privacy boundary of the PostgreSQL store: its ``__all__`` is the public
surface, and every module inside it is private (``_name``):

* ``_store``: :class:`PostgresStore` itself (lifecycle, producer, consumer, inspection);
* ``_async_store``: :class:`AsyncPostgresStore`, the producer side for asyncio;
* ``_plans``: the steps a verb written once yields; ``_run_sync`` / ``_run_async``: the
  executors that run them on ``Connection`` / ``AsyncConnection``; ``_producer``: the
  producer and inspection verbs as plans;
* ``_connections``: the pool it owns or wraps, and the per-verb connection helpers;
* ``_cancel`` and ``_schedules``: the cancel verb and the schedule verbs;
* ``_control``: pause / resume a type, retry or run one job now; ``_registry``: the worker
  registry; ``_dashboard`` and ``_metrics``: the dashboard's and the metrics collector's
  bounded reads;
* ``_waiters`` / ``_async_waiters``: ``job_wait`` for threads / asyncio tasks, each store's
  waiters sharing one LISTEN connection;
* ``_claim``: the claim (fast path and guarded path);
* ``_rows``: rows and parameters <-> the port's value types;
* ``_sql``: loading ``sql/queries`` and composing it per schema;
* ``_migration_files``: reading ``sql/migrations`` (the no-transaction marker, the checks);
  ``_migrations``: ``migrate()`` and :func:`migration_script`;
* ``_listener``: the LISTEN connection of a worker.
"""

from golemq_pg.store.postgres._async_store import AsyncPostgresStore
from golemq_pg.store.postgres._migrations import migration_script
from golemq_pg.store.postgres._store import PostgresStore

__all__ = ["AsyncPostgresStore", "PostgresStore", "migration_script"]
