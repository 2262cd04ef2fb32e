"""The synchronous executor of plans (see ``_plans``): each step on a ``psycopg.Connection``.

Used by ``PostgresStore`` for the verbs written as plans; ``_run_async`` is the same
executor for ``psycopg.AsyncConnection``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, TypeVar

import psycopg

from golemq_pg._stepping import drive
from golemq_pg.store.postgres._plans import (
    Atomic,
    CopyIn,
    Count,
    Done,
    Plan,
    Rows,
    _Owned,
    ours,
    start,
)

R = TypeVar("R")
Connection = psycopg.Connection[Any]


def run_plan(
    connection: Callable[[], AbstractContextManager[Connection]], plan: Plan[R], owned: bool
) -> R:
    """Run ``plan`` to its end on a connection from ``connection()``, taken only once the plan
    asks for its first statement. ``owned``: the store's own (pooled) connection, not a
    caller's, so an :class:`Atomic` step may begin and commit a transaction on it even when
    it is not in autocommit mode."""
    step = start(plan)
    if type(step) is Done:
        value: R = step.value
        return value
    with connection() as conn:
        finished: R = _drive(conn, plan, step, owned).value
        return finished


def _drive(conn: Connection, plan: Plan[Any], step: Any, owned: bool) -> Done:
    return drive(plan, functools.partial(_execute, conn, owned=owned), step)


def _execute(conn: Connection, step: Any, *, owned: bool) -> Any:
    kind = type(step)
    if kind is Rows:
        return conn.execute(step.query, step.params, prepare=step.prepare).fetchall()
    if kind is Count:
        return conn.execute(step.query, step.params).rowcount
    if kind is CopyIn:
        with conn.cursor() as cur, cur.copy(step.query) as copy:
            copy.write(step.data)
        return None
    if kind is Atomic:
        first = start(step.plan)
        if type(first) is Done:
            return first.value
        if not ours(conn.autocommit, owned, conn.info.transaction_status):
            return _drive(conn, step.plan, first, owned).value
        with conn.transaction():
            return _drive(conn, step.plan, first, owned).value
    if kind is _Owned:
        return owned
    # IN_TRANSACTION
    return not conn.autocommit
