"""A worker Runtime with default options on an InMemoryStore, for unit tests of its parts."""

from __future__ import annotations

from golemq_pg import InMemoryStore, Resource
from golemq_pg.worker.config import build_config
from golemq_pg.worker.runtime import Runtime


def bare_runtime(*, batch_size: int | None = None,
                 resources: dict[str, Resource] | None = None) -> Runtime:
    """A Runtime as ``Worker`` builds it (nothing started), with the default options."""
    config = build_config(
        poll_interval=0.5, notify=True, batch_size=batch_size, lease_duration=None,
        lease_renew_interval=None, lease_grace=30, base_backoff=2, max_backoff=300,
        abandon_grace=5, shutdown_grace=15, default_max_attempts=3, worker_id="w",
        resources=resources, retention=None, observers=(), retry_strategy=None,
    )
    return Runtime(config, InMemoryStore())
