"""Turning outcomes into ratios, a terminal table, a JSON file, a PNG chart and
benchmarks/RESULTS.md."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from benchmarks.runner import Outcome
from benchmarks.scenarios import SCENARIOS, Metric, Scenario, Sizes, scenario_named
from benchmarks.systems import Variant, system_named
from benchmarks.systems.golemq_sys import CONCURRENCY, FEATURES_ON, FEATURES_SUFFIX

#: The systems whose reference configuration every figure is compared with.
REFERENCES = (("pgqueuer", "÷ PGQueuer best"), ("raw-sql", "÷ raw ceiling"),
              ("golemq-pg", "÷ unguarded"))
COLORS = {"raw-sql": "#7f7f7f", "pgqueuer": "#1f77b4", "procrastinate": "#ff7f0e",
          "chancy": "#9467bd", "golemq-pg": "#2ca02c"}


def _fmt(metric: str, value: float | None) -> str:
    if value is None:
        return "-"
    if metric.endswith(("_ms", "_mb", "_over_small")) or abs(value) < 100:
        return f"{value:,.2f}"
    return f"{value:,.0f}"


def _ok(outcome: Outcome) -> bool:
    return bool(outcome.runs) and outcome.error is None


def reference_value(outcomes: list[Outcome], scenario: Scenario, system: str) -> float | None:
    """The best median of ``system``'s reference configurations in ``scenario``."""
    metric = scenario.primary
    values = [o.median()[metric.key] for o in outcomes
              if o.scenario is scenario and o.system.name == system and o.variant.reference
              and _ok(o) and metric.key in o.median()]
    if not values:
        return None
    return max(values) if metric.higher_is_better else min(values)


def _reference_runs(outcomes: list[Outcome], scenario: Scenario,
                    system: str) -> list[float | None]:
    """Per run index, the best figure among ``system``'s reference configurations."""
    metric = scenario.primary
    refs = [o for o in outcomes if o.scenario is scenario and o.system.name == system
            and o.variant.reference and _ok(o)]
    pick = max if metric.higher_is_better else min
    best: list[float | None] = []
    for i in range(max((len(o.runs) for o in refs), default=0)):
        values = [o.runs[i][metric.key] for o in refs
                  if i < len(o.runs) and metric.key in o.runs[i]]
        best.append(pick(values) if values else None)
    return best


def ratio_runs(outcomes: list[Outcome], outcome: Outcome) -> dict[str, list[float]]:
    """The outcome's primary figure divided by each reference, run by run (run i of both was
    measured in the same pass, minutes apart)."""
    if not _ok(outcome):
        return {}
    key = outcome.scenario.primary.key
    found: dict[str, list[float]] = {}
    for system, _label in REFERENCES:
        refs = _reference_runs(outcomes, outcome.scenario, system)
        pairs = [run[key] / ref for run, ref in zip(outcome.runs, refs, strict=False)
                 if key in run and ref]
        if pairs:
            found[system] = pairs
    return found


def ratios(outcomes: list[Outcome], outcome: Outcome) -> dict[str, float]:
    """The outcome's primary figure divided by each reference: the median of the per-run
    ratios (:func:`ratio_runs`)."""
    return {system: statistics.median(pairs)
            for system, pairs in ratio_runs(outcomes, outcome).items()}


def paired_runs(outcome: Outcome, reference: Outcome, key: str | None = None) -> list[float]:
    """Run by run, ``outcome``'s figure ``key`` (default: the scenario's primary one) over
    ``reference``'s (run i of both measured in the same pass)."""
    key = key or outcome.scenario.primary.key
    return [run[key] / ref[key] for run, ref in zip(outcome.runs, reference.runs, strict=False)
            if key in run and ref.get(key)]


def same_batch_runs(outcomes: list[Outcome], outcome: Outcome, batch: int) -> list[float]:
    """Run by run, ``outcome`` over the raw ceiling's best thread count at claim batch
    ``batch`` (run i of both measured in the same pass)."""
    key = outcome.scenario.primary.key
    raw = [o for o in outcomes if o.scenario is outcome.scenario
           and o.system.name == "raw-sql" and o.variant.options.get("batch") == batch
           and _ok(o)]
    pairs: list[float] = []
    for i, run in enumerate(outcome.runs):
        refs = [o.runs[i][key] for o in raw if i < len(o.runs) and key in o.runs[i]]
        if refs and key in run and max(refs):
            pairs.append(run[key] / max(refs))
    return pairs


# -- targets -----------------------------------------------------------------------------------
#: How many interleaved runs a verdict needs before "met" means more than one lucky pass.
VERDICT_RUNS = 5


@dataclass(frozen=True, slots=True)
class Target:
    """One target and what this run measured for it.

    ``ratio`` is the figure the target is stated on: golemq-pg over the named reference
    (``of``: a peer, the raw ceiling, the plain drain; the median of the per-run ratios), or,
    for an absolute bound, the measured median over the bound (``of`` = "the bound").
    ``runs`` holds the per-run ratios the median was taken of (empty: one figure only), and
    ``every_run`` whether each of them meets the target too.
    """

    text: str
    measured: str
    ok: bool
    ratio: float | None = None
    of: str = ""
    source: str = "docs/BENCHMARKS.md"
    runs: tuple[float, ...] = ()
    every_run: bool = False

    @property
    def ratio_text(self) -> str:
        """The ratio as the tables print it, e.g. ``0.71x raw B=500``."""
        if self.ratio is None:
            return "-"
        return f"{self.ratio:.2f}x {self.of}".rstrip()

    @property
    def spread_text(self) -> str:
        """The per-run ratios' count and range, e.g. ``5 runs: 0.68x to 0.83x``."""
        if len(self.runs) < 2:
            return f"{len(self.runs)} run" if self.runs else "-"
        return f"{len(self.runs)} runs: {min(self.runs):.2f}x to {max(self.runs):.2f}x"

    @property
    def verdict(self) -> str:
        """"met in every run" (the median and each of at least :data:`VERDICT_RUNS` runs),
        "met" (the median), or "NOT met"."""
        if not self.ok:
            return "NOT met"
        if self.every_run and len(self.runs) >= VERDICT_RUNS:
            return "met in every run"
        return "met"


