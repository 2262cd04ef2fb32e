"""Connection-string helpers: where a DSN points, and conninfo quoting."""

from __future__ import annotations

from typing import Any

from psycopg.conninfo import conninfo_to_dict


def quote_value(value: str) -> str:
    """``value`` as a conninfo ``key=value`` value (quoted unless plainly safe)."""
    if value and all(c.isalnum() or c in "._-/" for c in value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def dsn_host_port(dsn: str) -> dict[str, Any]:
    """The DSN's fields (URL or conninfo form), parsed by libpq's own parser: a URI's
    ``?host=/socket/dir`` (the embedded server) counts too."""
    return dict(conninfo_to_dict(dsn))
