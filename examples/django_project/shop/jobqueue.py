"""The project's golemq-pg store and queue, created on first use and shared by the process.

They are created lazily, not at import: Django's test runner switches the database to its
test database before the first use, and the store follows that switch.
"""

import atexit
import threading

from django.conf import settings
from django.db import connections
from psycopg.conninfo import make_conninfo

from golemq_pg import PostgresStore, Queue

_lock = threading.Lock()
_store: PostgresStore | None = None
_queue: Queue | None = None


def database_dsn(alias: str = "default") -> str:
    """The DSN of the database Django uses now (under tests: its test database)."""
    return make_conninfo(settings.GOLEMQ_DSN, dbname=connections[alias].settings_dict["NAME"])


def get_store() -> PostgresStore:
    """The process's PostgresStore (its own small pool, on the same database as Django)."""
    global _store  # noqa: PLW0603 - one store per process, created on first use
    with _lock:
        if _store is None:
            _store = PostgresStore.connect(
                database_dsn(), schema=settings.GOLEMQ_SCHEMA, min_size=1, max_size=4
            )
            atexit.register(_store.close)
        return _store


def get_queue() -> Queue:
    """The process's Queue on :func:`get_store`."""
    global _queue  # noqa: PLW0603 - one queue per process, created on first use
    store = get_store()
    with _lock:
        if _queue is None:
            _queue = Queue(store)
        return _queue


def close_queue() -> None:
    """Close the store's pool (before dropping the database, e.g. at the end of tests)."""
    global _store, _queue  # noqa: PLW0603 - see get_store
    with _lock:
        if _store is not None:
            _store.close()
        _store = _queue = None
