"""Regenerate the "Index of cited tests" of docs/RELIABILITY.md from its citations.

Run from the repository root: ``python docs/reindex.py`` rewrites the index (every
``path::function`` cited above it, once, sorted); ``--check`` only says whether it is current
and whether every cited test exists, and exits 1 if not. Standard library only.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "RELIABILITY.md"
HEADING = "## Index of cited tests"
CITATION = re.compile(r"\b(tests/[\w/]+\.py)::(\w+)")


def cited(text: str) -> list[str]:
    """Every ``path::function`` in ``text``, once each, sorted."""
    return sorted({f"{path}::{name}" for path, name in CITATION.findall(text)})


def missing(citations: list[str]) -> list[str]:
    """The citations whose file or ``def function`` does not exist."""
    gone = []
    for item in citations:
        path, name = item.split("::")
        file = ROOT / path
        if not file.exists() or not re.search(rf"^\s*def {name}\(", file.read_text(), re.M):
            gone.append(item)
    return gone


def render(text: str) -> str:
    """``text`` with its index block rebuilt from the citations above it."""
    head, sep, _ = text.partition(HEADING)
    if not sep:
        raise SystemExit(f"{DOC} has no '{HEADING}' section")
    body = "\n".join(cited(head))
    return (f"{head}{HEADING}\n\nEvery test this document cites, one per line, as "
            f"`path::function`.\n\n```text\n{body}\n```\n")


def main(argv: list[str]) -> int:
    """Rewrite the index (or, with ``--check``, report whether it is current)."""
    text = DOC.read_text(encoding="utf-8")
    new = render(text)
    gone = missing(cited(text.partition(HEADING)[0]))
    for item in gone:
        print(f"cited but not found: {item}", file=sys.stderr)
    if "--check" in argv:
        if new != text:
            print("the index is out of date: run python docs/reindex.py", file=sys.stderr)
        return 1 if gone or new != text else 0
    DOC.write_text(new, encoding="utf-8")
    return 1 if gone else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
