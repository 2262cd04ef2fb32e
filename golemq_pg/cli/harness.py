"""``golemq-pg bench``: the benchmark harness of the source checkout, found here: its
``benchmarks/`` folder, which is not installed with the package.

An editable install (``pip install -e .``) imports ``golemq_pg`` from the checkout itself,
so the harness is ``<checkout>/benchmarks/__main__.py`` beside the package directory. A
wheel installs ``golemq_pg`` alone into site-packages: there is no harness to run.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

import click

from golemq_pg._errortext import error_text
from golemq_pg.cli.base import EXIT_RUNTIME, EXIT_USAGE, CliError, db_options, settings

#: What ``golemq-pg bench`` says (exit code 2) when there is no checkout beside the package.
UNAVAILABLE = (
    "golemq-pg bench runs the harness of a source checkout (benchmarks/ is not installed with "
    "the package): clone the repository, `pip install -e '.[bench]'` in it, and run "
    "`golemq-pg bench` or `python -m benchmarks` there"
)


def checkout_root() -> Path | None:
    """The source checkout this ``golemq_pg`` was imported from, if it holds the harness."""
    root = Path(__file__).resolve().parents[2]  # <checkout>/golemq_pg/cli/harness.py
    return root if (root / "benchmarks" / "__main__.py").is_file() else None


def load(root: Path) -> Callable[[list[str]], object]:
    """``benchmarks.__main__.main`` of the checkout at ``root``, imported in this process
    (so Ctrl-C, SIGTERM, exit codes and the console output are the harness's own).

    Raises ImportError when the harness cannot be imported, or when another module named
    ``benchmarks`` (not this checkout's) is already loaded.
    """
    loaded = sys.modules.get("benchmarks")
    where = getattr(loaded, "__file__", None)
    if loaded is not None and (where is None or Path(where).resolve().parent.parent != root):
        raise ImportError(f"another module named 'benchmarks' is already imported ({where})")
    entry = str(root)
    sys.path.insert(0, entry)
    try:
        # Imported by name: the harness lives outside the typed package. Its submodules load
        # through the package's __path__, so the path entry is only needed for this import;
        # its worker children get the checkout in PYTHONPATH from the harness itself.
        module = importlib.import_module("benchmarks.__main__")
    finally:
        with suppress(ValueError):
            sys.path.remove(entry)
    main_fn: Callable[[list[str]], object] = module.main
    return main_fn


class HarnessUnavailable(click.ClickException):
    """No benchmark harness next to this golemq_pg: one line on stderr, exit code 2."""

    exit_code = EXIT_USAGE


@click.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                                 "help_option_names": []})
@db_options(refuse={
    "--schema": "the harness runs each scenario in a fresh schema or database of its own",
    "--no-prepare": "the harness connects its own stores",
})
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
    root = checkout_root()
    if root is None:
        if "--help" in args or "-h" in args:
            click.echo(ctx.get_help())
            click.echo(f"\nNot available here: {UNAVAILABLE}.")
            ctx.exit(0)
        raise HarnessUnavailable(UNAVAILABLE)
    try:
        bench_main = load(root)
    except ImportError as exc:
        raise CliError(f"cannot load the benchmark harness of {root}: {error_text(exc)}") from None
    argv = list(args)
    dsn = settings(ctx).dsn
    if dsn is not None:
        argv = ["--dsn", dsn, *argv]
    try:
        code = bench_main(argv)  # benchmarks/__main__.py: main(argv) -> exit status
    except SystemExit as exc:  # argparse exits on --help and on bad arguments
        code = exc.code
    ctx.exit(code if isinstance(code, int) else (0 if code is None else EXIT_RUNTIME))
