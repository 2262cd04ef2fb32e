"""``golemq-pg enqueue TYPE JSON``: add one job and print its id."""

from __future__ import annotations

import click

from golemq_pg._errortext import error_text
from golemq_pg.cli.base import DURATION, SCOPE, CliError, db_options, open_store, parse_payload


@click.command()
@db_options
@click.argument("job_type", metavar="TYPE")
@click.argument("payload_json", metavar="JSON")
@click.option("--scope", type=SCOPE, default=None, help="Scope as TYPE:ID.")
@click.option("--delay", type=DURATION, default=None, help="Run after this long (5, 30s, 2h).")
@click.option("--dedupe-key", default=None, help="Reject (or replace) while one is live.")
@click.option("--on-duplicate", type=click.Choice(["reject", "replace"]), default="reject",
              show_default=True)
@click.option("--priority", type=int, default=0, show_default=True, help="Higher runs first.")
@click.option("--max-attempts", type=click.IntRange(min=1), default=None)
def enqueue(
    job_type: str, payload_json: str, scope: tuple[str, str] | None, delay: float | None,
    dedupe_key: str | None, on_duplicate: str, priority: int, max_attempts: int | None,
) -> None:
    """Enqueue one job; prints its id. JSON is an object, or - to read it from stdin."""
    ctx = click.get_current_context()
    payload = parse_payload(payload_json)
    from golemq_pg.queue import Queue  # noqa: PLC0415 - imported when the command runs

    with open_store(ctx) as store:
        try:
            job_id = Queue(store).add(
                job_type, payload, scope=scope, delay=delay, dedupe_key=dedupe_key,
                on_duplicate="replace" if on_duplicate == "replace" else "reject",
                priority=priority, max_attempts=max_attempts,
            )
        except ValueError as exc:  # QueuePayloadError included: names the category only
            raise click.UsageError(error_text(exc)) from None
    if job_id is None:
        raise CliError(f"not enqueued: a {job_type!r} job with this dedupe key is already "
                       "pending or running")
    click.echo(job_id)
