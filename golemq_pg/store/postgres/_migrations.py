"""Applying the migrations (``_migration_files`` reads them) and recording them in the
ledger ``<schema>.schema_migrations``.

``migrate`` applies the files not yet recorded, in version order, with ``search_path``
pinned to the schema, serialised across concurrent migrators by an advisory lock (one per
schema), each file followed by its ledger row:

* a file is applied in **one transaction** with its ledger row, under the transaction-scoped
  advisory lock; a failure leaves nothing of it;
* a file whose leading comment block holds the line ``-- golemq: no-transaction`` is
  applied **outside a transaction**, statement by statement in autocommit (``CREATE INDEX
  CONCURRENTLY`` refuses a transaction block), under the session-level advisory lock,
  released afterwards; its ledger row is written after its last statement. A failure leaves
  the statements before it applied, so such a file must be re-runnable: every statement
  idempotent (``IF NOT EXISTS``, ``IF EXISTS``). Before each ``CREATE INDEX CONCURRENTLY IF
  NOT EXISTS name``, an INVALID index ``name`` (what a failed or interrupted CONCURRENTLY
  build leaves, and what ``IF NOT EXISTS`` would take for done) is dropped, so that the
  statement builds it again.

Every step waits at most ``lock_timeout`` for a lock (:class:`LockPolicy`): a step waiting
for a lock queues every later enqueue and claim that conflicts with it behind itself, so a
long transaction on ``jobs`` must not make a migration stop the queue. A step refused its
lock (``lock_not_available``) is tried again after a growing pause (the whole transaction,
or the one statement outside a transaction), a bounded number of times, then
:class:`~golemq_pg.errors.MigrationLockTimeout` names the migration. Two kinds of wait have
no limit, because nothing of the queue waits behind them: for another migrator's advisory
lock (tried, never waited for in a statement: see ``_TRY_XACT_LOCK``), and a CONCURRENTLY
index statement's (see ``_run_statement``). No statement_timeout either (``_timeouts``).

``migration_script`` renders the very same steps as one script for ``psql -f``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import psycopg
import structlog
from psycopg import errors as pg_errors
from psycopg import pq, sql

from golemq_pg._validation import check_schema
from golemq_pg.errors import MigrationLockTimeout
from golemq_pg.store.postgres._migration_files import (
    NO_TRANSACTION_MARKER,
    Migration,
    created_index,
    index_concurrently,
    migrations,
)
from golemq_pg.store.postgres._sql import SqlStatement, trusted_sql

log = structlog.get_logger("golemq_pg.store.migrations")

T = TypeVar("T")

# The ledger. IF NOT EXISTS: migrate() runs it on every call, under the migration lock.
_LEDGER_DDL = """\
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)"""

#: The default wait for a lock of one migration step, in seconds.
DEFAULT_LOCK_TIMEOUT = 1.0
#: How many times a step refused its lock is tried again by default.
DEFAULT_LOCK_RETRIES = 10


@dataclass(frozen=True, slots=True)
class LockPolicy:
    """How long one migration step waits for a lock, and how it tries again.

    ``lock_timeout``: seconds a step waits for any lock (0: no limit, PostgreSQL's own
    default). A step refused its lock is tried again ``retries`` times, after a pause that
    starts at ``first_delay`` and doubles up to ``max_delay`` (no jitter: migrators of one
    schema take turns on the advisory lock, so only one of them is ever retrying).
    """

    lock_timeout: float = DEFAULT_LOCK_TIMEOUT
    retries: int = DEFAULT_LOCK_RETRIES
    first_delay: float = 0.5
    max_delay: float = 10.0

    def __post_init__(self) -> None:
        for field in ("lock_timeout", "first_delay", "max_delay"):
            value = getattr(self, field)
            if (isinstance(value, bool) or not isinstance(value, int | float)
                    or not math.isfinite(value) or value < 0):
                raise ValueError(f"{field} must be a number of seconds >= 0")
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or not (
                0 <= self.retries <= 1000):
            raise ValueError("lock_retries must be an integer from 0 to 1000")
        if 0 < self.lock_timeout < 0.001:
            raise ValueError("lock_timeout must be 0 (no limit) or at least 1 ms")

    def delay(self, retry: int) -> float:
        """The pause before try ``retry + 1`` (``retry`` from 0)."""
        return min(self.first_delay * 2.0 ** min(retry, 30), self.max_delay)

    def setting(self) -> str:
        """``lock_timeout`` as the server setting's text (milliseconds)."""
        return str(round(self.lock_timeout * 1000))


