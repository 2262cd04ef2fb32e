"""The documentation's code blocks follow the convention of tests/support/doc_blocks.py:
every block names a language the checker knows, a block left out of the run says why, and
the parser finds what the runner runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.doc_blocks import (
    ROOT,
    blocks,
    doc_pages,
    problems,
    runnable,
    runnable_python,
    setup_code,
    setup_sql,
    shell_commands,
)

SAMPLE = '''# Page

<!-- docs-setup
def load(x): return x
-->

<!-- docs-setup-sql
CREATE ROLE app_runtime NOLOGIN;
-->

```python
a = 1
```

<!-- not-runnable: blocks forever -->

```python
worker.run()
```

* a list item:

  ```python
  b = a + 1
  ```

```bash
golemq-pg stats
```

```text
pending  3
```

```sql
GRANT USAGE ON SCHEMA golemq TO app_runtime;
```
'''


def test_the_parser_finds_blocks_markers_indented_blocks_and_the_setups() -> None:
    found = blocks(SAMPLE)
    assert [(b.lang, b.code, b.not_runnable) for b in found] == [
        ("python", "a = 1\n", None),
        ("python", "worker.run()\n", "blocks forever"),
        ("python", "b = a + 1\n", None),
        ("bash", "golemq-pg stats\n", None),
        ("text", "pending  3\n", None),
        ("sql", "GRANT USAGE ON SCHEMA golemq TO app_runtime;\n", None),
    ]
    assert [b.code for b in runnable_python(SAMPLE)] == ["a = 1\n", "b = a + 1\n"]
    assert [b.lang for b in runnable(SAMPLE)] == ["python", "python", "bash", "sql"]
    assert setup_code(SAMPLE) == "def load(x): return x\n"
    assert setup_sql(SAMPLE) == "CREATE ROLE app_runtime NOLOGIN;\n"
    assert problems(SAMPLE) == []


def test_a_marker_without_a_reason_is_read_as_empty_and_refused() -> None:
    text = "<!-- not-runnable: -->\n```python\nx = 1\n```\n"
    (block,) = blocks(text)
    assert block.not_runnable == ""
    assert problems(text) == ["line 2: not-runnable without a reason"]


def test_an_unlabeled_block_is_found_with_its_closing_fence_and_refused() -> None:
    text = "```\nA -> B\n```\n\n```python\nx = 1\n```\n"
    assert [(b.lang, b.code) for b in blocks(text)] == [("", "A -> B\n"), ("python", "x = 1\n")]
    (problem,) = problems(text)
    assert problem.startswith("line 1: a fenced block without a language")


def test_a_language_the_checker_does_not_know_is_refused() -> None:
    (problem,) = problems("```yaml\na: 1\n```\n")
    assert problem == "line 1: the checker does not know the language 'yaml'"


def test_an_output_block_carries_no_marker() -> None:
    (problem,) = problems("<!-- not-runnable: output -->\n```console-output\nok\n```\n")
    assert "output, never run" in problem


@pytest.mark.parametrize("code", [
    "pip install -e .\n",
    "golemq-pg sql | psql \"$DSN\"\n",
    "golemq-pg stats && rm -rf build\n",
    "golemq-pg stats > out.txt\n",
    "golemq-pg show $(cat id)\n",
    "golemq-pg worker myapp.jobs:worker\n",
    "golemq-pg stats --watch\n",
    "docker compose up -d\n",
    "GOLEMQ_WEB_USER=ops golemq-pg web\n",
    "python -m\n",
])
def test_a_shell_block_with_other_commands_must_be_marked(code: str) -> None:
    text = f"```sh\n{code}```\n"
    (problem,) = problems(text)
    assert "mark it not-runnable with a reason" in problem
    assert problems(f"<!-- not-runnable: a reason -->\n{text}") == []


def test_a_shell_block_of_golemq_pg_and_python_m_commands_runs() -> None:
    code = ("# a comment\n"
            "golemq-pg enqueue email.send '{\"to\": \"a@example.com\"}' \\\n"
            "  --delay 30s     # what it does\n"
            "golemq-pg stats --json | python -m json.tool\n"
            "python -m golemq_pg.cli migrate; golemq-pg workers\n")
    assert shell_commands(code) == [
        ["golemq-pg", "enqueue", "email.send", '{"to": "a@example.com"}', "--delay", "30s"],
        ["golemq-pg", "stats", "--json"],
        ["python", "-m", "json.tool"],
        ["python", "-m", "golemq_pg.cli", "migrate"],
        ["golemq-pg", "workers"],
    ]
    assert problems(f"```bash\n{code}```\n") == []


@pytest.mark.parametrize("page", doc_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_block_of_the_page_is_run_or_says_why_not(page: Path) -> None:
    """A block without a language, with one the checker does not know, or a shell block the
    runner refuses fails here until it is labeled or marked not runnable with a reason."""
    assert problems(page.read_text(encoding="utf-8")) == []


def test_the_docs_have_python_blocks_to_run() -> None:
    total = sum(len(runnable_python(p.read_text(encoding="utf-8"))) for p in doc_pages())
    assert total >= 20


def test_the_queue_reference_documents_every_queue_method() -> None:
    """docs/reference/queue.md names each method's plan by hand (mkdocstrings cannot see
    through ``QueueMethod``): a method added to QueueMethods must get its entry."""
    from golemq_pg.queue.core import QueueMethod  # noqa: PLC0415
    from golemq_pg.queue.methods import QueueMethods  # noqa: PLC0415

    page = (ROOT / "docs" / "reference" / "queue.md").read_text(encoding="utf-8")
    methods = [name for name, value in vars(QueueMethods).items()
               if isinstance(value, QueueMethod)]
    missing = [name for name in ["add", "add_many", *methods]
               if f'heading: "Queue.{name}"' not in page]
    assert missing == []
