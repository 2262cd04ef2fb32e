"""The scenarios of docs/BENCHMARKS.md: what each one sets up, runs and reports.

Every run of every scenario gets its own fresh sandbox (schema or database), so no run
inherits bloat, statistics or leftovers from another.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass

from benchmarks import dashboard
from benchmarks.rss import drain_in_child
from benchmarks.sandbox import Sandbox, analyze_backlog, sandbox_for, vacuum_analyze
from benchmarks.systems import System, UnsupportedError, Variant
from benchmarks.systems.base import LoadedResult, LoadPlan
from benchmarks.systems.raw_sql import (
    count_golemq_finished,
    fill_golemq_history,
    fill_golemq_table,
)
from benchmarks.systems.workflow import JOBS_PER_WORKFLOW

Figures = dict[str, float]


@dataclass(frozen=True, slots=True)
class Sizes:
    """How big each scenario is; ``slow`` sizes are for systems far below 1k jobs/s."""

    drain: int
    drain_slow: int
    steady_seconds: float
    latency_count: int
    latency_interval: float
    bulk: int
    bulk_slow: int
    single: int
    scale_small: int
    scale_large: int
    scale_take: int
    scale_rounds: int
    rss: int
    rss_slow: int
    guarded: int
    #: Rows of the dashboard scenario's jobs table, and its rounds per route.
    dashboard_rows: int = 1_000_000
    dashboard_rounds: int = 15
    #: The loaded-latency scenario: the backlog whose drain rate sets the offered load, and
    #: the producer's tick (one enqueue call every ``loaded_tick`` s, for steady_seconds).
    loaded_drain: int = 20_000
    loaded_tick: float = 0.01
    #: The after-vacuum scenario: the backlog of each of its two drains, and the finished
    #: rows of history its "@1M" configurations (full runs only) load between them.
    after_vacuum: int = 30_000
    after_vacuum_history: int = 1_000_000
    #: The workflow scenario: workflows of 12 jobs each (fetch -> 10 x extract -> index).
    workflows: int = 2_000


QUICK = Sizes(drain=2_000, drain_slow=200, steady_seconds=1.0, latency_count=25,
              latency_interval=0.02, bulk=5_000, bulk_slow=1_000, single=200, scale_small=1_000,
              scale_large=10_000, scale_take=1_000, scale_rounds=2,
              rss=2_000, rss_slow=200, guarded=2_000, dashboard_rows=20_000, dashboard_rounds=3,
              loaded_drain=2_000, after_vacuum=2_000, after_vacuum_history=20_000,
              workflows=50)
FULL = Sizes(drain=50_000, drain_slow=3_000, steady_seconds=10.0, latency_count=500,
             latency_interval=0.02, bulk=100_000, bulk_slow=20_000, single=2_000,
             scale_small=10_000, scale_large=1_000_000, scale_take=10_000, scale_rounds=3,
             rss=50_000, rss_slow=3_000, guarded=20_000)


@dataclass(frozen=True, slots=True)
class Metric:
    """One reported figure."""

    key: str
    label: str
    higher_is_better: bool = True


@dataclass(frozen=True, slots=True)
class Scenario:
    """A named measurement; ``run`` does one run of one variant in a fresh sandbox."""

    name: str
    title: str
    method: str
    metrics: tuple[Metric, ...]
    run: Callable[[System, Variant, str, Sizes], Figures]
    #: Only these systems take part (None: every system that implements the verb).
    systems: tuple[str, ...] | None = None

    @property
    def primary(self) -> Metric:
        """The figure the ratios are computed on."""
        return self.metrics[0]


def _box(system: System, dsn: str, tag: str) -> AbstractContextManager[Sandbox]:
    return sandbox_for(system.isolation, dsn, f"{tag}_{system.name}")


def _slow(system: System, fast: int, slow: int) -> int:
    return slow if system.slow else fast


def run_drain(system: System, variant: Variant, dsn: str, sizes: Sizes) -> Figures:
    n = _slow(system, sizes.drain, sizes.drain_slow)
    with _box(system, dsn, "drain") as box:
        system.install(box)
        system.enqueue_setup(box, n)
        analyze_backlog(box)
        system.drain_figures = {}
        seconds = system.drain(box, variant, n)
    return {"jobs_per_s": n / seconds, "seconds": seconds, "jobs": n, **system.drain_figures}


def run_steady(system: System, variant: Variant, dsn: str, sizes: Sizes) -> Figures:
    with _box(system, dsn, "steady") as box:
        system.install(box)
        result = system.steady(box, variant, sizes.steady_seconds)
    return {"processed_per_s": result.processed / result.seconds,
            "enqueued_per_s": result.enqueued / result.seconds,
            "backlog_at_end": result.enqueued - result.processed}


def _percentile(ordered: list[float], q: float) -> float:
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def run_latency(system: System, variant: Variant, dsn: str, sizes: Sizes) -> Figures:
    with _box(system, dsn, "latency") as box:
        system.install(box)
        seen = sorted(system.latency(box, variant, sizes.latency_count, sizes.latency_interval))
    if not seen:
        raise RuntimeError("no job reached its handler")
    return {"p50_ms": _percentile(seen, 0.50) * 1000, "p95_ms": _percentile(seen, 0.95) * 1000,
            "p99_ms": _percentile(seen, 0.99) * 1000, "mean_ms": statistics.fmean(seen) * 1000,
            "missed": sizes.latency_count - len(seen)}


#: The loaded-latency scenario offers this fraction of the drain rate it measures first.
LOAD_FRACTION = 0.5


def loaded_figures(result: LoadedResult, rate: float, drain_per_s: float) -> Figures:
    """The loaded-latency figures of one run: pickup-latency percentiles of every job the
    producer enqueued, the rates offered and processed over the producer's window."""
    probe = result.probe
    seen = sorted(probe.latencies())
    if not seen:
        raise RuntimeError("no job reached its handler")
    window = result.window_end - result.window_start
    sent = sum(c is not None for c in probe.committed)
    in_window = sum(s is not None and s <= result.window_end for s in probe.started)
    return {"p50_ms": _percentile(seen, 0.50) * 1000, "p95_ms": _percentile(seen, 0.95) * 1000,
            "p99_ms": _percentile(seen, 0.99) * 1000, "max_ms": seen[-1] * 1000,
            "processed_per_s": in_window / window, "offered_per_s": sent / window,
            "target_rate": rate, "drain_per_s": drain_per_s, "jobs": sent,
            "missed": sent - len(seen)}


