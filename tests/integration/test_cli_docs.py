"""The documentation stays true: its commands and SQL work, its examples do what they say
(every python block also runs in test_docs_examples.py), ARCHITECTURE's state table is the
code's, and CI runs the README's quick-start lines as they are written."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from golemq_pg._types import TRANSITIONS
from golemq_pg.cli import cli
from tests.support.schemas import fresh_schema

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
DEPLOYMENT = (ROOT / "docs" / "DEPLOYMENT.md").read_text()
GUIDES = ROOT / "docs" / "guides"
BIN = str(Path(sys.executable).parent)


def _section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.DOTALL)


def _env(dsn: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "GOLEMQ_DEBUG"}
    env.update(DSN=dsn, GOLEMQ_DSN=dsn, PATH=BIN + os.pathsep + env.get("PATH", ""))
    return env


def _readme_commands(path: Path, section: str, count: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / ".ci" / "readme_commands.py"), str(path), section,
         str(count)],
        capture_output=True, text=True, check=False,
    )


def test_quick_start_has_exactly_two_commands_and_ci_runs_them_as_written() -> None:
    (block,) = _blocks(_section(README, "Quick start"), "sh")
    lines = [line for line in block.splitlines() if line.strip()]
    assert len(lines) == 2
    assert "golemq-pg demo" in lines[0]
    assert lines[1] == "pip install -e '.[dev]' && python -m pytest -q"
    # CI reads the lines from the README (never a copy of them) and runs each of them.
    read = _readme_commands(ROOT / "README.md", "Quick start", 2)
    assert read.returncode == 0, read.stderr
    assert read.stdout.splitlines() == lines
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'readme_commands.py README.md "Quick start" 2' in ci
    assert 'run_in_fresh_venv "$ROOT/.ci-venv-demo" "${QUICK_START[0]}"' in ci
    assert 'run_in_fresh_venv "$ROOT/.ci-venv-readme" "${QUICK_START[1]}"' in ci
    assert os.access(ROOT / ".ci" / "run", os.X_OK)


def test_ci_runs_the_examples_install_line_as_written() -> None:
    read = _readme_commands(ROOT / "examples" / "README.md", "Install", 1)
    assert read.returncode == 0, read.stderr
    assert read.stdout.splitlines() == ["pip install -e '.[dev,examples]'"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "readme_commands.py examples/README.md Install 1" in ci
    assert 'run_in_fresh_venv "$VENV" "${EXAMPLES_INSTALL[0]}"' in ci


def test_ci_refuses_a_quick_start_of_another_size(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n## Quick start\n\n```sh\none\ntwo\nthree\n```\n\n## Next\n")
    read = _readme_commands(readme, "Quick start", 2)
    assert read.returncode == 1
    assert "has 3 commands, not 2" in read.stderr
    assert _readme_commands(readme, "Missing", 2).returncode == 1


def test_architecture_state_table_is_the_transition_table() -> None:
    text = (ROOT / "ARCHITECTURE.md").read_text()
    rows = set(re.findall(r"^\| `(\w+)` \| (\w+) \| `(\w+)` \|", text, flags=re.MULTILINE))
    expected = {(old.value, verb, new.value) for (old, verb), new in TRANSITIONS.items()}
    assert rows == expected


def test_every_command_is_documented() -> None:
    table = (GUIDES / "cli.md").read_text()
    for name in cli.commands:
        assert f"`golemq-pg {name}" in table, name


@pytest.fixture
def doc_schema(pg_dsn: str) -> Iterator[str]:
    """A schema named like the README's ("golemq") but unique; dropped afterwards."""
    with fresh_schema(pg_dsn, "golemq_doc_", 10) as name:
        yield name


def _sh_blocks_about(section: str, needle: str) -> str:
    (block,) = [b for b in _blocks(_section(DEPLOYMENT, section), "sh") if needle in b]
    return block


@pytest.mark.parametrize("variant", ["golemq-pg sql", "for f in sql/migrations"])
def test_psql_install_commands_work(pg_dsn: str, doc_schema: str, variant: str) -> None:
    if shutil.which("psql") is None:
        pytest.skip("psql is not installed")
    script = _sh_blocks_about("Installing the SQL with psql", variant)
    # (not the no-transaction marker "-- golemq: no-transaction" the loop greps for)
    script = re.sub(r"\bgolemq\b(?!-pg|:)", doc_schema, script)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=ROOT,
                          env=_env(pg_dsn), capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert "failed" not in done.stderr, done.stderr
    migrate = subprocess.run([sys.executable, "-m", "golemq_pg.cli", "--schema", doc_schema,
                              "migrate"], env=_env(pg_dsn), capture_output=True, text=True,
                             timeout=60, check=False)
    assert migrate.returncode == 0, migrate.stderr
    assert "applied" not in migrate.stdout  # psql installed every migration, with its ledger