def _find(outcomes: list[Outcome], scenario: str, system: str,
          key: str | None = None) -> Outcome | None:
    for o in outcomes:
        if (o.scenario.name == scenario and o.system.name == system and _ok(o)
                and (key is None or o.variant.key == key)):
            return o
    return None


def _raw_at_batch(outcomes: list[Outcome], scenario: Scenario, batch: int) -> float | None:
    """The median figure of the raw ceiling's best thread count at claim batch ``batch``."""
    key = scenario.primary.key
    raw = [o.median()[key] for o in outcomes if o.scenario is scenario
           and o.system.name == "raw-sql" and o.variant.options.get("batch") == batch
           and _ok(o) and key in o.median()]
    return max(raw) if raw else None


def _rate(value: float | None, unit: str = "jobs/s") -> str:
    return "-" if value is None else f"{value:,.0f} {unit}"


def _meets(value: float, at_least: float | None, at_most: float | None) -> bool:
    if at_least is not None:
        return value >= at_least
    if at_most is not None:
        return value <= at_most
    raise ValueError("a target needs at_least or at_most")


class _Checks:
    """The rows of the target table, each added where this run measured its figures."""

    def __init__(self) -> None:
        self.found: list[Target] = []

    def ratio(self, text: str, source: str, measured: str,
              ratio: float | Sequence[float] | None, of: str, *,
              at_least: float | None = None, at_most: float | None = None) -> None:
        """A target on a ratio to a reference: met when the ratio is >= ``at_least`` (or <=
        ``at_most``). ``ratio``: the per-run ratios (their median is the verdict's; each run
        is checked too) or one figure (None or no runs: not measured, no row)."""
        if ratio is None:
            return
        runs: tuple[float, ...] = ()
        if not isinstance(ratio, float | int):
            runs = tuple(ratio)
            if not runs:
                return
            ratio = statistics.median(runs)
        ok = _meets(ratio, at_least, at_most)
        every = bool(runs) and all(_meets(r, at_least, at_most) for r in runs)
        self.found.append(Target(text, measured, ok, ratio, of, source, runs, every))

    def worst_run(self, text: str, source: str, measured: str, per_run: list[float], of: str,
                  *, at_least: float) -> None:
        """A target every run must meet, not only the median: met when the lowest of the
        per-run ratios ``per_run`` is >= ``at_least`` (that lowest ratio is its ratio)."""
        if per_run:
            ok = min(per_run) >= at_least
            self.found.append(Target(text, measured, ok, min(per_run), of, source,
                                     tuple(per_run), ok))

    def bound(self, text: str, source: str, value: float | None, unit: str, *,
              at_least: float | None = None, below: float | None = None,
              at_most: float | None = None, runs: Sequence[float] = ()) -> None:
        """A target on an absolute figure (``value``: the median of ``runs`` when given);
        its ratio is the value over the bound."""
        if value is None:
            return
        limit = at_least if at_least is not None else below if below is not None else at_most
        if limit is None:
            raise ValueError("a bound needs at_least, below or at_most")

        def meets(v: float) -> bool:
            if at_least is not None:
                return v >= at_least
            if below is not None:
                return v < below
            return v <= limit

        shown = f"{value:,.0f}" if abs(value) >= 1000 else f"{value:,.2f}"
        per_run = tuple(v / limit for v in runs)
        self.found.append(Target(text, f"{shown}{unit}", meets(value), value / limit,
                                 "the bound", source, per_run,
                                 bool(runs) and all(meets(v) for v in runs)))


def targets(outcomes: list[Outcome]) -> list[Target]:
    """Check golemq-pg's figures of this run against the targets of docs/BENCHMARKS.md and of
    issues 16, 17, 19, 37, 42 and 44 (where measured): medians of the runs, ratios as the median of
    the per-run ratios (run i of both sides measured in the same pass); the after-vacuum
    drains also in their worst run."""
    checks = _Checks()
    _drain_targets(outcomes, checks)
    _latency_targets(outcomes, checks)
    _enqueue_targets(outcomes, checks)
    _guarded_targets(outcomes, checks)
    _after_vacuum_targets(outcomes, checks)
    _workflow_targets(outcomes, checks)
    scale = _find(outcomes, "scale", "golemq-pg")
    if scale:
        m = scale.median()
        checks.ratio(f"drain rate at {m['backlog_large']:,.0f} pending >= 0.8x the rate at "
                     f"{m['backlog_small']:,.0f}", "docs/BENCHMARKS.md",
                     f"{_rate(m['large_per_s'])} vs {_rate(m['small_per_s'])}",
                     [r["large_over_small"] for r in scale.runs if "large_over_small" in r],
                     f"the rate at {m['backlog_small']:,.0f}",
                     at_least=0.8)
    rss = _find(outcomes, "rss", "golemq-pg")
    if rss:
        checks.bound("worker RSS < 150 MB while draining", "docs/BENCHMARKS.md; issue 19",
                     rss.median()["peak_rss_mb"], " MB", below=150,
                     runs=[r["peak_rss_mb"] for r in rss.runs])
    return checks.found