def run_loaded(system: System, variant: Variant, dsn: str, sizes: Sizes) -> Figures:
    # The offered load is set from a drain measured in the same sandbox, with the same
    # configuration, just before: LOAD_FRACTION of it, paced for steady_seconds.
    n = sizes.loaded_drain
    with _box(system, dsn, "loaded") as box:
        system.install(box)
        system.enqueue_setup(box, n)
        analyze_backlog(box)
        drain_per_s = n / system.drain(box, variant, n)
        rate = LOAD_FRACTION * drain_per_s
        result = system.loaded(box, variant, LoadPlan(rate, sizes.steady_seconds,
                                                      sizes.loaded_tick))
    return loaded_figures(result, rate, drain_per_s)


def run_bulk(system: System, variant: Variant, dsn: str, sizes: Sizes) -> Figures:
    n = _slow(system, sizes.bulk, sizes.bulk_slow)
    with _box(system, dsn, "bulk") as box:
        system.install(box)
        seconds = system.bulk_enqueue(box, n, **variant.options.get("enqueue", {}))
    return {"jobs_per_s": n / seconds, "jobs": n}


def run_single(system: System, variant: Variant, dsn: str, sizes: Sizes) -> Figures:
    with _box(system, dsn, "single") as box:
        system.install(box)
        seconds = system.single_enqueue(box, sizes.single, **variant.options.get("enqueue", {}))
    return {"adds_per_s": sizes.single / seconds, "ms_per_add": seconds / sizes.single * 1000}


