"""Store verbs written once, without I/O: a plan yields the statements it needs and is driven
by an executor that owns the connection (``_run_sync`` for ``psycopg.Connection``,
``_run_async`` for ``psycopg.AsyncConnection``).

A plan is a generator: it validates and composes its parameters, yields a :data:`Step` and
receives its result (or has the database's exception thrown in at the ``yield``, which it
may catch), and returns the verb's value, decoded. So ``PostgresStore`` and
``AsyncPostgresStore`` share each verb's statement choice, parameters, transactions, retries
and row decoding; only the execution of one step differs between them. The steps:

* :class:`Rows`: run one statement, receive its rows (``fetchall``);
* :class:`Count`: run one statement, receive its row count (no rows wanted);
* :class:`CopyIn`: run ``COPY ... FROM STDIN`` with the given text-format data;
* :class:`Atomic`: run a sub-plan in one transaction (ours, or the caller's: never
  committed here), receive its return value; an exception rolls it back and is thrown in;
* :data:`IN_TRANSACTION`: receive whether the connection is inside a transaction it does
  not commit itself (a caller's non-autocommit connection), where an error aborts it;
* :data:`OWNED`: receive whether the connection is the store's own (not a caller's).

An executor primes the plan before it takes a connection: a plan that returns before its
first step (an id that cannot be ours) costs no connection at all.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

import psycopg
from psycopg import pq, sql
from psycopg.conninfo import conninfo_to_dict

from golemq_pg._stepping import Done, advance, start
from golemq_pg.store.postgres._sql import Queries

__all__ = ["Done", "advance", "start"]  # re-exported for the executors

R = TypeVar("R")
P = ParamSpec("P")

#: A statement as ``Queries`` renders it (bytes), or composed ``psycopg.sql``.
Query = bytes | sql.Composable


@dataclass(frozen=True, slots=True)
class Rows:
    """Run ``query`` and send back every row it returns. ``prepare``: psycopg's choice
    (None: prepared once it repeats; False: planned for these parameters every time)."""

    query: Query
    params: Mapping[str, Any] | None = None
    prepare: bool | None = None


@dataclass(frozen=True, slots=True)
class Count:
    """Run ``query`` and send back its row count (for statements that return no rows)."""

    query: Query
    params: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class CopyIn:
    """Run ``COPY ... FROM STDIN`` (``query``) with ``data`` in COPY's text format."""

    query: Query
    data: bytes


@dataclass(frozen=True, slots=True)
class Atomic:
    """Run ``plan`` in one transaction and send back its return value."""

    plan: Plan[Any]


class _InTransaction:
    """Send back whether the connection is in a transaction this store does not commit."""

    __slots__ = ()


IN_TRANSACTION = _InTransaction()


class _Owned:
    """Send back whether the statements run on the store's own connection (not a caller's:
    ``with_connection``, ``connection=``)."""

    __slots__ = ()


OWNED = _Owned()

Step = Rows | Count | CopyIn | Atomic | _InTransaction | _Owned
Plan = Generator[Step, Any, R]


def ours(autocommit: bool, owned: bool, status: pq.TransactionStatus) -> bool:
    """Whether an :class:`Atomic` step begins and commits its own transaction: on an
    autocommit connection, and on a store's own connection outside a transaction; never in
    a transaction a caller (or the pool) is to end."""
    return autocommit or (owned and status == pq.TransactionStatus.IDLE)


class PlanContext:
    """What a plan needs to know about its store: the composed statements, the schema, the
    queue's identity (for in-process aborts, see ``golemq_pg._local``) and the NOTIFY
    channel names, read once (see :func:`channels`). One per store family; the same for
    the sync and the async store."""

    __slots__ = ("channels", "identity", "queries", "rate_window", "schema")

    def __init__(
        self,
        queries: Queries,
        schema: str,
        identity: tuple[str, ...],
        rate_window: float = 60.0,
    ) -> None:
        self.queries = queries
        self.schema = schema
        self.identity = identity
        #: The resource pools' rate window in seconds (the dashboard's pool view reads it).
        self.rate_window = rate_window
        self.channels: tuple[str, str] | None = None


def channels(ctx: PlanContext) -> Plan[tuple[str, str]]:
    """The NOTIFY channel names (jobs, cancel) of the schema, fetched once per store."""
    found = ctx.channels
    if found is None:
        row = (yield Rows(ctx.queries["channel_names"]))[0]
        found = ctx.channels = (row[0], row[1])
    return found


def queue_identity(conninfo: object, schema: str) -> tuple[str, ...]:
    """Which queue a pool's connections reach (server, database, user, schema): the key under
    which stores of one queue in one process abort each other's local handlers."""
    info: dict[str, Any] = {}
    if isinstance(conninfo, str):  # a callable conninfo cannot be read without calling it
        try:
            info = conninfo_to_dict(conninfo)
        except psycopg.ProgrammingError:
            info = {}
    keys = ("host", "hostaddr", "port", "dbname", "user")
    return (*(str(info.get(k) or "") for k in keys), schema)


