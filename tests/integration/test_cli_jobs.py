"""The real `golemq-pg` for one job at a time and lists of jobs: `jobs` (filters, JSON
lines), `enqueue`'s options and its warning for a type no live worker handles, `delete`,
`job ID not found` from every per-job command, and tables that fit 80 columns. Against the
real database, one schema per test."""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime, timedelta

import pytest

from golemq_pg import JobStatus, PostgresStore, Queue
from golemq_pg.store.port import FailItem, WorkerBeat
from tests.support.cli import CANARY, assert_clean_failure, run_cli
from tests.support.store_port import claim, refs, slots


@pytest.fixture
def migrated(pg_store: object, schema: str) -> str:
    """A migrated schema (migrated in process)."""
    return schema


def _lines(output: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in output.splitlines() if line.strip()]


def _beat(store: PostgresStore, handlers: dict[str, int], every: float = 5.0) -> None:
    store.worker_heartbeat(WorkerBeat(worker_id=f"w-{time.monotonic_ns()}", host="h", pid=1,
                                      handlers=handlers, heartbeat_seconds=every))


def test_jobs_lists_newest_first_and_filters_by_type_status_scope_and_tag(
    pg_dsn: str, migrated: str, pg_store: PostgresStore
) -> None:
    queue = Queue(pg_store)
    due = queue.add("mail.send", {"secret": CANARY}, scope=("User", "1"), tags=["billing"])
    later = queue.add("mail.send", {"secret": CANARY}, delay=3600)
    failed = queue.add("img.resize", {}, max_attempts=1)
    (job,) = claim(pg_store, slots("img.resize"), owner="cli")
    pg_store.job_fail_many("cli", [FailItem(job.id, job.lease_token, "RuntimeError: boom")])
    done = queue.add("img.resize", {}, tags=["billing"])
    pg_store.job_complete_many("cli", refs(claim(pg_store, slots("img.resize"), owner="cli")))
    running = queue.add("pdf.render", {})
    claim(pg_store, slots("pdf.render"), owner="cli")

    def ids(*args: str) -> list[object]:
        result = run_cli("--schema", migrated, "jobs", "--json", *args, dsn=pg_dsn)
        assert result.returncode == 0, result.stderr
        assert CANARY not in result.stdout
        return [row["id"] for row in _lines(result.stdout)]

    assert ids() == [running, done, failed, later, due]  # newest first
    everything = run_cli("--schema", migrated, "jobs", "--json", dsn=pg_dsn)
    row = _lines(everything.stdout)[2]
    # failed --json's keys, then what every job has
    assert list(row)[:5] == ["id", "type", "attempts", "last_error", "finished_at"]
    assert (row["status"], row["last_error"]) == ("failed", "RuntimeError: boom")
    assert ids("--type", "mail.send") == [later, due]
    assert ids("--status", "pending") == [due]  # due now
    assert ids("--status", "scheduled") == [later]  # pending with a future run time
    assert ids("--status", "PENDING", "--status", "scheduled") == [later, due]
    assert ids("--status", "running") == [running]
    assert ids("--status", "succeeded", "--status", "failed") == [done, failed]
    assert ids("--scope", "User:1") == [due]
    assert ids("--tag", "billing") == [done, due]
    assert ids("--limit", "2") == [running, done]
    table = run_cli("--schema", migrated, "jobs", "--type", "img.resize", dsn=pg_dsn)
    assert table.returncode == 0, table.stderr
    assert "RuntimeError" in table.stdout
    assert CANARY not in table.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["--status", "lost"], "--status"),
    (["--scope", "nocolon"], "TYPE:ID"),
    (["--limit", "0"], "--limit"),
    (["--type", ""], "job type"),
    (["--tag", "bad tag!"], "tag"),
])
def test_jobs_refuses_bad_filters_with_one_line(
    pg_dsn: str, migrated: str, args: list[str], message: str
) -> None:
    result = run_cli("--schema", migrated, "jobs", *args, dsn=pg_dsn)
    assert_clean_failure(result, 2)
    assert message in result.stderr


def test_jobs_lists_waiting_jobs_by_their_status(
    pg_dsn: str, migrated: str, pg_store: PostgresStore
) -> None:
    queue = Queue(pg_store)
    parent = queue.add("wait.parent", {})
    assert parent is not None
    child = queue.add("wait.child", {}, depends_on=[parent])
    result = run_cli("--schema", migrated, "jobs", "--status", "waiting", "--json", dsn=pg_dsn)
    assert result.returncode == 0, result.stderr
    assert [json.loads(line)["id"] for line in result.stdout.splitlines()] == [child]


def test_enqueue_takes_tags_priority_attempts_dedupe_key_and_run_at(
    pg_dsn: str, migrated: str, pg_store: PostgresStore
) -> None:
    when = (datetime.now(UTC) + timedelta(hours=3)).replace(microsecond=0)
    result = run_cli(
        "--schema", migrated, "enqueue", "mail.send", "{}", "--tags", "billing,eu",
        "--tags", "vip", "--priority", "7", "--max-attempts", "9", "--dedupe-key", "k1",
        "--run-at", when.astimezone(timezone_plus_two()).isoformat(), dsn=pg_dsn)
    assert result.returncode == 0, result.stderr
    job = pg_store.job_get(result.stdout.strip())
    assert job is not None
    assert (job.tags, job.priority, job.max_attempts, job.run_at) == (
        ("billing", "eu", "vip"), 7, 9, when)
    zulu = run_cli("--schema", migrated, "enqueue", "mail.send", "{}", "--run-at",
                   "2030-01-01T00:00:00Z", dsn=pg_dsn)
    assert zulu.returncode == 0, zulu.stderr
    zulu_job = pg_store.job_get(zulu.stdout.strip())
    assert zulu_job is not None
    assert zulu_job.run_at == datetime(2030, 1, 1, tzinfo=UTC)


def test_enqueue_takes_an_unlimited_budget_and_show_and_jobs_print_it(
    pg_dsn: str, migrated: str, pg_store: PostgresStore
) -> None:
    result = run_cli("--schema", migrated, "enqueue", "sync.forever", "{}",
                     "--max-attempts", "unlimited", dsn=pg_dsn)
    assert result.returncode == 0, result.stderr
    job_id = result.stdout.strip()
    job = pg_store.job_get(job_id)
    assert job is not None
    assert job.max_attempts is None
    shown = run_cli("--schema", migrated, "show", job_id, dsn=pg_dsn)
    assert shown.returncode == 0, shown.stderr
    assert re.search(r"max_attempts\s+unlimited", shown.stdout)
    as_json = run_cli("--schema", migrated, "show", job_id, "--json", dsn=pg_dsn)
    assert json.loads(as_json.stdout)["max_attempts"] is None
    listed = run_cli("--schema", migrated, "jobs", dsn=pg_dsn)
    assert listed.returncode == 0, listed.stderr
    assert "0/unlimited" in listed.stdout
    (line,) = _lines(run_cli("--schema", migrated, "jobs", "--json", dsn=pg_dsn).stdout)
    assert line["max_attempts"] is None


def timezone_plus_two() -> object:
    from datetime import timezone  # noqa: PLC0415

    return timezone(timedelta(hours=2))


@pytest.mark.parametrize(("args", "message"), [
    (["--run-at", "2030-01-01T09:00:00"], "UTC offset"),
    (["--run-at", "next tuesday"], "ISO 8601"),
    (["--run-at", "2030-01-01T09:00:00Z", "--delay", "5"], "not both"),
    (["--tags", "a,,b"], "empty tag"),
    (["--tags", "has space"], "tag"),
    (["--max-attempts", "unlimitedish"], "positive integer"),
    (["--max-attempts", str(2**31)], "max_attempts"),
])
def test_enqueue_refuses_bad_options_and_writes_nothing(
    pg_dsn: str, migrated: str, pg_store: PostgresStore, args: list[str], message: str
) -> None:
    result = run_cli("--schema", migrated, "enqueue", "t", "{}", *args, dsn=pg_dsn)
    assert_clean_failure(result, 2)
    assert message in result.stderr
    assert pg_store.job_count_by_status()[JobStatus.PENDING] == 0


