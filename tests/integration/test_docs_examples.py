"""Every code block of README.md and docs/**/*.md runs against a real PostgreSQL, or says why
not (the convention: tests/support/doc_blocks.py): a page's blocks in page order, on a fresh
database migrated first, that the placeholder DSN and ``$GOLEMQ_DSN`` point at. Python
blocks share one namespace; each SQL block runs in a transaction rolled back afterwards;
each shell block runs in bash and must exit 0."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from golemq_pg import PostgresStore, tracing
from tests.support.doc_blocks import (
    PLACEHOLDER_DSN,
    ROOT,
    SHELL_LANGUAGES,
    Block,
    doc_pages,
    problems,
    runnable,
    setup_code,
    setup_sql,
)

PAGES = [p for p in doc_pages() if runnable(p.read_text(encoding="utf-8"))]
BIN = str(Path(sys.executable).parent)


@pytest.fixture
def docs_database(pg_dsn: str) -> Iterator[str]:
    """A fresh database for one page (the examples use the default schema ``golemq``, as a
    reader's would); dropped afterwards with any connection an example left open."""
    name = "golemq_docs_" + uuid.uuid4().hex[:10]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield psycopg.conninfo.make_conninfo(pg_dsn, dbname=name)
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))


@pytest.mark.timeout(180)
@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_pages_code_blocks_run(page: Path, docs_database: str,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    text = page.read_text(encoding="utf-8")
    assert problems(text) == []  # never run a shell block the convention refuses
    with PostgresStore.connect(docs_database) as store:
        store.migrate()
    monkeypatch.setenv("GOLEMQ_DSN", docs_database)
    namespace: dict[str, object] = {"__name__": "docs_example"}
    name = str(page.relative_to(ROOT))
    setup = setup_code(text).replace(PLACEHOLDER_DSN, docs_database)
    exec(compile(setup, f"{name} (docs-setup)", "exec"), namespace)  # noqa: S102 - our docs
    try:
        for block in runnable(text):
            code = block.code.replace(PLACEHOLDER_DSN, docs_database)
            if block.lang == "python":
                # Line numbers in a traceback are the page's own.
                code = "\n" * block.line + code
                exec(compile(code, name, "exec"), namespace)  # noqa: S102 - our docs
            elif block.lang == "sql":
                _run_sql(docs_database, setup_sql(text), code, f"{name}:{block.line}")
            else:
                assert block.lang in SHELL_LANGUAGES
                _run_shell(docs_database, code, f"{name}:{block.line}", block)
    finally:
        for value in list(namespace.values()):
            if isinstance(value, PostgresStore):
                value.close()
        tracing.uninstrument()  # a page that instruments leaves the process as it found it


def _run_sql(dsn: str, setup: str, code: str, where: str) -> None:
    """The block after the page's SQL setup, in one transaction, rolled back: roles it
    creates and grants it gives stay out of the cluster."""
    with psycopg.connect(dsn) as conn:
        conn.execute("SET LOCAL lock_timeout = '10s'")
        if setup.strip():
            conn.execute(setup.encode())
        try:
            conn.execute(code.encode())
        except psycopg.Error as error:
            pytest.fail(f"{where}: {type(error).__name__}: {error}")
        finally:
            conn.rollback()


def _run_shell(dsn: str, code: str, where: str, block: Block) -> None:
    env = {k: v for k, v in os.environ.items() if k != "GOLEMQ_DEBUG"}
    env.update(GOLEMQ_DSN=dsn, DSN=dsn, PATH=BIN + os.pathsep + env.get("PATH", ""))
    done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", code], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, (
        f"{where}: the {block.lang} block exited {done.returncode}\n"
        f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}")
