"""``golemq-pg enqueue TYPE JSON``: add one job and print its id.

The job takes the options of ``Queue.add``: scope, delay or run time, dedupe key, priority,
attempt budget and tags. Every option is checked before anything is written (bad input: one
line, exit 2). A type no live worker handles is still enqueued, with a warning on stderr:
the job waits until a worker for it starts (``golemq-pg workers`` lists them).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import click

from golemq_pg._errortext import error_text
from golemq_pg._types import UNLIMITED, Unlimited
from golemq_pg.cli.base import (
    DURATION,
    SCOPE,
    CliError,
    announce,
    db_options,
    open_store,
    parse_payload,
)


class AwareTimestamp(click.ParamType[datetime]):
    """An ISO 8601 date and time with its UTC offset (``2026-05-01T09:00:00+02:00``, or
    ``...Z``); a time without an offset would be read in some unknown zone: refused."""

    name = "ISO-8601"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> datetime:
        """Parse ``value``, refusing text that is not ISO 8601 or has no UTC offset."""
        if isinstance(value, datetime):
            parsed = value
        else:
            text = str(value).strip()
            try:
                parsed = datetime.fromisoformat(text)
            except ValueError:
                self.fail(f"{text!r} is not an ISO 8601 date and time "
                          "(e.g. 2026-05-01T09:00:00+02:00)", param, ctx)
        if parsed.tzinfo is None or parsed.utcoffset() is None:
            self.fail("needs a UTC offset (e.g. 2026-05-01T09:00:00+02:00 or ...Z): "
                      "a time without one is ambiguous", param, ctx)
        return parsed


class MaxAttempts(click.ParamType[int]):
    """A positive attempt budget (at most 2**31-1, checked by the Queue), or ``unlimited``."""

    name = "N|unlimited"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> Any:
        """A positive int, or :data:`~golemq_pg.UNLIMITED` for ``unlimited``."""
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            text = str(value).strip()
            if text.lower() == "unlimited":
                return UNLIMITED
            try:
                number = int(text)
            except ValueError:
                self.fail(f"{text!r} is not a positive integer", param, ctx)
        if number < 1:
            self.fail("must be at least 1", param, ctx)
        return number


def split_tags(values: tuple[str, ...]) -> list[str] | None:
    """``--tags a,b --tags c`` -> ``["a", "b", "c"]`` (None: no tags given); the Queue checks
    each tag."""
    tags = [tag.strip() for value in values for tag in value.split(",")]
    if not values:
        return None
    if any(not tag for tag in tags):
        raise click.UsageError("--tags: empty tag (give tags as a,b,c)")
    return tags


@click.command()
@db_options
@click.argument("job_type", metavar="TYPE")
@click.argument("payload_json", metavar="JSON")
@click.option("--scope", type=SCOPE, default=None, help="Scope as TYPE:ID.")
@click.option("--delay", type=DURATION, default=None, help="Run after this long (5, 30s, 2h).")
@click.option("--run-at", type=AwareTimestamp(), default=None,
              help="Run at this time, ISO 8601 with its offset (2026-05-01T09:00:00+02:00).")
@click.option("--dedupe-key", default=None, help="Reject (or replace) while one is live.")
@click.option("--on-duplicate", type=click.Choice(["reject", "replace"]), default="reject",
              show_default=True)
@click.option("--priority", type=int, default=0, show_default=True, help="Higher runs first.")
@click.option("--max-attempts", type=MaxAttempts(), default=None,
              help="Attempt budget, or `unlimited` (default: the queue's, 3).")
@click.option("--tags", "tag_values", multiple=True, metavar="A,B",
              help="Labels for `jobs --tag` (comma-separated or repeated; at most 16).")
def enqueue(
    job_type: str, payload_json: str, scope: tuple[str, str] | None, delay: float | None,
    run_at: datetime | None, dedupe_key: str | None, on_duplicate: str, priority: int,
    max_attempts: int | Unlimited | None, tag_values: tuple[str, ...],
) -> None:
    """Enqueue one job; prints its id. JSON is an object, or - to read it from stdin."""
    ctx = click.get_current_context()
    if run_at is not None and delay is not None:
        raise click.UsageError("give --run-at or --delay, not both")
    tags = split_tags(tag_values)
    payload = parse_payload(payload_json)
    from golemq_pg.queue import Queue  # noqa: PLC0415 - imported when the command runs

    with open_store(ctx) as store:
        queue = Queue(store)
        try:
            job_id = queue.add(
                job_type, payload, scope=scope, delay=delay, run_at=run_at,
                dedupe_key=dedupe_key,
                on_duplicate="replace" if on_duplicate == "replace" else "reject",
                priority=priority, max_attempts=max_attempts, tags=tags,
            )
        except ValueError as exc:  # QueuePayloadError included: names the category only
            raise click.UsageError(error_text(exc)) from None
        handled = any(
            job_type in worker.handlers for worker in queue.workers() if worker.state != "lost"
        )
    if job_id is None:
        raise CliError(f"not enqueued: a {job_type!r} job with this dedupe key is already "
                       "pending or running")
    if not handled:
        announce(f"warning: no live worker handles {job_type!r}: the job waits until one "
                 "that does starts (see `golemq-pg workers`)")
    click.echo(job_id)
