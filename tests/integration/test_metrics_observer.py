"""PrometheusObserver through a real Worker on PostgreSQL: counters and histograms per type
and outcome, the due-to-start wait, and no job id, scope or payload in the exposition."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
from prometheus_client import CollectorRegistry, generate_latest
from psycopg import sql

from golemq_pg import JobEvent, PostgresStore, Queue, TerminalJobError
from golemq_pg.metrics import BUCKETS, PrometheusObserver
from tests.support.in_process import add_job, fast_worker

PAYLOAD_CANARY = "payload-canary-7f3a"
SCOPE_CANARY = "scope-canary-91bd"
#: Job ids start here, so that an id in the exposition could not pass for a count.
FIRST_ID = 987_654_321


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    """One sample's value (0 when the series does not exist)."""
    return registry.get_sample_value(name, labels) or 0.0


def test_counts_and_histograms_by_type_and_outcome(pg_store: PostgresStore) -> None:
    registry = CollectorRegistry()
    queue = Queue(pg_store)
    worker = fast_worker(pg_store, observers=[PrometheusObserver(registry)])
    calls: dict[str, int] = {}

    @worker.handler("m.ok")
    def ok(job: JobEvent[Any]) -> None:
        del job

    @worker.handler("m.flaky")
    def flaky(job: JobEvent[Any]) -> None:
        calls[job.id] = calls.get(job.id, 0) + 1
        if job.attempt == 1:
            raise RuntimeError("first attempt fails")

    @worker.handler("m.doomed")
    def doomed(job: JobEvent[Any]) -> None:
        raise TerminalJobError("never")

    for _ in range(3):
        add_job(queue, "m.ok", {})
    add_job(queue, "m.flaky", {}, max_attempts=3)
    add_job(queue, "m.doomed", {}, max_attempts=3)
    worker.run_until_empty(timeout=30)

    def total(job_type: str, outcome: str) -> float:
        return sample(registry, "golemq_jobs_total", type=job_type, outcome=outcome)

    def durations(job_type: str, outcome: str) -> float:
        return sample(registry, "golemq_job_duration_seconds_count", type=job_type,
                      outcome=outcome)

    assert (total("m.ok", "started"), total("m.ok", "succeeded")) == (3, 3)
    assert durations("m.ok", "succeeded") == 3
    assert (total("m.flaky", "started"), total("m.flaky", "retry-scheduled"),
            total("m.flaky", "succeeded")) == (2, 1, 1)
    assert (durations("m.flaky", "retry-scheduled"), durations("m.flaky", "succeeded")) == (1, 1)
    assert (total("m.doomed", "started"), total("m.doomed", "failed-terminal")) == (1, 1)
    assert durations("m.doomed", "failed-terminal") == 1
    assert total("m.ok", "failed-terminal") == 0
    # "started" carries no duration; every start is one wait observation of its type
    assert durations("m.ok", "started") == 0
    for job_type, starts in (("m.ok", 3), ("m.flaky", 2), ("m.doomed", 1)):
        assert sample(registry, "golemq_job_wait_seconds_count", type=job_type) == starts
    # the histograms use the module's buckets, sub-millisecond to an hour
    last = sample(registry, "golemq_job_duration_seconds_bucket", type="m.ok",
                  outcome="succeeded", le=str(BUCKETS[-1]))
    assert last == 3
    assert BUCKETS[0] < 0.001
    assert BUCKETS[-1] >= 3600


def test_wait_runs_from_the_due_time_to_the_start(pg_store: PostgresStore) -> None:
    registry = CollectorRegistry()
    queue = Queue(pg_store)
    worker = fast_worker(pg_store, observers=[PrometheusObserver(registry)])

    @worker.handler("m.late")
    def late(job: JobEvent[Any]) -> None:
        del job

    # due 30 s ago (a backlog the worker meets when it starts): waited at least that long
    add_job(queue, "m.late", {}, run_at=pg_store.now() - timedelta(seconds=30))
    worker.run_until_empty(timeout=30)
    assert sample(registry, "golemq_job_wait_seconds_count", type="m.late") == 1
    waited = sample(registry, "golemq_job_wait_seconds_sum", type="m.late")
    assert 30.0 <= waited < 90.0
    assert sample(registry, "golemq_job_wait_seconds_bucket", type="m.late", le="10.0") == 0
    assert sample(registry, "golemq_job_wait_seconds_bucket", type="m.late", le="60.0") == 1


def test_two_observers_on_one_registry_share_its_series(pg_store: PostgresStore) -> None:
    registry = CollectorRegistry()
    queue = Queue(pg_store)
    first, second = PrometheusObserver(registry), PrometheusObserver(registry)
    worker = fast_worker(pg_store, observers=[first])
    other = fast_worker(pg_store, observers=[second])
    for w in (worker, other):
        w.handler("m.shared")(lambda job: None)
    add_job(queue, "m.shared", {})
    worker.run_until_empty(timeout=30)
    add_job(queue, "m.shared", {})
    other.run_until_empty(timeout=30)
    assert sample(registry, "golemq_jobs_total", type="m.shared", outcome="succeeded") == 2


def test_no_job_id_scope_or_payload_in_the_exposition(
    pg_store: PostgresStore, pg_dsn: str, schema: str,
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER TABLE {}.jobs ALTER COLUMN id RESTART WITH {}").format(
            sql.Identifier(schema), sql.Literal(FIRST_ID)))
    registry = CollectorRegistry()
    queue = Queue(pg_store, observers=[PrometheusObserver(registry)])  # "enqueued" too
    worker = fast_worker(pg_store, observers=[PrometheusObserver(registry)])

    @worker.handler("m.secret")
    def secret(job: JobEvent[Any]) -> None:
        if job.attempt == 1:
            raise RuntimeError(f"failed on {job.payload['secret']}")  # an error quoting it

    ids = [add_job(queue, "m.secret", {"secret": PAYLOAD_CANARY},
                   scope=("Canary", SCOPE_CANARY)) for _ in range(2)]
    worker.run_until_empty(timeout=30)
    assert all(int(i) >= FIRST_ID for i in ids)
    text = generate_latest(registry).decode()
    assert sample(registry, "golemq_jobs_total", type="m.secret", outcome="enqueued") == 2
    assert sample(registry, "golemq_jobs_total", type="m.secret", outcome="succeeded") == 2
    for canary in (PAYLOAD_CANARY, SCOPE_CANARY, "Canary", *ids):
        assert canary not in text
    labels = {line.split("{", 1)[1].split("}", 1)[0] for line in text.splitlines()
              if "{" in line and not line.startswith("#")}
    names = {pair.split("=", 1)[0] for label in labels for pair in label.split(",")}
    assert names <= {"type", "outcome", "le"}
