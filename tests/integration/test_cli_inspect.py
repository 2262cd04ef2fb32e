"""`golemq-pg workers` and `golemq-pg show`, the real command against the real database:
tables and JSON, each attempt's traceback, the payload only with --payload, bad and unknown
ids."""

from __future__ import annotations

import json

import psycopg
import pytest
from psycopg import sql

from golemq_pg import PostgresStore, Queue
from golemq_pg.store.port import FailItem, WorkerBeat
from tests.support.cli import assert_clean_failure, run_cli
from tests.support.store_port import claim

CANARY = "CANARY-pay1oad-5e2d"
WIDE = {"COLUMNS": "200"}


def test_workers_lists_the_registry_as_a_table_and_as_json(
    pg_dsn: str, pg_store: PostgresStore, schema: str,
) -> None:
    empty = run_cli("--schema", schema, "workers", "--json", dsn=pg_dsn)
    assert empty.returncode == 0, empty.stderr
    assert empty.stdout == ""
    pg_store.worker_heartbeat(WorkerBeat(worker_id="w-a", host="host-a", pid=101,
                                         handlers={"email.send": 4, "report": 1},
                                         heartbeat_seconds=60.0, running=3))
    pg_store.worker_heartbeat(WorkerBeat(worker_id="w-b", host="host-b", pid=202,
                                         handlers={"x": 1}, heartbeat_seconds=60.0,
                                         state="stopping"))
    listed = run_cli("--schema", schema, "workers", "--json", dsn=pg_dsn)
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [r["worker_id"] for r in rows] == ["w-a", "w-b"]
    first = rows[0]
    assert (first["host"], first["pid"], first["state"], first["running"]) == (
        "host-a", 101, "running", 3)
    assert first["handlers"] == {"email.send": 4, "report": 1}
    assert 0 <= first["last_seen_age_seconds"] < 60
    assert rows[1]["state"] == "stopping"
    table = run_cli("--schema", schema, "workers", dsn=pg_dsn, env=WIDE)
    assert table.returncode == 0, table.stderr
    for text in ("w-a", "host-a", "101", "running", "email.sendx4", "w-b", "stopping",
                 "s ago"):
        assert text in table.stdout, table.stdout


def _history_and_result(store: PostgresStore, job_id: str) -> None:
    """Give a job an attempt history and a result by hand (their writers are elsewhere)."""
    errors = [{"attempt": 1, "at": "2026-01-01T00:00:00+00:00", "error": "RuntimeError: boom",
               "worker_id": "w-a", "started": "2025-12-31T23:59:58.5+00:00"},
              {"attempt": 2, "at": "2026-01-01T00:01:00+00:00", "error": "LeaseExpired: x",
               "worker_id": None}]
    with psycopg.connect(store.dsn or "", autocommit=True) as conn:
        conn.execute(
            sql.SQL("UPDATE {}.jobs SET errors = %s::jsonb, result = %s::jsonb, attempts = 2 "
                    "WHERE id = %s").format(sql.Identifier(store.schema)),
            [json.dumps(errors), json.dumps({"url": "s3://r/1.pdf"}), int(job_id)],
        )


def test_show_prints_summary_history_and_result_but_not_the_payload(
    pg_dsn: str, pg_store: PostgresStore, schema: str,
) -> None:
    job_id = Queue(pg_store).add("report.build", {"secret": CANARY}, tags=("billing", "eu"),
                                 scope=("Account", "a1"))
    assert job_id is not None
    _history_and_result(pg_store, job_id)
    shown = run_cli("--schema", schema, "show", job_id, "--json", dsn=pg_dsn)
    assert shown.returncode == 0, shown.stderr
    assert CANARY not in shown.stdout
    detail = json.loads(shown.stdout)
    assert "payload" not in detail
    assert (detail["id"], detail["type"], detail["status"]) == (job_id, "report.build",
                                                                "pending")
    assert detail["scope"] == {"type": "Account", "id": "a1"}
    assert detail["tags"] == ["billing", "eu"]
    assert [e["attempt"] for e in detail["errors"]] == [1, 2]
    assert detail["errors"][0] == {"attempt": 1, "at": "2026-01-01T00:00:00+00:00",
                                   "started_at": "2025-12-31T23:59:58.500000+00:00",
                                   "duration": 1.5, "error": "RuntimeError: boom",
                                   "worker_id": "w-a", "traceback": None}
    # an entry written before attempts kept their start (migration 0012) has no duration
    assert (detail["errors"][1]["started_at"], detail["errors"][1]["duration"]) == (None, None)
    assert detail["result"] == {"url": "s3://r/1.pdf"}
    text = run_cli("--schema", schema, "show", job_id, dsn=pg_dsn, env=WIDE)
    assert text.returncode == 0, text.stderr
    assert CANARY not in text.stdout
    assert "payload" not in text.stdout
    for part in ("report.build", "pending", "Account:a1", "billing, eu", "attempt history (2)",
                 "RuntimeError: boom", "1.500s", "s3://r/1.pdf"):
        assert part in text.stdout, text.stdout