def _drain_targets(outcomes: list[Outcome], checks: _Checks) -> None:
    plain = _find(outcomes, "drain", "golemq-pg", f"c{CONCURRENCY}")
    if plain:
        r = ratio_runs(outcomes, plain)
        drain = scenario_named("drain")
        measured = (f"golemq-pg {_rate(plain.median()['jobs_per_s'])}, PGQueuer best "
                    f"{_rate(reference_value(outcomes, drain, 'pgqueuer'))}")
        checks.ratio("drain >= 2.5x PGQueuer's best", "docs/BENCHMARKS.md; issue 44", measured,
                     r.get("pgqueuer"), "PGQueuer best", at_least=2.5)
        checks.ratio("drain >= 3x PGQueuer's best configuration", "issue 19", measured,
                     r.get("pgqueuer"), "PGQueuer best", at_least=3.0)
    # "At the same batch size": each golemq-pg configuration against the ceiling's best
    # thread count at its batch size (the default claims up to 500 jobs at a time).
    for key, batch, label, source in (
            (f"c{CONCURRENCY}b100", 100, "batch_size=100", "docs/BENCHMARKS.md"),
            (f"c{CONCURRENCY}", 500, "default batch (<= 500)", "docs/BENCHMARKS.md; issue 44"),
            (FEATURES_ON, 500, "every feature on: result stored, registry heartbeats, "
                               "completion NOTIFY, PrometheusObserver; default batch (<= 500)",
             "issues 19 and 44"),
            (f"c{CONCURRENCY}b100{FEATURES_SUFFIX}", 100,
             "every feature on, batch_size=100", "issue 19")):
        same = _find(outcomes, "drain", "golemq-pg", key)
        if same:
            raw = _raw_at_batch(outcomes, same.scenario, batch)
            checks.ratio(f"drain >= 0.8x the raw-SQL ceiling at B={batch} ({label})", source,
                         f"golemq-pg {_rate(same.median()['jobs_per_s'])}, raw B={batch} "
                         f"{_rate(raw)}", same_batch_runs(outcomes, same, batch),
                         f"raw B={batch}", at_least=0.8)
    for key, label, source, floor in (
            (f"c{CONCURRENCY}-async", "async-handler drain >= 0.7x the sync drain (same runs)",
             "issue 17", 0.7),
            (f"c{CONCURRENCY}+prometheus", "drain with PrometheusObserver >= 0.95x the plain "
                                           "drain", "issue 16", 0.95),
            (f"c{CONCURRENCY}+otel1pct", "drain with OpenTelemetry tracing sampled at 1% "
                                         "(ParentBased(TraceIdRatioBased(0.01))) >= 0.95x the "
                                         "plain drain", "issue 44", 0.95)):
        variant = _find(outcomes, "drain", "golemq-pg", key)
        if variant and plain:
            checks.ratio(label, source,
                         f"{_rate(variant.median()['jobs_per_s'])} vs "
                         f"{_rate(plain.median()['jobs_per_s'])}",
                         paired_runs(variant, plain), "the plain drain", at_least=floor)
    traced = _find(outcomes, "drain", "golemq-pg", f"c{CONCURRENCY}+otel")
    if traced and plain:
        _tracing_target(traced, plain, checks)
    # Honest running (the claim leaves the start to the handler's, written with the outcome
    # or by the marker) against the same drain with the claim stamping the start, as before.
    before = _find(outcomes, "drain", "golemq-pg", f"c{CONCURRENCY}-claimstart")
    if before and plain:
        checks.ratio("drain with honest running >= 0.97x the drain with claim-time starts "
                     "(same runs)", "issue 41",
                     f"{_rate(plain.median()['jobs_per_s'])} vs "
                     f"{_rate(before.median()['jobs_per_s'])}",
                     paired_runs(plain, before), "the claim-time-start drain", at_least=0.97)


#: The drain's CPU per job (microseconds), measured over the timed drain: the client's
#: (process_time) and the whole host's (client + PostgreSQL, /proc/stat busy time); in a
#: traced drain's runs also the SDK's own CPU for one span of the same shape, measured in the
#: same pass (benchmarks/systems/otel_cost.py).
CPU_PER_JOB = "cpu_us_per_job"
HOST_CPU_PER_JOB = "host_cpu_us_per_job"
SDK_SPAN = "sdk_span_us"


def _tracing_target(traced: Outcome, plain: Outcome, checks: _Checks) -> None:
    """The traced drain against the best case the SDK allows: the plain drain slowed by
    exactly one SDK span's CPU per job on top of the host's CPU per job (client and server
    share the cores), run by run; and golemq-pg's own share of the extra CPU per job."""
    best, own = [], []
    for t, p in zip(traced.runs, plain.runs, strict=False):
        key = HOST_CPU_PER_JOB if t.get(HOST_CPU_PER_JOB) and p.get(HOST_CPU_PER_JOB) \
            else CPU_PER_JOB
        if not t.get(SDK_SPAN) or not p.get(key) or key not in t:
            continue
        best_rate = p["jobs_per_s"] * p[key] / (p[key] + t[SDK_SPAN])
        best.append(t["jobs_per_s"] / best_rate)
        extra = t[CPU_PER_JOB] - p[CPU_PER_JOB]  # the span's CPU is the client's
        if extra > 0:
            own.append(max(0.0, extra - t[SDK_SPAN]) / extra)
    if not best:
        return
    tm, pm = traced.median(), plain.median()
    share = f"{statistics.median(own):.0%}" if own else "none"
    host = (f", host {tm[HOST_CPU_PER_JOB]:.1f} vs {pm[HOST_CPU_PER_JOB]:.1f} us"
            if HOST_CPU_PER_JOB in tm and HOST_CPU_PER_JOB in pm else "")
    checks.ratio("drain with OpenTelemetry tracing >= 0.9x the best case the SDK allows "
                 "(the plain drain slowed by one SDK span's CPU per job)", "issue 44",
                 f"{_rate(tm['jobs_per_s'])} vs plain {_rate(pm['jobs_per_s'])}; CPU per job: "
                 f"client {tm[CPU_PER_JOB]:.1f} vs {pm[CPU_PER_JOB]:.1f} us{host}; one SDK "
                 f"span {tm[SDK_SPAN]:.1f} us; golemq-pg's own share of the extra client "
                 f"CPU {share}", best, "the best case", at_least=0.9)


