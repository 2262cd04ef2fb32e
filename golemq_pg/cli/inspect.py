"""The ``golemq-pg`` commands that inspect the queue and tidy it in bulk: ``stats``,
``failed``, ``retry-failed``, ``prune``, ``workers`` and ``show ID``.

No command here prints a payload, except ``show ID --payload``, which asks for one; what
they print is built in ``views``.
"""

from __future__ import annotations

import json
import signal
import threading
from datetime import UTC, datetime
from typing import Any

import click

from golemq_pg._errortext import error_text
from golemq_pg._types import JobStatus
from golemq_pg.cli.base import DURATION, CliError, db_options, job_id_argument, open_store
from golemq_pg.cli.views import (
    console,
    job_detail,
    paused_json,
    paused_lines,
    render_job,
    render_workers,
    short_time,
    table,
    worker_row,
)


def collect_stats(store: Any) -> dict[str, Any]:
    """Totals, per-type counts and the oldest due age, as plain JSON-ready data."""
    totals = dict(store.job_stats())
    by_type = {str(k): dict(v) for k, v in store.job_stats_by_type().items()}
    oldest = store.job_oldest_due_age()
    return {
        "paused": paused_json(store.type_paused()),
        "totals": totals,
        "due_backlog": int(totals.get("pending", 0)),
        "oldest_due_age_seconds": None if oldest is None else float(oldest),
        "by_type": by_type,
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


_COLUMNS = ("pending", "scheduled", "waiting", "running", "succeeded", "failed")


def render_stats(data: dict[str, Any]) -> Any:
    """A rich renderable of :func:`collect_stats` output."""
    from rich.console import Group  # noqa: PLC0415
    from rich.text import Text  # noqa: PLC0415

    # Text: a type name is shown as written, never read as markup.
    cells = [[Text(name), *(str(counts.get(c, 0)) for c in _COLUMNS)]
             for name, counts in sorted(data["by_type"].items())]
    cells.append([Text("all", style="bold"), *(str(data["totals"].get(c, 0)) for c in _COLUMNS)])
    made = table(f"golemq-pg jobs at {data['at']}", ("type", *_COLUMNS), cells, right=_COLUMNS,
                 keep=_COLUMNS)
    oldest = data["oldest_due_age_seconds"]
    lines: list[Any] = [f"due backlog: {data['due_backlog']}",
             "oldest due job: " + ("-" if oldest is None else f"{oldest:.1f}s ago")]
    lines += paused_lines(data.get("paused", {}))
    return Group(made, *lines)


@click.command()
@db_options
@click.option("--watch", is_flag=True, help="Refresh until interrupted.")
@click.option("--interval", type=DURATION, default=2.0, show_default=True,
              help="Refresh period with --watch.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def stats(watch: bool, interval: float, as_json: bool) -> None:
    """Counts by status and by type, the due backlog and the oldest due job's age."""
    ctx = click.get_current_context()
    if watch and as_json:
        raise click.UsageError("--watch and --json do not combine")
    if not watch and (
        ctx.get_parameter_source("interval") is not click.core.ParameterSource.DEFAULT
    ):
        raise click.UsageError("--interval needs --watch (it is the refresh period)")
    with open_store(ctx) as store:
        if as_json:
            click.echo(json.dumps(collect_stats(store), sort_keys=True))
            return
        out = console()
        if not watch:
            out.print(render_stats(collect_stats(store)))
            return
        from rich.live import Live  # noqa: PLC0415

        stop = threading.Event()
        # Ctrl-C ends the loop between two refreshes instead of raising KeyboardInterrupt
        # wherever the main thread is: inside a pool checkout or a query, it could leave the
        # pool waiting on closing for a connection never given back (seen: no exit at all).
        previous = signal.signal(signal.SIGINT, lambda _signum, _frame: stop.set())
        try:
            with Live(render_stats(collect_stats(store)), console=out,
                      auto_refresh=False) as live:
                while not stop.wait(max(interval, 0.2)):
                    live.update(render_stats(collect_stats(store)), refresh=True)
        finally:
            signal.signal(signal.SIGINT, previous)


@click.command()
@db_options
@click.option("--type", "job_type", default=None, help="Only this job type.")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines instead of a table.")
def failed(job_type: str | None, limit: int, as_json: bool) -> None:
    """List dead letters (FAILED jobs), newest first."""
    ctx = click.get_current_context()
    from golemq_pg.queue import Queue  # noqa: PLC0415 - imported when the command runs

    with open_store(ctx) as store:
        try:
            jobs = Queue(store).find(types=[job_type] if job_type else None,
                                     statuses=[JobStatus.FAILED], limit=limit)
        except ValueError as exc:
            raise click.UsageError(error_text(exc)) from None
        paused = paused_json(store.type_paused())
    rows = [{"id": j.id, "type": j.type, "attempts": j.attempts, "last_error": j.last_error,
             "finished_at": j.finished_at.isoformat() if j.finished_at else None} for j in jobs]
    if as_json:
        for row in rows:
            click.echo(json.dumps(row))
        return
    from rich.text import Text  # noqa: PLC0415

    cells = [
        [str(row["id"]), Text(str(row["type"])), str(row["attempts"]),
         short_time(row["finished_at"] if isinstance(row["finished_at"], str) else None),
         Text(str(row["last_error"] or ""))]
        for row in rows
    ]
    made = table(f"dead letters ({len(rows)} shown)",
                 ("id", "type", "attempts", "finished", "last_error"), cells,
                 right=("attempts",), keep=("id", "attempts", "finished"))
    out = console()
    out.print(made)
    for line in paused_lines(paused):
        out.print(line)


@click.command("retry-failed")
@db_options
@click.option("--type", "job_type", default=None, help="Only this job type.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Default: all.")
def retry_failed(job_type: str | None, limit: int | None) -> None:
    """Move dead letters back to PENDING with attempts reset."""
    ctx = click.get_current_context()
    from golemq_pg.queue import Queue  # noqa: PLC0415 - imported when the command runs

    with open_store(ctx) as store:
        try:
            count = Queue(store).retry_failed(types=[job_type] if job_type else None,
                                              limit=limit)
        except ValueError as exc:
            raise click.UsageError(error_text(exc)) from None
    click.echo(f"{count} job(s) moved back to pending")


@click.command()
@db_options
@click.option("--older-than", type=DURATION, required=True,
              help="Age of finished_at: 30s, 15m, 12h, 7d, 2w.")
@click.option("--status", "statuses", multiple=True,
              type=click.Choice(["succeeded", "failed"], case_sensitive=False),
              help="Repeatable, any case; default both.")
def prune(older_than: float, statuses: tuple[str, ...]) -> None:
    """Delete finished jobs (succeeded and failed by default) older than a duration."""
    ctx = click.get_current_context()
    from golemq_pg.queue import Queue  # noqa: PLC0415 - imported when the command runs

    chosen = [JobStatus(s) for s in statuses] or [JobStatus.SUCCEEDED, JobStatus.FAILED]
    with open_store(ctx) as store:
        count = Queue(store).prune(older_than=older_than, statuses=chosen)
    click.echo(f"{count} job(s) pruned")


@click.command("workers")
@db_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines instead of a table.")
def workers(as_json: bool) -> None:
    """List registered workers: id, host, pid, state (running, stopping, lost), running
    jobs, handlers and how long ago each was last seen."""
    ctx = click.get_current_context()
    from golemq_pg.queue import Queue  # noqa: PLC0415 - imported when the command runs

    with open_store(ctx) as store:
        found = Queue(store).workers()
        now = store.now()
    rows = [worker_row(w, now) for w in found]
    if as_json:
        for row in rows:
            click.echo(json.dumps(row, sort_keys=True))
        return
    console().print(render_workers(rows))


@click.command("show")
@db_options
@click.argument("job_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--payload", "with_payload", is_flag=True,
              help="Also print the job's payload (never shown without this flag).")
def show(job_id: str, as_json: bool, with_payload: bool) -> None:
    """One job: its summary, attempt history and result (the payload only with --payload)."""
    ctx = click.get_current_context()
    from golemq_pg.queue import Queue  # noqa: PLC0415 - imported when the command runs

    job_id = job_id_argument(job_id)
    with open_store(ctx) as store:
        job = Queue(store).get(job_id)
        payload_text = store.job_payload(job_id) if job is not None and with_payload else None
    if job is None:
        raise CliError(f"job {job_id} not found")
    payload = None if payload_text is None else json.loads(payload_text)
    detail = job_detail(job, payload, with_payload=with_payload)
    if as_json:
        click.echo(json.dumps(detail, sort_keys=True))
        return
    console().print(render_job(detail))
