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


def table(
    title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]],
    *, right: Sequence[str] = (), keep: Sequence[str] = (), width: int = TABLE_WIDTH,
) -> Any:
    """A rich table of ``rows`` (``str`` or rich ``Text`` cells) at most ``width`` columns
    wide: each cell stays on one line, and the widest columns are narrowed first (never
    below their header) with long cells cut by an ellipsis; the ``keep`` columns (ids,
    counts, times) only once the others are down to their headers. ``right``: columns
    aligned right (numbers)."""
    from rich.box import SIMPLE_HEAD  # noqa: PLC0415 - keep the CLI's start fast
    from rich.table import Table  # noqa: PLC0415

    natural = [
        max([len(name), *(len(str(row[i])) for row in rows)]) for i, name in enumerate(columns)
    ]
    floor = [len(name) for name in columns]
    # Between two cells: a padding space, the (blank) rule of the box, a padding space; one
    # padding space at each edge: 3 per column, less one.
    budget = width - 3 * len(columns) + 1
    widths = list(natural)
    while sum(widths) > budget:
        cuttable = [i for i in range(len(widths)) if widths[i] > floor[i]]
        flexible = [i for i in cuttable if columns[i] not in keep] or cuttable
        if not flexible:
            break  # only headers left: nothing more to cut
        widths[max(flexible, key=lambda i: widths[i])] -= 1
    # No vertical rules: the width they would take goes to the cells.
    made = Table(title=title, title_justify="left", box=SIMPLE_HEAD, show_edge=False)
    for name, size in zip(columns, widths, strict=True):
        made.add_column(name, no_wrap=True, overflow="ellipsis", width=size,
                        justify="right" if name in right else "left")
    for row in rows:
        made.add_row(*row)
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
    from rich.text import Text  # noqa: PLC0415 - keep the CLI's start fast

    cells = [
        [Text(row["worker_id"]), Text(row["host"]), str(row["pid"]), row["state"],
         str(row["running"]),
         Text(", ".join(f"{name}x{count}" for name, count in sorted(row["handlers"].items()))),
         f"{row['last_seen_age_seconds']:.1f}s ago"]
        for row in rows
    ]
    return table(f"workers ({len(rows)})",
                 ("id", "host", "pid", "state", "running", "handlers", "last seen"), cells,
                 right=("pid", "running"), keep=("pid", "state", "running", "last seen"))


def budget_text(max_attempts: int | None) -> str:
    """An attempt budget as the tables print it: the number, or ``unlimited`` (None)."""
    return "unlimited" if max_attempts is None else str(max_attempts)


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
            {"attempt": e.attempt, "started_at": _iso(e.started_at), "at": _iso(e.at),
             "duration": None if e.started_at is None
             else round((e.at - e.started_at).total_seconds(), 3),
             "error": e.error, "worker_id": e.worker_id, "traceback": e.traceback}
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
        elif key == "max_attempts":
            value = budget_text(value)
        elif isinstance(value, dict | list):
            value = json.dumps(value)
        summary.add_row(key, "-" if value is None else str(value))
    parts: list[Any] = [summary]
    history = table(
        f"attempt history ({len(detail['errors'])})",
        ("attempt", "at", "took", "worker", "error"),
        [[str(item["attempt"]), short_time(item["at"]),
          "-" if item["duration"] is None else f"{item['duration']:.3f}s",
          Text(item["worker_id"] or "-"), Text(item["error"])] for item in detail["errors"]],
        right=("attempt", "took"), keep=("attempt", "at", "took"),
    )
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
    "budget_text",
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