def _latency_targets(outcomes: list[Outcome], checks: _Checks) -> None:
    notify = _find(outcomes, "latency", "golemq-pg", "notify")
    listen = _find(outcomes, "latency", "raw-sql", "listen")
    if notify:
        m = notify.median()
        checks.bound("latency p50 <= 3 ms (LISTEN/NOTIFY)", "docs/BENCHMARKS.md", m["p50_ms"],
                     " ms", at_most=3, runs=[r["p50_ms"] for r in notify.runs])
        checks.bound("latency p99 <= 10 ms (LISTEN/NOTIFY)", "docs/BENCHMARKS.md", m["p99_ms"],
                     " ms", at_most=10, runs=[r["p99_ms"] for r in notify.runs])
        if listen:
            lm = listen.median()
            for pct, limit, source in (("p50", 1.3, "issues 19 and 44"), ("p99", 1.5, "issue 44")):
                checks.ratio(f"idle pickup latency {pct} <= {limit}x the raw LISTEN loop's",
                             source, f"{pct} {m[f'{pct}_ms']:.2f} ms, raw LISTEN "
                             f"{lm[f'{pct}_ms']:.2f} ms",
                             paired_runs(notify, listen, f"{pct}_ms"), "raw LISTEN",
                             at_most=limit)
        checks.bound("idle pickup latency p99 <= 5 ms", "issue 19", m["p99_ms"], " ms",
                     at_most=5, runs=[r["p99_ms"] for r in notify.runs])
    loaded = _find(outcomes, "loaded", "golemq-pg")
    if loaded:
        m = loaded.median()
        checks.bound(f"pickup latency p99 <= 20 ms under steady load at half the drain rate "
                     f"(p50 {m['p50_ms']:.2f} ms, {m['processed_per_s']:,.0f} processed/s of "
                     f"{m['offered_per_s']:,.0f} offered, drain {m['drain_per_s']:,.0f}/s)",
                     "issue 19", m["p99_ms"], " ms", at_most=20,
                     runs=[r["p99_ms"] for r in loaded.runs])
        raw = _find(outcomes, "loaded", "raw-sql")
        if raw:
            checks.ratio("pickup latency p99 under steady load at half the drain rate <= 1.5x "
                         "the raw LISTEN loop's (each at half its own drain rate)", "issue 44",
                         f"p99 {m['p99_ms']:.2f} ms, raw loop {raw.median()['p99_ms']:.2f} ms",
                         paired_runs(loaded, raw, "p99_ms"), "the raw loop", at_most=1.5)


def _enqueue_targets(outcomes: list[Outcome], checks: _Checks) -> None:
    bulk = _find(outcomes, "bulk", "golemq-pg", f"c{CONCURRENCY}")
    if bulk:
        checks.bound("add_many >= 150k jobs/s", "docs/BENCHMARKS.md; issue 19",
                     bulk.median()["jobs_per_s"], " jobs/s", at_least=150_000,
                     runs=[r["jobs_per_s"] for r in bulk.runs])
    bulk_async = _find(outcomes, "bulk", "golemq-pg", "async")
    if bulk and bulk_async:
        # time ratio: async over sync = sync jobs/s over async jobs/s
        checks.ratio("AsyncQueue add_many within 1.2x of the sync add_many's time", "issue 17",
                     f"{_rate(bulk_async.median()['jobs_per_s'])} vs "
                     f"{_rate(bulk.median()['jobs_per_s'])}", paired_runs(bulk, bulk_async),
                     "the sync time", at_most=1.2)
    single = _find(outcomes, "single", "golemq-pg", f"c{CONCURRENCY}")
    bare = _find(outcomes, "single", "raw-sql")
    if single and bare:
        per_run = paired_runs(single, bare, "ms_per_add")
        for limit, source in ((1.2, "docs/BENCHMARKS.md (first pass)"),
                              (1.1, "docs/BENCHMARKS.md; issue 44")):
            checks.ratio(f"single add within {limit}x of a bare INSERT+COMMIT", source,
                         f"{single.median()['ms_per_add']:.3f} ms vs "
                         f"{bare.median()['ms_per_add']:.3f} ms", per_run,
                         "the time", at_most=limit)
    pgq = _find(outcomes, "single", "pgqueuer")
    for key, label, source in ((f"c{CONCURRENCY}", "single add", "issue 19"),
                               ("async", "AsyncQueue.add", "issues 17 and 44")):
        ours = _find(outcomes, "single", "golemq-pg", key)
        if ours and pgq:
            checks.ratio(f"{label} at least as fast as PGQueuer's one-job enqueue", source,
                         f"{ours.median()['ms_per_add']:.3f} ms vs PGQueuer "
                         f"{pgq.median()['ms_per_add']:.3f} ms", paired_runs(ours, pgq),
                         "PGQueuer's adds/s", at_least=1.0)


