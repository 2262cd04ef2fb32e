"""The ``golemq-pg`` commands that control single jobs and types: ``retry ID``,
``run-now ID``, ``cancel ID``, ``pause TYPE [--reason R]``, ``resume TYPE``.

Registered on the command group by :func:`register` (``golemq_pg.cli`` passes its own
``--dsn``/``--schema`` decorator and store opener, so these commands follow the same
conventions): the argument is checked before connecting (bad input: one line, exit 2); a
job not in the state the command needs changes nothing and exits 1 with one line.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

import click

from golemq_pg._cli_params import CliError
from golemq_pg._errortext import error_text
from golemq_pg._queue_control import MAX_PAUSE_REASON, check_job_id
from golemq_pg._validation import check_name

F = TypeVar("F", bound=Callable[..., Any])
OpenStore = Callable[[click.Context], AbstractContextManager[Any]]


class DbOptions(Protocol):
    """The ``--dsn``/``--schema`` decorator of ``golemq_pg.cli``."""

    def __call__(self, func: F, /) -> F: ...


class NotChanged(CliError):  # noqa: N818 - named after what happened
    """The job is not in the state the command needs: one line, exit code 1."""


def _job_id(value: str) -> str:
    try:
        return check_job_id(value)
    except ValueError as exc:
        raise click.UsageError(error_text(exc)) from None


def _type_and_reason(job_type: str, reason: str | None = None) -> str:
    try:
        name = check_name(job_type, "job type")
    except ValueError as exc:
        raise click.UsageError(error_text(exc)) from None
    if reason is not None and (len(reason) > MAX_PAUSE_REASON or "\x00" in reason):
        raise click.UsageError(f"--reason must be at most {MAX_PAUSE_REASON} characters")
    return name


def _queue(store: Any) -> Any:
    from golemq_pg.queue import Queue  # noqa: PLC0415 - imported when a command runs

    return Queue(store)


def register(group: click.Group, db_options: DbOptions, open_store: OpenStore) -> None:
    """Add the control commands to ``group``."""

    def one_job(job_id: str, act: Callable[[Any, str], bool], refused: str, done: str) -> None:
        # retry / run-now / cancel: one fenced verb on one job; "{id}" in the texts.
        checked = _job_id(job_id)
        with open_store(click.get_current_context()) as store:
            changed = act(_queue(store), checked)
        if not changed:
            raise NotChanged(refused.format(id=checked))
        click.echo(done.format(id=checked))

    @group.command("retry")
    @db_options
    @click.argument("job_id", metavar="ID")
    def retry(job_id: str) -> None:
        """Move one dead letter (FAILED) back to PENDING, due now, attempts reset."""
        one_job(job_id, lambda queue, job: queue.retry(job),
                "not retried: job {id} is not FAILED (or does not exist)",
                "job {id} moved back to pending")

    @group.command("run-now")
    @db_options
    @click.argument("job_id", metavar="ID")
    def run_now(job_id: str) -> None:
        """Make one PENDING job parked in the future (scheduled, backoff) due now."""
        one_job(job_id, lambda queue, job: queue.run_now(job),
                "not changed: job {id} is not pending with a future run time (already due, "
                "running, finished or unknown)",
                "job {id} is due now")

    @group.command("cancel")
    @db_options
    @click.argument("job_id", metavar="ID")
    def cancel(job_id: str) -> None:
        """Cancel one pending or running job (a running handler is aborted)."""
        one_job(job_id, lambda queue, job: queue.cancel(job),
                "not cancelled: job {id} is not pending or running",
                "job {id} cancelled")

    @group.command("pause")
    @db_options
    @click.argument("job_type", metavar="TYPE")
    @click.option("--reason", default=None, help="Why (shown by stats and failed).")
    def pause(job_type: str, reason: str | None) -> None:
        """Stop every worker from claiming TYPE until resumed (running jobs finish)."""
        name = _type_and_reason(job_type, reason)
        with open_store(click.get_current_context()) as store:
            _queue(store).pause(name, reason=reason)
        click.echo(f"paused {name}")

    @group.command("resume")
    @db_options
    @click.argument("job_type", metavar="TYPE")
    def resume(job_type: str) -> None:
        """Let workers claim TYPE again (idle workers are woken at once)."""
        name = _type_and_reason(job_type)
        with open_store(click.get_current_context()) as store:
            was_paused = _queue(store).resume(name)
        click.echo(f"resumed {name}" if was_paused else f"{name} was not paused")


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
