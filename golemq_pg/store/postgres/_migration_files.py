"""Reading the migration files (``sql/migrations/NNNN_name.sql``): their numbers, names,
text, and how each is applied (in one transaction, or statement by statement outside one:
:data:`NO_TRANSACTION_MARKER`). A file the migrator would apply wrongly is refused when it is
read, before anything is applied. Applying them is ``_migrations``'s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib.resources.abc import Traversable

from golemq_pg.store.postgres._sql import SqlStatement, split_statements, sql_dir

_FILE_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")

#: The line that marks a migration applied outside a transaction (in the file's leading
#: comment block).
NO_TRANSACTION_MARKER = "-- golemq: no-transaction"

_CONCURRENTLY = re.compile(r"\bCONCURRENTLY\b", re.IGNORECASE)
_TRANSACTION_CONTROL = re.compile(
    r"^(BEGIN|START\s+TRANSACTION|COMMIT|END|ROLLBACK|ABORT)\b", re.IGNORECASE)
_CREATE_INDEX_CONCURRENTLY = re.compile(
    r"^CREATE\s+(?:UNIQUE\s+)?INDEX\s+CONCURRENTLY\b", re.IGNORECASE)
_INDEX_CONCURRENTLY = re.compile(
    r"^(?:CREATE\s+(?:UNIQUE\s+)?INDEX|DROP\s+INDEX|REINDEX\s+(?:\([^)]*\)\s*)?\w+)"
    r"\s+CONCURRENTLY\b",
    re.IGNORECASE,
)
_NAMED_IF_NOT_EXISTS = re.compile(
    r"^CREATE\s+(?:UNIQUE\s+)?INDEX\s+CONCURRENTLY\s+IF\s+NOT\s+EXISTS\s+"
    r"(?P<name>\"(?:[^\"]|\"\")+\"|[A-Za-z_][A-Za-z0-9_$]*)\s+ON\b",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class Migration:
    """One migration file: its number, its name (file stem), its SQL text, and whether it is
    applied in one transaction (``False``: the file is marked ``-- golemq: no-transaction``)."""

    version: int
    name: str
    text: str
    transactional: bool = True

    def statements(self) -> list[SqlStatement]:
        """The file's statements, as they are sent one by one outside a transaction."""
        return split_statements(self.text)


def parse_migration(file_name: str, text: str) -> Migration | None:
    """The migration a file named ``file_name`` holds (None: not a ``NNNN_name.sql`` file).

    ``RuntimeError`` for a file the migrator would apply wrongly: the no-transaction marker
    below the leading comment block, a transaction command (the migrator owns transactions),
    ``CONCURRENTLY`` in a file applied in a transaction, or a ``CREATE INDEX CONCURRENTLY``
    that a second run could not recognise (it must say ``IF NOT EXISTS`` and name the index).
    """
    match = _FILE_RE.match(file_name)
    if match is None:
        return None
    name = file_name.removesuffix(".sql")
    header: list[str] = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("--"):
            break
        header.append(line.strip())
    transactional = NO_TRANSACTION_MARKER not in header
    marked = [line for line in text.splitlines() if line.strip() == NO_TRANSACTION_MARKER]
    if len(marked) > (0 if transactional else 1):
        raise RuntimeError(f"{name}: {NO_TRANSACTION_MARKER!r} must be a line of the comment "
                           "block at the top of the file, once")
    try:
        statements = split_statements(text)
    except ValueError as exc:
        raise RuntimeError(f"{name}: {exc}") from None
    for statement in statements:
        _check_statement(name, statement.code, transactional=transactional)
    return Migration(int(match.group(1)), name, text, transactional)


def _check_statement(name: str, code: str, *, transactional: bool) -> None:
    if _TRANSACTION_CONTROL.match(code):
        raise RuntimeError(f"{name}: {code.split(maxsplit=1)[0]} in a migration: the migrator "
                           "begins and commits its transactions")
    if transactional and _CONCURRENTLY.search(code):
        raise RuntimeError(f"{name}: CONCURRENTLY cannot run in a transaction: put "
                           f"{NO_TRANSACTION_MARKER!r} at the top of the file")
    if _CREATE_INDEX_CONCURRENTLY.match(code) and not _NAMED_IF_NOT_EXISTS.match(code):
        raise RuntimeError(f"{name}: write CREATE INDEX CONCURRENTLY IF NOT EXISTS <name> ON "
                           "...: a retry, or a run after a failed one, must recognise the "
                           "index it built")


def created_index(statement: SqlStatement) -> str | None:
    """The name of the index a ``CREATE INDEX CONCURRENTLY IF NOT EXISTS`` builds, else None."""
    match = _NAMED_IF_NOT_EXISTS.match(statement.code)
    if match is None:
        return None
    found = match.group("name")
    if found.startswith('"'):
        return found[1:-1].replace('""', '"')
    return found.lower()


def index_concurrently(statement: SqlStatement) -> bool:
    """Whether ``statement`` creates, drops or rebuilds an index CONCURRENTLY."""
    return _INDEX_CONCURRENTLY.match(statement.code) is not None


def load_migrations(folder: Traversable) -> tuple[Migration, ...]:
    """Every migration file in ``folder``, in version order (tests give a folder of their
    own; :func:`migrations` is the package's)."""
    found = [
        migration
        for entry in folder.iterdir()
        if (migration := parse_migration(entry.name, entry.read_text(encoding="utf-8")))
    ]
    found.sort(key=lambda item: item.version)
    versions = [item.version for item in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError("two migration files share a version number")
    return tuple(found)


@cache
def migrations() -> tuple[Migration, ...]:
    """Every migration shipped in ``sql/migrations``, in version order."""
    return load_migrations(sql_dir().joinpath("migrations"))
