"""The plans PostgreSQL picks for the store's statements when its statistics mislead it.

Statistics lag the table (autovacuum behind, a table analysed while idle): the plans of the
hot statements must stay the cheap ones anyway, because a bad one here grows with the
backlog and feeds on itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import sql

from golemq_pg import Queue
from golemq_pg.store.port import ClaimRequest, TypeSlots
from golemq_pg.store.postgres import PostgresStore
from golemq_pg.store.postgres._sql import queries_for

#: The statements given a worker's lease ids (id, token, owner): each must find its rows by
#: primary key.
FENCED_BY_IDS = (
    "job_complete_many",
    "job_complete_many_with_results",
    "job_complete_many_deleting",
    "job_fail_many",
    "job_retry_many",
    "job_release_many",
    "lease_renew",
    "lease_held",
)
#: The partial indexes on running rows, which a plan for a few given ids must not scan.
RUNNING_INDEXES = {"jobs_running_idx", "jobs_lease_idx", "jobs_dedupe_running_idx"}


def _indexes(plan: dict[str, Any]) -> Iterator[str]:
    if "Index Name" in plan:
        yield plan["Index Name"]
    for child in plan.get("Plans", ()):
        yield from _indexes(child)


def test_fenced_writes_find_their_rows_by_primary_key_when_statistics_say_nothing_runs(
    pg_store: PostgresStore, pg_dsn: str, schema: str
) -> None:
    jobs = sql.Identifier(schema, "jobs")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL(
            "INSERT INTO {} (type, payload, status, attempts, lease_token, finished_at)"
            " SELECT 'done', '{{}}', 'succeeded', 1, 1, now() FROM generate_series(1, 20000)"
        ).format(jobs))
        Queue(pg_store).add_many("work", [{"n": n} for n in range(3000)])
        # Analysed while nothing runs: "running" looks like an empty set to the planner.
        conn.execute(sql.SQL("ANALYZE {}").format(jobs))
        claimed = pg_store.job_claim(ClaimRequest(
            owner="w", types=[TypeSlots(type="work", limit=3000, lease_seconds=300)]))
        assert len(claimed) == 3000
        few = claimed[:50]
        values = {
            "owner": "w", "ids": [int(j.id) for j in few], "tokens": [j.lease_token for j in few],
            "results": "[" + ",".join(["null"] * len(few)) + "]", "delete_types": ["work"],
            "errors": ["E"] * len(few), "history": 10, "delays": [1.0] * len(few),
            "consume": [True] * len(few), "seconds": 60.0,
        }
        queries = queries_for(schema)
        cursor = psycopg.RawCursor(conn)
        for name in FENCED_BY_IDS:
            statement = queries.raw(name)
            cursor.execute(b"EXPLAIN (FORMAT JSON) " + statement.text,
                           statement.args(values))
            row = cursor.fetchone()
            assert row is not None
            used = set(_indexes(row[0][0]["Plan"]))
            assert "jobs_pkey" in used, (name, used)
            assert not used & RUNNING_INDEXES, (name, used)
