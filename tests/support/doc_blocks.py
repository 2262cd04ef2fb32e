"""The fenced code blocks of the documentation (README.md and docs/**/*.md), for the tests
that run them.

The convention every page follows:

* Each fenced ```` ```python ```` block is run; the blocks of one page run in order, in one
  namespace, so a page's later blocks use what its earlier ones defined.
* A block directly preceded by ``<!-- not-runnable: REASON -->`` (blank lines between are
  allowed) is not run; the reason is required.
* A page may hold one hidden setup, ``<!-- docs-setup`` then Python lines then ``-->``, run
  before its first block (stand-ins for the application's own functions the examples call).
* The examples connect to the placeholder DSN ``postgresql://app@db/app`` (or read
  ``$GOLEMQ_DSN``); the test points both at a fresh database.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLACEHOLDER_DSN = "postgresql://app@db/app"

_FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)\s*$")
_NOT_RUNNABLE = re.compile(r"^\s*<!--\s*not-runnable:(?P<reason>.*?)-->\s*$")
_SETUP = re.compile(r"<!--\s*docs-setup\n(?P<code>.*?)-->", re.DOTALL)


@dataclass(frozen=True)
class Block:
    """One fenced block: its language, its code (indentation removed), the line of its fence
    (1-based) and, when it is marked not runnable, the marker's reason (maybe empty)."""

    lang: str
    code: str
    line: int
    not_runnable: str | None


def doc_pages() -> list[Path]:
    """README.md and every Markdown page under docs/, sorted."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(text: str) -> list[Block]:
    """Every fenced block of ``text``, in order."""
    lines = text.split("\n")
    found: list[Block] = []
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if fence is None or not fence.group("lang"):
            i += 1
            continue
        indent = fence.group("indent")
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        found.append(Block(fence.group("lang"), "\n".join(body) + "\n", start + 1,
                           _marker(lines, start)))
        i += 1
    return found


def _marker(lines: list[str], fence: int) -> str | None:
    j = fence - 1
    while j >= 0 and not lines[j].strip():
        j -= 1
    if j < 0:
        return None
    match = _NOT_RUNNABLE.match(lines[j])
    return None if match is None else match.group("reason").strip()


def setup_code(text: str) -> str:
    """The page's hidden setup (empty when it has none)."""
    found = _SETUP.findall(text)
    if len(found) > 1:
        raise ValueError("a page holds at most one docs-setup comment")
    return found[0] if found else ""


def runnable_python(text: str) -> list[Block]:
    """The page's ``python`` blocks that are not marked not runnable, in order."""
    return [b for b in blocks(text) if b.lang == "python" and b.not_runnable is None]
