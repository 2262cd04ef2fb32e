"""What the figures were measured on: cores, memory, PostgreSQL, Python, package versions."""

from __future__ import annotations

import datetime as dt
import os
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

import psycopg

PACKAGES = ("golemq-pg", "pgqueuer", "procrastinate", "chancy", "psycopg", "asyncpg", "psutil",
            "uvloop")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_mb() -> int | None:
    try:
        import psutil  # noqa: PLC0415 - optional: only the bench extra installs it
    except ImportError:
        return None
    return int(psutil.virtual_memory().total / 2**20)


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _server(dsn: str) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT current_setting('server_version'), version(),"
            " current_setting('shared_buffers'), current_setting('synchronous_commit')"
        ).fetchall()[0]
    return {"postgres_version": row[0], "postgres_build": row[1],
            "shared_buffers": row[2], "synchronous_commit": row[3]}


def machine_info(dsn: str) -> dict[str, Any]:
    """A JSON-safe description of the machine, the server and the software measured."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_mb": _memory_mb(),
        "load_average_at_start": list(load) if load else None,
        "python": platform.python_version(),
        **_server(dsn),
        "packages": {name: _version(name) for name in PACKAGES},
    }


def machine_busy_seconds() -> float:
    """CPU seconds every core of this host has spent busy since boot (``/proc/stat``: all but
    idle and iowait); 0.0 where there is no such file."""
    try:
        fields = Path("/proc/stat").read_text(encoding="utf-8").split("\n", 1)[0].split()[1:]
    except OSError:
        return 0.0
    ticks = [int(f) for f in fields[:8]]
    busy = sum(ticks) - ticks[3] - ticks[4]  # user nice system idle iowait irq softirq steal
    return busy / os.sysconf("SC_CLK_TCK")
