"""The ``dashboard`` scenario: what each page of the web dashboard costs on a big jobs table.

A jobs table of N rows (1,000,000 in a full run) is generated with one INSERT ... SELECT
generate_series in golemq-pg's table shape, mixed as a long-running queue looks: 95%
succeeded (finished over the last days, about two a second, so the last hour holds ~7,000),
3% due, 1% scheduled, 0.9% dead letters over five error texts, 0.1% running, 10% tagged,
twenty types plus one rare type (10 rows per million). The finished rows are then moved
into the history, where golemq-pg keeps them (migration 0008: its day partitions made first,
the counts folded), as a running queue's completions put them. Then every route is requested in
process through httpx's ASGI transport (the app, its templates and its queries; no network),
round after round; the figure per route is its median, in milliseconds.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import psycopg
from psycopg import sql

from benchmarks.sandbox import Sandbox

_FILL = """
INSERT INTO {jobs} (type, payload, status, run_at, attempts, max_attempts, last_error,
                    lease_owner, lease_expires_at, started_at, finished_at, created_at, tags)
SELECT CASE WHEN i %% 100000 = 7 THEN 'rare' ELSE 'type.' || (i %% 20) END,
       '{{"n": 1}}'::jsonb,
       CASE WHEN m < 950 THEN 'succeeded' WHEN m < 990 THEN 'pending'
            WHEN m < 999 THEN 'failed' ELSE 'running' END,
       CASE WHEN m >= 980 AND m < 990 THEN now() + interval '1 hour' ELSE at END,
       CASE WHEN m >= 990 AND m < 999 THEN 3 WHEN m < 950 OR m = 999 THEN 1 ELSE 0 END,
       3,
       CASE WHEN m >= 990 AND m < 999 THEN 'RuntimeError: upstream ' || (i %% 5) END,
       CASE WHEN m = 999 THEN 'bench-worker' END,
       CASE WHEN m = 999 THEN now() + interval '1 hour' END,
       CASE WHEN m < 950 OR m >= 990 THEN at END,
       CASE WHEN m < 950 OR (m >= 990 AND m < 999) THEN at END,
       at,
       CASE WHEN i %% 10 = 0 THEN ARRAY['blue'] END
  FROM generate_series(1, %(n)s::bigint) AS i,
       LATERAL (SELECT i %% 1000 AS m,
                       now() - make_interval(secs => (%(n)s::bigint - i) * 0.5) AS at) AS g
"""


_TO_HISTORY = """
SELECT {ensure}(s, {day}(now()) - k)
  FROM unnest(ARRAY['succeeded', 'failed']) AS s,
       generate_series(0, ceil(%(n)s::bigint * 0.5 / 86400)::int + 1) AS k
"""


def fill(box: Sandbox, n: int) -> None:
    """Generate the scenario's ``n`` rows in ``box`` (a migrated schema), move the finished
    ones into the history, then VACUUM ANALYZE."""
    def name(relation: str) -> sql.Identifier:
        return sql.Identifier(box.schema_name, relation)

    with psycopg.connect(box.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL(_FILL).format(jobs=name("jobs")), {"n": n})
        conn.execute(sql.SQL(_TO_HISTORY).format(
            ensure=name("history_ensure_partition"), day=name("history_day")), {"n": n})
        conn.execute(sql.SQL("SELECT {}(%(n)s::int)").format(name("history_move_legacy")),
                     {"n": n})
        conn.execute(sql.SQL("SELECT {}()").format(name("history_fold_counts")))
        for table in ("jobs", "jobs_history", "history_counts"):
            conn.execute(sql.SQL("VACUUM ANALYZE {}").format(name(table)))


def routes(newest_id: int) -> dict[str, str]:
    """Figure key -> route (relative to the app), every page and the jobs filters."""
    return {
        "overview_ms": "/",
        "overview_live_ms": "/?fragment=live",
        "jobs_ms": "/jobs",
        "jobs_type_ms": "/jobs?type=type.7",
        "jobs_rare_type_ms": "/jobs?type=rare",
        "jobs_failed_ms": "/jobs?status=failed",
        "jobs_tag_ms": "/jobs?tag=blue",
        "jobs_older_page_ms": f"/jobs?after={newest_id // 2}",
        "jobs_newer_page_ms": f"/jobs?before={newest_id // 2}",
        "jobs_scheduled_ms": "/jobs?status=scheduled",
        "jobs_search_error_ms": "/jobs?q=upstream+3",
        "jobs_search_rare_ms": "/jobs?q=rare",
        "jobs_search_id_ms": f"/jobs?q={newest_id // 3}",
        "jobs_rows_fragment_ms": "/jobs?type=type.7&fragment=rows",
        "job_ms": f"/jobs/{newest_id // 3}",
        "failed_ms": "/failed",
        "schedules_ms": "/schedules",
        "workers_ms": "/workers",
    }


def measure(box: Sandbox, rounds: int) -> dict[str, float]:
    """Median milliseconds per route over ``rounds`` rounds (one warm-up round first)."""
    import httpx  # noqa: PLC0415 - the web extra: only this scenario needs it

    from golemq_pg import PostgresStore  # noqa: PLC0415
    from golemq_pg.web import create_app  # noqa: PLC0415

    with PostgresStore.connect(box.dsn, schema=box.schema_name, max_size=2) as store:
        newest = int(store.dashboard_jobs(_first_page()).jobs[0].id)
        app = create_app(store)
        paths = routes(newest)
        seen: dict[str, list[float]] = {key: [] for key in paths}

        async def run() -> None:
            transport = httpx.ASGITransport(app=app)
            # localhost: a Host the dashboard answers by default (see allowed_hosts).
            base = "http://localhost"
            async with httpx.AsyncClient(transport=transport, base_url=base) as client:
                for round_ in range(rounds + 1):
                    for key, path in paths.items():
                        start = time.perf_counter()
                        answer = await client.get(path)
                        spent = time.perf_counter() - start
                        if answer.status_code != 200:
                            raise RuntimeError(f"{path} answered {answer.status_code}")
                        if round_:
                            seen[key].append(spent * 1000)

        asyncio.run(run())
    figures = {key: statistics.median(values) for key, values in seen.items()}
    figures["slowest_page_ms"] = max(figures.values())
    return figures


def _first_page() -> Any:
    from golemq_pg.store.dashboard import JobQuery  # noqa: PLC0415

    return JobQuery(limit=1)