def run_scale(system: System, variant: Variant, dsn: str, sizes: Sizes) -> Figures:
    # Both backlogs live side by side and their drain windows alternate, so a burst of load
    # from elsewhere hits both alike; the small one is refilled before each of its windows.
    small, large, take = sizes.scale_small, sizes.scale_large, sizes.scale_take
    spent = {small: 0.0, large: 0.0}
    with ExitStack() as stack:
        boxes = {}
        for backlog in (small, large):
            boxes[backlog] = stack.enter_context(_box(system, dsn, "scale"))
            system.install(boxes[backlog])
            fill_golemq_table(boxes[backlog], backlog)  # INSERT ... SELECT generate_series
            analyze_backlog(boxes[backlog])
        for round_ in range(sizes.scale_rounds):
            for backlog, box in boxes.items():
                if backlog == small and round_ > 0:
                    fill_golemq_table(box, take)
                    analyze_backlog(box)
                spent[backlog] += system.drain_partial(box, variant, take)
    rate_small = take * sizes.scale_rounds / spent[small]
    rate_large = take * sizes.scale_rounds / spent[large]
    return {"large_over_small": rate_large / rate_small, "small_per_s": rate_small,
            "large_per_s": rate_large, "backlog_small": small, "backlog_large": large}


def run_after_vacuum(system: System, variant: Variant, dsn: str, sizes: Sizes) -> Figures:
    # Both drains in one sandbox by one set of consumers (System.drain_twice: golemq-pg's
    # pool and its prepared statements outlive the first drain). Between them, with nothing
    # consuming: the history (the "@1M" configurations), the second backlog, then the
    # VACUUM ANALYZE autovacuum would run on the idle queue (instead of analyze_backlog).
    n = sizes.after_vacuum
    history = sizes.after_vacuum_history if variant.options.get("history") else 0
    scopes = int(variant.options.get("scopes", 0))
    interleaved = bool(variant.options.get("interleaved"))
    finished = [0]
    with _box(system, dsn, "after_vacuum") as box:
        system.install(box)
        system.enqueue_setup(box, n, scopes=scopes, interleaved=interleaved)
        analyze_backlog(box)

        def idle_upkeep() -> None:
            if history:
                fill_golemq_history(box, history)
            system.enqueue_setup(box, n, scopes=scopes, interleaved=interleaved)
            finished[0] = count_golemq_finished(box)
            vacuum_analyze(box)

        first, second = system.drain_twice(box, variant, n, idle_upkeep)
    return {"second_over_first": first / second, "first_per_s": n / first,
            "second_per_s": n / second, "finished_rows": finished[0], "jobs": n}


def _ms_percentiles(seconds: list[float], prefix: str) -> Figures:
    seen = sorted(seconds)
    if not seen:
        return {}
    return {f"{prefix}p50_ms": _percentile(seen, 0.50) * 1000,
            f"{prefix}p99_ms": _percentile(seen, 0.99) * 1000}


