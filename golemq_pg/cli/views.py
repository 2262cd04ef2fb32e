"""What ``golemq-pg workers``, ``show`` and the paused lines of ``stats`` and ``failed``
print: rows as JSON-ready data, and their rich renderables. Pure functions of the values the
Queue returns (no I/O); no payload appears here unless the caller passes one in
(``show --payload``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from golemq_pg._types import JobSummary, WorkerSummary

#: The width every table the CLI prints fits in: a cell too long for its share of it is cut
#: with an ellipsis (``--json`` has every value whole).
TABLE_WIDTH = 80


def console() -> Any:
    """A rich console at most :data:`TABLE_WIDTH` columns wide (narrower on a narrower
    terminal), so every table fits an 80-column terminal, piped or not."""
    from rich.console import Console  # noqa: PLC0415 - keep the CLI's start fast

    detected = Console().width
    return Console(width=min(detected, TABLE_WIDTH))


def table(title: str | None, *columns: str, right: Sequence[str] = ()) -> Any:
    """A rich table whose cells stay on one line, cut with an ellipsis when too long for the
    console's width (``right``: the columns aligned right, numbers)."""
    from rich.table import Table  # noqa: PLC0415 - keep the CLI's start fast

    made = Table(title=title, title_justify="left")
    for column in columns:
        made.add_column(column, no_wrap=True, overflow="ellipsis",
                        justify="right" if column in right else "left")
    return made


def short_time(iso: str | None) -> str:
    """An ISO timestamp as a table cell: ``2026-05-01 09:00:00`` (to the second, in the
    offset it was given in: UTC from the store), "" for None."""
    return "" if iso is None else iso[:19].replace("T", " ")


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def worker_row(worker: WorkerSummary, now: datetime) -> dict[str, Any]:
    """One registered worker; ``last_seen_age_seconds`` against the store's ``now``."""
    return {
        "worker_id": worker.worker_id,
        "host": worker.host,
        "pid": worker.pid,
        "state": worker.state,
        "running": worker.running,
        "handlers": dict(worker.handlers),
        "started_at": _iso(worker.started_at),
        "last_seen_at": _iso(worker.last_seen_at),
        "last_seen_age_seconds": round(max((now - worker.last_seen_at).total_seconds(), 0.0), 3),
    }


def render_workers(rows: Sequence[dict[str, Any]]) -> Any:
    """A table of :func:`worker_row` rows: id, host, pid, state, running, handlers, age."""
    made = table(f"workers ({len(rows)})", "id", "host", "pid", "state", "running", "handlers",
                 "last seen", right=("pid", "running"))
    for row in rows:
        handlers = ", ".join(f"{name}x{count}" for name, count in sorted(row["handlers"].items()))
        made.add_row(
            row["worker_id"], row["host"], str(row["pid"]), row["state"], str(row["running"]),
            handlers, f"{row['last_seen_age_seconds']:.1f}s ago",
        )
    return made


def job_detail(
    job: JobSummary, payload: Any = None, *, with_payload: bool = False
) -> dict[str, Any]:
    """One job's summary, attempt history and result (and its payload only when asked)."""
    detail: dict[str, Any] = {
        "id": job.id,
        "type": job.type,
        "status": job.status.value,
        "scope": None if job.scope is None else {"type": job.scope.type, "id": job.scope.id},
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "priority": job.priority,
        "tags": list(job.tags),
        "last_error": job.last_error,
        "progress": job.progress,
        "run_at": _iso(job.run_at),
        "created_at": _iso(job.created_at),
        "updated_at": _iso(job.updated_at),
        "started_at": _iso(job.started_at),
        "finished_at": _iso(job.finished_at),
        # Each attempt's traceback (None: nothing was raised): the operator's, like the
        # payload, and like it never in a log; it may say what the exception said.
        "errors": [
            {"attempt": e.attempt, "at": _iso(e.at), "error": e.error, "worker_id": e.worker_id,
             "traceback": e.traceback}
            for e in job.errors
        ],
        "result": job.result,
    }
    if with_payload:
        detail["payload"] = payload
    return detail


_SUMMARY_KEYS = (
    "id", "type", "status", "scope", "attempts", "max_attempts", "priority", "tags",
    "last_error", "progress", "run_at", "created_at", "updated_at", "started_at",
    "finished_at",
)


def render_job(detail: dict[str, Any]) -> Any:
    """The summary as ``key  value`` lines, the attempt history as a table and each attempt's
    traceback, then the result (and the payload when :func:`job_detail` put one in), both as
    JSON."""
    import json  # noqa: PLC0415

    from rich.console import Group  # noqa: PLC0415
    from rich.table import Table  # noqa: PLC0415
    from rich.text import Text  # noqa: PLC0415

    summary = Table.grid(padding=(0, 2))
    summary.add_column(style="bold")
    summary.add_column(overflow="fold")
    for key in _SUMMARY_KEYS:
        value = detail[key]
        if key == "scope" and value is not None:
            value = f"{value['type']}:{value['id']}"
        elif key == "tags":
            value = ", ".join(value) or None
        elif isinstance(value, dict | list):
            value = json.dumps(value)
        summary.add_row(key, "-" if value is None else str(value))
    parts: list[Any] = [summary]
    history = table(f"attempt history ({len(detail['errors'])})", "attempt", "at", "worker",
                    "error")
    for item in detail["errors"]:
        history.add_row(str(item["attempt"]), item["at"] or "", Text(item["worker_id"] or "-"),
                        Text(item["error"]))
    parts.append(history)
    # Text, not markup: a traceback's brackets are printed as they are.
    parts.extend(
        Text(f"traceback of attempt {item['attempt']}:\n{item['traceback'].rstrip()}")
        for item in detail["errors"] if item["traceback"]
    )
    parts.append(Text("result: " + ("-" if detail["result"] is None
                                    else json.dumps(detail["result"]))))
    if "payload" in detail:
        parts.append(Text("payload: " + json.dumps(detail["payload"])))
    return Group(*parts)


def paused_json(paused: dict[str, Any]) -> dict[str, dict[str, str | None]]:
    """The paused types (``PausedType`` by name) as JSON-ready data (``stats --json``)."""
    return {
        name: {"paused_at": p.paused_at.isoformat(timespec="seconds"), "reason": p.reason}
        for name, p in sorted(paused.items())
    }


def paused_lines(paused: dict[str, dict[str, str | None]]) -> list[Any]:
    """One line per paused type (:func:`paused_json` data) for the ``stats`` and ``failed``
    output, as rich Text: a reason is shown as written, never read as markup."""
    from rich.text import Text  # noqa: PLC0415

    return [
        Text(f"paused: {name} since {p['paused_at']}"
             + (f" ({p['reason']})" if p["reason"] else ""))
        for name, p in paused.items()
    ]


__all__ = [
    "TABLE_WIDTH",
    "console",
    "job_detail",
    "paused_json",
    "paused_lines",
    "render_job",
    "render_workers",
    "short_time",
    "table",
    "worker_row",
]
