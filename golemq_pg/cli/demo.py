"""``golemq-pg demo``: a real Worker draining a sample workload, with a live progress bar
(the command, :func:`run_demo` that it runs, and :func:`build_worker`, the demo handlers
docker-compose.yml's worker runs).

The workload mixes fast no-ops, flaky handlers that fail and retry, slow handlers that
report progress, and one type that always dead-letters with ``TerminalJobError``. Most jobs
arrive in bulk (``add_many``); a trickle of single ``add`` calls made while the worker is
busy measures the latency from enqueue to handler start.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click

from golemq_pg._types import JobStatus, Transition
from golemq_pg.cli.base import (
    DEMO_SCHEMA,
    CliError,
    db_options,
    probe,
    reset_logging,
    resolve_dsn,
    runtime_error,
    settings,
)
from golemq_pg.errors import TerminalJobError

if TYPE_CHECKING:
    from golemq_pg.queue import Queue
    from golemq_pg.store.postgres import PostgresStore

#: Every demo job carries this scope so a store without ``drop_schema`` can still be emptied.
DEMO_SCOPE = ("golemq-demo", "run")
NOOP, FLAKY, SLOW, POISON, PING = (
    "demo.noop", "demo.flaky", "demo.slow", "demo.poison", "demo.ping",
)
DEADLINE_SECONDS = 120.0


@dataclass
class DemoResult:
    """What one demo run did; ``complete`` is False when it hit its deadline."""

    total: int
    complete: bool
    seconds: float
    succeeded: int
    dead_letters: int
    retries: int
    latencies_ms: list[float] = field(default_factory=list)

    @property
    def jobs_per_second(self) -> float:
        """Finished jobs per second of drain time."""
        return (self.succeeded + self.dead_letters) / self.seconds if self.seconds else 0.0


class _Tally:
    """A thread-safe LifecycleObserver counting outcomes (and pickup latencies)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.outcomes: Counter[str] = Counter()
        self.latencies_ms: list[float] = []
        self.changed = threading.Event()

    def on_transition(self, t: Transition) -> None:
        """Count one lifecycle event."""
        with self._lock:
            self.outcomes[t.outcome] += 1
        self.changed.set()

    def latency(self, sent_at: float) -> None:
        """Record enqueue-to-start for a job sent at ``sent_at`` (time.time())."""
        with self._lock:
            self.latencies_ms.append((time.time() - sent_at) * 1000.0)

    def snapshot(self) -> Counter[str]:
        """A copy of the outcome counts."""
        with self._lock:
            return Counter(self.outcomes)


