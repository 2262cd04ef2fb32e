"""The real `golemq-pg` control commands (retry, run-now, cancel, pause, resume) and the
paused types in `stats` / `failed`, against the real database, one schema per test."""

from __future__ import annotations

import json

import pytest

from golemq_pg import JobStatus, PostgresStore, Queue
from golemq_pg.store.port import FailItem
from tests.integration.test_cli import CANARY, assert_clean_failure, count_jobs, run_cli
from tests.support.store_port import claim, slots


@pytest.fixture
def migrated(pg_store: object, schema: str) -> str:
    """A migrated schema (migrated in process)."""
    return schema


def _dead_letter(store: PostgresStore) -> str:
    job_id = Queue(store).add("mail.send", {"secret": CANARY}, max_attempts=1)
    (job,) = claim(store, slots("mail.send"), owner="cli-test")
    store.job_fail_many("cli-test", [FailItem(job.id, job.lease_token, "RuntimeError: down")])
    return job_id


def test_retry_run_now_and_cancel_by_id(pg_dsn: str, migrated: str,
                                        pg_store: PostgresStore) -> None:
    dead = _dead_letter(pg_store)
    retried = run_cli("--schema", migrated, "retry", dead, dsn=pg_dsn)
    assert retried.returncode == 0, retried.stderr
    assert retried.stdout.strip() == f"job {dead} moved back to pending"
    summary = pg_store.job_get(dead)
    assert summary is not None
    assert (summary.status, summary.attempts, summary.last_error) == (JobStatus.PENDING, 0, None)
    again = run_cli("--schema", migrated, "retry", dead, dsn=pg_dsn)  # pending now: refused
    assert_clean_failure(again, 1)
    assert "not FAILED" in again.stderr

    later = Queue(pg_store).add("report", {}, delay=3600)
    moved = run_cli("--schema", migrated, "run-now", later, dsn=pg_dsn)
    assert moved.returncode == 0, moved.stderr
    assert moved.stdout.strip() == f"job {later} is due now"
    assert pg_store.job_stats()["scheduled"] == 0
    assert_clean_failure(run_cli("--schema", migrated, "run-now", later, dsn=pg_dsn), 1)

    cancelled = run_cli("--schema", migrated, "cancel", later, dsn=pg_dsn)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.strip() == f"job {later} cancelled"
    assert pg_store.job_get(later) is None
    assert_clean_failure(run_cli("--schema", migrated, "cancel", later, dsn=pg_dsn), 1)
    assert count_jobs(pg_dsn, migrated) == 1


def test_pause_and_resume_show_in_stats_and_failed(pg_dsn: str, migrated: str,
                                                   pg_store: PostgresStore) -> None:
    _dead_letter(pg_store)
    paused = run_cli("--schema", migrated, "pause", "mail.send", "--reason", "smtp [outage]",
                     dsn=pg_dsn)
    assert paused.returncode == 0, paused.stderr
    assert paused.stdout.strip() == "paused mail.send"
    assert list(pg_store.type_paused()) == ["mail.send"]
    assert pg_store.type_paused()["mail.send"].reason == "smtp [outage]"

    data = json.loads(run_cli("--schema", migrated, "stats", "--json", dsn=pg_dsn).stdout)
    assert list(data["paused"]) == ["mail.send"]
    assert data["paused"]["mail.send"]["reason"] == "smtp [outage]"
    table = run_cli("--schema", migrated, "stats", dsn=pg_dsn)
    assert table.returncode == 0, table.stderr
    assert "paused: mail.send since" in table.stdout
    assert "(smtp [outage])" in table.stdout  # shown as written, not read as markup
    listed = run_cli("--schema", migrated, "failed", dsn=pg_dsn)
    assert listed.returncode == 0, listed.stderr
    assert "paused: mail.send since" in listed.stdout
    assert CANARY not in listed.stdout + table.stdout

    resumed = run_cli("--schema", migrated, "resume", "mail.send", dsn=pg_dsn)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.strip() == "resumed mail.send"
    assert pg_store.type_paused() == {}
    twice = run_cli("--schema", migrated, "resume", "mail.send", dsn=pg_dsn)
    assert twice.returncode == 0
    assert twice.stdout.strip() == "mail.send was not paused"
    data = json.loads(run_cli("--schema", migrated, "stats", "--json", dsn=pg_dsn).stdout)
    assert data["paused"] == {}


BAD_INPUTS: list[tuple[list[str], str]] = [
    (["retry", "abc"], "job id"),
    (["retry", "-1"], "no such option"),
    (["retry", "1.5"], "job id"),
    (["run-now", "1" * 20], "job id"),
    (["cancel", "12x"], "job id"),
    (["retry"], "ID"),
    (["pause", "x" * 256], "255"),
    (["pause", " "], "non-empty"),
    (["pause", "t", "--reason", "r" * 1001], "1000"),
    (["resume", ""], "non-empty"),
]


@pytest.mark.parametrize(("args", "message"), BAD_INPUTS,
                         ids=[" ".join(a[0])[:30] for a in BAD_INPUTS])
def test_bad_input_is_one_clear_line_and_changes_nothing(
    pg_dsn: str, migrated: str, pg_store: PostgresStore, args: list[str], message: str,
) -> None:
    result = run_cli("--schema", migrated, *args, dsn=pg_dsn)
    assert_clean_failure(result, 2)
    assert message.lower() in result.stderr.lower()
    assert pg_store.type_paused() == {}
    assert count_jobs(pg_dsn, migrated) == 0


def test_control_commands_fail_at_runtime_with_exit_1(pg_dsn: str, schema: str) -> None:
    unreachable = "postgresql://postgres@127.0.0.1:1/test?connect_timeout=2"
    for args in (["retry", "1"], ["run-now", "1"], ["cancel", "1"], ["pause", "t"],
                 ["resume", "t"]):
        result = run_cli("--dsn", unreachable, *args, dsn=None)
        assert_clean_failure(result, 1)
        assert "cannot connect to PostgreSQL" in result.stderr
        # A schema that was never migrated: a hint, not a stack trace.
        result = run_cli("--schema", schema, *args, dsn=pg_dsn)
        assert_clean_failure(result, 1)
        assert "golemq-pg migrate" in result.stderr
