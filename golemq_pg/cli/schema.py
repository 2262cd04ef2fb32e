"""``golemq-pg migrate`` (apply the migrations) and ``golemq-pg sql`` (print them, for psql)."""

from __future__ import annotations

import click

from golemq_pg.cli.base import (
    DEFAULT_SCHEMA,
    DURATION,
    CliError,
    db_options,
    open_store,
    settings,
)
from golemq_pg.errors import MigrationLockTimeout


@click.command()
@db_options
@click.option(
    "--lock-timeout", type=DURATION, default="1s", show_default=True,
    help="How long each migration step waits for a lock on the queue's tables (0: no "
         "limit). A step waiting for a lock makes every enqueue and claim that needs the "
         "table wait behind it, so it gives up early and tries again.",
)
@click.option(
    "--lock-retries", type=click.IntRange(0, 1000), default=10, show_default=True,
    help="How many times a step refused its lock is tried again (after 0.5 s, doubling up "
         "to 10 s) before the command fails naming the migration.",
)
def migrate(lock_timeout: float, lock_retries: int) -> None:
    """Apply sql/migrations to the schema (idempotent)."""
    ctx = click.get_current_context()
    schema = settings(ctx).schema or DEFAULT_SCHEMA
    with open_store(ctx) as store:
        try:
            applied = store.migrate(lock_timeout=lock_timeout, lock_retries=lock_retries)
        except MigrationLockTimeout as exc:
            raise CliError(str(exc)) from None
    for name in applied or ():
        click.echo(f"applied {name}")
    click.echo(f"schema {schema!r} is up to date")


@click.command("sql")
@db_options(refuse={
    "--dsn": "it connects to nothing, it prints the SQL (golemq-pg sql | psql \"$DSN\")",
    "--no-prepare": "it connects to nothing, it prints the SQL",
})
def sql() -> None:
    """Print the migration SQL for psql (golemq-pg sql | psql "$DSN")."""
    ctx = click.get_current_context()
    schema = settings(ctx).schema or DEFAULT_SCHEMA
    from golemq_pg.store.postgres import migration_script  # noqa: PLC0415

    script = migration_script(schema)
    click.echo(script, nl=not script.endswith("\n"))