def plan(total: int) -> dict[str, int]:
    """How many jobs of each kind a run of ``total`` jobs enqueues."""
    poison = max(1, total // 100)
    slow = max(1, min(40, total // 50))
    flaky = max(1, total // 10)
    ping = max(1, min(200, total // 20))
    noop = total - poison - slow - flaky - ping
    if noop < 1:  # tiny runs: at least one of each kind, the rest no-ops
        return {NOOP: max(total - 4, 0), FLAKY: 1, SLOW: 1, POISON: 1, PING: 1} if total >= 4 \
            else {NOOP: total}
    return {NOOP: noop, FLAKY: flaky, SLOW: slow, POISON: poison, PING: ping}


def _register(worker: Any, tally: _Tally) -> None:
    def noop(job: Any) -> None:
        return None

    def flaky(job: Any) -> None:
        # Deterministic flakiness: fail the first `fail_times` attempts, then succeed.
        if job.attempt <= int(job.payload["fail_times"]):
            raise RuntimeError("simulated transient failure")

    def slow(job: Any) -> None:
        steps = int(job.payload["steps"])
        for step in range(1, steps + 1):
            if job.signal.wait(0.02):
                return
            job.progress(step / steps)

    def poison(job: Any) -> None:
        raise TerminalJobError("this job type always dead-letters (demo)")

    def ping(job: Any) -> None:
        tally.latency(float(job.payload["sent_at"]))

    worker.handler(NOOP, concurrency=8)(noop)
    worker.handler(FLAKY, concurrency=4)(flaky)
    worker.handler(SLOW, concurrency=4, timeout=30)(slow)
    worker.handler(POISON, concurrency=2)(poison)
    worker.handler(PING, concurrency=4)(ping)


def build_worker() -> Any:
    """A Worker with the demo handlers on ``$GOLEMQ_DSN`` (schema ``$GOLEMQ_SCHEMA`` or
    ``golemq``), for ``golemq-pg worker golemq_pg.cli.demo:build_worker`` (docker-compose.yml).

    Try it with ``golemq-pg enqueue demo.noop '{}'`` or ``demo.slow '{"steps": 5}'``.
    """
    import os  # noqa: PLC0415

    from golemq_pg import PostgresStore, Worker  # noqa: PLC0415

    store = PostgresStore.connect(os.environ["GOLEMQ_DSN"],
                                  schema=os.environ.get("GOLEMQ_SCHEMA") or "golemq")
    worker = Worker(store)
    _register(worker, _Tally())
    return worker


def _reset(store: PostgresStore, queue: Queue) -> None:
    """Start from a migrated schema holding none of an earlier run's demo jobs."""
    store.migrate()
    queue.cancel_for_scope(DEMO_SCOPE, reason="demo reset")
    queue.prune(older_than=0)


def _enqueue_bulk(queue: Any, counts: dict[str, int]) -> tuple[int, float]:
    started = time.perf_counter()
    added = 0
    if counts.get(NOOP):
        added += queue.add_many(NOOP, ({"n": i} for i in range(counts[NOOP])), scope=DEMO_SCOPE)
    if counts.get(FLAKY):
        # A few flaky jobs fail more often than max_attempts allows: retry exhaustion.
        flaky = [{"fail_times": 5 if i % 10 == 0 else 1 + i % 2} for i in range(counts[FLAKY])]
        added += queue.add_many(FLAKY, flaky, scope=DEMO_SCOPE, max_attempts=3)
    if counts.get(POISON):
        added += queue.add_many(POISON, ({"n": i} for i in range(counts[POISON])),
                                scope=DEMO_SCOPE)
    for i in range(counts.get(SLOW, 0)):
        if queue.add(SLOW, {"steps": 5}, scope=DEMO_SCOPE, dedupe_key=f"slow-{i}") is not None:
            added += 1
    return added, time.perf_counter() - started


def _trickle(queue: Any, count: int, stop: threading.Event, sent: list[int]) -> None:
    """Single adds while the worker drains the bulk: the latency probes."""
    for _ in range(count):
        if stop.is_set():
            return
        # Priority puts the probe ahead of the bulk backlog: it measures pickup, not queueing.
        queue.add(PING, {"sent_at": time.time()}, scope=DEMO_SCOPE, priority=10)
        sent[0] += 1
        stop.wait(0.005)


def run_demo(
    dsn: str, *, schema: str = DEMO_SCHEMA, jobs: int = 3000, quiet: bool = False,
    deadline: float = DEADLINE_SECONDS, console: Any = None, prepare: bool = True,
) -> DemoResult:
    """Run the demo against ``dsn`` in ``schema`` (emptied first) and print a summary.
    ``prepare=False``: no server-side prepared statements (``--no-prepare``)."""
    from rich.console import Console  # noqa: PLC0415

    from golemq_pg import PostgresStore, Queue, Worker  # noqa: PLC0415

    console = console or Console()
    counts = plan(jobs)
    tally = _Tally()
    store = PostgresStore.connect(dsn, schema=schema, min_size=1, max_size=6, prepare=prepare)
    try:
        queue = Queue(store)
        _reset(store, queue)
        worker = Worker(store, poll_interval=0.2, base_backoff=0.05, max_backoff=0.5,
                        observers=[tally], shutdown_grace=5)
        _register(worker, tally)
        bulk, enqueue_seconds = _enqueue_bulk(queue, {k: v for k, v in counts.items()
                                                       if k != PING})
        total = bulk + counts.get(PING, 0)
        started = time.perf_counter()
        worker.start()
        stop = threading.Event()
        sent = [0]
        producer = threading.Thread(target=_trickle, name="golemq-demo-producer",
                                    args=(queue, counts.get(PING, 0), stop, sent), daemon=True)
        producer.start()
        try:
            complete = _wait(queue, tally, total, started + deadline, quiet, console)
        finally:
            stop.set()
            producer.join(timeout=10)
            worker.stop(timeout=10)
        seconds = time.perf_counter() - started
        final = queue.stats()
    finally:
        store.close()
    outcomes = tally.snapshot()
    result = DemoResult(
        total=total, complete=complete, seconds=seconds,
        succeeded=int(final.get(str(JobStatus.SUCCEEDED), 0)),
        dead_letters=int(final.get(str(JobStatus.FAILED), 0)),
        retries=outcomes["retry-scheduled"], latencies_ms=sorted(tally.latencies_ms),
    )
    _summary(console, result, bulk, enqueue_seconds)
    return result


def _done(outcomes: Counter[str]) -> int:
    return outcomes["succeeded"] + outcomes["failed-terminal"]


def _wait(
    queue: Any, tally: _Tally, total: int, deadline: float, quiet: bool, console: Any
) -> bool:
    """Until every job finished (by the observer, confirmed by the store) or the deadline."""
    from rich.progress import (  # noqa: PLC0415
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    progress = Progress(
        TextColumn("[bold]demo[/bold]"), BarColumn(), MofNCompleteColumn(),
        TextColumn("retries {task.fields[retries]}  dead letters {task.fields[dead]}"),
        TimeElapsedColumn(), console=console, disable=quiet, transient=False,
    )
    with progress:
        task = progress.add_task("drain", total=total, retries=0, dead=0)
        last_check = 0.0
        while True:
            outcomes = tally.snapshot()
            progress.update(task, completed=min(_done(outcomes), total),
                            retries=outcomes["retry-scheduled"],
                            dead=outcomes["failed-terminal"])
            now = time.perf_counter()
            if _done(outcomes) >= total or now - last_check > 1.0:
                last_check = now
                stats = queue.stats()
                if not any(stats.get(k, 0) for k in ("pending", "scheduled", "running")) \
                        and _finished(stats) >= total:
                    progress.update(task, completed=total)
                    return True
            if now >= deadline:
                return False
            tally.changed.wait(0.1)
            tally.changed.clear()


def _finished(stats: dict[str, int]) -> int:
    return int(stats.get("succeeded", 0)) + int(stats.get("failed", 0))


def _percentile(sorted_values: list[float], fraction: float) -> float | None:
    if not sorted_values:
        return None
    index = min(len(sorted_values) - 1, round(fraction * (len(sorted_values) - 1)))
    return sorted_values[index]


def _summary(console: Any, result: DemoResult, bulk: int, enqueue_seconds: float) -> None:
    from rich.table import Table  # noqa: PLC0415

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f} ms"

    table = Table(title="golemq-pg demo", title_justify="left", show_header=False)
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("jobs", str(result.total))
    table.add_row("finished", "yes" if result.complete else "NO (deadline hit)")
    table.add_row("total time", f"{result.seconds:.2f} s")
    table.add_row("throughput", f"{result.jobs_per_second:,.0f} jobs/s")
    table.add_row("bulk enqueue", f"{bulk} jobs in {enqueue_seconds * 1000:.0f} ms")
    table.add_row("succeeded", str(result.succeeded))
    table.add_row("retries", str(result.retries))
    table.add_row("dead letters", str(result.dead_letters))
    table.add_row("latency p50 (add -> start)", ms(_percentile(result.latencies_ms, 0.50)))
    table.add_row("latency p99 (add -> start)", ms(_percentile(result.latencies_ms, 0.99)))
    console.print(table)


@click.command()
@db_options
@click.option("--jobs", type=click.IntRange(min=1, max=1_000_000), default=3000,
              show_default=True, help="How many jobs to enqueue.")
@click.option("--quiet", is_flag=True, help="No progress bar; print the summary only.")
def demo(jobs: int, quiet: bool) -> None:
    """Run a real worker on a sample workload (its own schema, recreated each run)."""
    ctx = click.get_current_context()
    schema = settings(ctx).schema or DEMO_SCHEMA
    if "demo" not in schema:
        raise click.UsageError(
            f"the demo drops and recreates its schema: pick one whose name contains 'demo', "
            f"not {schema!r}"
        )
    dsn = resolve_dsn(ctx)
    probe(dsn)
    # The demo dead-letters on purpose: the worker's warnings about it would be noise here.
    reset_logging(logging.ERROR)
    try:
        result = run_demo(dsn, schema=schema, jobs=jobs, quiet=quiet,
                          prepare=settings(ctx).prepare)
    except (click.ClickException, click.exceptions.Exit):
        raise
    except Exception as exc:  # noqa: BLE001 - CLI boundary: one line, not a traceback
        raise runtime_error(exc, schema) from None
    if not result.complete:
        raise CliError("the demo did not finish in time (see the summary above)")
