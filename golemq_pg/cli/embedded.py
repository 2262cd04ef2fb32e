"""``golemq-pg embedded status|stop``: the embedded PostgreSQL the other commands fall back
to when no ``--dsn`` / ``$GOLEMQ_DSN`` is given."""

from __future__ import annotations

import os
from pathlib import Path

import click

from golemq_pg import _embedded
from golemq_pg._errortext import error_text
from golemq_pg.cli.base import GLOBAL_OPTIONS, CliError, db_options, quiet_platformdirs


@click.command()
@db_options(refuse=dict.fromkeys(
    GLOBAL_OPTIONS, "it manages the embedded PostgreSQL, whatever DSN or schema is chosen"
))
@click.argument("action", type=click.Choice(["status", "stop"]))
def embedded(action: str) -> None:
    """Show or stop the embedded PostgreSQL (used when no --dsn / $GOLEMQ_DSN is set)."""
    directory = _embedded.data_dir()
    pid = _embedded_pid(directory)
    if action == "status":
        if pid is None:
            click.echo(f"embedded PostgreSQL: not running (data directory {directory})")
        else:
            click.echo(f"embedded PostgreSQL: running, pid {pid}, data directory {directory}")
            dsn = _embedded.running_dsn(directory)
            if dsn is not None:
                click.echo(f"connect with: {dsn}")
                click.echo(f"  e.g. psql '{dsn}'  or  GOLEMQ_DSN='{dsn}' golemq-pg stats")
        return
    if pid is None:
        click.echo(f"embedded PostgreSQL: not running (data directory {directory})")
        return
    try:
        with quiet_platformdirs():
            _embedded.stop_server(directory)
    except Exception as exc:  # noqa: BLE001 - CLI boundary: one line, not a traceback
        raise CliError(f"could not stop the embedded PostgreSQL: {error_text(exc)}") from None
    click.echo(f"embedded PostgreSQL stopped (data kept in {directory})")


def _embedded_pid(directory: Path) -> int | None:
    """The postmaster pid when the embedded server in ``directory`` is alive."""
    try:
        first = (directory / "postmaster.pid").read_text().split("\n", 1)[0]
        pid = int(first.strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid
