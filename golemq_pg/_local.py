"""In-process registry of running workers, so that a cancel issued in this process aborts
the matching handlers synchronously (other processes learn through NOTIFY / reconcile).

Workers register an ``abort(job_ids, reason)`` callback under their store's identity; the
Queue calls :func:`abort` after the cancelled rows are deleted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence

import structlog

Aborter = Callable[[Sequence[str], str], None]

_lock = threading.Lock()
_aborters: dict[Hashable, list[Aborter]] = {}
log = structlog.get_logger("golemq_pg.local")


def store_identity(store: object) -> Hashable:
    """Stores of one queue share an identity (PostgreSQL: database + schema)."""
    identity = getattr(store, "identity", None)
    return identity if identity is not None else id(store)


def register(store: object, aborter: Aborter) -> Callable[[], None]:
    """Register a worker's abort callback; returns the function that unregisters it."""
    key = store_identity(store)
    with _lock:
        _aborters.setdefault(key, []).append(aborter)

    def unregister() -> None:
        with _lock:
            callbacks = _aborters.get(key, [])
            if aborter in callbacks:
                callbacks.remove(aborter)
            if not callbacks:
                _aborters.pop(key, None)

    return unregister


def abort(store: object, job_ids: Sequence[str], reason: str) -> None:
    """Abort ``job_ids`` in every worker of this process that serves ``store``'s queue."""
    with _lock:
        callbacks = list(_aborters.get(store_identity(store), ()))
    for callback in callbacks:
        try:
            callback(job_ids, reason)
        except Exception:
            log.exception("local_abort_failed", jobs=len(job_ids))
