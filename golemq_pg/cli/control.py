"""The ``golemq-pg`` commands that control single jobs and types: ``retry ID``,
``run-now ID``, ``cancel ID``, ``delete ID``, ``pause TYPE [--reason R]``, ``resume TYPE``.

The argument is checked before connecting (bad input: one line, exit 2); an unknown job is
``job ID not found`` (exit 1), as for ``show``; a job not in the state the command needs
changes nothing and exits 1 with one line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from golemq_pg._errortext import error_text
from golemq_pg._validation import check_job_type, check_pause_reason
from golemq_pg.cli.base import CliError, db_options, job_id_argument, open_store


class NotChanged(CliError):  # noqa: N818 - named after what happened
    """The job is not in the state the command needs: one line, exit code 1."""


def _type_and_reason(job_type: str, reason: str | None = None) -> str:
    try:
        check_pause_reason(reason)
        return check_job_type(job_type)
    except ValueError as exc:
        raise click.UsageError(error_text(exc)) from None


def _queue(store: Any) -> Any:
    from golemq_pg.queue import Queue  # noqa: PLC0415 - imported when a command runs

    return Queue(store)


def _one_job(job_id: str, act: Callable[[Any, str], bool], refused: str, done: str) -> None:
    """retry / run-now / cancel / delete: one fenced verb on one job; "{id}" in the texts.
    Refused, the job is looked up to tell an unknown id from one in another state."""
    checked = job_id_argument(job_id)
    with open_store(click.get_current_context()) as store:
        queue = _queue(store)
        changed = act(queue, checked)
        known = changed or queue.get(checked) is not None
    if not known:
        raise CliError(f"job {checked} not found")
    if not changed:
        raise NotChanged(refused.format(id=checked))
    click.echo(done.format(id=checked))


@click.command("retry")
@db_options
@click.argument("job_id", metavar="ID")
@click.option("--reset-steps", is_flag=True,
              help="Delete the job's durable steps too, so every step runs again.")
def retry(job_id: str, reset_steps: bool) -> None:
    """Move one dead letter (FAILED) back to PENDING, due now, attempts reset (its durable
    steps kept unless --reset-steps)."""
    _one_job(job_id, lambda queue, job: queue.retry(job, reset_steps=reset_steps),
             "not retried: job {id} is not FAILED",
             "job {id} moved back to pending")


@click.command("run-now")
@db_options
@click.argument("job_id", metavar="ID")
def run_now(job_id: str) -> None:
    """Make one PENDING job parked in the future (scheduled, backoff) due now."""
    _one_job(job_id, lambda queue, job: queue.run_now(job),
             "not changed: job {id} is not pending with a future run time (already due, "
             "running or finished)",
             "job {id} is due now")


@click.command("cancel")
@db_options
@click.argument("job_id", metavar="ID")
def cancel(job_id: str) -> None:
    """Cancel one pending or running job (a running handler is aborted)."""
    _one_job(job_id, lambda queue, job: queue.cancel(job),
             "not cancelled: job {id} is not pending or running",
             "job {id} cancelled")


@click.command("delete")
@db_options
@click.argument("job_id", metavar="ID")
def delete(job_id: str) -> None:
    """Delete one job: a finished one with its result and history; a pending or running
    one is cancelled (its handler aborted)."""
    _one_job(job_id, lambda queue, job: queue.delete(job),
             "not deleted: job {id}", "job {id} deleted")


@click.command("pause")
@db_options
@click.argument("job_type", metavar="TYPE")
@click.option("--reason", default=None, help="Why (shown by stats and failed).")
def pause(job_type: str, reason: str | None) -> None:
    """Stop every worker from claiming TYPE until resumed (running jobs finish)."""
    name = _type_and_reason(job_type, reason)
    with open_store(click.get_current_context()) as store:
        _queue(store).pause(name, reason=reason)
    click.echo(f"paused {name}")


@click.command("resume")
@db_options
@click.argument("job_type", metavar="TYPE")
def resume(job_type: str) -> None:
    """Let workers claim TYPE again (idle workers are woken at once)."""
    name = _type_and_reason(job_type)
    with open_store(click.get_current_context()) as store:
        was_paused = _queue(store).resume(name)
    click.echo(f"resumed {name}" if was_paused else f"{name} was not paused")
