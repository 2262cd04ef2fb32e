"""The real `golemq-pg` command (a subprocess) against the real database, one schema per test."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil  # type: ignore[import-untyped]
import psycopg
import pytest
from psycopg import sql

from golemq_pg import PostgresStore, Queue
from golemq_pg.store.port import FailItem, LeaseRef
from golemq_pg.store.postgres._migrations import migrate
from tests.support.cli import CANARY, assert_clean_failure, run_cli
from tests.support.store_port import claim, slots
from tests.support.waiting import wait_until


def count_jobs(dsn: str, schema: str, status: str | None = None) -> int:
    """Rows in <schema>.jobs (optionally of one status); 0 when the table does not exist."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL",
                              [f"{schema}.jobs_all"]).fetchone()
        if not exists or not exists[0]:
            return 0
        query = sql.SQL("SELECT count(*) FROM {}.jobs_all").format(sql.Identifier(schema))
        if status is not None:
            query = query + sql.SQL(" WHERE status = %s")
        row = conn.execute(query, [status] if status else []).fetchone()
        assert row is not None
        return int(row[0])


@pytest.fixture
def migrated(pg_store: object, schema: str) -> str:
    """A migrated schema (in process: `migrate` itself is tested through the CLI below)."""
    return schema


def test_migrate_twice_is_idempotent(pg_dsn: str, schema: str) -> None:
    for _ in range(2):
        result = run_cli("migrate", "--schema", schema, dsn=pg_dsn)
        assert result.returncode == 0, result.stderr
        assert schema in result.stdout
    with psycopg.connect(pg_dsn) as conn:
        tables = {
            row[0]
            for row in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                [schema],
            )
        }
    assert {"jobs", "schedules", "resource_budgets"} <= tables


def test_migrate_gives_up_on_a_lock_a_long_transaction_holds(pg_dsn: str, schema: str) -> None:
    # The schema as release 0001 left it, and an application transaction that read jobs and
    # stays open: 0002 (ALTER TABLE jobs) is refused its lock.
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        migrate(conn, schema, up_to=1)
    with psycopg.connect(pg_dsn) as holder:
        holder.execute(sql.SQL("SELECT count(*) FROM {}.jobs").format(sql.Identifier(schema)))
        once = run_cli("migrate", "--schema", schema, "--lock-timeout", "0.1s",
                       "--lock-retries", "0", dsn=pg_dsn)
        assert_clean_failure(once, 1)
        assert "migration 0002_operating_surface was refused a lock within its lock_timeout "\
               "of 0.1s on its only try" in once.stderr
        # With retries, each is logged (stderr), then the same one-line error.
        retried = run_cli("migrate", "--schema", schema, "--lock-timeout", "0.1",
                          "--lock-retries", "2", dsn=pg_dsn)
        assert retried.returncode == 1, retried.stderr
        lines = retried.stderr.strip().splitlines()
        assert sum("migration_lock_timeout" in line for line in lines) == 2, lines
        assert lines[-1].startswith("golemq-pg: error: migration 0002_operating_surface was "
                                    "refused a lock"), lines
        assert "on each of 3 tries" in lines[-1]
    # Once it has ended, the same command applies everything.
    done = run_cli("migrate", "--schema", schema, "--lock-timeout", "1s", dsn=pg_dsn)
    assert done.returncode == 0, done.stderr
    assert "applied 0002_operating_surface" in done.stdout


@pytest.mark.parametrize(("option", "value"), [("--lock-timeout", "-1"),
                                               ("--lock-timeout", "soon"),
                                               ("--lock-retries", "-1"),
                                               ("--lock-retries", "1001")])
def test_migrate_rejects_bad_lock_options(pg_dsn: str, option: str, value: str) -> None:
    assert_clean_failure(run_cli("migrate", option, value, dsn=pg_dsn), 2)


