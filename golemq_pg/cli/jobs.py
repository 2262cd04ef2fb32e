"""``golemq-pg jobs``: list jobs by type, status, scope and tag, newest first, as a table
or (``--json``) one JSON object per line, the shape ``failed --json`` prints plus the
fields every job has. No payload is printed.

``--status`` takes the buckets ``stats`` counts: ``pending`` (due now), ``scheduled``
(pending with a future run time: scheduled or in retry backoff), ``running``,
``succeeded``, ``failed``; ``waiting`` only once the queue has that status. The store keeps
pending jobs in one status, so telling due from scheduled apart is done here, by run time
against the database's clock, over the newest :data:`SCAN_LIMIT` pending jobs at most.
"""

from __future__ import annotations

import json
from typing import Any

import click

from golemq_pg._errortext import error_text
from golemq_pg._types import JobStatus, JobSummary
from golemq_pg.cli.base import SCOPE, announce, db_options, open_store
from golemq_pg.cli.views import budget_text, console, short_time, table

#: The statuses ``--status`` accepts.
STATUS_CHOICES = ("pending", "scheduled", "waiting", "running", "succeeded", "failed")
#: At most this many pending jobs are read to split due ones from scheduled ones.
SCAN_LIMIT = 10_000
_PAGE = 500


def job_row(job: JobSummary) -> dict[str, Any]:
    """One job as ``jobs --json`` prints it: ``failed --json``'s keys first (id, type,
    attempts, last_error, finished_at), then status, scope, priority, tags and times."""
    return {
        "id": job.id,
        "type": job.type,
        "attempts": job.attempts,
        "last_error": job.last_error,
        "finished_at": None if job.finished_at is None else job.finished_at.isoformat(),
        "status": job.status.value,
        "scope": None if job.scope is None else f"{job.scope.type}:{job.scope.id}",
        "priority": job.priority,
        "max_attempts": job.max_attempts,
        "tags": list(job.tags),
        "run_at": job.run_at.isoformat(),
        "created_at": job.created_at.isoformat(),
    }


def _statuses(chosen: tuple[str, ...]) -> tuple[list[JobStatus] | None, set[str]]:
    """The store statuses to ask for, and the pending buckets wanted ({"pending",
    "scheduled"} both: no split)."""
    wanted = {c.lower() for c in chosen}
    if not wanted:
        return None, {"pending", "scheduled"}
    statuses = [JobStatus(s) for s in sorted(wanted - {"pending", "scheduled"})]
    buckets = wanted & {"pending", "scheduled"}
    if buckets:
        statuses.append(JobStatus.PENDING)
    return statuses, buckets


@click.command("jobs")
@db_options
@click.option("--type", "job_types", multiple=True, metavar="T",
              help="Only this job type (repeatable).")
@click.option("--status", "statuses", multiple=True,
              type=click.Choice(STATUS_CHOICES, case_sensitive=False),
              help="Only this status (repeatable, any case). pending: due now; scheduled: "
                   "pending with a future run time.")
@click.option("--scope", type=SCOPE, default=None, help="Only jobs of this scope (TYPE:ID).")
@click.option("--tag", "tags", multiple=True, metavar="X",
              help="Only jobs carrying this tag (repeatable: every one).")
@click.option("--limit", type=click.IntRange(min=1, max=10_000), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object per line (as failed --json) instead of a table.")
def jobs(job_types: tuple[str, ...], statuses: tuple[str, ...],
         scope: tuple[str, str] | None, tags: tuple[str, ...], limit: int,
         as_json: bool) -> None:
    """List jobs, newest first, by type, status, scope and tag (no payloads)."""
    ctx = click.get_current_context()
    store_statuses, buckets = _statuses(statuses)
    from golemq_pg.queue import Queue  # noqa: PLC0415 - imported when the command runs

    with open_store(ctx) as store:
        queue = Queue(store)

        def page(skip: int, size: int) -> list[JobSummary]:
            try:
                found: list[JobSummary] = queue.find(
                    types=list(job_types) or None, statuses=store_statuses,
                    scope_type=None if scope is None else scope[0],
                    scope_id=None if scope is None else scope[1],
                    tags=list(tags) or None, limit=size, skip=skip)
            except ValueError as exc:
                raise click.UsageError(error_text(exc)) from None
            return found

        if len(buckets) != 1:  # no split of the pending jobs: one read
            found = page(0, limit)
        else:
            found = _split_pending(page, store.now(), buckets.pop(), limit)
    rows = [job_row(job) for job in found]
    if as_json:
        for row in rows:
            click.echo(json.dumps(row))
        return
    _print_table(rows)


def _split_pending(page: Any, now: Any, bucket: str, limit: int) -> list[JobSummary]:
    """Up to ``limit`` jobs, newest first, of the pages ``page(skip, size)`` returns, keeping
    pending jobs of one bucket only (``pending``: due at ``now``; ``scheduled``: later)."""
    kept: list[JobSummary] = []
    skip = 0
    while len(kept) < limit:
        batch = page(skip, _PAGE)
        for job in batch:
            if job.status is JobStatus.PENDING and (job.run_at > now) != (bucket == "scheduled"):
                continue
            kept.append(job)
        skip += len(batch)
        if len(batch) < _PAGE:
            break
        if skip >= SCAN_LIMIT:
            announce(f"looked at the newest {SCAN_LIMIT} matching jobs only "
                     "(narrow with --type, --scope or --tag)")
            break
    return kept[:limit]


def _print_table(rows: list[dict[str, Any]]) -> None:
    from rich.text import Text  # noqa: PLC0415

    cells = [
        [row["id"], Text(row["type"]), row["status"],
         f"{row['attempts']}/{budget_text(row['max_attempts'])}",
         short_time(row["run_at"]), Text(row["last_error"] or "")]
        for row in rows
    ]
    console().print(table(f"jobs ({len(rows)} shown, newest first)",
                          ("id", "type", "status", "attempts", "run_at", "last_error"), cells,
                          right=("attempts",), keep=("id", "status", "attempts", "run_at")))
