"""``golemq-pg worker MODULE:ATTR``: run a Worker of the application, in one process or N
(``processes``), serving ``/metrics`` with ``--metrics-port`` (``metrics``)."""

from __future__ import annotations

import logging
import os

import click

from golemq_pg import _embedded
from golemq_pg.cli.base import (
    CliError,
    announce,
    db_options,
    reset_logging,
    resolve_dsn,
    route_library_logs,
)
from golemq_pg.cli.processes import (
    TargetError,
    TargetImportError,
    run_processes,
    run_worker,
    split_target,
)
from golemq_pg.errors import SchemaNotMigrated


@click.command()
@db_options(refuse={
    "--schema": "the worker's own store decides its schema "
                "(PostgresStore.connect(dsn, schema=...) in MODULE)",
    "--no-prepare": "the worker's own store decides "
                    "(PostgresStore.connect(dsn, prepare=False) in MODULE)",
})
@click.argument("target", metavar="MODULE:ATTR")
@click.option("--processes", type=click.IntRange(min=1, max=256), default=1, show_default=True,
              help="Run N worker processes (each imports TARGET).")
@click.option("--metrics-port", type=click.IntRange(min=0, max=65535), default=None,
              help="Serve Prometheus /metrics and /healthz on this port (needs the metrics "
              "extra).")
@click.option("--metrics-host", default="127.0.0.1", show_default=True,
              help="The address the metrics port listens on (0.0.0.0: every interface, for "
              "a scraper on another host or container).")
@click.option("--metrics-child", is_flag=True, hidden=True)  # set by --processes N for its children
def worker(
    target: str, processes: int, metrics_port: int | None, metrics_host: str, metrics_child: bool,
) -> None:
    """Import a Worker (or a zero-argument factory returning one) and run it.

    --dsn (or the embedded server) is exported to the module as $GOLEMQ_DSN; the module's
    store decides its schema. --metrics-port adds a PrometheusObserver to the worker unless
    it has one and serves /metrics (every process's counts with --processes N) and /healthz
    (200 while the database answers, else 503).
    """
    ctx = click.get_current_context()
    if metrics_port is None and not metrics_child and (
        ctx.get_parameter_source("metrics_host") is not click.core.ParameterSource.DEFAULT
    ):
        raise click.UsageError("--metrics-host needs --metrics-port (without it nothing "
                               "listens)")
    try:
        split_target(target)
        os.environ[_embedded.ENV_DSN] = resolve_dsn(ctx)
        reset_logging(logging.INFO)  # a worker's lifecycle logs are its output
        route_library_logs()  # psycopg_pool's lines too, in the same format
        if metrics_port is not None or metrics_child:
            ctx.exit(_serve_metrics(target, processes, metrics_port, metrics_host))
        if processes > 1:
            ctx.exit(run_processes(target, processes, announce))
        run_worker(target, announce)
    except TargetError as exc:
        raise click.UsageError(str(exc)) from None
    except TargetImportError as exc:
        if os.environ.get("GOLEMQ_DEBUG"):
            raise
        raise CliError(str(exc)) from None
    except SchemaNotMigrated as exc:  # one line, exit code 1, before anything is claimed
        raise CliError(str(exc)) from None


def _serve_metrics(target: str, processes: int, port: int | None, host: str) -> int:
    """``worker --metrics-port`` (and its children): see golemq_pg.cli.metrics."""
    try:
        from golemq_pg.cli import metrics  # noqa: PLC0415 - needs the metrics extra
        from golemq_pg.metrics import MetricsServeError  # noqa: PLC0415
    except ImportError:
        raise CliError("--metrics-port needs prometheus_client: "
                       "pip install 'golemq-pg[metrics]'") from None
    try:
        return metrics.serve(target, processes, port, host, announce)
    except MetricsServeError as exc:
        raise CliError(str(exc)) from None