def _guarded_targets(outcomes: list[Outcome], checks: _Checks) -> None:
    unguarded = _find(outcomes, "guarded", "golemq-pg", "unguarded")

    def jobs(o: Outcome | None) -> str:
        return _rate(o.median()["jobs_per_s"]) if o else "-"

    for key, same, label in (
            ("scope", "unguarded-scoped", "serialize_by_scope (1,000 scopes, each in a row)"),
            ("scope-spread", "unguarded-spread",
             "serialize_by_scope (1,000 scopes, arrivals in turn)")):
        guarded, plain = (_find(outcomes, "guarded", "golemq-pg", k) for k in (key, same))
        if guarded and plain:
            measured = f"{jobs(guarded)} vs {jobs(plain)}"
            pair = paired_runs(guarded, plain)
            checks.ratio(f"{label} >= 0.5x the same backlog unguarded", "docs/BENCHMARKS.md",
                         measured, pair, "the same backlog unguarded", at_least=0.5)
            checks.ratio(f"{label} >= 0.7x the same backlog unguarded", "issue 19",
                         measured, pair, "the same backlog unguarded", at_least=0.7)
        if guarded:
            checks.ratio(f"{label} >= 0.5x unguarded (unscoped jobs)", "docs/BENCHMARKS.md",
                         f"{jobs(guarded)} vs {jobs(unguarded)}",
                         ratio_runs(outcomes, guarded).get("golemq-pg"), "unguarded",
                         at_least=0.5)
    open_pool = _find(outcomes, "guarded", "golemq-pg", "resource-open")
    if open_pool:
        checks.ratio("resource pool, cap above the worker's leases >= 0.5x unguarded",
                     "docs/BENCHMARKS.md", f"{jobs(open_pool)} vs {jobs(unguarded)}",
                     ratio_runs(outcomes, open_pool).get("golemq-pg"), "unguarded",
                     at_least=0.5)
    # A pool whose cap is the handler's concurrency admits a lease only after the committed
    # completion that frees its room: no statement leasing at most 32 jobs a commit beats
    # the plain claim-32 / complete-32 loop, so that loop is the ceiling (issue 44).
    binding = _find(outcomes, "guarded", "golemq-pg", "resource")
    loop = _find(outcomes, "guarded", "raw-sql", "b32x1")
    if binding and loop:
        checks.ratio(f"resource pool, cap = handler concurrency (binding) >= 0.9x the raw "
                     f"claim-{CONCURRENCY}/complete-{CONCURRENCY} loop", "issue 44",
                     f"{jobs(binding)} vs {jobs(loop)}", paired_runs(binding, loop),
                     f"the raw claim-{CONCURRENCY} loop", at_least=0.9)


#: Where the after-vacuum targets come from: the report of a drain that collapsed once
#: autovacuum had visited an idle queue.
AFTER_VACUUM_SOURCE = "issue 37"


def _after_vacuum_targets(outcomes: list[Outcome], checks: _Checks) -> None:
    # Every configuration, with and without the big history, on its own: the second drain
    # against the first of the same run (second_over_first is that per-run ratio), in the
    # median and in the worst run.
    for o in outcomes:
        if o.scenario.name != "after-vacuum" or o.system.name != "golemq-pg" or not _ok(o):
            continue
        m = o.median()
        per_run = [run["second_over_first"] for run in o.runs if "second_over_first" in run]
        rates = f"{_rate(m['second_per_s'])} after vs {_rate(m['first_per_s'])} before"
        text = (f"{o.variant.label}, {m['finished_rows']:,.0f} finished rows: the drain after "
                "an idle VACUUM ANALYZE >=")
        checks.ratio(f"{text} 0.9x the drain before it (median)", AFTER_VACUUM_SOURCE, rates,
                     m["second_over_first"], "the first drain", at_least=0.9)
        checks.worst_run(f"{text} 0.8x the drain before it in the worst run",
                         AFTER_VACUUM_SOURCE, f"lowest of {len(per_run)} runs; {rates}",
                         per_run, "the first drain, worst run", at_least=0.8)


#: Where the workflow targets come from.
WORKFLOW_SOURCE = "issue 42"
#: Where the targets of add_workflows, job.parents and the history come from.
WORKFLOW_SPEED_SOURCE = "issue 56"


def _per_run(outcome: Outcome, key: str) -> list[float | None]:
    return [run.get(key) for run in outcome.runs]