def test_enqueue_warns_when_no_live_worker_handles_the_type(
    pg_dsn: str, migrated: str, pg_store: PostgresStore
) -> None:
    def enqueue(job_type: str) -> str:
        result = run_cli("--schema", migrated, "enqueue", job_type, "{}", dsn=pg_dsn)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip().isdigit()  # enqueued all the same
        return result.stderr

    assert "no live worker handles 'mail.send'" in enqueue("mail.send")
    _beat(pg_store, {"mail.send": 2})
    assert enqueue("mail.send") == ""
    assert "no live worker handles 'img.resize'" in enqueue("img.resize")
    _beat(pg_store, {"pdf.render": 1}, every=0.1)  # lost after three missed beats
    time.sleep(0.5)
    assert "no live worker handles 'pdf.render'" in enqueue("pdf.render")
    assert pg_store.job_count_by_status()[JobStatus.PENDING] == 4


@pytest.mark.parametrize("command", ["show", "retry", "run-now", "cancel", "delete"])
def test_every_per_job_command_answers_an_unknown_id_with_not_found(
    pg_dsn: str, migrated: str, command: str
) -> None:
    result = run_cli("--schema", migrated, command, "987654321", dsn=pg_dsn)
    assert_clean_failure(result, 1)
    assert result.stderr.strip() == "golemq-pg: error: job 987654321 not found"


def test_delete_removes_a_finished_job_and_cancels_a_live_one(
    pg_dsn: str, migrated: str, pg_store: PostgresStore
) -> None:
    queue = Queue(pg_store)
    done = queue.add("t", {})
    pg_store.job_complete_many("cli", refs(claim(pg_store, slots("t"), owner="cli")))
    live = queue.add("t", {}, delay=60)
    for job_id in (done, live):
        result = run_cli("--schema", migrated, "delete", job_id, dsn=pg_dsn)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == f"job {job_id} deleted"
        assert pg_store.job_get(job_id) is None
    assert set(pg_store.job_count_by_status().values()) == {0}


def test_every_table_fits_80_columns_and_cuts_long_cells_with_an_ellipsis(
    pg_dsn: str, migrated: str, pg_store: PostgresStore
) -> None:
    long_type = "very.long.type." + "x" * 120
    queue = Queue(pg_store)
    queue.add(long_type, {}, max_attempts=1)
    (job,) = claim(pg_store, slots(long_type), owner="cli")
    error = "RuntimeError: " + "the remote service refused the request " * 6
    pg_store.job_fail_many("cli", [FailItem(job.id, job.lease_token, error)])
    queue.add(long_type, {}, delay=30)
    _beat(pg_store, {long_type: 4, "other." + "y" * 100: 1})
    commands = [["jobs"], ["failed"], ["stats"], ["workers"], ["show", job.id]]
    for args in commands:
        for columns in ("80", "200"):  # a wide terminal too: the tables stay within 80
            result = run_cli("--schema", migrated, *args, dsn=pg_dsn, env={"COLUMNS": columns})
            assert result.returncode == 0, (args, result.stderr)
            widths = [len(line) for line in result.stdout.splitlines()]
            assert max(widths) <= 80, (args, columns, max(widths))
    listed = run_cli("--schema", migrated, "jobs", dsn=pg_dsn)
    assert "…" in listed.stdout  # cut, not wrapped onto more lines
    assert len(listed.stdout.splitlines()) == 5  # title, header, rule, one line per job
