"""``golemq-pg workflow ID [--json]``: one workflow (``Queue.workflow``): its name, status and
times, then a table of its jobs with their parents; ``--json`` prints it as one object.

No payload is printed. An unknown id is a runtime failure (exit 1), a malformed one bad
input (exit 2, before any connection).
"""

from __future__ import annotations

import json
from typing import Any

import click

from golemq_pg._types import WorkflowSummary
from golemq_pg._validation import check_job_id
from golemq_pg.cli.base import CliError, db_options, open_store


def _iso(value: Any) -> str | None:
    return None if value is None else str(value.isoformat())


def _id_key(job_id: str) -> tuple[int, str]:
    return (len(job_id), job_id)


def workflow_detail(found: WorkflowSummary) -> dict[str, Any]:
    """The workflow as JSON-ready data: its record, its jobs (each with its parents, by id)
    and every edge as ``[parent id, child id]``."""
    parents: dict[str, list[str]] = {}
    for parent, child in found.edges:
        parents.setdefault(child, []).append(parent)
    return {
        "id": found.id,
        "name": found.name,
        "status": found.status,
        "created_at": _iso(found.created_at),
        "finished_at": _iso(found.finished_at),
        "jobs": [
            {
                "id": job.id,
                "type": job.type,
                "status": job.status.value,
                "parents": sorted(parents.get(job.id, []), key=_id_key),
                "attempts": job.attempts,
                "started_at": _iso(job.started_at),
                "finished_at": _iso(job.finished_at),
                "last_error": job.last_error,
            }
            for job in found.jobs
        ],
        "edges": [[parent, child] for parent, child in found.edges],
    }


def render_workflow(detail: dict[str, Any]) -> Any:
    """The header (name, status, times) as ``key  value`` lines, then a table of the jobs
    (id, type, status, parents) that fits 80 columns."""
    from rich.console import Group  # noqa: PLC0415 - keep the CLI's start fast
    from rich.table import Table  # noqa: PLC0415
    from rich.text import Text  # noqa: PLC0415

    from golemq_pg.cli.views import short_time, table  # noqa: PLC0415

    header = Table.grid(padding=(0, 2))
    header.add_column(style="bold")
    header.add_column(overflow="fold")
    for key, value in (("workflow", detail["id"]), ("name", detail["name"]),
                       ("status", detail["status"]),
                       ("created", short_time(detail["created_at"])),
                       ("finished", short_time(detail["finished_at"]) or "-")):
        header.add_row(key, Text(str(value)))
    jobs = detail["jobs"]
    cells = [[job["id"], Text(job["type"]), job["status"],
              Text(", ".join(job["parents"]) or "-")] for job in jobs]
    made = table(f"jobs ({len(jobs)})", ("id", "type", "status", "parents"), cells,
                 keep=("id", "status"))
    return Group(header, made)


@click.command("workflow")
@db_options
@click.argument("workflow_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def workflow(workflow_id: str, as_json: bool) -> None:
    """One workflow: its name, status, times and jobs with their parents (no payloads)."""
    ctx = click.get_current_context()
    from golemq_pg.queue import Queue  # noqa: PLC0415 - imported when the command runs

    try:
        workflow_id = check_job_id(workflow_id)
    except ValueError:
        raise click.UsageError(
            "ID: must be a workflow id as add_workflow() returns it (digits)") from None
    with open_store(ctx) as store:
        found = Queue(store).workflow(workflow_id)
    if found is None:
        raise CliError(f"workflow {workflow_id} not found")
    detail = workflow_detail(found)
    if as_json:
        click.echo(json.dumps(detail, sort_keys=True))
        return
    from golemq_pg.cli.views import console  # noqa: PLC0415

    console().print(render_workflow(detail))