def run_workflow(system: System, variant: Variant, dsn: str, sizes: Sizes) -> Figures:
    count = sizes.workflows
    with _box(system, dsn, "workflow") as box:
        system.install(box)
        if variant.options.get("history"):  # a queue that has run a while: not timed
            fill_golemq_history(box, sizes.after_vacuum_history)
            analyze_backlog(box)
        result = system.workflows(box, variant, count)
    jobs = count * JOBS_PER_WORKFLOW
    figures: Figures = {"jobs_per_s": jobs / result.seconds, "seconds": result.seconds,
                        "workflows": count, "jobs": jobs}
    if result.add_seconds:
        figures["add_seconds"] = result.add_seconds
    if result.linked:
        edges = result.probe.edge_latencies()
        every = edges["fan_out"] + edges["fan_in"]
        if len(every) != count * (JOBS_PER_WORKFLOW - 1) or min(every) <= 0:
            raise RuntimeError("a workflow job ran before its parents had all run")
        figures.update(_ms_percentiles(every, ""))
        figures.update(_ms_percentiles(edges["fan_in"], "fan_in_"))
    if result.idle_pickup:
        figures.update(_ms_percentiles(result.idle_pickup, "idle_"))
    if result.idle_chain:
        figures.update(_ms_percentiles(result.idle_chain, "chain_"))
    return figures


def run_rss(system: System, variant: Variant, dsn: str, sizes: Sizes) -> Figures:
    n = _slow(system, sizes.rss, sizes.rss_slow)
    with _box(system, dsn, "rss") as box:
        system.install(box)
        system.enqueue_setup(box, n)
        analyze_backlog(box)
        peak_bytes, seconds = drain_in_child(system, variant, box, n)
    return {"peak_rss_mb": peak_bytes / 2**20, "jobs_per_s": n / seconds, "jobs": n}


def run_guarded(system: System, variant: Variant, dsn: str, sizes: Sizes) -> Figures:
    with _box(system, dsn, "guarded") as box:
        system.install(box)
        system.enqueue_setup(box, sizes.guarded, scopes=int(variant.options.get("scopes", 0)),
                             interleaved=bool(variant.options.get("interleaved")))
        analyze_backlog(box)
        seconds = system.drain(box, variant, sizes.guarded)
    return {"jobs_per_s": sizes.guarded / seconds, "jobs": sizes.guarded}