# -- SQL the migrator sends --------------------------------------------------------------------

# One lock per schema: migrators of different schemas do not wait for each other. The two
# forms are the same lock: a transaction-scoped holder and a session-level one exclude each
# other. A migrator only ever tries it (and asks again every _LOCK_POLL seconds) instead of
# waiting in a statement: a statement waiting for it holds a snapshot, and a CONCURRENTLY
# index build of the holder waits for every older snapshot: each would wait for the other.
_TRY_XACT_LOCK = sql.SQL("SELECT pg_try_advisory_xact_lock(hashtextextended(%s, 0))")
_TRY_SESSION_LOCK = sql.SQL("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))")
_SESSION_UNLOCK = sql.SQL("SELECT pg_advisory_unlock(hashtextextended(%s, 0))")
_LOCK_POLL = 0.2
# Values through set_config: SET takes no parameters. The third argument: transaction-local.
_SET = sql.SQL("SELECT set_config(%s, %s, %s)")
_SHOW = sql.SQL(
    "SELECT current_setting('lock_timeout'), current_setting('statement_timeout'),"
    " current_setting('search_path')")
_INVALID_INDEX = sql.SQL(
    "SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
    " JOIN pg_namespace n ON n.oid = c.relnamespace"
    " WHERE n.nspname = %s AND c.relname = %s AND NOT i.indisvalid")


def _lock_name(schema: str) -> str:
    return "golemq:migrate:" + schema


class _MigratorBusy(Exception):  # noqa: N818 - a condition, caught right here
    """Another migrator of the schema holds the migration lock: try again shortly."""


def _take_lock(conn: psycopg.Connection[Any], query: sql.SQL, schema: str) -> None:
    row = conn.execute(query, (_lock_name(schema),)).fetchone()
    if not (row and row[0]):
        raise _MigratorBusy


def _recorded(conn: psycopg.Connection[Any], schema: str, version: int) -> bool:
    found = conn.execute(
        sql.SQL("SELECT 1 FROM {}.schema_migrations WHERE version = %s").format(
            sql.Identifier(schema)),
        (version,),
    ).fetchone()
    return found is not None


def _record(conn: psycopg.Connection[Any], schema: str, migration: Migration) -> None:
    conn.execute(
        sql.SQL("INSERT INTO {}.schema_migrations (version, name) VALUES (%s, %s)").format(
            sql.Identifier(schema)),
        (migration.version, migration.name),
    )


def _timeouts(conn: psycopg.Connection[Any], policy: LockPolicy, *, local: bool) -> None:
    # Migrations are administration: the runtime statement_timeout of the store's
    # connections must not cut a step short, and none replaces it (0), deliberately. What
    # blocks the queue is a step waiting for a lock (lock_timeout bounds that) or holding
    # one that enqueues and claims need for long, which a timeout would not make shorter,
    # only fail on every try (squawk's rules keep such steps out of migrations: no table
    # rewrite, no index build or constraint check under a lock that blocks writes). A
    # CONCURRENTLY build over a 10M-row table takes minutes; cut short, it would leave an
    # INVALID index to build again from scratch.
    conn.execute(_SET, ("statement_timeout", "0", local))
    conn.execute(_SET, ("lock_timeout", policy.setting(), local))


def _begin_locked(conn: psycopg.Connection[Any], schema: str, policy: LockPolicy) -> None:
    """Inside a transaction: the migration lock (else :class:`_MigratorBusy`), then the
    step's timeouts and search_path."""
    _take_lock(conn, _TRY_XACT_LOCK, schema)
    _timeouts(conn, policy, local=True)
    conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(sql.Identifier(schema)))


def _prepare(conn: psycopg.Connection[Any], schema: str, policy: LockPolicy) -> None:
    with conn.transaction():
        _take_lock(conn, _TRY_XACT_LOCK, schema)
        _timeouts(conn, policy, local=True)
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(sql.Identifier(schema)))
        conn.execute(trusted_sql(_LEDGER_DDL))


def _apply_in_transaction(
    conn: psycopg.Connection[Any], schema: str, migration: Migration, policy: LockPolicy
) -> bool:
    with conn.transaction():
        _begin_locked(conn, schema, policy)
        if _recorded(conn, schema, migration.version):
            return False
        # No parameters: the file may hold several statements (simple query protocol).
        conn.execute(trusted_sql(migration.text), prepare=False)
        _record(conn, schema, migration)
    return True


