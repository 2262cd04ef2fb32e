"""``python -m benchmarks`` (and ``golemq-pg bench``): run the harness, print and save results.

Exit status: 0 when the harness ran (a system that is missing or fails is reported, not
fatal, unless ``--strict``), 1 when the harness itself broke or the database went away for
good, 2 on bad arguments, 130 when interrupted (partial results are still written).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from types import FrameType

from rich.console import Console
from rich.markup import escape

from benchmarks import report
from benchmarks.machine import machine_info
from benchmarks.runner import Selection, execute, plan
from benchmarks.scenarios import FULL, QUICK, Sizes
from benchmarks.systems import all_systems

LOCAL_DSN = "postgresql://postgres@127.0.0.1:5432/test"
HERE = Path(__file__).resolve().parent


def _in_harness_dir(name: str) -> Path:
    """``name`` in this benchmarks/ folder (where the record lives), whatever the current
    directory (``golemq-pg bench`` may run from anywhere): relative when under it."""
    path = HERE / name
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path


DEFAULT_OUT = _in_harness_dir("out")
#: benchmarks/RESULTS.md, the record of the latest full run.
DEFAULT_RESULTS_MD = _in_harness_dir("RESULTS.md")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="golemq-pg side by side with PGQueuer, Procrastinate, Chancy and the raw-SQL "
                    "ceiling, each scenario in a fresh schema or database.")
    p.add_argument("--dsn", help="PostgreSQL to run against (else $GOLEMQ_DSN, else the "
                                 "local test server, else the embedded server)")
    p.add_argument("--quick", action="store_true",
                   help="tiny sizes, one run: a smoke test of the harness, not of speed")
    p.add_argument("--runs", type=int, default=None,
                   help="runs per configuration, median reported (default 3; 1 with --quick)")
    p.add_argument("--only", action="append", default=[], metavar="NAME",
                   help="a scenario, a system or scenario/system (repeatable, comma-separated)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT,
                   help=f"directory for results.json and results.png (default {DEFAULT_OUT})")
    p.add_argument("--results-md", type=Path, nargs="?", const=DEFAULT_RESULTS_MD, default=None,
                   metavar="PATH", help=f"also write the Markdown record (default path "
                                        f"{DEFAULT_RESULTS_MD})")
    p.add_argument("--note", action="append", default=[],
                   help="a note recorded with the results (e.g. what else was running)")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 when any system run fails (default: report and go on)")
    p.add_argument("--from-json", type=Path, metavar="RESULTS_JSON",
                   help="run nothing: re-render the tables, chart and --results-md of an "
                        "earlier results.json (its notes, then any --note)")
    p.add_argument("--list", action="store_true", help="list scenarios and systems, then exit")
    return p


def resolve_dsn(explicit: str | None, console: Console) -> str:
    """--dsn, else $GOLEMQ_DSN, else the local test server, else the embedded server."""
    if explicit:
        return explicit
    env = os.environ.get("GOLEMQ_DSN")
    if env:
        return env
    from golemq_pg._embedded import ensure_server, reachable  # noqa: PLC0415 - only when needed

    if reachable(LOCAL_DSN):
        return LOCAL_DSN

    console.print("using the embedded PostgreSQL (set GOLEMQ_DSN to use your own server)")
    return ensure_server()


def _list(console: Console) -> int:
    from benchmarks.scenarios import SCENARIOS  # noqa: PLC0415

    # One line each, however narrow the terminal (scripts read them).
    console.print("scenarios: " + ", ".join(s.name for s in SCENARIOS), soft_wrap=True)
    console.print("systems:   " + ", ".join(s.name for s in all_systems()), soft_wrap=True)
    return 0


def _terminate_gracefully(signum: int, frame: FrameType | None) -> None:
    # SIGTERM (CI timeouts, `kill`) unwinds like Ctrl-C, so every sandbox is dropped.
    raise KeyboardInterrupt


def _rerender(args: argparse.Namespace, console: Console) -> int:
    doc = json.loads(args.from_json.read_text(encoding="utf-8"))
    outcomes = report.load_outcomes(doc)
    sizes = Sizes(**{**asdict(FULL), **doc["harness"]["sizes"]})
    found = report.targets(outcomes)
    report.print_tables(console, outcomes, found)
    args.out.mkdir(parents=True, exist_ok=True)
    report.write_chart(args.out / "results.png", outcomes)
    if args.results_md is not None:
        report.write_results_md(args.results_md, machine=doc["machine"], sizes=sizes,
                                runs=doc["harness"]["runs"],
                                notes=doc["notes"] + list(args.note),
                                outcomes=outcomes, found=found,
                                command=doc["harness"].get("command", "python -m benchmarks"))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the harness; see the module docstring for the exit status."""
    args = _parser().parse_args(argv)
    if threading.current_thread() is not threading.main_thread():
        return _run(args, argv)
    previous = signal.signal(signal.SIGTERM, _terminate_gracefully)
    try:
        return _run(args, argv)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run(args: argparse.Namespace, argv: list[str] | None) -> int:
    console = Console()
    if args.list:
        return _list(console)
    if args.from_json:
        return _rerender(args, console)
    runs = args.runs if args.runs is not None else (1 if args.quick else 3)
    if runs < 1:
        console.print("[red]--runs must be at least 1[/]")
        return 2
    systems = all_systems()
    try:
        selection = Selection.parse(args.only, systems)
    except ValueError as exc:
        console.print(f"[red]{escape(str(exc))}[/]")
        return 2
    sizes = QUICK if args.quick else FULL
    started = time.perf_counter()
    dsn = resolve_dsn(args.dsn, console)
    machine = machine_info(dsn)
    console.print(f"PostgreSQL {machine['postgres_version']}, {machine['cores']} cores, "
                  f"Python {machine['python']}; {'quick' if args.quick else 'full'} sizes, "
                  f"{runs} run(s)")
    outcomes, notes = plan(systems, selection, args.quick, console)
    result = execute(outcomes, dsn, sizes, runs, console)
    outcomes = result.outcomes
    if hasattr(os, "getloadavg"):
        machine["load_average_at_end"] = list(os.getloadavg())
    notes += result.notes + list(args.note)
    found = report.targets(outcomes)
    report.print_tables(console, outcomes, found)

    args.out.mkdir(parents=True, exist_ok=True)
    chart_note = report.write_chart(args.out / "results.png", outcomes)
    if chart_note:
        notes.append(chart_note)
    command = shlex.join(["python", "-m", "benchmarks",
                          *(argv if argv is not None else sys.argv[1:])])
    report.write_json(args.out / "results.json", machine=machine, sizes=sizes, quick=args.quick,
                      runs=runs, notes=notes, outcomes=outcomes, found=found, command=command)
    measured = any(o.runs for o in outcomes)
    if args.results_md is not None and not measured:
        notes.append(f"{args.results_md} left as it was: nothing was measured")
    elif args.results_md is not None:
        report.write_results_md(args.results_md, machine=machine, sizes=sizes, runs=runs,
                                notes=notes, outcomes=outcomes, found=found,
                                command=command)
    for note in notes:
        console.print(f"[yellow]note[/]: {escape(note)}")
    console.print(f"wrote {args.out / 'results.json'}"
                  + ("" if chart_note else f" and {args.out / 'results.png'}")
                  + (f" and {args.results_md}" if args.results_md and measured else "")
                  + f" in {time.perf_counter() - started:.0f} s")
    if result.interrupted:
        return 130
    if result.aborted:
        return 1
    failed = [o for o in outcomes if o.error]
    if failed and args.strict:
        console.print(f"[red]{len(failed)} configuration(s) failed[/] (--strict)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
