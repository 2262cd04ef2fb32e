"""The documentation's code blocks follow the convention of tests/support/doc_blocks.py:
a block left out of the run says why, and the parser finds what the runner runs."""

from __future__ import annotations

import pytest

from tests.support.doc_blocks import ROOT, blocks, doc_pages, runnable_python, setup_code

SAMPLE = '''# Page

<!-- docs-setup
def load(x): return x
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
'''


def test_the_parser_finds_blocks_markers_indented_blocks_and_the_setup() -> None:
    found = blocks(SAMPLE)
    assert [(b.lang, b.code, b.not_runnable) for b in found] == [
        ("python", "a = 1\n", None),
        ("python", "worker.run()\n", "blocks forever"),
        ("python", "b = a + 1\n", None),
        ("bash", "golemq-pg stats\n", None),
    ]
    assert [b.code for b in runnable_python(SAMPLE)] == ["a = 1\n", "b = a + 1\n"]
    assert setup_code(SAMPLE) == "def load(x): return x\n"


def test_a_marker_without_a_reason_is_read_as_empty() -> None:
    (block,) = blocks("<!-- not-runnable: -->\n```python\nx = 1\n```\n")
    assert block.not_runnable == ""


@pytest.mark.parametrize("page", doc_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_not_runnable_block_gives_a_reason(page: object) -> None:
    text = page.read_text(encoding="utf-8")  # type: ignore[attr-defined]
    unexplained = [b.line for b in blocks(text) if b.not_runnable == ""]
    assert unexplained == [], f"not-runnable without a reason at lines {unexplained}"
    setup_code(text)  # at most one hidden setup


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