@contextmanager
def _autocommit(conn: psycopg.Connection[Any]) -> Iterator[None]:
    if conn.info.transaction_status != pq.TransactionStatus.IDLE:
        raise RuntimeError("a migration marked no-transaction needs a connection that is not "
                           "inside a transaction")
    if conn.autocommit:
        yield
        return
    conn.autocommit = True
    try:
        yield
    finally:
        if not conn.closed:
            conn.autocommit = False


@contextmanager
def _session_settings_kept(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """The session's lock_timeout, statement_timeout and search_path as they were, afterwards
    (a pooled connection goes back to the pool)."""
    row = conn.execute(_SHOW).fetchone()
    try:
        yield
    finally:
        if row is not None and not conn.broken:
            for name, value in zip(("lock_timeout", "statement_timeout", "search_path"), row,
                                   strict=True):
                conn.execute(_SET, (name, value, False))


def _drop_invalid_index(conn: psycopg.Connection[Any], schema: str, index: str) -> None:
    """Drop index ``index`` of ``schema`` if it is INVALID: a CONCURRENTLY build that failed
    or was interrupted left it, and ``IF NOT EXISTS`` would take it for built. No other build
    of it can be in progress: its builder would hold the migration lock."""
    if conn.execute(_INVALID_INDEX, (schema, index)).fetchone() is None:
        return
    log.warning("migration_invalid_index_dropped", schema=schema, index=index)
    conn.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}.{}").format(
        sql.Identifier(schema), sql.Identifier(index)))


def _run_statement(
    conn: psycopg.Connection[Any], schema: str, statement: SqlStatement, policy: LockPolicy
) -> None:
    # A CONCURRENTLY index statement waits with SHARE UPDATE EXCLUSIVE, which no insert,
    # update or claim conflicts with, and then for every transaction older than its
    # snapshots, in the whole database: under lock_timeout it would fail (leaving an INVALID
    # index to build again from scratch) whenever any transaction runs longer, while its
    # waiting blocks no enqueue or claim. So it waits as long as it takes.
    patient = index_concurrently(statement)
    if patient:
        conn.execute(_SET, ("lock_timeout", "0", False))
    try:
        index = created_index(statement)
        if index is not None:
            _drop_invalid_index(conn, schema, index)
        conn.execute(trusted_sql(statement.text), prepare=False)
    finally:
        if patient and not conn.broken:
            conn.execute(_SET, ("lock_timeout", policy.setting(), False))


def _apply_outside_transaction(
    conn: psycopg.Connection[Any], schema: str, migration: Migration, policy: LockPolicy
) -> bool:
    with _autocommit(conn), _session_settings_kept(conn):
        _while_busy(partial(_take_lock, conn, _TRY_SESSION_LOCK, schema))
        try:
            if _recorded(conn, schema, migration.version):
                return False
            _timeouts(conn, policy, local=False)
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
            statements = migration.statements()
            for number, statement in enumerate(statements, start=1):
                _with_lock_retries(
                    migration, policy, partial(_run_statement, conn, schema, statement, policy),
                    where=f"statement {number} of {len(statements)}",
                )
            _record(conn, schema, migration)
        finally:
            if not conn.broken:
                conn.execute(_SESSION_UNLOCK, (_lock_name(schema),))
    return True


def _while_busy(attempt: Callable[[], T]) -> T:
    """``attempt()``, asked again every :data:`_LOCK_POLL` seconds while another migrator
    holds the migration lock (for as long as it does: nothing of the queue waits behind)."""
    while True:
        try:
            return attempt()
        except _MigratorBusy:
            time.sleep(_LOCK_POLL)


def _with_lock_retries(
    migration: Migration | None, policy: LockPolicy, attempt: Callable[[], T], *, where: str = ""
) -> T:
    """``attempt()``, tried again after a pause while a lock is refused to it, at most
    ``policy.retries`` times; then :class:`MigrationLockTimeout`."""
    started = time.monotonic()
    retry = 0
    while True:
        try:
            return attempt()
        except pg_errors.LockNotAvailable as exc:
            name = migration.name if migration is not None else "schema_migrations"
            if retry >= policy.retries:
                raise _lock_timeout_error(migration, policy, retry + 1,
                                          time.monotonic() - started, where) from exc
            pause = policy.delay(retry)
            log.warning("migration_lock_timeout", migration=name, step=where or None,
                        attempt=retry + 1, lock_timeout=policy.lock_timeout, retry_in=pause)
            time.sleep(pause)
            retry += 1


