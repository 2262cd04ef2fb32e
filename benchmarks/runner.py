"""Plan which (scenario, system, configuration) pairs to run, run them with a live progress
display, and keep every run's figures.

Runs are interleaved (run 1 of everything, then run 2 of everything, ...) so a burst of
load from elsewhere on the machine hits every system alike, and the ratios stay fair.
"""

from __future__ import annotations

import datetime
import statistics
import time
import traceback
from dataclasses import dataclass, field

import psycopg
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from benchmarks.sandbox import drop_leftovers
from benchmarks.scenarios import SCENARIOS, Figures, Scenario, Sizes
from benchmarks.systems import System, UnavailableError, UnsupportedError, Variant


@dataclass
class Outcome:
    """Every run of one configuration in one scenario."""

    scenario: Scenario
    system: System
    variant: Variant
    runs: list[Figures] = field(default_factory=list)
    error: str | None = None

    def median(self) -> Figures:
        """The median of each figure over the runs."""
        keys = {k for run in self.runs for k in run}
        return {k: statistics.median(run[k] for run in self.runs if k in run) for k in keys}


@dataclass(frozen=True, slots=True)
class Selection:
    """What ``--only`` asked for: scenario names, system names, scenario/system pairs."""

    scenarios: frozenset[str] = frozenset()
    systems: frozenset[str] = frozenset()
    pairs: frozenset[tuple[str, str]] = frozenset()

    @classmethod
    def parse(cls, tokens: list[str], systems: list[System]) -> Selection:
        """Split ``--only`` tokens; raises ValueError on an unknown name."""
        scenario_names = {s.name for s in SCENARIOS}
        system_names = {s.name for s in systems}
        scen: set[str] = set()
        sys_: set[str] = set()
        pairs: set[tuple[str, str]] = set()
        for token in (t.strip() for raw in tokens for t in raw.split(",")):
            if not token:
                continue
            if "/" in token:
                left, right = token.split("/", 1)
                if left not in scenario_names or right not in system_names:
                    raise ValueError(f"unknown scenario/system pair {token!r}")
                pairs.add((left, right))
            elif token in scenario_names:
                scen.add(token)
            elif token in system_names:
                sys_.add(token)
            else:
                raise ValueError(f"unknown scenario or system {token!r} (scenarios: "
                                 f"{', '.join(sorted(scenario_names))}; systems: "
                                 f"{', '.join(sorted(system_names))})")
        return cls(frozenset(scen), frozenset(sys_), frozenset(pairs))

    def wants(self, scenario: str, system: str) -> bool:
        """Whether the pair is selected."""
        if (scenario, system) in self.pairs:
            return True
        if not self.scenarios and not self.systems:
            return not self.pairs
        return ((not self.scenarios or scenario in self.scenarios)
                and (not self.systems or system in self.systems))


def plan(systems: list[System], selection: Selection, quick: bool,
         console: Console) -> tuple[list[Outcome], list[str]]:
    """The outcomes to fill, and notes on what is skipped and why."""
    notes: list[str] = []
    usable: list[System] = []
    for system in systems:
        if not any(selection.wants(s.name, system.name) for s in SCENARIOS):
            continue
        try:
            system.check_available()
        except UnavailableError as exc:
            notes.append(f"{system.title} skipped: {exc}")
            console.print(f"[yellow]skip[/] {system.title}: {escape(str(exc))}")
            continue
        usable.append(system)
    outcomes = []
    for scenario in SCENARIOS:
        for system in usable:
            if scenario.systems is not None and system.name not in scenario.systems:
                continue
            if not selection.wants(scenario.name, system.name):
                continue
            for variant in system.variants(scenario.name, quick):
                if quick and variant.full_only:
                    continue
                outcomes.append(Outcome(scenario, system, variant))
    return outcomes, notes


#: How long a run waits for the database to come back after losing it (a restart).
SERVER_WAIT = 60.0


class DatabaseGoneError(Exception):
    """The database stopped answering and did not come back: nothing more can be measured."""