def test_documented_grants_are_enough_for_the_runtime_role(pg_dsn: str, doc_schema: str) -> None:
    (grants,) = _blocks(_section(DEPLOYMENT, "Least-privilege grants"), "sql")
    role = "golemq_doc_rt_" + uuid.uuid4().hex[:8]
    grants = re.sub(r"\bgolemq\b", doc_schema, grants).replace("app_runtime", role)
    cli_cmd = [sys.executable, "-m", "golemq_pg.cli", "--schema", doc_schema]
    assert subprocess.run([*cli_cmd, "migrate"], env=_env(pg_dsn), timeout=60,
                          check=False).returncode == 0
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    try:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(grants.encode())
        runtime_dsn = psycopg.conninfo.make_conninfo(pg_dsn, user=role)
        env = _env(runtime_dsn)
        for args in (["enqueue", "doc.echo", "{}", "--scope", "A:1", "--dedupe-key", "k"],
                     ["enqueue", "doc.echo", "{}", "--delay", "1h"], ["stats"],
                     ["failed"], ["retry-failed"], ["prune", "--older-than", "0s"],
                     ["workers"]):
            done = subprocess.run([*cli_cmd, *args], env=env, capture_output=True, text=True,
                                  timeout=60, check=False)
            assert done.returncode == 0, (args, done.stderr)
        # The runtime role runs a worker: claim, guards, resource pool budget, completion.
        worker = (
            "import os\n"
            "from golemq_pg import PostgresStore, Resource, Worker\n"
            f"store = PostgresStore.connect(os.environ['GOLEMQ_DSN'], schema={doc_schema!r})\n"
            "w = Worker(store, resources={'p': Resource(concurrency=1, rate_per_minute=10,"
            " types=['doc.echo'])})\n"
            "w.handler('doc.echo', serialize_by_scope=True)(lambda job: job.progress(1.0))\n"
            "w.run_until_empty(timeout=60)\n"
            "store.close()\n"
        )
        ran = subprocess.run([sys.executable, "-c", worker], env=env, capture_output=True,
                             text=True, timeout=120, check=False)
        assert ran.returncode == 0, ran.stderr
        with psycopg.connect(pg_dsn) as conn:
            row = conn.execute(
                sql.SQL("SELECT count(*) FROM {}.jobs_all WHERE status = 'succeeded'").format(
                    sql.Identifier(doc_schema)
                )
            ).fetchone()
        assert row == (1,)
        # ... and cannot change the schema.
        ddl = subprocess.run([*cli_cmd, "migrate"], env=env, capture_output=True, text=True,
                             timeout=60, check=False)
        assert ddl.returncode == 1
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                sql.Identifier(doc_schema)))
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_web_dashboard_mount_example_serves_under_its_prefix(
    pg_dsn: str, doc_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import base64  # noqa: PLC0415

    from tests.support.web_client import Dashboard  # noqa: PLC0415

    (code,) = _blocks((GUIDES / "dashboard.md").read_text(), "python")
    code = code.replace('connect(os.environ["GOLEMQ_DSN"])',
                        f'connect(os.environ["GOLEMQ_DSN"], schema={doc_schema!r})')
    assert doc_schema in code
    monkeypatch.setenv("GOLEMQ_DSN", pg_dsn)
    namespace: dict[str, object] = {"__name__": "readme_web_example"}
    exec(compile(code, "docs/guides/dashboard.md", "exec"), namespace)  # noqa: S102 - our docs
    try:
        client = Dashboard(namespace["api"])
        assert client.get("/queue/healthz").status_code == 200
        assert client.get("/queue/").status_code == 401
        auth = {"authorization": "Basic " + base64.b64encode(b"ops:s3cret").decode()}
        namespace["store"].migrate()  # type: ignore[attr-defined]
        page = client.get("/queue/", headers=auth)
        assert page.status_code == 200
        assert "orders queue" in page.text
        assert 'href="/queue/jobs"' in page.text
    finally:
        namespace["store"].close()  # type: ignore[attr-defined]


def test_tracing_example_runs_and_links_its_spans(pg_dsn: str, doc_schema: str) -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: PLC0415
        InMemorySpanExporter,
    )

    from golemq_pg import tracing  # noqa: PLC0415

    (code,) = _blocks(_section((GUIDES / "observability.md").read_text(), "Tracing"), "python")
    code = code.replace('"postgresql://app@db/app", schema="golemq"',
                        f'{pg_dsn!r}, schema={doc_schema!r}')
    assert doc_schema in code
    assert code.count("ConsoleSpanExporter()") == 1
    exporter = InMemorySpanExporter()
    namespace: dict[str, object] = {"__name__": "readme_tracing",
                                    "_exporter": exporter}
    try:
        exec(compile(code.replace("ConsoleSpanExporter()", "_exporter"),  # noqa: S102 - our docs
                     "docs/guides/observability.md", "exec"),
             namespace)
    finally:
        tracing.uninstrument()
    spans = {span.name: span for span in exporter.get_finished_spans()}
    assert set(spans) == {"POST /checkout", "send receipt.render", "process receipt.render",
                          "render pdf"}
    request, send = spans["POST /checkout"], spans["send receipt.render"]
    process, render = spans["process receipt.render"], spans["render pdf"]
    assert send.parent is not None
    assert send.parent.span_id == request.context.span_id
    assert [link.context.span_id for link in process.links] == [send.context.span_id]
    assert render.parent is not None
    assert render.parent.span_id == process.context.span_id


def test_the_reliability_index_is_current_and_every_cited_test_exists() -> None:
    done = subprocess.run([sys.executable, "docs/reindex.py", "--check"], cwd=ROOT,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_the_keepalive_example_runs(pg_dsn: str) -> None:
    (code,) = _blocks(_section(DEPLOYMENT, "Network faults (keepalives)"), "python")
    assert '"postgresql://app@db/app"' in code
    code = code.replace('"postgresql://app@db/app"', repr(pg_dsn))
    code = code.replace("store.close()", "")
    namespace: dict[str, object] = {"__name__": "readme_example"}
    exec(compile(code, "docs/DEPLOYMENT.md", "exec"), namespace)  # noqa: S102 - our docs
    store = namespace["store"]
    try:
        with store.pool.connection() as conn:  # type: ignore[attr-defined]
            row = conn.execute("SHOW tcp_user_timeout").fetchone()
        # The server end of a TCP session is bounded; on a Unix socket it reads 0.
        assert row is not None
        assert row[0] in ("5000", "5s", "0")
    finally:
        store.close()  # type: ignore[attr-defined]
