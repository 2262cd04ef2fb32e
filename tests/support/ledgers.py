"""Ledger tables a test's handlers write to, and the queries that read them back.

* the *effects* ledger of docs/RELIABILITY.md, one row per handler run:
  ``(job_id, attempt, worker, pid)``: :func:`effects_table`, :func:`record_effect` (on any
  connection), :func:`insert_effect` (through a transactional handler's ``job.connection``),
  :func:`effects`;
* :func:`job_rows`: the jobs table as the ledger tests compare it.

The fault scenarios' richer ledger (lease tokens, outcomes, an audit trigger) lives with
:class:`tests.support.fault_env.FaultEnv`.
"""

from __future__ import annotations

import os
from typing import Any

import psycopg
from psycopg import sql

from golemq_pg import JobEvent


def insert_effect(event: JobEvent[Any], schema: str, worker: str) -> None:
    """Record one effect through the handler's own transaction (``job.connection``)."""
    record_effect(event.connection, schema, event.id, event.attempt, worker)


def effects_table(dsn: str, schema: str) -> None:
    """Create the effects ledger in ``schema``."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {}.effects (job_id text NOT NULL, attempt int NOT "
                "NULL, worker text NOT NULL, pid int NOT NULL, at timestamptz NOT NULL "
                "DEFAULT clock_timestamp())"
            ).format(sql.Identifier(schema))
        )


def record_effect(conn: psycopg.Connection[Any], schema: str, job_id: str, attempt: int,
                  worker: str) -> None:
    conn.execute(
        sql.SQL("INSERT INTO {}.effects (job_id, attempt, worker, pid) VALUES (%s, %s, %s, %s)")
        .format(sql.Identifier(schema)),
        (job_id, attempt, worker, os.getpid()),
    )


def effects(dsn: str, schema: str) -> list[tuple[str, int, str, int]]:
    """Every ledger row, in insertion order."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            sql.SQL("SELECT job_id, attempt, worker, pid FROM {}.effects ORDER BY at")
            .format(sql.Identifier(schema))
        ).fetchall()
    return [(r[0], r[1], r[2], r[3]) for r in rows]


def job_rows(dsn: str, schema: str) -> list[tuple[Any, ...]]:
    """(id, status, attempts, lease_owner, last_error) of every job."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            sql.SQL("SELECT id::text, status, attempts, lease_owner, last_error FROM {}.jobs_all "
                    "ORDER BY id").format(sql.Identifier(schema))
        ).fetchall()