def _lock_timeout_error(
    migration: Migration | None, policy: LockPolicy, tries: int, waited: float, where: str
) -> MigrationLockTimeout:
    name = migration.name if migration is not None else "schema_migrations"
    if migration is None:
        what, applied = "the ledger table schema_migrations", "Nothing was applied."
    elif migration.transactional:
        what, applied = f"migration {name}", "Nothing of it was applied."
    else:
        what = f"migration {name} ({where}, outside a transaction)"
        applied = "The statements before that one are applied; the next run runs them again."
    when = "on its only try" if tries == 1 else f"on each of {tries} tries over {waited:.0f}s"
    return MigrationLockTimeout(
        f"{what} was refused a lock within its lock_timeout of {policy.lock_timeout:g}s "
        f"{when}: a long transaction holds a lock it needs "
        f"or waits for one (pg_stat_activity, pg_blocking_pids() show which). {applied} Run "
        "the migrations again once that transaction has ended, or with a longer lock timeout "
        "(golemq-pg migrate --lock-timeout).",
        migration=name,
    )


def migrate(
    conn: psycopg.Connection[Any],
    schema: str,
    *,
    up_to: int | None = None,
    policy: LockPolicy = LockPolicy(),
    source: Sequence[Migration] | None = None,
) -> list[str]:
    """Apply pending migrations to ``schema`` on ``conn``; returns the names applied.

    ``conn`` must not be inside a transaction: every step commits on its own. ``up_to``
    stops after that version (an older schema, as a release of it left it: upgrade tests).
    ``policy``: each step's lock timeout and retries. ``source``: the migrations to apply
    instead of the package's (tests: :func:`load_migrations` of a folder of their own).
    """
    check_schema(schema)
    chosen = migrations() if source is None else tuple(source)
    _with_lock_retries(None, policy, partial(_while_busy, partial(_prepare, conn, schema, policy)))
    applied: list[str] = []
    for migration in chosen:
        if up_to is not None and migration.version > up_to:
            break
        if migration.transactional:
            done = _with_lock_retries(migration, policy, partial(
                _while_busy, partial(_apply_in_transaction, conn, schema, migration, policy)))
        else:
            done = _apply_outside_transaction(conn, schema, migration, policy)
        if done:
            applied.append(migration.name)
            log.info("migration_applied", schema=schema, migration=migration.name,
                     transactional=migration.transactional)
    return applied


def migration_script(schema: str, *, source: Sequence[Migration] | None = None) -> str:
    """The migrations for ``schema`` as one script for ``psql -f``.

    It creates the schema and the ledger, then runs every migration followed by its ledger
    row, in one transaction; a migration marked no-transaction runs between two transaction
    blocks, its statements one by one as psql sends them (outside a transaction), then its
    ledger row. Applied to an empty schema it yields exactly what :func:`migrate` builds.
    ``source``: as for :func:`migrate`.
    """
    check_schema(schema)
    ident = sql.Identifier(schema)
    set_local = sql.SQL("SET LOCAL search_path TO {};\n").format(ident)
    parts: list[sql.Composable] = [
        sql.SQL("-- golemq-pg migrations for schema {} (apply with psql -f)\n").format(ident),
        sql.SQL("BEGIN;\n"),
        sql.SQL("CREATE SCHEMA IF NOT EXISTS {};\n").format(ident),
        set_local,
        trusted_sql(_LEDGER_DDL + ";\n"),
    ]
    in_transaction, session_path = True, False
    for migration in migrations() if source is None else source:
        if migration.transactional and not in_transaction:
            parts += [sql.SQL("\nBEGIN;\n"), set_local]
        elif not migration.transactional:
            if in_transaction:
                parts.append(sql.SQL("COMMIT;\n"))
            parts.append(sql.SQL("\n-- {} runs outside a transaction block ({})\n").format(
                trusted_sql(migration.name), trusted_sql(NO_TRANSACTION_MARKER)))
            parts.append(sql.SQL("SET search_path TO {};\n").format(ident))
            session_path = True
        in_transaction = migration.transactional
        parts.append(sql.SQL("\n-- {}\n").format(trusted_sql(migration.name)))
        parts.append(trusted_sql(migration.text.rstrip() + "\n"))
        parts.append(
            sql.SQL("INSERT INTO schema_migrations (version, name) VALUES ({}, {});\n").format(
                sql.Literal(migration.version), sql.Literal(migration.name)
            )
        )
    if in_transaction:
        parts.append(sql.SQL("COMMIT;\n"))
    if session_path:
        parts.append(sql.SQL("RESET search_path;\n"))
    return sql.Composed(parts).as_string(None)
