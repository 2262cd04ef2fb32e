"""The fenced code blocks of the documentation (README.md and docs/**/*.md), for the tests
that run them.

The convention every page follows (docs/development.md says it to the reader):

* Every fenced block names its language. Code is ``python``, ``sql``, ``sh`` or ``bash``;
  ``text`` (plain text that is not code: a diagram, a DSN, a list) and ``console-output``
  (what a command printed) are output listings, with nothing to run. A block without a
  language, or with another one, fails the check.
* Every code block is run, unless it is directly preceded by
  ``<!-- not-runnable: REASON -->`` (blank lines between are allowed); the reason is required.
* A page's code blocks run in page order on one fresh database, migrated (schema ``golemq``)
  before the first block:

  * ``python`` blocks run in one namespace, so a page's later blocks use what its earlier
    ones defined;
  * each ``sql`` block runs in a transaction that is rolled back afterwards (it may run DDL
    or create roles without leaving them behind), after the page's hidden SQL setup if any;
  * each ``sh``/``bash`` block runs in bash (``-e -o pipefail``) with ``$GOLEMQ_DSN`` and
    ``$DSN`` set to the database, and must exit 0. Such a block may hold only ``golemq-pg``
    and ``python -m`` commands (one a line, ``\\`` continues a line, ``#`` comments; pipes,
    ``&&`` and ``;`` join commands of those two kinds only); anything else (installing
    packages, servers, psql, docker) is marked not runnable, and so is a command that serves
    until it is stopped or runs for minutes (``golemq-pg worker``, ``web``, ``demo``,
    ``bench``, ``--watch``).

* A page may hold one hidden Python setup, ``<!-- docs-setup`` then Python lines then
  ``-->``, run before its first block (stand-ins for the application's own functions the
  examples call, jobs a command shows), and one hidden SQL setup, ``<!-- docs-setup-sql``
  then SQL then ``-->``, run in each ``sql`` block's transaction before the block (roles the
  page's grants name).
* The examples connect to the placeholder DSN ``postgresql://app@db/app`` (or read
  ``$GOLEMQ_DSN``); the test points both at the fresh database.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLACEHOLDER_DSN = "postgresql://app@db/app"

#: Languages of code, which the docs test runs (unless marked not runnable).
CODE_LANGUAGES = frozenset({"python", "sql", "sh", "bash"})
#: Languages of output listings and plain text: nothing to run.
OUTPUT_LANGUAGES = frozenset({"text", "console-output"})
SHELL_LANGUAGES = frozenset({"sh", "bash"})

_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,})(?P<info>[^`]*)$")
_NOT_RUNNABLE = re.compile(r"^\s*<!--\s*not-runnable:(?P<reason>.*?)-->\s*$")
_SETUP = re.compile(r"<!--\s*docs-setup\n(?P<code>.*?)-->", re.DOTALL)
_SETUP_SQL = re.compile(r"<!--\s*docs-setup-sql\n(?P<code>.*?)-->", re.DOTALL)
_SEPARATORS = frozenset({"|", "&&", "||", ";"})
# Commands that serve until they are stopped (or run for minutes): never in a run block.
_NEVER_ENDS = frozenset({"worker", "web", "demo", "bench", "--watch"})


@dataclass(frozen=True)
class Block:
    """One fenced block: its language (empty when the fence names none), its code
    (indentation removed), the line of its fence (1-based) and, when it is marked not
    runnable, the marker's reason (maybe empty)."""

    lang: str
    code: str
    line: int
    not_runnable: str | None

    @property
    def runs(self) -> bool:
        """Whether the docs test runs this block: code, not marked not runnable."""
        return self.lang in CODE_LANGUAGES and self.not_runnable is None