def test_sql_prints_a_script_psql_applies(pg_dsn: str, schema: str) -> None:
    result = run_cli("sql", "--schema", schema, dsn=None, env={"GOLEMQ_DSN": ""})
    assert result.returncode == 0, result.stderr
    assert "CREATE TABLE" in result.stdout
    assert schema in result.stdout
    # Printing SQL needs no database: the embedded server was not started for it.
    assert "embedded" not in result.stderr
    psql = shutil.which("psql")
    if psql is None:
        pytest.skip("psql is not installed")
    applied = subprocess.run(
        [psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", pg_dsn], input=result.stdout,
        capture_output=True, text=True, check=False, timeout=60,
    )
    assert applied.returncode == 0, applied.stderr
    # The schema psql built is a working queue, and `migrate` agrees it is up to date.
    assert run_cli("migrate", "--schema", schema, dsn=pg_dsn).returncode == 0
    enqueued = run_cli("enqueue", "--schema", schema, "t.x", "{}", dsn=pg_dsn)
    assert enqueued.returncode == 0, enqueued.stderr
    assert count_jobs(pg_dsn, schema) == 1


def test_enqueue_prints_the_id_and_stores_every_option(pg_dsn: str, migrated: str) -> None:
    result = run_cli(
        "--schema", migrated, "enqueue", "article.extract", '{"article_id": "a1"}',
        "--scope", "Article:a1:with:colons", "--delay", "1h", "--dedupe-key", "k1",
        "--priority", "7", "--max-attempts", "5", dsn=pg_dsn,
    )
    assert result.returncode == 0, result.stderr
    job_id = result.stdout.strip()
    with psycopg.connect(pg_dsn) as conn:
        row = conn.execute(
            sql.SQL(
                "SELECT type, payload, scope_type, scope_id, dedupe_key, priority, max_attempts,"
                " status, run_at > now() + interval '59 minutes' FROM {}.jobs_all WHERE id = %s"
            ).format(sql.Identifier(migrated)),
            [int(job_id)],
        ).fetchone()
    assert row == ("article.extract", {"article_id": "a1"}, "Article", "a1:with:colons", "k1",
                   7, 5, "pending", True)
    # The same dedupe key while that job is pending: rejected, exit 1, nothing written.
    again = run_cli("--schema", migrated, "enqueue", "article.extract", "{}",
                    "--dedupe-key", "k1", dsn=pg_dsn)
    assert_clean_failure(again, 1)
    assert "dedupe key" in again.stderr
    assert count_jobs(pg_dsn, migrated) == 1
    # A payload from stdin.
    piped = run_cli("--schema", migrated, "enqueue", "t.stdin", "-", stdin='{"x": [1, 2]}',
                    dsn=pg_dsn)
    assert piped.returncode == 0, piped.stderr
    assert count_jobs(pg_dsn, migrated) == 2


def test_stats_failed_retry_failed_and_prune(pg_dsn: str, migrated: str) -> None:
    for job_type, extra in (("mail.send", ()), ("mail.send", ()), ("img.resize", ()),
                            ("img.resize", ("--delay", "2w"))):
        result = run_cli("--schema", migrated, "enqueue", job_type,
                         json.dumps({"secret": CANARY}), *extra, dsn=pg_dsn)
        assert result.returncode == 0, result.stderr

    stats = run_cli("--schema", migrated, "stats", "--json", dsn=pg_dsn)
    assert stats.returncode == 0, stats.stderr
    data = json.loads(stats.stdout)
    assert data["totals"]["pending"] == 3
    assert data["totals"]["scheduled"] == 1
    assert data["due_backlog"] == 3
    if data["by_type"] is not None:
        assert data["by_type"]["mail.send"]["pending"] == 2
        assert data["by_type"]["img.resize"]["scheduled"] == 1
        assert data["oldest_due_age_seconds"] is not None
    table = run_cli("--schema", migrated, "stats", dsn=pg_dsn)
    assert table.returncode == 0, table.stderr
    assert "due backlog: 3" in table.stdout

    # Dead-letter both mail jobs and complete the due image job, through the store port.
    store = PostgresStore.connect(pg_dsn, schema=migrated, min_size=1, max_size=2)
    try:
        mail = claim(store, slots("mail.send", lease=60), owner="cli-test")
        assert len(mail) == 2
        store.job_fail_many("cli-test", [FailItem(j.id, j.lease_token, "RuntimeError: smtp down")
                                         for j in mail])
        images = claim(store, slots("img.resize", lease=60), owner="cli-test")
        assert len(images) == 1
        store.job_complete_many("cli-test", [LeaseRef(j.id, j.lease_token)
                                             for j in images])
    finally:
        store.close()

    listed = run_cli("--schema", migrated, "failed", "--json", dsn=pg_dsn)
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert sorted(r["id"] for r in rows) == sorted(j.id for j in mail)
    assert {r["last_error"] for r in rows} == {"RuntimeError: smtp down"}
    assert all(r["type"] == "mail.send" and r["finished_at"] for r in rows)
    assert CANARY not in listed.stdout
    pretty = run_cli("--schema", migrated, "failed", "--type", "mail.send", dsn=pg_dsn)
    assert pretty.returncode == 0
    assert "smtp down" in pretty.stdout
    assert CANARY not in pretty.stdout
    none = run_cli("--schema", migrated, "failed", "--type", "img.resize", "--json", dsn=pg_dsn)
    assert none.returncode == 0
    assert none.stdout == ""

    retried = run_cli("--schema", migrated, "retry-failed", "--type", "mail.send",
                      "--limit", "1", dsn=pg_dsn)
    assert retried.returncode == 0, retried.stderr
    assert retried.stdout.startswith("1 job")
    assert count_jobs(pg_dsn, migrated, "failed") == 1
    assert run_cli("--schema", migrated, "retry-failed", dsn=pg_dsn).stdout.startswith("1 job")
    assert count_jobs(pg_dsn, migrated, "failed") == 0
    assert count_jobs(pg_dsn, migrated, "pending") == 3  # two retried + the scheduled one

    kept = run_cli("--schema", migrated, "prune", "--older-than", "7d", dsn=pg_dsn)
    assert kept.returncode == 0, kept.stderr
    assert kept.stdout.startswith("0 job")
    pruned = run_cli("--schema", migrated, "prune", "--older-than", "0s", dsn=pg_dsn)
    assert pruned.returncode == 0, pruned.stderr
    assert pruned.stdout.startswith("1 job")
    assert count_jobs(pg_dsn, migrated, "succeeded") == 0
    assert count_jobs(pg_dsn, migrated) == 3


BAD_INPUTS: list[tuple[list[str], str | None, int, str]] = [
    (["enqueue", "t", "{not json"], None, 2, "not valid JSON"),
    (["enqueue", "t", "[1, 2]"], None, 2, "must be an object"),
    (["enqueue", "t", '"just a string"'], None, 2, "must be an object"),
    (["enqueue", "t", f'{{"s": "{CANARY}", "x": NaN}}'], None, 2, "NaN"),
    (["enqueue", "t", "-"], '{"s": "' + CANARY * 80_000 + '"}', 2, "larger than"),
    (["enqueue", "t", "{}", "--scope", "no-colon"], None, 2, "TYPE:ID"),
    (["enqueue", "t", "{}", "--scope", ":id"], None, 2, "TYPE:ID"),
    (["enqueue", "t", "{}", "--delay", "-5"], None, 2, "negative"),
    (["enqueue", "t", "{}", "--delay", "soon"], None, 2, "not a duration"),
    (["enqueue", "t", "{}", "--max-attempts", "0"], None, 2, "max-attempts"),
    (["enqueue", "t", "{}", "--priority", "99999999999"], None, 2, "priority"),
    (["enqueue", "x" * 256, "{}"], None, 2, "255"),
    (["enqueue", "t", "{}", "--dedupe-key", ""], None, 2, "dedupe_key"),
    (["prune", "--older-than", "7 days"], None, 2, "not a duration"),
    (["prune", "--older-than", "-1d"], None, 2, "negative"),
    (["prune"], None, 2, "--older-than"),
    (["failed", "--limit", "0"], None, 2, "--limit"),
    (["worker", "no_colon_here"], None, 2, "module:attribute"),
    (["worker", "golemq_pg_no_such_module:worker"], None, 2, "no such module"),
    (["worker", "golemq_pg.cli:no_such_attribute"], None, 2, "no attribute"),
    (["worker", "golemq_pg.cli.base:DEFAULT_SCHEMA"], None, 2, "not a golemq_pg.Worker"),
    (["nonsense-command"], None, 2, "No such command"),
]


@pytest.mark.parametrize(("args", "stdin", "code", "message"), BAD_INPUTS,
                         ids=[" ".join(a[0])[:40] for a in BAD_INPUTS])
def test_bad_input_is_one_clear_line_and_writes_nothing(
    pg_dsn: str, migrated: str, args: list[str], stdin: str | None, code: int, message: str,
) -> None:
    # `worker` refuses --schema (its module's store decides): its bad targets go without it.
    chosen = [] if args[0] == "worker" else ["--schema", migrated]
    result = run_cli(*chosen, *args, stdin=stdin, dsn=pg_dsn)
    assert_clean_failure(result, code)
    assert message.lower() in result.stderr.lower()
    assert count_jobs(pg_dsn, migrated) == 0


@pytest.mark.parametrize("bad_schema", ["Golemq", "a;drop", "bad-name", "x" * 64, "1abc", "ü"])
def test_bad_schema_names_are_rejected(pg_dsn: str, bad_schema: str) -> None:
    result = run_cli("stats", "--schema", bad_schema, dsn=pg_dsn)
    assert_clean_failure(result, 2)
    assert "--schema" in result.stderr


@pytest.mark.parametrize("args", [["migrate"], ["enqueue", "t", "{}"], ["sql"], ["failed"],
                                  ["retry-failed"], ["prune", "--older-than", "1d"], ["demo"]])
def test_every_command_validates_the_schema(pg_dsn: str, args: list[str]) -> None:
    result = run_cli("--schema", "a;drop", *args, dsn=pg_dsn)
    assert_clean_failure(result, 2)
    assert "--schema" in result.stderr


def test_runtime_failures_exit_1(pg_dsn: str, schema: str) -> None:
    unreachable = "postgresql://postgres@127.0.0.1:1/test?connect_timeout=2"
    for args in (["stats"], ["migrate"], ["enqueue", "t", "{}"], ["failed"], ["prune",
                 "--older-than", "1d"], ["retry-failed"]):
        result = run_cli("--dsn", unreachable, *args, dsn=None)
        assert_clean_failure(result, 1)
        assert "cannot connect to PostgreSQL at 127.0.0.1:1/test" in result.stderr
    # A multi-host DSN (a primary and its standby) names each server with its port.
    result = run_cli("--dsn", "host=127.0.0.1,localhost port=1,2 dbname=test user=postgres "
                     "target_session_attrs=read-write connect_timeout=2", "stats", dsn=None)
    assert_clean_failure(result, 1)
    assert "cannot connect to PostgreSQL at 127.0.0.1:1,localhost:2/test" in result.stderr
    # A schema that was never migrated: a hint, not a stack trace.
    for args in (["stats"], ["enqueue", "t", "{}"], ["failed"]):
        result = run_cli("--schema", schema, *args, dsn=pg_dsn)
        assert_clean_failure(result, 1)
        assert "golemq-pg migrate" in result.stderr
    # A malformed DSN is a usage error and never echoed (it could hold a password).
    result = run_cli("--dsn", "host=x password=hunter2 nonsense", "stats", dsn=None)
    assert_clean_failure(result, 2)
    assert "hunter2" not in result.stderr


def test_global_options_work_before_and_after_the_command(pg_dsn: str, schema: str) -> None:
    before = run_cli("--dsn", pg_dsn, "--schema", schema, "migrate", dsn=None,
                     env={"GOLEMQ_DSN": ""})
    assert before.returncode == 0, before.stderr
    after = run_cli("enqueue", "t", "{}", "--dsn", pg_dsn, "--schema", schema, dsn=None,
                    env={"GOLEMQ_DSN": ""})
    assert after.returncode == 0, after.stderr
    assert count_jobs(pg_dsn, schema) == 1


WORKER_MODULE = textwrap.dedent(
    """
    import os
    from golemq_pg import PostgresStore, Worker

    store = PostgresStore.connect(os.environ["GOLEMQ_DSN"], schema=os.environ["TEST_SCHEMA"])
    worker = Worker(store, poll_interval=0.1, shutdown_grace=5)

    @worker.handler("cli.echo", concurrency=2)
    def echo(job):
        with open(os.environ["TEST_LEDGER"], "a") as ledger:
            ledger.write(f"{job.id} {os.getpid()}\\n")
    """
)


@pytest.mark.parametrize("processes", [1, 2])
def test_worker_command_on_an_unmigrated_schema_says_so_once_and_exits(
    pg_dsn: str, schema: str, tmp_path: Path, processes: int,
) -> None:
    (tmp_path / "cli_worker_app.py").write_text(WORKER_MODULE)
    env = {k: v for k, v in os.environ.items() if k != "GOLEMQ_DEBUG"}
    env.update(GOLEMQ_DSN=pg_dsn, TEST_SCHEMA=schema, TEST_LEDGER=str(tmp_path / "ledger"))
    result = subprocess.run(
        [sys.executable, "-m", "golemq_pg.cli", "worker", "cli_worker_app:worker",
         "--processes", str(processes)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 1, result.stderr
    message = f"schema {schema!r} is not migrated: run `golemq-pg migrate`"
    assert result.stderr.count(message) == processes, result.stderr
    assert "does not exist" not in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("processes", [1, 2])
def test_worker_command_runs_an_imported_worker_and_stops_on_sigterm(
    pg_dsn: str, migrated: str, tmp_path: Path, processes: int,
) -> None:
    (tmp_path / "cli_worker_app.py").write_text(WORKER_MODULE)
    ledger = tmp_path / "ledger.txt"
    ledger.touch()
    env = {k: v for k, v in os.environ.items() if k != "GOLEMQ_DEBUG"}
    env.update(GOLEMQ_DSN=pg_dsn, TEST_SCHEMA=migrated, TEST_LEDGER=str(ledger))
    proc = subprocess.Popen(
        [sys.executable, "-m", "golemq_pg.cli", "worker", "cli_worker_app:worker",
         "--processes", str(processes)],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        # One CLI enqueue, the rest in process (the worker command is what is tested here).
        result = run_cli("--schema", migrated, "enqueue", "cli.echo", "{}", dsn=pg_dsn)
        assert result.returncode == 0, result.stderr
        store = PostgresStore.connect(pg_dsn, schema=migrated, min_size=1, max_size=2)
        try:
            for i in range(19):
                Queue(store).add("cli.echo", {"i": i})
        finally:
            store.close()
        wait_until(lambda: count_jobs(pg_dsn, migrated, "succeeded") == 20, 60, interval=0.05,
                   what="20 jobs")
        assert proc.poll() is None
        pids = {line.split()[1] for line in ledger.read_text().splitlines()}
        assert len(ledger.read_text().splitlines()) == 20
        if processes == 1:
            assert pids == {str(proc.pid)}
        else:
            assert str(proc.pid) not in pids  # the parent only supervises
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr
    if processes > 1:
        started = stderr.split("started 2 worker processes: ", 1)[1].splitlines()[0]
        children = [int(p) for p in started.split(", ")]
        assert len(children) == 2
        assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"
                       for pid in children)


def _talks_to_postgres(pid: int) -> bool:
    """Whether process ``pid`` holds a connection to a PostgreSQL server: TCP to port 5432,
    or any Unix socket (the embedded server's; Linux does not name a client socket's peer,
    and the CLI opens no other socket)."""
    try:
        found = psutil.Process(pid).net_connections(kind="all")
    except psutil.Error:
        return False
    for conn in found:
        if conn.family == socket.AF_UNIX:
            return True
        address = conn.raddr
        if isinstance(address, tuple) and len(address) == 2 and address[1] == 5432:
            return True
    return False


def test_stats_watch_refreshes_until_interrupted(pg_dsn: str, migrated: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "GOLEMQ_DEBUG"}
    env["GOLEMQ_DSN"] = pg_dsn
    proc = subprocess.Popen(
        [sys.executable, "-m", "golemq_pg.cli", "--schema", migrated, "stats", "--watch",
         "--interval", "0.2"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # It keeps running (refreshing) until interrupted: still alive a few refreshes after
        # it reached the database (waited for: a loaded machine may take seconds to import;
        # rich's Live draws nothing on a pipe before it ends, so its output cannot tell).
        wait_until(lambda: _talks_to_postgres(proc.pid), timeout=60,
                   what="stats --watch connecting")
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=1.0)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr
    assert "due backlog: 0" in stdout
    assert "Traceback" not in stderr
    bad = run_cli("--schema", migrated, "stats", "--watch", "--json", dsn=pg_dsn)
    assert_clean_failure(bad, 2)


def test_worker_processes_stop_cleanly_when_signalled_during_start_up(
    pg_dsn: str, migrated: str, tmp_path: Path,
) -> None:
    (tmp_path / "cli_worker_app.py").write_text(WORKER_MODULE)
    env = {k: v for k, v in os.environ.items() if k != "GOLEMQ_DEBUG"}
    env.update(GOLEMQ_DSN=pg_dsn, TEST_SCHEMA=migrated, TEST_LEDGER=str(tmp_path / "ledger"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "golemq_pg.cli", "worker", "cli_worker_app:worker",
         "--processes", "2"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stderr is not None
        started = proc.stderr.readline()  # the children were just spawned and are importing
        assert "started 2 worker processes" in started
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # Every child stopped on the forwarded signal instead of being killed by it.
    assert proc.returncode == 0, started + stderr
    assert "Traceback" not in stderr
    children = [int(p) for p in started.rsplit(": ", 1)[1].split(", ")]
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"
                   for pid in children)
