"""Every runnable ```python block of README.md and docs/**/*.md runs against a real
PostgreSQL (the convention: tests/support/doc_blocks.py): a page's blocks in order, in one
namespace, on a fresh database the placeholder DSN and ``$GOLEMQ_DSN`` point at."""

from __future__ import annotations

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
    doc_pages,
    runnable_python,
    setup_code,
)

PAGES = [p for p in doc_pages() if runnable_python(p.read_text(encoding="utf-8"))]


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
def test_the_pages_python_blocks_run(page: Path, docs_database: str,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    text = page.read_text(encoding="utf-8")
    monkeypatch.setenv("GOLEMQ_DSN", docs_database)
    namespace: dict[str, object] = {"__name__": "docs_example"}
    name = str(page.relative_to(ROOT))
    setup = setup_code(text).replace(PLACEHOLDER_DSN, docs_database)
    exec(compile(setup, f"{name} (docs-setup)", "exec"), namespace)  # noqa: S102 - our docs
    try:
        for block in runnable_python(text):
            code = block.code.replace(PLACEHOLDER_DSN, docs_database)
            # Line numbers in a traceback are the page's own.
            code = "\n" * block.line + code
            exec(compile(code, name, "exec"), namespace)  # noqa: S102 - our docs
    finally:
        for value in list(namespace.values()):
            if isinstance(value, PostgresStore):
                value.close()
        tracing.uninstrument()  # a page that instruments leaves the process as it found it