def _workflow_targets(outcomes: list[Outcome], checks: _Checks) -> None:
    flow = _find(outcomes, "workflow", "golemq-pg", "workflow")
    if not flow:
        return
    m = flow.median()
    # Time ratios: the workflows' seconds over the plain jobs' (jobs/s the other way round).
    for key, label in (("plain", "the same jobs without dependencies, added while the worker "
                                 "runs (same clock: first add to last job)"),
                       ("plain-drain", "the same jobs' plain drain (backlog first, "
                                       "run_until_empty only)")):
        plain = _find(outcomes, "workflow", "golemq-pg", key)
        if plain:
            checks.ratio(f"workflows within 1.5x the time of {label}", WORKFLOW_SOURCE,
                         f"{m['seconds']:.2f} s vs {plain.median()['seconds']:.2f} s",
                         paired_runs(plain, flow), "the plain time", at_most=1.5)
    _workflow_speed_targets(outcomes, checks, flow)
    # Chancy's best configuration per run (its default flush and the shorter one).
    chancy = [o for o in outcomes if o.scenario.name == "workflow"
              and o.system.name == "chancy" and _ok(o)]
    per_run: list[float] = []
    for i, ours in enumerate(_per_run(flow, "seconds")):
        theirs = [o.runs[i]["seconds"] for o in chancy if i < len(o.runs)]
        if ours and theirs:
            per_run.append(min(theirs) / ours)
    if per_run:
        best = min(o.median()["seconds"] for o in chancy)
        checks.ratio("workflows >= 3x faster than Chancy's workflows (its best configuration)",
                     WORKFLOW_SOURCE, f"{m['seconds']:.2f} s vs Chancy {best:.2f} s",
                     per_run, "Chancy's time", at_least=3.0)
    # The release latency: two-job chains sent one at a time to the idle worker, against
    # single jobs sent to it the same way (the loaded run's parent -> child figures include
    # the queueing behind 24,000 jobs, reported beside it).
    pairs = [run["chain_p50_ms"] / run["idle_p50_ms"] for run in flow.runs
             if run.get("idle_p50_ms") and "chain_p50_ms" in run]
    if pairs:
        checks.ratio("parent -> child latency p50 within 2x the idle pickup latency p50 "
                     f"(idle chains; chain p99 {m['chain_p99_ms']:.2f} ms; in the loaded run "
                     f"p50 {m['p50_ms']:.2f} ms, p99 {m['p99_ms']:.2f} ms)", WORKFLOW_SOURCE,
                     f"chain p50 {m['chain_p50_ms']:.2f} ms, idle pickup p50 "
                     f"{m['idle_p50_ms']:.2f} ms",
                     pairs, "idle pickup", at_most=2.0)


def _workflow_speed_targets(outcomes: list[Outcome], checks: _Checks, flow: Outcome) -> None:
    """One add_workflow call per workflow against the plain drain, and job.parents beside a
    big history against an empty one (times: jobs/s the other way round)."""
    drain = _find(outcomes, "workflow", "golemq-pg", "plain-drain")
    each = _find(outcomes, "workflow", "golemq-pg", "workflow-each")
    if drain and each:
        checks.ratio("workflows added one add_workflow call each within 3x the time of the "
                     "same jobs' plain drain", WORKFLOW_SPEED_SOURCE,
                     f"{each.median()['seconds']:.2f} s vs {drain.median()['seconds']:.2f} s",
                     paired_runs(drain, each), "the plain time", at_most=3.0)
    history = _find(outcomes, "workflow", "golemq-pg", "workflow-history")
    if history:
        checks.ratio("workflows reading job.parents beside 1M finished rows within 1.2x the "
                     "time beside an empty history", WORKFLOW_SPEED_SOURCE,
                     f"{history.median()['seconds']:.2f} s vs {flow.median()['seconds']:.2f} s",
                     paired_runs(flow, history), "the empty history's time", at_most=1.2)


def load_outcomes(doc: dict[str, Any]) -> list[Outcome]:
    """Outcomes back from a results.json written by :func:`write_json` (to re-render)."""
    outcomes = []
    for r in doc["results"]:
        system = system_named(r["system"])
        known = [v for quick in (False, True) for v in system.variants(r["scenario"], quick)]
        variant = next((v for v in known if v.key == r["variant"]), None) or Variant(
            system.name, r["variant"], r["label"], r["options"], r["reference"])
        outcomes.append(Outcome(scenario_named(r["scenario"]), system, variant,
                                runs=r["runs"], error=r["error"]))
    return outcomes


# -- terminal ----------------------------------------------------------------------------------
def _scenario_rows(outcomes: list[Outcome], scenario: Scenario) -> list[Outcome]:
    return [o for o in outcomes if o.scenario is scenario]


def _ratio_columns(outcomes: list[Outcome], scenario: Scenario) -> list[tuple[str, str]]:
    return [(system, label) for system, label in REFERENCES
            if reference_value(outcomes, scenario, system) is not None
            and any(o.system.name != system for o in _scenario_rows(outcomes, scenario))]


def print_tables(console: Console, outcomes: list[Outcome], found: list[Target]) -> None:
    """One table per scenario, then the targets."""
    for scenario in SCENARIOS:
        rows = _scenario_rows(outcomes, scenario)
        if not rows:
            continue
        refs = _ratio_columns(outcomes, scenario)
        table = Table(title=scenario.title, title_justify="left")
        table.add_column("configuration")
        for metric in scenario.metrics:
            table.add_column(metric.label, justify="right")
        for _system, label in refs:
            table.add_column(label, justify="right")
        table.add_column("runs", justify="right")
        for o in rows:
            if o.error and not o.runs:
                table.add_row(o.variant.label, f"[red]error: {escape(o.error[:60])}[/]")
                continue
            median, r = o.median(), ratios(outcomes, o)
            table.add_row(o.variant.label,
                          *(_fmt(m.key, median.get(m.key)) for m in scenario.metrics),
                          *(f"{r[s]:.2f}x" if s in r else "-" for s, _ in refs),
                          str(len(o.runs)))
        console.print(table)
    if found:
        table = Table(title=TARGETS_TITLE, title_justify="left")
        for column in ("target", "from", "measured (medians)", "ratio", "runs", "met"):
            table.add_column(column)
        for t in found:
            table.add_row(escape(t.text), t.source, escape(t.measured), escape(t.ratio_text),
                          t.spread_text,
                          f"[green]{t.verdict}[/]" if t.ok else f"[red]{t.verdict}[/]")
        console.print(table)
        console.print(targets_summary(found))


