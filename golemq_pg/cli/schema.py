"""``golemq-pg migrate`` (apply the migrations) and ``golemq-pg sql`` (print them, for psql)."""

from __future__ import annotations

import click

from golemq_pg.cli.base import DEFAULT_SCHEMA, db_options, open_store, settings


@click.command()
@db_options
def migrate() -> None:
    """Apply sql/migrations to the schema (idempotent)."""
    ctx = click.get_current_context()
    schema = settings(ctx).schema or DEFAULT_SCHEMA
    with open_store(ctx) as store:
        applied = store.migrate()
    for name in applied or ():
        click.echo(f"applied {name}")
    click.echo(f"schema {schema!r} is up to date")


@click.command("sql")
@db_options
def sql() -> None:
    """Print the migration SQL for psql (golemq-pg sql | psql "$DSN")."""
    ctx = click.get_current_context()
    schema = settings(ctx).schema or DEFAULT_SCHEMA
    from golemq_pg.store.postgres import migration_script  # noqa: PLC0415

    script = migration_script(schema)
    click.echo(script, nl=not script.endswith("\n"))
