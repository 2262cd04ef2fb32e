"""QueueCollector on PostgreSQL: its gauges against known rows, next to the observer's metrics
in one registry, through a store failure, and the bounded plan of its statement."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families
from psycopg import sql

from golemq_pg import PostgresStore
from golemq_pg.metrics import PrometheusObserver, QueueCollector
from golemq_pg.store.port import FailItem, WorkerBeat
from tests.support.store_port import add, claim, slots


def collected(store: Any, **options: Any) -> CollectorRegistry:
    """A private registry holding a QueueCollector on ``store``."""
    registry = CollectorRegistry()
    registry.register(QueueCollector(store, **options))
    return registry


def jobs(registry: CollectorRegistry, job_type: str, status: str) -> float | None:
    """``golemq_queue_jobs{type, status}``."""
    return registry.get_sample_value("golemq_queue_jobs", {"type": job_type, "status": status})


def test_gauges_match_the_rows(pg_store: PostgresStore) -> None:
    now = pg_store.now()
    add(pg_store, "c.a", run_at=now - timedelta(seconds=60))
    add(pg_store, "c.a")
    add(pg_store, "c.a", delay=3600)
    for _ in range(2):
        add(pg_store, "c.b")
    running, failed = claim(pg_store, slots("c.b", limit=2))
    pg_store.job_fail_many("w1", [FailItem(failed.id, failed.lease_token, "E: x")])
    pg_store.type_pause("c.paused", None)
    for worker_id in ("w1", "w2"):
        pg_store.worker_heartbeat(WorkerBeat(worker_id=worker_id, host="h", pid=1,
                                             handlers={"c.a": 1}, heartbeat_seconds=30.0))
    registry = collected(pg_store)
    assert [jobs(registry, "c.a", s) for s in ("pending", "scheduled", "running", "failed")] \
        == [2, 1, 0, 0]
    assert [jobs(registry, "c.b", s) for s in ("pending", "scheduled", "running", "failed")] \
        == [0, 0, 1, 1]
    assert running.type == "c.b"
    age = registry.get_sample_value("golemq_oldest_due_age_seconds", {"type": "c.a"})
    assert age is not None
    assert 59.0 <= age < 120.0
    assert registry.get_sample_value("golemq_oldest_due_age_seconds", {"type": "c.b"}) == 0
    assert registry.get_sample_value("golemq_paused", {"type": "c.paused"}) == 1
    assert registry.get_sample_value("golemq_paused", {"type": "c.a"}) == 0
    assert jobs(registry, "c.paused", "pending") == 0
    assert registry.get_sample_value("golemq_workers") == 2
    pg_store.worker_remove("w2")
    pg_store.type_resume("c.paused")
    registry = collected(pg_store)
    assert registry.get_sample_value("golemq_workers") == 1
    assert registry.get_sample_value("golemq_paused", {"type": "c.paused"}) is None


def test_counts_are_capped(pg_store: PostgresStore) -> None:
    for _ in range(5):
        add(pg_store, "c.many")
    registry = collected(pg_store, count_cap=3)
    assert jobs(registry, "c.many", "pending") == 3
    with pytest.raises(ValueError, match="count_cap"):
        QueueCollector(pg_store, count_cap=0)


def test_shares_a_registry_with_the_observer(pg_store: PostgresStore) -> None:
    add(pg_store, "c.a")
    registry = CollectorRegistry()
    PrometheusObserver(registry)
    registry.register(QueueCollector(pg_store))
    text = generate_latest(registry).decode()
    assert "# TYPE golemq_jobs_total counter" in text
    assert 'golemq_queue_jobs{status="pending",type="c.a"} 1.0' in text


def test_the_observer_and_the_collector_parse_as_openmetrics(pg_store: PostgresStore) -> None:
    """Every family of both in one OpenMetrics exposition, which the OpenMetrics parser
    accepts (it refused the gauge's old name, golemq_jobs: the counter golemq_jobs_total's
    family name there); the same series as the text format."""
    add(pg_store, "c.a")
    registry = CollectorRegistry()
    observer = PrometheusObserver(registry)
    observer.count_transition("c.a", "started", None, 0.2)
    observer.count_transition("c.a", "succeeded", 0.01, None)
    registry.register(QueueCollector(pg_store))
    text = openmetrics_latest(registry).decode()
    parsed = {f.name: f for f in openmetrics_families(text)}
    assert {name: f.type for name, f in parsed.items()} == {
        "golemq_jobs": "counter",
        "golemq_job_duration_seconds": "histogram",
        "golemq_job_wait_seconds": "histogram",
        "golemq_worker_errors": "counter",
        "golemq_queue_jobs": "gauge",
        "golemq_oldest_due_age_seconds": "gauge",
        "golemq_workers": "gauge",
        "golemq_paused": "gauge",
    }
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in parsed.values() for s in f.samples}
    assert samples[("golemq_queue_jobs", (("status", "pending"), ("type", "c.a")))] == 1
    assert samples[("golemq_jobs_total", (("outcome", "succeeded"), ("type", "c.a")))] == 1
    plain = {(s.name, tuple(sorted(s.labels.items()))): s.value
             for f in text_string_to_metric_families(generate_latest(registry).decode())
             for s in f.samples}
    assert samples.keys() == plain.keys()
    moving = "golemq_oldest_due_age_seconds"  # read again by the second scrape
    assert {k: v for k, v in samples.items() if k[0] != moving} \
        == {k: v for k, v in plain.items() if k[0] != moving}


def test_a_store_failure_leaves_the_gauges_out_of_the_scrape(pg_dsn: str, schema: str) -> None:
    store = PostgresStore.connect(pg_dsn, schema=schema, min_size=1, max_size=2)
    store.migrate()
    registry = CollectorRegistry()
    PrometheusObserver(registry)
    registry.register(QueueCollector(store))
    store.close()
    text = generate_latest(registry).decode()  # no exception: the observer's part is served
    assert "golemq_job_wait_seconds" in text
    assert "golemq_workers" not in text


def _scans(node: dict[str, Any]) -> list[dict[str, Any]]:
    found = [node] if node.get("Relation Name") == "jobs" else []
    for child in node.get("Plans", []):
        found.extend(_scans(child))
    return found


def test_the_statement_reads_indexes_not_the_kept_history(
    pg_store: PostgresStore, pg_dsn: str, schema: str,
) -> None:
    """50,000 succeeded rows (the history) and 5,000 dead letters: the statement reads no
    succeeded row and at most the cap of dead letters, through index descents and ranges."""
    table = sql.SQL("{}.jobs").format(sql.Identifier(schema))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL(
            "INSERT INTO {} (type, payload, status, attempts, finished_at) "
            "SELECT 'h.' || (g % 4), '{{}}', CASE WHEN g <= 50000 THEN 'succeeded' "
            "ELSE 'failed' END, 1, now() FROM generate_series(1, 55000) g").format(table))
        conn.execute(sql.SQL("VACUUM ANALYZE {}").format(table))
    for priority in range(3):
        add(pg_store, "h.0", priority=priority)
    cap = 500
    query = pg_store._shared.queries["metrics_type_gauges"]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        row = conn.execute(b"EXPLAIN (ANALYZE, FORMAT JSON) " + query,
                           {"cap": cap, "lost_after": 3.0}).fetchone()
    assert row is not None
    scans = _scans(row[0][0]["Plan"])
    assert scans
    kinds = {s["Node Type"] for s in scans}
    assert kinds <= {"Index Only Scan", "Index Scan", "Bitmap Heap Scan"}, kinds
    read = sum(s["Actual Rows"] * s["Actual Loops"] for s in scans)
    # 4 types x the cap of dead letters, 3 pending rows, and one row per descent
    assert read <= 4 * cap + 100, read
    assert [g.failed for g in pg_store.metrics_type_gauges(cap)] == [cap] * 4