#: The heading of the target table, on the terminal and in benchmarks/RESULTS.md.
TARGETS_TITLE = "Targets (docs/BENCHMARKS.md, issues 16, 17, 19, 37, 42 and 44)"


def targets_summary(found: list[Target]) -> str:
    """One line: how many of the measured targets this run met, and in every run."""
    missed = [t for t in found if not t.ok]
    every = sum(1 for t in found if t.verdict == "met in every run")
    return (f"{len(found) - len(missed)} of {len(found)} targets met in this run"
            + (f" ({every} in every run)" if every else "")
            + (f"; not met: {len(missed)}" if missed else ""))


# -- files -------------------------------------------------------------------------------------
def _result_json(outcomes: list[Outcome], o: Outcome) -> dict[str, Any]:
    return {"scenario": o.scenario.name, "system": o.system.name, "variant": o.variant.key,
            "label": o.variant.label, "options": dict(o.variant.options),
            "reference": o.variant.reference, "runs": o.runs,
            "median": o.median() if o.runs else {}, "ratios": ratios(outcomes, o),
            "error": o.error}


def write_json(path: Path, *, machine: dict[str, Any], sizes: Sizes, quick: bool, runs: int,
               notes: list[str], outcomes: list[Outcome], found: list[Target],
               command: str) -> None:
    """Every figure of every run, the medians, the ratios, the machine and the sizes."""
    doc = {
        "harness": {"command": command, "quick": quick, "runs": runs, "sizes": asdict(sizes),
                    "scenarios": {s.name: {"title": s.title, "method": s.method,
                                           "metrics": [asdict(m) for m in s.metrics]}
                                  for s in SCENARIOS}},
        "machine": machine,
        "notes": notes,
        "results": [_result_json(outcomes, o) for o in outcomes],
        "targets": [asdict(t) for t in found],
    }
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n", encoding="utf-8")


def write_chart(path: Path, outcomes: list[Outcome]) -> str | None:
    """Drain throughput and latency bars per configuration; returns a note when skipped."""
    try:
        import matplotlib as mpl  # noqa: PLC0415 - optional: the bench extra installs it

        mpl.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        return "chart skipped: matplotlib not installed"
    drain = [o for o in outcomes if o.scenario.name == "drain" and _ok(o)]
    latency = [o for o in outcomes if o.scenario.name == "latency" and _ok(o)]
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 6))
    labels = [o.variant.label for o in drain]
    left.barh(labels, [o.median()["jobs_per_s"] for o in drain],
              color=[COLORS.get(o.system.name, "#333333") for o in drain])
    left.set_xlabel("jobs/s (median)")
    left.set_title("Drain throughput (higher is better)")
    left.invert_yaxis()
    width = 0.27
    for offset, key in enumerate(("p50_ms", "p95_ms", "p99_ms")):
        positions = [i + (offset - 1) * width for i in range(len(latency))]
        right.barh(positions, [o.median()[key] for o in latency], height=width, label=key[:3])
    right.set_yticks(range(len(latency)), [o.variant.label for o in latency])
    right.set_xscale("log")
    right.xaxis.set_major_formatter(mpl.ticker.ScalarFormatter())
    right.set_xlabel("ms, enqueue -> handler start (log scale)")
    right.set_title("Latency, idle worker (lower is better)")
    right.invert_yaxis()
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def _loads(values: list[float] | None) -> str:
    return "/".join(f"{v:.1f}" for v in values) if values else "n/a"


#: The last column of each scenario's Markdown table: the spread its medians hide.
SPREAD_LABEL = "runs: lowest to highest"


def _spread(outcome: Outcome, key: str) -> str:
    """The lowest and the highest run of figure ``key`` ("-" with fewer than two runs)."""
    values = [run[key] for run in outcome.runs if key in run]
    if len(values) < 2:
        return "-"
    return f"{_fmt(key, min(values))} to {_fmt(key, max(values))}"


