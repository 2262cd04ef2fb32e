"""The JobStore port without a database: :class:`InMemoryStore`, for tests and scripts.

This package is the privacy boundary of the in-memory store: its ``__all__`` is the public
surface, and every module inside it is private (``_name``):

* ``_store``: :class:`InMemoryStore` itself (every verb, under one lock);
* ``_rows``: its rows (jobs, schedules, rate budgets), the jobs table with its row
  transitions, and its listener;
* ``_claim``: the claim, sequenced like the PostgreSQL one;
* ``_admin``: inspection and administration over the jobs table (stats, cancel, revive,
  prune);
* ``_schedules``: recurring schedules;
* ``_control``: pause / resume a type, retry or run one job now; ``_workers``: the worker
  registry; ``_dashboard`` and ``_metrics``: the dashboard's and the metrics collector's
  reads; ``_waiting``: ``job_wait`` (a condition variable on the store's lock);
* ``_graph``: job dependencies and workflow records, and how a parent's outcome reaches its
  children; ``_workflows``: the enqueue verbs (with parents) and the workflow verbs.
"""

from golemq_pg.store.memory._store import Clock, InMemoryStore

__all__ = ["Clock", "InMemoryStore"]
