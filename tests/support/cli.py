"""Running the real `golemq-pg` command in a subprocess, and checking a clean failure."""

from __future__ import annotations

import os
import subprocess
import sys

#: A secret the CLI tests put in payloads: it must never reach stderr.
CANARY = "CANARY-s3cr3t-7f1c"


def run_cli(
    *args: str, dsn: str | None, stdin: str | None = None, env: dict[str, str] | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """Run `python -m golemq_pg.cli ARGS` and capture its output."""
    environment = {k: v for k, v in os.environ.items() if k not in ("GOLEMQ_DEBUG",)}
    if dsn is not None:
        environment["GOLEMQ_DSN"] = dsn
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "golemq_pg.cli", *args], input=stdin, capture_output=True,
        text=True, env=environment, timeout=timeout, check=False,
    )


def assert_clean_failure(result: subprocess.CompletedProcess[str], code: int) -> None:
    """One line on stderr, the expected exit code, nothing on stdout, no traceback/canary."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert result.stdout == ""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("golemq-pg: error: "), result.stderr
    assert "Traceback" not in result.stderr
    assert CANARY not in result.stderr