def run_dashboard(system: System, variant: Variant, dsn: str, sizes: Sizes) -> Figures:
    with _box(system, dsn, "dashboard") as box:
        system.install(box)
        dashboard.fill(box, sizes.dashboard_rows)
        figures = dashboard.measure(box, sizes.dashboard_rounds)
    return {**figures, "rows": sizes.dashboard_rows}


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("drain", "Drain (burn-down) throughput",
             "N no-op jobs are enqueued first (not timed), then consumed until the queue is "
             "empty; jobs/s = N / wall time of the consumers. golemq-pg's CPU per job: the "
             "client's (process_time of the worker's process over the drain, every thread) "
             "and the host's (/proc/stat busy time: client and PostgreSQL) / N; a "
             "traced drain's run also measures one OpenTelemetry SDK span of the CONSUMER "
             "span's shape through the same provider (benchmarks/systems/otel_cost.py).",
             (Metric("jobs_per_s", "jobs/s"),
              Metric("cpu_us_per_job", "client CPU us/job", higher_is_better=False),
              Metric("host_cpu_us_per_job", "host CPU us/job", higher_is_better=False),
              Metric("sdk_span_us", "one SDK span us", higher_is_better=False)), run_drain),
    Scenario("steady", "Steady state",
             "One producer enqueues batches of 100 as fast as it can while the consumers run, "
             "for a fixed time; jobs/s processed (and enqueued) over that window.",
             (Metric("processed_per_s", "processed/s"), Metric("enqueued_per_s", "enqueued/s"),
              Metric("backlog_at_end", "backlog", higher_is_better=False)), run_steady),
    Scenario("latency", "Latency, idle worker",
             "An idle worker; one job every 20 ms from another thread; time from the enqueue "
             "call (which commits) to the handler starting. Includes the enqueue round trip.",
             (Metric("p50_ms", "p50 ms", higher_is_better=False),
              Metric("p95_ms", "p95 ms", higher_is_better=False),
              Metric("p99_ms", "p99 ms", higher_is_better=False)), run_latency),
    Scenario("loaded", "Latency under steady load",
             "First N no-op jobs are drained (N = 20,000; 2,000 with --quick) to measure the "
             "configuration's drain rate in this run and sandbox; then, with the consumers "
             "running, one producer enqueues at half that rate (one enqueue call of "
             "rate x 10 ms jobs every 10 ms: add_many, PGQueuer's list enqueue, raw INSERT "
             "... SELECT generate_series) for the steady window (10 s; 1 s with --quick). "
             "Pickup latency as in the idle scenario, from just before the enqueue call "
             "(which commits) to the handler starting, for every job the producer sent; "
             "processed/s and offered/s over the producer's window.",
             (Metric("p50_ms", "p50 ms", higher_is_better=False),
              Metric("p95_ms", "p95 ms", higher_is_better=False),
              Metric("p99_ms", "p99 ms", higher_is_better=False),
              Metric("processed_per_s", "processed/s"), Metric("offered_per_s", "offered/s"),
              Metric("drain_per_s", "drain jobs/s")), run_loaded,
             systems=("raw-sql", "pgqueuer", "golemq-pg")),
    Scenario("bulk", "Bulk enqueue",
             "N jobs through the bulk API (golemq-pg add_many, PGQueuer list enqueue in chunks "
             "of 10k, Procrastinate batch_defer in chunks of 5k, raw COPY).",
             (Metric("jobs_per_s", "jobs/s"),), run_bulk),
    Scenario("single", "Single enqueue",
             "N jobs enqueued one call (one transaction) at a time; the ceiling is a bare "
             "INSERT + COMMIT.",
             (Metric("adds_per_s", "adds/s"), Metric("ms_per_add", "ms/add", False)), run_single),
    Scenario("scale", "Claim cost vs backlog size",
             "Backlogs are inserted with INSERT ... SELECT generate_series into golemq-pg's "
             "table shape; K jobs are drained from each in alternating windows (the small "
             "backlog refilled before each); drain rate with the large backlog divided by "
             "the rate with the small one.",
             (Metric("large_over_small", "large/small"), Metric("small_per_s", "small jobs/s"),
              Metric("large_per_s", "large jobs/s")), run_scale,
             systems=("raw-sql", "golemq-pg")),
    Scenario("after-vacuum", "Drain after an idle VACUUM ANALYZE",
             "In one sandbox: N no-op jobs are enqueued, analyzed and drained (N = 30,000; "
             "2,000 with --quick); then, with nothing consuming, N more are enqueued (the "
             "\"@1M\" configurations first insert 1,000,000 succeeded rows of history with "
             "INSERT ... SELECT generate_series; full runs only) and every table of the "
             "sandbox gets a VACUUM ANALYZE, as autovacuum would give an idle queue; then "
             "the second backlog is drained by the same worker configuration on the same "
             "store, whose pooled connections keep the statements prepared in the first "
             "drain. 2nd/1st = the second drain's jobs/s over the first's, per run; "
             "finished rows = succeeded rows in the table at the VACUUM.",
             (Metric("second_over_first", "2nd/1st"), Metric("first_per_s", "1st jobs/s"),
              Metric("second_per_s", "2nd jobs/s"), Metric("finished_rows", "finished rows")),
             run_after_vacuum, systems=("golemq-pg",)),
    Scenario("rss", "Worker RSS while draining",
             "The consumer runs in a child process that drains N jobs; its RSS is sampled "
             "every 20 ms with psutil; the peak is reported.",
             (Metric("peak_rss_mb", "peak RSS MB", higher_is_better=False),
              Metric("jobs_per_s", "jobs/s")), run_rss),
    Scenario("guarded", "Guarded claims",
             "Drain throughput with serialize_by_scope over 1,000 scopes and with a resource "
             "pool, against the same worker unguarded. The scoped backlog is loaded two ways: "
             "each scope's jobs in a row (scope by scope, the worst case for a claim-order "
             "window) and arriving in turn, and each layout is also drained unguarded: "
             "scoped rows cost more to claim and complete than unscoped ones whatever the "
             "guard, so the guard's own cost is the ratio to the same backlog unguarded. "
             "The pool is run twice: with a cap as "
             "wide as the handler (32), which binds (the pool counts leased jobs, so nothing "
             "is prefetched: each job waits for a claim, and for the committed completions "
             "that free its room), and with a cap above all one worker leases at once, which "
             "measures what the guard itself costs. The plain raw-SQL loop that never holds more "
             "than 32 leased jobs (claim 32, complete 32, one thread) is set beside the "
             "binding pool for reference.",
             (Metric("jobs_per_s", "jobs/s"),), run_guarded,
             systems=("raw-sql", "golemq-pg")),
    Scenario("workflow", "Workflows: fetch -> 10 x extract -> index",
             "Workflows of 12 no-op jobs each (fetch, then ten extract jobs once it has "
             "finished, then index once all ten have), timed from the first add to the last "
             "job's handler; the worker runs (idle) before the clock starts. golemq-pg: "
             "Workflow + queue.add_workflows, 100 workflows a call, the extract and index "
             "handlers reading job.parents (as users do); the same without the read; with "
             "queue.add_workflow, one call per workflow; with the read beside 1,000,000 "
             "finished rows of history (loaded and analyzed first, not timed); the same jobs "
             "without dependencies added with add_many on the same clock; and the same jobs "
             "as a backlog drained with run_until_empty (the drain scenario's clock). Chancy: "
             "its WorkflowPlugin (Workflow + WorkflowPlugin.push, one call per workflow) "
             "on an async-executor queue of concurrency 32, at its default outcome flush "
             "(1 s) and at 0.05 s. Parent -> child: each child's handler start minus its "
             "latest parent's (handler timestamps in the worker's process; a no-op ends "
             "microseconds after it starts); fan-in = the last extract -> index. golemq-pg's "
             "workflow run first sends 50 single jobs, one every 20 ms, to the same idle "
             "worker: their commit -> handler start is its idle pickup latency. \"Of which "
             "adding\": from the first add to the return of the last (the worker runs "
             "meanwhile).",
             (Metric("jobs_per_s", "jobs/s"),
              Metric("seconds", "seconds", higher_is_better=False),
              Metric("add_seconds", "of which adding", higher_is_better=False),
              Metric("p50_ms", "parent->child p50 ms", higher_is_better=False),
              Metric("p99_ms", "parent->child p99 ms", higher_is_better=False),
              Metric("fan_in_p50_ms", "fan-in p50 ms", higher_is_better=False),
              Metric("idle_p50_ms", "idle pickup p50 ms", higher_is_better=False)),
             run_workflow, systems=("golemq-pg", "chancy")),
    Scenario("dashboard", "Web dashboard page cost",
             "A jobs table of 1,000,000 rows (generate_series: 95% succeeded over the last "
             "days, 4% pending, 0.9% dead letters, 0.1% running, 10% tagged, 21 types); every "
             "route of golemq_pg.web requested in process through httpx's ASGI transport, "
             "15 rounds after a warm-up; the median per route in ms (target: < 250 ms each).",
             (Metric("slowest_page_ms", "slowest page ms", higher_is_better=False),
              Metric("overview_ms", "overview ms", higher_is_better=False),
              Metric("jobs_rare_type_ms", "jobs?type=rare ms", higher_is_better=False),
              Metric("failed_ms", "dead letters ms", higher_is_better=False)), run_dashboard,
             systems=("golemq-pg",)),
)


def scenario_named(name: str) -> Scenario:
    """The scenario called ``name``."""
    for scenario in SCENARIOS:
        if scenario.name == name:
            return scenario
    raise KeyError(name)


__all__ = ["FULL", "QUICK", "SCENARIOS", "Figures", "Metric", "Scenario", "Sizes",
           "UnsupportedError", "scenario_named"]