def test_show_prints_each_attempts_traceback_as_it_is(
    pg_dsn: str, pg_store: PostgresStore, schema: str,
) -> None:
    trace = ("Traceback (most recent call last):\n"
             '  File "/app/reports.py", line 7, in build_report_pdf\n'
             "    raise RuntimeError('[bold]boom[/bold] <b>')\n"
             "RuntimeError: [bold]boom[/bold] <b>\n")
    job_id = Queue(pg_store).add("report.build", {"secret": CANARY}, max_attempts=1)
    assert job_id is not None
    (job,) = claim(pg_store, "report.build", owner="w-a")
    assert pg_store.job_fail_many("w-a", [FailItem(job_id, job.token, "RuntimeError: boom",
                                                   trace)]) == {job_id}
    shown = run_cli("--schema", schema, "show", job_id, "--json", dsn=pg_dsn)
    assert shown.returncode == 0, shown.stderr
    (entry,) = json.loads(shown.stdout)["errors"]
    assert entry["traceback"] == trace
    text = run_cli("--schema", schema, "show", job_id, dsn=pg_dsn, env=WIDE)
    assert text.returncode == 0, text.stderr
    assert "traceback of attempt 1:" in text.stdout
    # printed as text, rich markup included (never interpreted)
    for line in trace.splitlines():
        assert line in text.stdout, text.stdout
    assert CANARY not in text.stdout


def test_show_prints_the_payload_only_with_the_flag(
    pg_dsn: str, pg_store: PostgresStore, schema: str,
) -> None:
    job_id = Queue(pg_store).add("t", {"secret": CANARY, "n": 1})
    assert job_id is not None
    shown = run_cli("--schema", schema, "show", job_id, "--json", "--payload", dsn=pg_dsn)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["payload"] == {"secret": CANARY, "n": 1}
    text = run_cli("--schema", schema, "show", job_id, "--payload", dsn=pg_dsn, env=WIDE)
    assert text.returncode == 0, text.stderr
    assert CANARY in text.stdout


def test_show_an_unknown_id_exits_1_and_a_bad_id_exits_2(
    pg_dsn: str, pg_store: PostgresStore, schema: str,
) -> None:
    unknown = run_cli("--schema", schema, "show", "987654321", dsn=pg_dsn)
    assert_clean_failure(unknown, 1)
    assert "job 987654321 not found" in unknown.stderr
    for bad in ("abc", "-1", "1" * 20):
        result = run_cli("--schema", schema, "show", bad, dsn=pg_dsn)
        assert_clean_failure(result, 2)


@pytest.mark.parametrize("spelling", ["FAILED", "Failed", "failed"])
def test_prune_takes_statuses_in_any_case(
    pg_dsn: str, pg_store: PostgresStore, schema: str, spelling: str,
) -> None:
    result = run_cli("--schema", schema, "prune", "--older-than", "1d", "--status", spelling,
                     dsn=pg_dsn)
    assert result.returncode == 0, result.stderr
    assert "0 job(s) pruned" in result.stdout
    bad = run_cli("--schema", schema, "prune", "--older-than", "1d", "--status", "done",
                  dsn=pg_dsn)
    assert bad.returncode == 2
