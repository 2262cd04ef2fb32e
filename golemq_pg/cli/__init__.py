"""The ``golemq-pg`` command line: migrate, inspect, enqueue, control, run workers, demo, bench.

This module only builds the command group and registers the commands, one module per group
of commands: ``schema`` (migrate, sql), ``enqueue``, ``inspect`` (stats, failed,
retry-failed, prune, workers, show), ``jobs``, ``workflow``, ``control`` (retry, run-now,
cancel, delete, pause, resume), ``web``, ``worker``, ``demo``, ``harness`` (bench) and
``embedded``. What they share (the connection options, opening a store, exit codes,
:class:`~golemq_pg.cli.base.CliError`, the option types) is in ``base``, which each of them
imports.

Every command takes ``--dsn`` (else ``$GOLEMQ_DSN``, else the embedded PostgreSQL),
``--schema`` and ``--no-prepare``, before or after its name, or refuses one it cannot
honour (exit 2, saying why: ``base.db_options(refuse=...)``); none is silently ignored. Bad
input gets one line on stderr and exit code 2; a runtime failure (the database is
unreachable, the schema is not migrated) gets one line and exit code 1. No command prints a
payload (except ``show ID --payload``, which asks for one) or a traceback (set
``GOLEMQ_DEBUG=1`` to see tracebacks). ``--help`` imports no database driver and connects
to nothing.
"""

from __future__ import annotations

import os

import click

from golemq_pg._errortext import error_text
from golemq_pg.cli import (
    control,
    demo,
    embedded,
    enqueue,
    harness,
    inspect,
    jobs,
    schema,
    web,
    worker,
    workflow,
)
from golemq_pg.cli.base import (
    EXIT_RUNTIME,
    EXIT_USAGE,
    check_global_options,
    db_options,
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@db_options
@click.version_option(package_name="golemq-pg", prog_name="golemq-pg")
def cli() -> None:
    """golemq-pg: a durable job queue on PostgreSQL."""
    ctx = click.get_current_context()
    if ctx.invoked_subcommand is not None:
        check_global_options(ctx, cli.get_command(ctx, ctx.invoked_subcommand))
    # Logging is set up when a command first needs the database (base.resolve_dsn), not
    # here: `golemq-pg CMD --help` must not import structlog (nor rich, which it loads).


for _command in (
    schema.migrate, schema.sql,
    enqueue.enqueue,
    inspect.stats, inspect.failed, inspect.retry_failed, inspect.prune, inspect.workers,
    inspect.show, jobs.jobs, workflow.workflow,
    control.retry, control.run_now, control.cancel, control.delete, control.pause,
    control.resume,
    web.web,
    worker.worker,
    demo.demo,
    harness.bench,
    embedded.embedded,
):
    cli.add_command(_command)


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: run the command, map failures to one line + exit code."""
    try:
        result = cli.main(args=argv, prog_name="golemq-pg", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:
        click.echo(exc.ctx.get_help() if exc.ctx else str(exc), err=True)
        return EXIT_USAGE
    except click.UsageError as exc:
        click.echo(f"golemq-pg: error: {exc.format_message()}", err=True)
        return EXIT_USAGE
    except click.ClickException as exc:
        click.echo(f"golemq-pg: error: {exc.format_message()}", err=True)
        return exc.exit_code
    except click.Abort:
        click.echo("golemq-pg: interrupted", err=True)
        return 130
    except Exception as exc:
        if os.environ.get("GOLEMQ_DEBUG"):
            raise
        click.echo(f"golemq-pg: error: {type(exc).__name__}: {error_text(exc)}", err=True)
        return EXIT_RUNTIME
    return result if isinstance(result, int) else 0


__all__ = ["cli", "main"]
