"""Loading the SQL that ships in ``sql/``: named queries and numbered migrations.

Statements live in ``sql/queries/*.sql`` as named blocks (``-- name: job_claim``), written
against ``{schema}.table``. They are read once per process and composed once per store with
``psycopg.sql`` (the schema only ever enters through :class:`psycopg.sql.Identifier`).
Blocks named ``fragment_*`` are shared pieces: every statement may reference them as
``{fragment_name}``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, LiteralString, cast

from psycopg import sql

_NAME_RE = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_FRAGMENT_PREFIX = "fragment_"
# Blocks named template_* take identifiers other than the schema (e.g. a channel); they are
# composed where used, never rendered with the schema's statements.
_TEMPLATE_PREFIX = "template_"


def sql_dir() -> Traversable:
    """The ``sql/`` directory of the code that is running: ``golemq_pg/sql`` beside the package
    (a wheel), else the checkout's ``sql/`` (a source tree), else the package data
    ``golemq_pg.sql`` as importlib finds it.

    The files beside this module come first because an editable install maps ``golemq_pg.sql``
    to the checkout it was installed from: a second checkout run with ``PYTHONPATH`` (a git
    worktree) would otherwise run its own Python against the other checkout's statements and
    migrations.
    """
    here = Path(__file__).resolve()
    for candidate in (here.parents[2] / "sql", here.parents[3] / "sql"):
        if (candidate / "migrations").is_dir() and (candidate / "queries").is_dir():
            return candidate
    try:
        root = resources.files("golemq_pg.sql")
        if root.joinpath("migrations").is_dir():
            return root
    except ModuleNotFoundError:  # pragma: no cover - depends on how the package is installed
        pass
    return here.parents[3] / "sql"  # pragma: no cover - the error then names this path


def trusted_sql(text: str) -> sql.SQL:
    """Wrap SQL text read from our own ``sql/`` files as a ``psycopg.sql.SQL`` template.

    This is the single place where file text becomes SQL. The cast to ``LiteralString`` is
    sound because the text comes only from the files shipped with the package, never from a
    caller; variable identifiers are merged later with ``sql.Identifier`` and values are
    always passed as parameters. (mypy treats LiteralString as plain str, hence the ignore;
    the cast is for checkers that enforce LiteralString, such as pyright.)
    """
    return sql.SQL(cast(LiteralString, text))  # type: ignore[redundant-cast]


def parse_named(text: str, origin: str) -> dict[str, str]:
    """Split one queries file into ``{name: statement}``; text before the first name is a header."""
    found: dict[str, str] = {}
    matches = list(_NAME_RE.finditer(text))
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
        body = text[match.end() : end].strip()
        name = match.group(1)
        if name in found:
            raise RuntimeError(f"duplicate query name {name!r} in {origin}")
        if not body:
            raise RuntimeError(f"empty query {name!r} in {origin}")
        found[name] = body
    return found


@cache
def query_texts() -> dict[str, str]:
    """Every named statement of ``sql/queries/*.sql``, read once per process."""
    texts: dict[str, str] = {}
    folder = sql_dir().joinpath("queries")
    for entry in sorted(folder.iterdir(), key=lambda item: item.name):
        if not entry.name.endswith(".sql"):
            continue
        for name, body in parse_named(entry.read_text(encoding="utf-8"), entry.name).items():
            if name in texts:
                raise RuntimeError(f"query name {name!r} defined twice (in {entry.name})")
            texts[name] = body
    return texts


def _resolve_fragments(bodies: dict[str, str], ident: sql.Identifier) -> dict[str, sql.Composable]:
    """Compose fragments, which may use other fragments, in dependency order."""
    done: dict[str, sql.Composable] = {}
    pending = dict(bodies)
    while pending:
        progressed = False
        for name, body in list(pending.items()):
            try:
                done[name] = trusted_sql(body).format(schema=ident, **done)
            except KeyError:
                continue  # uses a fragment not composed yet
            del pending[name]
            progressed = True
        if not progressed:
            raise RuntimeError(f"unresolvable SQL fragments: {sorted(pending)}")
    return done


_NAMED_PARAM = re.compile(rb"%\((\w+)\)s")


@dataclass(frozen=True, slots=True)
class RawStatement:
    """A statement with PostgreSQL's own ``$n`` placeholders, for :class:`psycopg.RawCursor`.

    psycopg rewrites ``%(name)s`` placeholders on every execution and caches the rewrite
    only for statements up to 4 KB; the guarded claims are about 20 KB, so the rewrite
    (0.1-0.2 ms) was paid on each claim. This one is rewritten once, at load.
    """

    text: bytes
    names: tuple[str, ...]

    @classmethod
    def convert(cls, query: bytes) -> RawStatement:
        """``query`` with each distinct ``%(name)s`` numbered in order of first use."""
        names: list[str] = []

        def number(match: re.Match[bytes]) -> bytes:
            name = match.group(1).decode()
            if name not in names:
                names.append(name)
            return b"$%d" % (names.index(name) + 1)

        return cls(_NAMED_PARAM.sub(number, query).replace(b"%%", b"%"), tuple(names))

    def args(self, params: Mapping[str, Any]) -> list[Any]:
        """The values of ``params`` in placeholder order."""
        return [params[name] for name in self.names]


class Queries:
    """The named statements composed for one schema, rendered once to bytes.

    Rendering up front keeps the hot path free of composition work and gives psycopg a
    stable query key, so its automatic prepared statements kick in for repeated verbs.
    """

    __slots__ = ("_raw", "_rendered", "schema")

    def __init__(self, schema: str) -> None:
        self.schema = schema
        ident = sql.Identifier(schema)
        texts = query_texts()
        fragments = _resolve_fragments(
            {name: body for name, body in texts.items() if name.startswith(_FRAGMENT_PREFIX)},
            ident,
        )
        self._rendered: dict[str, bytes] = {
            name: trusted_sql(body).format(schema=ident, **fragments).as_bytes(None)
            for name, body in texts.items()
            if not name.startswith((_FRAGMENT_PREFIX, _TEMPLATE_PREFIX))
        }
        self._raw: dict[str, RawStatement] = {}

    def __getitem__(self, name: str) -> bytes:
        return self._rendered[name]

    def raw(self, name: str) -> RawStatement:
        """Statement ``name`` with ``$n`` placeholders (converted once, then cached)."""
        found = self._raw.get(name)
        if found is None:
            found = self._raw[name] = RawStatement.convert(self._rendered[name])
        return found

    def names(self) -> list[str]:
        """The statement names available (fragments and templates excluded)."""
        return sorted(self._rendered)


def listen_statement(channel: str) -> sql.Composed:
    """``LISTEN`` on ``channel`` (``template_listen``: LISTEN takes no parameters, so the
    channel goes in as an identifier). Sent without its comment lines, so that the
    connection's query in ``pg_stat_activity`` starts with ``LISTEN``."""
    body = query_texts()["template_listen"]
    text = "\n".join(line for line in body.splitlines() if not line.lstrip().startswith("--"))
    return trusted_sql(text.strip()).format(channel=sql.Identifier(channel))


# -- splitting a file into statements (migrations applied outside a transaction) ------------


@dataclass(frozen=True, slots=True)
class SqlStatement:
    """One statement of a SQL file: ``text`` as written (its comments included, no final
    semicolon), and ``code``: the same without comments and with the contents of string
    and dollar-quoted literals left out, for looking at what the statement does."""

    text: str
    code: str


_DOLLAR_TAG = re.compile(r"\$(?:[A-Za-z_][A-Za-z0-9_]*)?\$")
_IDENT_CHAR = re.compile(r"[A-Za-z0-9_$]")


def _skip(text: str, pos: int) -> int | None:
    """The index just past the comment, literal or quoted identifier that opens at ``pos``;
    None when none does."""
    char = text[pos]
    if text.startswith("--", pos):
        end = text.find("\n", pos)
        return len(text) if end < 0 else end
    if text.startswith("/*", pos):
        return _block_comment_end(text, pos)
    if char == "$":
        # $1 or a name with a $ in it opens nothing.
        tag = None if pos and _IDENT_CHAR.match(text[pos - 1]) else _DOLLAR_TAG.match(text, pos)
        if tag is None:
            return None
        end = text.find(tag.group(), tag.end())
        if end < 0:
            raise ValueError(f"unterminated dollar quote {tag.group()}")
        return end + len(tag.group())
    if char not in "'\"":
        return None
    # 'string' (E'...' takes backslash escapes) or "identifier"; a doubled quote is one.
    escapes = char == "'" and pos > 0 and text[pos - 1] in "eE" and (
        pos < 2 or not _IDENT_CHAR.match(text[pos - 2]))
    at = pos + 1
    while at < len(text):
        if (escapes and text[at] == "\\") or text.startswith(char * 2, at):
            at += 2
        elif text[at] == char:
            return at + 1
        else:
            at += 1
    raise ValueError(f"unterminated {char} quote")


def _block_comment_end(text: str, pos: int) -> int:
    depth, at = 0, pos
    while at < len(text):
        if text.startswith("/*", at):
            depth, at = depth + 1, at + 2
        elif text.startswith("*/", at):
            depth, at = depth - 1, at + 2
            if depth == 0:
                return at
        else:
            at += 1
    raise ValueError("unterminated /* comment")


def split_statements(text: str) -> list[SqlStatement]:
    """The statements of ``text``, split at the semicolons outside comments, literals and
    quoted identifiers (dollar quotes, nested block comments and E'' escapes included), as
    psql splits a file; a part holding only comments or blanks is no statement.
    ``ValueError`` names an unterminated comment or quote."""
    found: list[SqlStatement] = []
    start, pos = 0, 0
    code: list[str] = []
    while pos < len(text):
        char = text[pos]
        end = _skip(text, pos)
        if end is not None:
            if char == '"':
                code.append(text[pos:end])
            elif char in "'$":
                code.append("''")  # what a literal says is not what the statement does
            else:
                code.append(" ")  # a comment separates tokens
            pos = end
            continue
        if char == ";":
            _keep(found, text[start:pos], "".join(code))
            start, code = pos + 1, []
        else:
            code.append(char)
        pos += 1
    _keep(found, text[start:], "".join(code))
    return found


def _keep(found: list[SqlStatement], text: str, code: str) -> None:
    if code.strip():
        found.append(SqlStatement(text=text.strip(), code=" ".join(code.split())))


_cache: dict[str, Queries] = {}


def queries_for(schema: str) -> Queries:
    """The composed statements for ``schema`` (cached: stores on one schema share them)."""
    found = _cache.get(schema)
    if found is None:
        found = _cache[schema] = Queries(schema)
    return found
