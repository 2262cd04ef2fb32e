"""The stores the backend and the worker share: one PostgresStore per (DSN, schema) in a
process, created on first use (Django's task backends are per thread; their pool is not).

The DSN is ``OPTIONS["dsn"]`` when given, else built from ``DATABASES[alias]`` when the store
is first needed, so under Django's test runner it is the test database.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db import connections
from psycopg.conninfo import make_conninfo

from golemq_pg import PostgresStore

#: Keys of a PostgreSQL ``DATABASES[...]["OPTIONS"]`` that Django reads itself; the others
#: are libpq parameters (sslmode, connect_timeout, ...) and go into the DSN as they are.
_DJANGO_ONLY_OPTIONS = frozenset({
    "assume_role", "cursor_factory", "isolation_level", "pool", "prepare_threshold",
    "server_side_binding", "context",
})

_lock = threading.Lock()
_stores: dict[tuple[str, str], PostgresStore] = {}


@dataclass(frozen=True, slots=True)
class StoreOptions:
    """A backend's ``OPTIONS``, checked: where its jobs live and how they are retried."""

    schema: str
    dsn: str | None
    max_attempts: int
    modules: tuple[str, ...]
    database: str


def store_options(options: Mapping[str, Any]) -> StoreOptions:
    """``OPTIONS`` of a GolemqBackend, each checked (``ValueError`` naming the key)."""
    known = {"schema", "dsn", "max_attempts", "modules", "database"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"OPTIONS has unknown keys {unknown}; known: {sorted(known)}")
    schema = options.get("schema", "golemq")
    if not isinstance(schema, str) or not schema:
        raise ValueError("OPTIONS['schema'] must be a non-empty string")
    dsn = options.get("dsn")
    if dsn is not None and (not isinstance(dsn, str) or not dsn):
        raise ValueError("OPTIONS['dsn'] must be a non-empty string (or left out)")
    attempts = options.get("max_attempts", 3)
    if not isinstance(attempts, int) or isinstance(attempts, bool) or attempts < 1:
        raise ValueError("OPTIONS['max_attempts'] must be a positive integer")
    modules = options.get("modules", ())
    if isinstance(modules, str) or not all(isinstance(m, str) and m for m in modules):
        raise ValueError("OPTIONS['modules'] must be a list of module paths")
    database = options.get("database", "default")
    if not isinstance(database, str) or not database:
        raise ValueError("OPTIONS['database'] must be a DATABASES alias")
    return StoreOptions(schema=schema, dsn=dsn, max_attempts=attempts,
                        modules=tuple(modules), database=database)


def database_dsn(alias: str = "default") -> str:
    """A libpq DSN for ``DATABASES[alias]`` as Django uses it now (the test database under
    tests): its name, user, password, host, port and libpq ``OPTIONS``."""
    settings = connections[alias].settings_dict
    params: dict[str, Any] = {
        key: value
        for key, value in (settings.get("OPTIONS") or {}).items()
        if key not in _DJANGO_ONLY_OPTIONS and isinstance(value, str | int)
    }
    for key, setting in (("dbname", "NAME"), ("user", "USER"), ("password", "PASSWORD"),
                         ("host", "HOST"), ("port", "PORT")):
        value = settings.get(setting)
        if value not in (None, ""):
            params[key] = str(value)
    return make_conninfo("", **params)


def shared_store(options: StoreOptions) -> PostgresStore:
    """The process's store for these options (its own small pool), opened on first use."""
    dsn = options.dsn if options.dsn is not None else database_dsn(options.database)
    key = (dsn, options.schema)
    with _lock:
        store = _stores.get(key)
        if store is None:
            store = PostgresStore.connect(dsn, schema=options.schema, min_size=1, max_size=4)
            _stores[key] = store
        return store


def close_stores() -> None:
    """Close every shared store (before its database is dropped, e.g. at the end of tests)."""
    with _lock:
        stores = list(_stores.values())
        _stores.clear()
    for store in stores:
        store.close()


atexit.register(close_stores)