def _md_table(outcomes: list[Outcome], scenario: Scenario) -> list[str]:
    rows = _scenario_rows(outcomes, scenario)
    refs = _ratio_columns(outcomes, scenario)
    metrics: list[Metric] = list(scenario.metrics)
    head = ["configuration", *(m.label for m in metrics), *(label for _s, label in refs),
            f"{scenario.primary.label}, {SPREAD_LABEL}"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for o in rows:
        if not o.runs:
            lines.append(f"| {o.variant.label} | error: {o.error} |")
            continue
        median, r = o.median(), ratios(outcomes, o)
        cells = [o.variant.label, *(_fmt(m.key, median.get(m.key)) for m in metrics),
                 *(f"{r[s]:.2f}x" if s in r else "-" for s, _l in refs),
                 _spread(o, scenario.primary.key)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def write_results_md(path: Path, *, machine: dict[str, Any], sizes: Sizes, runs: int,
                     notes: list[str], outcomes: list[Outcome], found: list[Target],
                     command: str) -> None:
    """The human-readable record of the latest full run: figures, ratios, method, how to
    reproduce."""
    pk = machine.get("packages", {})
    out = [
        "# golemq-pg benchmark results",
        "",
        "Generated by `python -m benchmarks` (do not edit by hand; re-run to refresh).",
        "",
        f"* Date: {machine.get('date')}",
        f"* Machine: {machine.get('cores')} cores ({machine.get('cpu')}), "
        f"{machine.get('memory_mb')} MB RAM, {machine.get('platform')}",
        f"* PostgreSQL {machine.get('postgres_version')} (shared_buffers "
        f"{machine.get('shared_buffers')}, synchronous_commit "
        f"{machine.get('synchronous_commit')}); Python {machine.get('python')}",
        "* Packages: " + ", ".join(f"{k} {v}" for k, v in pk.items() if v),
        f"* Median of {runs} interleaved runs per configuration (ratios: median of the "
        f"per-run ratios); load average (1/5/15 min) "
        f"at start {_loads(machine.get('load_average_at_start'))}, at end "
        f"{_loads(machine.get('load_average_at_end'))}; each table's last column gives the "
        "lowest and the highest run of its first figure",
        f"* Command: `{command}`",
        "",
        "Absolute figures drift with the machine and whatever else runs on it; the ratios "
        "compare systems measured side by side in this one run.",
        "",
    ]
    if notes:
        out += ["**Notes on this run**", "", *(f"* {n}" for n in notes), ""]
    if found:
        out += [f"## {TARGETS_TITLE}", "",
                "Each target checked on this run's figures: the medians of the runs, ratios "
                "as the median of the per-run ratios (run i of both sides measured in the "
                "same pass); for an absolute bound the ratio is the measured median over the "
                "bound. The runs column gives the per-run ratios' lowest and highest: a "
                f"target is \"met in every run\" when each of at least {VERDICT_RUNS} runs "
                "meets it too, \"met\" when the median does. Reported, not asserted: a "
                "missed target does not fail the run.", "",
                "| target | from | measured (medians) | ratio | runs | met |",
                "|---|---|---|---|---|---|"]
        out += [f"| {t.text} | {t.source} | {t.measured} | {t.ratio_text} | "
                f"{t.spread_text} | {t.verdict} |" for t in found]
        out += ["", targets_summary(found) + ".", ""]
    for scenario in SCENARIOS:
        if _scenario_rows(outcomes, scenario):
            out += [f"## {scenario.title}", "", scenario.method, "",
                    *_md_table(outcomes, scenario), ""]
    out += [
        "## Method",
        "",
        "* Every run of every scenario gets a fresh sandbox created and dropped by the "
        "harness: a schema for golemq-pg and the raw-SQL ceiling, a dedicated database for "
        "PGQueuer and Procrastinate (a schema on their search_path when CREATEDB is missing).",
        "* A backlog loaded before a timed drain is ANALYZEd (every table of the sandbox) "
        "whichever system loaded it, as the raw-SQL ceiling's fill always was; golemq-pg's "
        "pool opens the connections a drain uses before the clock starts, as the ceiling's "
        "loops connect before theirs.",
        "* Handlers are no-ops; rows are kept (golemq-pg and the ceiling mark them "
        "SUCCEEDED, Procrastinate keeps them with `delete_jobs=\"never\"`; PGQueuer always "
        "moves finished jobs to its log table).",
        "* raw-SQL ceiling: golemq-pg's own migrations, then a psycopg loop: claim B with a "
        "MATERIALIZED CTE + FOR UPDATE SKIP LOCKED, complete B with one UPDATE ... WHERE id "
        "= ANY(...); its best B=100 figure (1 or 2 threads) is the ceiling of the ratio "
        "columns; the drain targets set each golemq-pg configuration against the ceiling at "
        "its own claim batch size (batch_size=100 against B=100, the default, which claims "
        "up to 500 at a time, against B=500), best of 1 or 2 threads.",
        "* PGQueuer: asyncpg driver, schema from its own installer; QueueManagers on their "
        "own connections in one uvloop event loop; best = 2 consumers x batch 100; also "
        "5 x 10 (its benchmark tool's default) and 1 x 10 (the library's defaults).",
        "* Procrastinate: psycopg connector, schema from its schema manager, concurrency 4, "
        "async no-op task.",
        "* Chancy: schema from `Chancy.migrate()`; a queue on its async executor "
        "(concurrency 32, eager polling, LISTEN/NOTIFY on), async no-op job; only the plugins "
        "a scenario needs (none; Leadership and WorkflowPlugin for workflows); a drain is "
        "timed until its batched outcome writes are flushed.",
        "* golemq-pg: PostgresStore + Queue.add_many / add + Worker with a no-op handler "
        "(`run_until_empty` for drains). \"Every feature on\": the handler returns a small "
        "JSON result (stored with each job) and a PrometheusObserver (on a registry of its "
        "own) is attached; the worker registry's heartbeat and the completion NOTIFY are "
        "always on.",
        "* Latency under steady load: the offered rate is half the drain rate that run "
        "measured on its own backlog (same sandbox, same configuration, worker start-up "
        "included); the producer runs in the consumers' process, as in the steady "
        "scenario, and a late enqueue call carries every job due by then, so the rate "
        "holds when single calls run long.",
        "* Targets: the medians of the runs; a ratio target is the median of the per-run "
        "ratios (run i of both sides measured in the same pass); reported, not asserted.",
        f"* Sizes: {json.dumps(asdict(sizes))}",
        "",
        "## Reproduce",
        "",
        "```",
        "# in a source checkout: benchmarks/ is not installed with the package",
        "pip install -e '.[bench]'",
        "export GOLEMQ_DSN=postgresql://postgres@127.0.0.1:5432/test   # else the embedded server",
        "python -m benchmarks --results-md benchmarks/RESULTS.md      # or: golemq-pg bench",
        "python -m benchmarks --quick                                 # CI smoke test",
        "python -m benchmarks --only drain --only pgqueuer --runs 5   # a subset",
        "```",
        "",
    ]
    path.write_text("\n".join(out), encoding="utf-8")