def _server_started(dsn: str, wait: float) -> datetime.datetime | None:
    """The server's start time, polling up to ``wait`` seconds; None when it stays down."""
    deadline = time.monotonic() + wait
    while True:
        try:
            with psycopg.connect(dsn, connect_timeout=3) as conn:
                started: datetime.datetime = conn.execute(
                    "SELECT pg_postmaster_start_time()").fetchall()[0][0]
                return started
        except psycopg.Error:
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.5)


@dataclass
class RunResult:
    """What :func:`execute` measured, and how the run ended."""

    outcomes: list[Outcome]
    notes: list[str]
    interrupted: bool = False
    aborted: bool = False


def execute(outcomes: list[Outcome], dsn: str, sizes: Sizes, runs: int,
            console: Console) -> RunResult:
    """Run everything ``runs`` times. Interrupted (Ctrl-C, SIGTERM) or aborted (database
    gone), it keeps what was measured so far."""
    result = RunResult([], [])
    dropped: set[int] = set()
    boot = [_server_started(dsn, 0)]
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
               MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("benchmarks", total=len(outcomes) * runs)
        try:
            for run in range(1, runs + 1):
                for index, outcome in enumerate(outcomes):
                    if index in dropped or outcome.error:
                        progress.advance(task)
                        continue
                    step = (f"{outcome.scenario.name:<8} {outcome.variant.label} "
                            f"[dim](run {run}/{runs})[/]")
                    progress.update(task, description=step)
                    if not console.is_terminal:  # CI logs: no live bar, so one line per step
                        console.print(step)
                    if not _run_one(outcome, dsn, sizes, console, result.notes, boot):
                        dropped.add(index)
                    progress.advance(task)
        except KeyboardInterrupt:
            result.interrupted = True
            result.notes.append("interrupted: the figures below are partial")
            console.print("[red]interrupted[/]: reporting what was measured so far")
        except DatabaseGoneError as exc:
            result.aborted = True
            result.notes.append(f"aborted: {exc}")
            console.print(f"[red]aborted[/]: {escape(str(exc))}")
    left = drop_leftovers()
    if left:
        result.notes.append("could not drop these sandboxes (drop them by hand): "
                            + ", ".join(left))
    result.outcomes = [o for i, o in enumerate(outcomes)
                       if i not in dropped and (o.runs or o.error)]
    return result


def _run_one(outcome: Outcome, dsn: str, sizes: Sizes, console: Console, notes: list[str],
             boot: list[datetime.datetime | None]) -> bool:
    """One run of one outcome; False when the pair is to be dropped (unsupported/skipped).

    A run that fails because the server restarted under it (other users of a shared
    machine do that) is retried once when the server is back.
    """
    name = f"{outcome.scenario.name} {outcome.variant.label}"
    for attempt in (1, 2):
        try:
            figures = outcome.scenario.run(outcome.system, outcome.variant, dsn, sizes)
        except UnsupportedError:
            return False
        except UnavailableError as exc:
            notes.append(f"{outcome.scenario.name}/{outcome.variant.label} skipped: {exc}")
            console.print(f"[yellow]skip[/] {name}: {escape(str(exc))}")
            return False
        except Exception as exc:
            started = _server_started(dsn, SERVER_WAIT)
            if started is None:
                raise DatabaseGoneError(f"the database stopped answering during {name}") from exc
            if started != boot[0] and attempt == 1:
                boot[0] = started
                notes.append(f"{name}: the server restarted during a run; that run was "
                             "repeated")
                console.print(f"[yellow]retry[/] {name}: the server restarted under it")
                continue
            outcome.error = f"{type(exc).__name__}: {exc}"
            console.print(f"[red]error[/] {name}: {escape(outcome.error)}")
            console.print("".join(traceback.format_exception(exc, limit=-4)), style="dim",
                          markup=False, highlight=False)
            return True
        outcome.runs.append(figures)
        return True
    return True