def doc_pages() -> list[Path]:
    """README.md and every Markdown page under docs/, sorted."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(text: str) -> list[Block]:
    """Every fenced block of ``text``, in order (an unclosed last block runs to the end)."""
    lines = text.split("\n")
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _OPEN.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence = opening.group("indent"), opening.group("fence")
        info = opening.group("info").strip()
        lang = info.split()[0] if info else ""
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines) and not _closes(lines[i], fence):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        found.append(Block(lang, "\n".join(body) + "\n", start + 1, _marker(lines, start)))
        i += 1
    return found


def _closes(line: str, fence: str) -> bool:
    stripped = line.strip()
    return stripped.startswith(fence) and not stripped.strip("`")


def _marker(lines: list[str], fence: int) -> str | None:
    j = fence - 1
    while j >= 0 and not lines[j].strip():
        j -= 1
    if j < 0:
        return None
    match = _NOT_RUNNABLE.match(lines[j])
    return None if match is None else match.group("reason").strip()


def setup_code(text: str) -> str:
    """The page's hidden Python setup (empty when it has none)."""
    return _one(_SETUP, text, "docs-setup")


def setup_sql(text: str) -> str:
    """The page's hidden SQL setup (empty when it has none)."""
    return _one(_SETUP_SQL, text, "docs-setup-sql")


def _one(pattern: re.Pattern[str], text: str, name: str) -> str:
    found = pattern.findall(text)
    if len(found) > 1:
        raise ValueError(f"a page holds at most one {name} comment")
    return found[0] if found else ""


def runnable_python(text: str) -> list[Block]:
    """The page's ``python`` blocks that are not marked not runnable, in order."""
    return [b for b in blocks(text) if b.lang == "python" and b.runs]


def runnable(text: str) -> list[Block]:
    """Every block of the page the docs test runs, in page order."""
    return [b for b in blocks(text) if b.runs]


def shell_commands(code: str) -> list[list[str]]:
    """The simple commands of a shell block, each as its words (``\\`` continuations
    joined, comments dropped, split at ``|``, ``&&``, ``||`` and ``;``)."""
    joined = re.sub(r"\\\n", " ", code)
    commands: list[list[str]] = []
    for line in joined.split("\n"):
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        current: list[str] = []
        for token in lexer:
            if token in _SEPARATORS:
                commands.append(current)
                current = []
            else:
                current.append(token)
        if current:
            commands.append(current)
    return commands


def _runnable_shell_command(words: list[str]) -> bool:
    if any(set(w) <= set("();<>&|") for w in words):  # subshells, redirections, background
        return False
    if any("$(" in w or "`" in w for w in words):
        return False
    if words[:1] == ["golemq-pg"]:
        return not (_NEVER_ENDS & set(words))
    return words[:2] == ["python", "-m"] and len(words) > 2


def problems(text: str) -> list[str]:
    """What breaks the convention on a page, one message per block at fault (empty when the
    page follows it)."""
    found: list[str] = []
    for block in blocks(text):
        where = f"line {block.line}"
        if not block.lang:
            found.append(f"{where}: a fenced block without a language (python, sql, sh, bash "
                         "for code; text or console-output for output)")
        elif block.lang not in CODE_LANGUAGES | OUTPUT_LANGUAGES:
            found.append(f"{where}: the checker does not know the language {block.lang!r}")
        elif block.not_runnable == "":
            found.append(f"{where}: not-runnable without a reason")
        elif block.not_runnable is not None and block.lang in OUTPUT_LANGUAGES:
            found.append(f"{where}: a {block.lang} block is output, never run: drop its "
                         "not-runnable marker")
        elif block.runs and block.lang in SHELL_LANGUAGES:
            try:
                commands = shell_commands(block.code)
            except ValueError as error:  # an unbalanced quote
                found.append(f"{where}: the shell block does not parse ({error})")
                continue
            bad = [" ".join(words) for words in commands if not _runnable_shell_command(words)]
            if bad:
                found.append(f"{where}: a runnable shell block holds only golemq-pg and "
                             f"python -m commands that end by themselves; mark it "
                             f"not-runnable with a reason (it runs {bad[0]!r})")
    try:
        setup_code(text)
        setup_sql(text)
    except ValueError as error:
        found.append(str(error))
    return found
