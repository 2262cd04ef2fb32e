"""The asyncio executor of plans (see ``_plans``): each step on a ``psycopg.AsyncConnection``.

Used by ``AsyncPostgresStore``; ``_run_sync`` is the same executor for
``psycopg.Connection``. Only how one step is executed lives here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

import psycopg

from golemq_pg._stepping import drive_async
from golemq_pg.store.postgres import _plans as plans

R = TypeVar("R")
AsyncConnection = psycopg.AsyncConnection[Any]


async def run_plan_async(
    connection: Callable[[], AbstractAsyncContextManager[AsyncConnection]],
    plan: plans.Plan[R],
    owned: bool,
) -> R:
    """Run ``plan`` to its end on a connection from ``connection()`` (taken only once the plan
    asks for its first statement); ``owned`` as for ``_run_sync.run_plan``."""
    step = plans.start(plan)
    if type(step) is not plans.Done:
        async with connection() as conn:  # a pooled one's end: _async_checkout decides
            step = await _drive(conn, plan, step, owned)
    value: R = step.value
    return value


async def _drive(
    conn: AsyncConnection, plan: plans.Plan[Any], step: Any, owned: bool
) -> plans.Done:
    return await drive_async(plan, functools.partial(_execute, conn, owned=owned), step)


async def _execute(conn: AsyncConnection, step: Any, *, owned: bool) -> Any:
    kind = type(step)
    if kind is plans.Rows:
        cursor = await conn.execute(step.query, step.params, prepare=step.prepare)
        return await cursor.fetchall()
    if kind is plans.Count:
        return (await conn.execute(step.query, step.params)).rowcount
    if kind is plans.CopyIn:
        async with conn.cursor() as cur, cur.copy(step.query) as copy:
            await copy.write(step.data)
        return None
    if kind is plans.Atomic:
        return await _atomic(conn, step.plan, owned)
    if kind is plans._Owned:
        return owned
    # IN_TRANSACTION
    return not conn.autocommit


async def _atomic(conn: AsyncConnection, plan: plans.Plan[Any], owned: bool) -> Any:
    """A sub-plan in one transaction: ours (see ``_plans.ours``), else the caller's."""
    step = plans.start(plan)
    if type(step) is plans.Done:
        return step.value
    if plans.ours(conn.autocommit, owned, conn.info.transaction_status):
        async with conn.transaction():
            step = await _drive(conn, plan, step, owned)
    else:
        step = await _drive(conn, plan, step, owned)
    return step.value
