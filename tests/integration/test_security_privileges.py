"""docs/RELIABILITY.md, security: the queue works under a least-privilege runtime role.

The owner (the test DSN's user) migrates; a runtime role gets only USAGE on the schema,
SELECT/INSERT/UPDATE/DELETE on its tables, USAGE on its sequences and EXECUTE on its
functions (LISTEN/NOTIFY need no grant), and can create nothing. Everything a producer, an
administrator and a worker do then runs as that role: enqueue (one, keyed, bulk COPY), claim
(fast and guarded, resource pools with rate budgets), complete, retry, fail, cancel (with its
NOTIFY), progress, schedules, reaping, retention, inspection, dead-letter retry, a
transactional handler, and LISTEN wake-ups. The exact grants are in GRANTS below (and in the
README).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import structlog
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from golemq_pg import (
    JobEvent,
    JobStatus,
    PostgresStore,
    Queue,
    Resource,
    Retention,
    TerminalJobError,
    Worker,
)
from golemq_pg.store.port import ClaimRequest, TypeSlots

#: The runtime role's grants, for schema {schema} and role {role} (README "Least privilege").
GRANTS = (
    "GRANT USAGE ON SCHEMA {schema} TO {role}",
    "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}",
    "GRANT USAGE ON ALL SEQUENCES IN SCHEMA {schema} TO {role}",
    "GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {schema} TO {role}",
)


@pytest.fixture
def runtime_dsn(pg_dsn: str, pg_store: PostgresStore) -> Iterator[str]:
    """A DSN for a fresh LOGIN role holding exactly GRANTS on the migrated schema."""
    role = "gq_runtime_" + uuid.uuid4().hex[:8]
    ident = sql.Identifier(role)
    schema = sql.Identifier(pg_store.schema)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE")
                     .format(ident))
        for grant in GRANTS:
            conn.execute(sql.SQL(grant).format(schema=schema, role=ident))
    info = conninfo_to_dict(pg_dsn)
    info["user"] = role
    info.pop("password", None)
    try:
        yield make_conninfo(**info)
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                         "WHERE usename = %s", (role,))
            conn.execute(sql.SQL("DROP OWNED BY {}").format(ident))
            conn.execute(sql.SQL("DROP ROLE {}").format(ident))


def test_the_runtime_role_can_do_no_ddl(runtime_dsn: str, pg_store: PostgresStore) -> None:
    schema = sql.Identifier(pg_store.schema)
    with psycopg.connect(runtime_dsn, autocommit=True) as conn:
        for ddl in ("CREATE TABLE {}.intruder (x int)", "DROP TABLE {}.jobs",
                    "ALTER TABLE {}.jobs ADD COLUMN x int", "TRUNCATE {}.jobs"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(sql.SQL(ddl).format(schema))
    runtime = PostgresStore.connect(runtime_dsn, schema="gq_fresh_" + uuid.uuid4().hex[:8],
                                    max_size=1)
    try:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            runtime.migrate()  # migrations need the owner
    finally:
        runtime.close()


def test_everything_runs_under_the_runtime_role(runtime_dsn: str, pg_store: PostgresStore,
                                                pg_dsn: str) -> None:
    schema = pg_store.schema
    store = PostgresStore.connect(runtime_dsn, schema=schema, max_size=8)
    try:
        with psycopg.connect(runtime_dsn, autocommit=True) as conn:
            assert conn.execute("SELECT current_user").fetchone()[0] != "postgres"  # type: ignore[index]
        queue = Queue(store)
        # Producer and admin verbs.
        plain = queue.add("plain", {"n": 1}, scope=("Doc", "1"))
        assert queue.add("keyed", {"v": 1}, dedupe_key="k") is not None
        assert queue.add("keyed", {"v": 2}, dedupe_key="k") is None
        assert queue.add("keyed", {"v": 3}, dedupe_key="k", on_duplicate="replace")
        assert queue.add_many("bulk", [{"n": n} for n in range(50)]) == 50
        assert queue.add_many("later", [{"n": 1}], delay=3600) == 1
        doomed = queue.add("doomed", {}, max_attempts=1)
        queue.add("pooled", {})
        queue.add("serial", {}, scope=("Doc", "1"))
        queue.add("txn", {})
        queue.add("long", {})
        queue.schedule("every-hour", "sched", {}, every=3600)
        queue.schedule("daily", "sched", {}, cron="0 6 * * *")
        assert {s.key for s in queue.schedules()} == {"every-hour", "daily"}
        assert queue.get(plain) is not None  # type: ignore[arg-type]
        assert queue.find(types=["bulk"], limit=5)
        assert queue.find_for_scope(("Doc", "1"))
        assert queue.stats()["scheduled"] == 1
        assert store.job_stats_by_type()["bulk"]["pending"] == 50
        assert store.job_oldest_due_age() is not None
        # A lease that expires elsewhere, for the reaper.
        queue.add("orphan", {})
        assert store.job_claim(ClaimRequest("ghost", [TypeSlots("orphan", 1, 0.05)]))
        long_started = threading.Event()
        arrived = threading.Event()
        worker = Worker(
            store, poll_interval=0.1, base_backoff=0, max_backoff=0,
            resources={"api": Resource(concurrency=1, rate_per_minute=100, types=["pooled"])},
            retention=Retention(older_than=3600, sweep_interval=0.2),
        )

        def ok(job: JobEvent[Any]) -> None:
            job.progress({"done": 1})

        for job_type in ("plain", "keyed", "bulk", "sched", "orphan"):
            worker.handler(job_type, concurrency=2)(ok)
        worker.handler("pooled")(ok)
        worker.handler("serial", serialize_by_scope=True, not_while_running=["doomed"])(ok)

        @worker.handler("doomed", not_while_running=["serial"])
        def doom(job: JobEvent[Any]) -> None:
            raise TerminalJobError("always fails")

        @worker.handler("txn", transactional=True)
        def txn(job: JobEvent[Any]) -> None:
            assert job.connection is not None
            job.connection.execute("SELECT 1")

        @worker.handler("long")
        def long(job: JobEvent[Any]) -> None:
            long_started.set()
            job.signal.wait(20)
            job.signal.raise_if_cancelled()

        @worker.handler("hinted")
        def hinted(job: JobEvent[Any]) -> None:
            arrived.set()

        with structlog.testing.capture_logs() as logs:
            worker.start()
            try:
                assert long_started.wait(15)
                long_id = next(j.id for j in queue.find(types=["long"]))
                assert queue.cancel(long_id, reason="cancel as the runtime role")
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    counts = queue.count_by_status()
                    if counts[JobStatus.PENDING] <= 1 and not counts[JobStatus.RUNNING]:
                        break
                    time.sleep(0.05)
                time.sleep(0.3)  # idle: a new job must now arrive by NOTIFY
                sent = time.monotonic()
                queue.add("hinted", {})
                assert arrived.wait(5)
                hint_latency = time.monotonic() - sent
            finally:
                worker.stop()
        denied = [e for e in logs if "InsufficientPrivilege" in str(e)]
        assert not denied, denied[:3]
        counts = queue.count_by_status()
        assert counts[JobStatus.RUNNING] == 0
        assert counts[JobStatus.FAILED] == 1  # "doomed"
        assert counts[JobStatus.PENDING] == 1  # "later"
        assert hint_latency < 2
        assert queue.get(doomed).status is JobStatus.FAILED  # type: ignore[arg-type,union-attr]
        assert queue.retry_failed(types=["doomed"]) == 1
        assert queue.prune(older_than=0) > 0
        assert queue.cancel_for_scope(("Doc", "1")) == 0
        assert queue.cancel_by_dedupe_keys("keyed", ["k"]) == 0
        assert queue.unschedule("daily") is True
    finally:
        store.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        owners = conn.execute(
            "SELECT DISTINCT tableowner FROM pg_tables WHERE schemaname = %s", (schema,)
        ).fetchall()
    assert owners == [(conninfo_to_dict(pg_dsn).get("user") or "postgres",)]
