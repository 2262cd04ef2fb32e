"""golemq-pg itself, through its public API only: PostgresStore, Queue, Worker."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from benchmarks.machine import machine_busy_seconds
from benchmarks.sandbox import Sandbox, analyze_backlog
from benchmarks.systems.base import (
    JOB_TYPE,
    LatencyProbe,
    LoadedResult,
    LoadPlan,
    SteadyResult,
    System,
    UnavailableError,
    Variant,
    paced,
    produce_paced,
    run_async,
    wait_until,
)
from benchmarks.systems.workflow import (
    EXTRACTS,
    JOBS_PER_WORKFLOW,
    PRODUCERS,
    WORKFLOW_SHAPE,
    WorkflowProbe,
    WorkflowResult,
    step_type,
)

#: Handler slots (threads) for the no-op handler in the throughput scenarios.
CONCURRENCY = 32
#: A resource pool's cap above anything one worker leases at once (concurrency + prefetch).
POOL_OPEN_CAP = 5_000
#: Scopes the serialize_by_scope scenario spreads its jobs over.
SCOPES = 1000
BULK_CHUNK = 50_000
#: The drain variants with every operating-surface feature on (keys; report.py names them).
FEATURES_SUFFIX = "+all"
FEATURES_ON = f"c{CONCURRENCY}{FEATURES_SUFFIX}"
#: What the every-feature-on handler returns: a small JSON result, stored with each job.
RESULT = {"ok": True}
#: The after-vacuum configurations drained beside a big finished history (variant keys end
#: with it; the rows are scenarios.Sizes.after_vacuum_history, 1,000,000 in a full run).
HISTORY_SUFFIX = "@1M"


def _quiet_logs() -> None:
    """Keep golemq-pg's structlog INFO lines (worker started/stopped, migrations) off the
    harness's terminal and out of the RSS child's stdout; warnings still show."""
    import structlog  # noqa: PLC0415

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))


def _api() -> tuple[Any, Any, Any, Any]:
    import golemq_pg  # noqa: PLC0415 - imported late: the harness must start without it

    _quiet_logs()

    return golemq_pg.PostgresStore, golemq_pg.Queue, golemq_pg.Worker, golemq_pg.Resource


def _succeeded() -> Any:
    import golemq_pg  # noqa: PLC0415

    return golemq_pg.JobStatus.SUCCEEDED


async def _async_enqueue(box: Sandbox, work: Any) -> float:
    """Seconds ``await work(AsyncQueue)`` takes on an AsyncPostgresStore (pool connected
    before the clock starts, as for the sync side)."""
    import golemq_pg  # noqa: PLC0415

    async with await golemq_pg.AsyncPostgresStore.connect(box.dsn, schema=box.schema,
                                                          max_size=2) as store:
        queue = golemq_pg.AsyncQueue(store)
        await store.pool.wait()
        started = time.perf_counter()
        await work(queue)
        return time.perf_counter() - started


def _finished(box: Sandbox) -> tuple[int, int]:
    """Jobs of the sandbox that succeeded, and those that carry a result (``jobs_all``:
    finished jobs live in ``jobs_history``; counted around a drain, not timed, on a
    connection of their own)."""
    import psycopg  # noqa: PLC0415
    from psycopg import sql  # noqa: PLC0415

    with psycopg.connect(box.dsn) as conn:
        rows = conn.execute(sql.SQL(
            "SELECT count(*) FILTER (WHERE status = 'succeeded'),"
            " count(*) FILTER (WHERE result IS NOT NULL) FROM {}").format(
            sql.Identifier(box.schema_name, "jobs_all"))).fetchall()
    return int(rows[0][0]), int(rows[0][1])


#: Pool connections a draining worker has in use at once (psycopg_pool's statistics after a
#: drain: three opened).
WARM_CONNECTIONS = 3


#: Single jobs sent to the idle worker before the workflows (its idle pickup latency, the
#: yardstick of the parent-to-child latency), one every IDLE_INTERVAL seconds.
IDLE_PROBES = 50
IDLE_INTERVAL = 0.02
#: The idle chain probe's job types (a parent and its child, in one two-job workflow).
CHAIN_PARENT = "chain.parent"
CHAIN_CHILD = "chain.child"


def _graphs(count: int) -> list[Any]:
    """``count`` golemq-pg Workflows of WORKFLOW_SHAPE (payload: workflow index, node)."""
    import golemq_pg  # noqa: PLC0415

    graphs = []
    for w in range(count):
        wf = golemq_pg.Workflow(f"bench {w}")
        nodes: dict[str, Any] = {}
        for node, parents in WORKFLOW_SHAPE:
            nodes[node] = wf.add(step_type(node), {"wf": w, "node": node},
                                 after=[nodes[p] for p in parents])
        graphs.append(wf)
    return graphs


def _idle_pickup(queue: Any, pickup: LatencyProbe) -> None:
    """Send the pickup probe's jobs one at a time to the idle worker, as the latency
    scenario does, and wait until each has started."""
    started = time.perf_counter()
    for i in range(len(pickup.committed)):
        time.sleep(paced(started, i, IDLE_INTERVAL))
        pickup.committed[i] = time.perf_counter()
        queue.add(JOB_TYPE, {"i": i})
    if not wait_until(pickup.done, timeout=10):
        raise RuntimeError("golemq-pg's idle worker did not start every probe job")
    time.sleep(0.1)  # idle again before the workflows


class _ChainProbe:
    """Two-job chains (parent -> child): the ids of each, and how many children ran."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.pairs: list[tuple[str, str]] = []
        self.ran: set[int] = set()

    def done(self) -> bool:
        return len(self.ran) >= self.count

    def latencies(self, queue: Any) -> list[float]:
        """Seconds from each parent's completion (its ``finished_at``, the commit of its
        outcome, which released the child) to its child's handler start (``started_at``):
        both the database's clock, read back once the chains have run."""
        found = []
        for parent_id, child_id in self.pairs:
            parent, child = queue.get(parent_id), queue.get(child_id)
            if parent is None or child is None or None in (parent.finished_at, child.started_at):
                raise RuntimeError("a chain job of the idle probe was not recorded")
            found.append((child.started_at - parent.finished_at).total_seconds())
        return found


def _idle_chain(queue: Any, chain: _ChainProbe) -> None:
    """Send two-job workflows (parent -> child) one at a time to the idle worker, paced as
    the pickup probe, and wait until each child has run: the release latency alone."""
    import golemq_pg  # noqa: PLC0415

    started = time.perf_counter()
    for i in range(chain.count):
        time.sleep(paced(started, i, IDLE_INTERVAL))
        wf = golemq_pg.Workflow("chain")
        first = wf.add(CHAIN_PARENT, {"i": i})
        second = wf.add(CHAIN_CHILD, {"i": i}, after=[first])
        run = queue.add_workflow(wf)
        chain.pairs.append((run.job_ids[first], run.job_ids[second]))
    if not wait_until(chain.done, timeout=10):
        raise RuntimeError("golemq-pg's idle worker did not run every chain")
    time.sleep(0.1)  # idle again before the workflows


#: The parents each workflow step reads (the fetch reads none).
PARENTS = {"wf.extract": 1, "wf.index": EXTRACTS}
#: Workflows per ``queue.add_workflows`` call in the scenario's add_workflows variants.
WORKFLOW_CHUNK = 100


def _add_concurrently(queue: Any, graphs: list[Any], chunk: int | None) -> None:
    """Add every graph from PRODUCERS threads at once: ``queue.add_workflows`` of ``chunk``
    graphs a call, or (``chunk`` None) ``queue.add_workflow`` of each."""
    failures: list[BaseException] = []

    def produce(part: list[Any]) -> None:
        try:
            if chunk is None:
                for wf in part:
                    queue.add_workflow(wf)
            else:
                for start in range(0, len(part), chunk):
                    queue.add_workflows(part[start:start + chunk])
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=produce, args=(graphs[k::PRODUCERS],), daemon=True)
               for k in range(PRODUCERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise RuntimeError(f"a workflow producer failed: {failures[0]!r}")


class _Counter:
    """A thread-safe count of handler calls."""

    def __init__(self) -> None:
        self.value = 0
        self._lock = threading.Lock()

    def add(self) -> None:
        with self._lock:
            self.value += 1


@contextlib.contextmanager
def _traced(on: bool, ratio: float | None = None) -> Iterator[Any]:
    """With ``on``: golemq_pg.tracing instrumented with an SDK TracerProvider (yielded) whose
    batch processor hands every span to an exporter that drops it; ``ratio``: its sampler
    is ``ParentBased(TraceIdRatioBased(ratio))`` (else the SDK's default, always on)."""
    if not on:
        yield None
        return
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import (  # noqa: PLC0415
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )
    from opentelemetry.sdk.trace.sampling import (  # noqa: PLC0415
        ParentBased,
        TraceIdRatioBased,
    )

    from golemq_pg import tracing  # noqa: PLC0415

    class Dropped(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    sampler = None if ratio is None else ParentBased(TraceIdRatioBased(ratio))
    provider = TracerProvider(sampler=sampler)
    provider.add_span_processor(BatchSpanProcessor(Dropped()))
    tracing.instrument(tracer_provider=provider)
    try:
        yield provider
    finally:
        tracing.uninstrument()
        provider.shutdown()


class GolemqSystem(System):
    """golemq-pg: Queue.add_many / add to enqueue, a Worker with a no-op handler to consume."""

    name = "golemq-pg"
    title = "golemq-pg"
    isolation = "schema"

    def check_available(self) -> None:
        try:
            store_cls, queue_cls, worker_cls, _resource = _api()
        except ImportError as exc:
            raise UnavailableError(f"golemq_pg does not import: {exc}") from exc
        missing = [name for name, obj in (("PostgresStore", store_cls), ("Queue", queue_cls),
                                          ("Worker", worker_cls)) if not callable(obj)]
        if missing:
            raise UnavailableError(f"golemq-pg's {', '.join(missing)} not implemented yet (stubs)")

    def variants(self, scenario: str, quick: bool) -> list[Variant]:
        base = {"concurrency": CONCURRENCY, "batch_size": None, "notify": True, "poll": 0.5}
        default = Variant(self.name, f"c{CONCURRENCY}", f"golemq-pg concurrency {CONCURRENCY}",
                          base)
        if scenario == "latency":
            return [Variant(self.name, "notify", "golemq-pg LISTEN/NOTIFY (poll 0.5 s)", base),
                    Variant(self.name, "poll", "golemq-pg poll-only (poll 0.5 s)",
                            {**base, "notify": False})]
        features = {"prometheus": True, "result": True}
        if scenario == "drain":
            # The default claims adaptively, up to 500 jobs a claim; batch_size=100 is the
            # configuration to set against the ceiling's B=100 (docs/BENCHMARKS.md: "at the same
            # batch size").
            return [default,
                    Variant(self.name, f"c{CONCURRENCY}b100",
                            f"golemq-pg concurrency {CONCURRENCY}, batch_size 100",
                            {**base, "batch_size": 100}, full_only=True),
                    # The drain as it was before honest running: the claim stamps the start,
                    # nothing else writes it (golemq_pg.worker.runtime.DEFER_START off).
                    Variant(self.name, f"c{CONCURRENCY}-claimstart",
                            f"golemq-pg concurrency {CONCURRENCY}, start stamped at the claim "
                            "(before honest running)", {**base, "claim_start": True}),
                    # The same no-op as an async def handler (tasks on the event loop).
                    Variant(self.name, f"c{CONCURRENCY}-async",
                            f"golemq-pg concurrency {CONCURRENCY}, async def handler",
                            {**base, "async": True}),
                    # golemq_pg.tracing instrumented (SDK, spans dropped): its cost per job.
                    Variant(self.name, f"c{CONCURRENCY}+otel",
                            f"golemq-pg concurrency {CONCURRENCY}, OpenTelemetry tracing",
                            {**base, "otel": True}, full_only=True),
                    # The same, the provider sampling 1% of new traces (a job follows its
                    # producer's trace: the backlog's add_many spans decide).
                    Variant(self.name, f"c{CONCURRENCY}+otel1pct",
                            f"golemq-pg concurrency {CONCURRENCY}, OpenTelemetry tracing "
                            "sampled at 1%", {**base, "otel": True, "otel_ratio": 0.01},
                            full_only=True),
                    # The same drain with golemq_pg.metrics.PrometheusObserver attached.
                    Variant(self.name, f"c{CONCURRENCY}+prometheus",
                            f"golemq-pg concurrency {CONCURRENCY}, PrometheusObserver",
                            {**base, "prometheus": True}, full_only=True),
                    # Every operating-surface feature on: a result stored per job and the
                    # PrometheusObserver (the registry heartbeat and the completion NOTIFY
                    # are always on), at the default claim cap and at batch_size 100, each
                    # set against the raw loop at the same claim batch size.
                    Variant(self.name, FEATURES_ON, f"golemq-pg concurrency {CONCURRENCY}, "
                            "every feature on (result stored, PrometheusObserver)",
                            {**base, **features}),
                    Variant(self.name, f"c{CONCURRENCY}b100{FEATURES_SUFFIX}",
                            f"golemq-pg concurrency {CONCURRENCY}, batch_size 100, every "
                            "feature on (result stored, PrometheusObserver)",
                            {**base, **features, "batch_size": 100}, full_only=True)]
        if scenario == "guarded":
            bunched = {**base, "scopes": SCOPES}
            spread = {**bunched, "interleaved": True}
            return [Variant(self.name, "unguarded", "golemq-pg unguarded", base, reference=True),
                    # Each scope's jobs in a row (a backlog loaded scope by scope: the worst
                    # layout for a claim-order window), then arriving in turn. Each layout
                    # is also drained without the guard: scoped rows cost more to claim and
                    # complete than unscoped ones whatever the guard (one more index, on
                    # the scope, to maintain at each update), so the guard's own cost is
                    # the ratio to the same backlog unguarded.
                    Variant(self.name, "unguarded-scoped",
                            f"golemq-pg unguarded ({SCOPES} scopes, each in a row)", bunched),
                    Variant(self.name, "scope",
                            f"golemq-pg serialize_by_scope ({SCOPES} scopes, each in a row)",
                            {**bunched, "serialize_by_scope": True}),
                    Variant(self.name, "unguarded-spread",
                            f"golemq-pg unguarded ({SCOPES} scopes, arrivals in turn)", spread),
                    Variant(self.name, "scope-spread",
                            f"golemq-pg serialize_by_scope ({SCOPES} scopes, arrivals in turn)",
                            {**spread, "serialize_by_scope": True}),
                    # A pool whose cap equals the handler concurrency binds: pooled jobs are
                    # leased ones, so nothing can be prefetched and each job waits for a claim
                    # and for the commit of the completion before it. A cap above what the
                    # worker holds (concurrency + prefetch) measures what the guard costs.
                    Variant(self.name, "resource",
                            f"golemq-pg resource pool (cap {CONCURRENCY}, binding)",
                            {**base, "resource": CONCURRENCY}),
                    Variant(self.name, "resource-open",
                            f"golemq-pg resource pool (cap {POOL_OPEN_CAP}, not binding)",
                            {**base, "resource": POOL_OPEN_CAP})]
        if scenario == "after-vacuum":
            return self._after_vacuum_variants(default, {**base, **features})
        if scenario == "workflow":
            # The same 24,000 jobs (at full size) as workflows, added with add_workflows in
            # chunks of WORKFLOW_CHUNK and with add_workflow one at a time, the extract and
            # index handlers reading job.parents (as users do) or not, beside an empty
            # history or a big one; as plain jobs added while the worker runs (the same
            # clock: first add to last handler); and as a plain backlog drained (the drain
            # scenario's clock: run_until_empty only).
            read = {**base, "mode": "workflow", "chunk": WORKFLOW_CHUNK, "read": True}
            return [Variant(self.name, "workflow", "golemq-pg workflows (add_workflows x"
                            f"{WORKFLOW_CHUNK}, job.parents read)", read),
                    Variant(self.name, "workflow-no-read", "golemq-pg workflows (add_workflows "
                            f"x{WORKFLOW_CHUNK}, job.parents not read)", {**read, "read": False}),
                    Variant(self.name, "workflow-each", "golemq-pg workflows (add_workflow "
                            "each, job.parents read)", {**read, "chunk": None}),
                    Variant(self.name, "workflow-history", "golemq-pg workflows (add_workflows "
                            f"x{WORKFLOW_CHUNK}, job.parents read), 1M finished rows of history",
                            {**read, "history": True}),
                    Variant(self.name, "plain", "golemq-pg the same jobs without "
                            "dependencies (add_many while the worker runs)",
                            {**base, "mode": "plain"}),
                    Variant(self.name, "plain-drain", "golemq-pg the same jobs without "
                            "dependencies, backlog drained (run_until_empty)",
                            {**base, "mode": "drain"})]
        if scenario in ("single", "bulk"):
            # AsyncQueue on an AsyncPostgresStore: the same producer, awaited on a loop.
            return [default, Variant(self.name, "async", "golemq-pg AsyncQueue",
                                     {**base, "enqueue": {"asynchronous": True}})]
        return [default]

    def _after_vacuum_variants(self, default: Variant,
                               features: dict[str, Any]) -> list[Variant]:
        # The plain drain, every feature on, and the two guards of the guarded scenario
        # whose cost showed there (its "scope-spread" and binding "resource" variants), each
        # once on the table the first drain leaves and once beside a big finished history
        # (full runs only: the history takes a while to load and to vacuum).
        base = dict(default.options)
        configs = [
            default,
            Variant(self.name, FEATURES_ON, f"golemq-pg concurrency {CONCURRENCY}, every "
                    "feature on (result stored, PrometheusObserver)", features),
            Variant(self.name, "scope-spread",
                    f"golemq-pg serialize_by_scope ({SCOPES} scopes, arrivals in turn)",
                    {**base, "scopes": SCOPES, "interleaved": True,
                     "serialize_by_scope": True}),
            Variant(self.name, "resource",
                    f"golemq-pg resource pool (cap {CONCURRENCY}, binding)",
                    {**base, "resource": CONCURRENCY})]
        return [v for config in configs for v in (
            config, Variant(self.name, config.key + HISTORY_SUFFIX,
                            f"{config.label}, 1M finished rows of history",
                            {**config.options, "history": True}, full_only=True))]

    # -- plumbing ---------------------------------------------------------------------------
    def _store(self, box: Sandbox, max_size: int = 8, min_size: int = 1) -> Any:
        store_cls = _api()[0]
        return store_cls.connect(box.dsn, schema=box.schema, min_size=min_size,
                                 max_size=max_size)

    def _worker(self, store: Any, variant: Variant, on_job: Any) -> Any:
        _store, _queue, worker_cls, resource_cls = _api()
        opts = variant.options
        resources = None
        if opts.get("resource"):
            resources = {"bench_pool": resource_cls(concurrency=opts["resource"],
                                                    types=[JOB_TYPE])}
        observers = []
        if opts.get("prometheus"):
            from prometheus_client import CollectorRegistry  # noqa: PLC0415 - metrics extra

            from golemq_pg.metrics import PrometheusObserver  # noqa: PLC0415

            observers.append(PrometheusObserver(CollectorRegistry()))
        # Read when the worker starts: set for every variant, so none inherits another's.
        from golemq_pg.worker import runtime  # noqa: PLC0415 - the measurement-only knob

        runtime.DEFER_START = not opts.get("claim_start")
        worker = worker_cls(store, notify=opts["notify"], poll_interval=opts["poll"],
                            batch_size=opts["batch_size"], resources=resources,
                            observers=observers)

        def noop(job: Any) -> None:
            on_job(job)

        def with_result(job: Any) -> dict[str, bool]:
            on_job(job)
            return RESULT

        async def noop_async(job: Any) -> None:
            on_job(job)

        handler = noop_async if opts.get("async") else with_result if opts.get("result") else noop
        worker.handler(JOB_TYPE, concurrency=opts["concurrency"],
                       serialize_by_scope=bool(opts.get("serialize_by_scope")),
                       )(handler)
        return worker

    # -- System -----------------------------------------------------------------------------
    def install(self, box: Sandbox) -> None:
        with self._store(box, max_size=1) as store:
            store.migrate()

    def enqueue_setup(self, box: Sandbox, n: int, *, scopes: int = 0,
                      interleaved: bool = False) -> None:
        queue_cls = _api()[1]
        with self._store(box, max_size=2) as store:
            queue = queue_cls(store)
            if scopes and interleaved:
                # add_many takes one scope; one add per job, all in one transaction
                import psycopg  # noqa: PLC0415

                with psycopg.connect(box.dsn) as conn:
                    for i in range(n):
                        queue.add(JOB_TYPE, {"i": i}, scope=("bench", str(i % scopes)),
                                  connection=conn)
                return
            if scopes:
                for s in range(scopes):
                    share = range(s, n, scopes)
                    queue.add_many(JOB_TYPE, [{"i": i} for i in share], scope=("bench", str(s)))
                return
            for start in range(0, n, BULK_CHUNK):
                chunk = range(start, min(n, start + BULK_CHUNK))
                queue.add_many(JOB_TYPE, [{"i": i} for i in chunk])

    def bulk_enqueue(self, box: Sandbox, n: int, asynchronous: bool = False) -> float:
        queue_cls = _api()[1]
        payloads = [{"i": i} for i in range(n)]
        if asynchronous:
            return run_async(lambda: _async_enqueue(box, lambda q: q.add_many(JOB_TYPE, payloads)))
        with self._store(box, max_size=2) as store:
            queue = queue_cls(store)
            # The raw side connects before its clock starts; so does this one (otherwise the
            # first call also waits for the pool's first connection, and the pool opens a
            # second one that consecutive calls then alternate with).
            store.pool.wait()
            started = time.perf_counter()
            queue.add_many(JOB_TYPE, payloads)
            return time.perf_counter() - started

    def single_enqueue(self, box: Sandbox, n: int, asynchronous: bool = False) -> float:
        queue_cls = _api()[1]
        if asynchronous:
            async def adds(queue: Any) -> None:
                for i in range(n):
                    await queue.add(JOB_TYPE, {"i": i})

            return run_async(lambda: _async_enqueue(box, adds))
        with self._store(box, max_size=2) as store:
            queue = queue_cls(store)
            # The raw side connects before its clock starts; so does this one (otherwise the
            # first call also waits for the pool's first connection, and the pool opens a
            # second one that consecutive calls then alternate with).
            store.pool.wait()
            started = time.perf_counter()
            for i in range(n):
                queue.add(JOB_TYPE, {"i": i})
            return time.perf_counter() - started

    def drain(self, box: Sandbox, variant: Variant, n: int) -> float:
        otel = bool(variant.options.get("otel"))
        ratio = variant.options.get("otel_ratio")
        # The ceiling's loops connect before the clock starts; so does the worker's pool (a
        # drain keeps WARM_CONNECTIONS busy: the claim loop, the completer and an upkeep
        # statement now and then), instead of growing it while timed.
        with self._store(box, min_size=WARM_CONNECTIONS) as store, \
                _traced(otel, ratio) as provider:
            store.pool.wait()
            if otel:  # the backlog again, as traced add_many calls leave it (not timed)
                import psycopg  # noqa: PLC0415

                with psycopg.connect(box.dsn, autocommit=True) as conn:
                    conn.execute(psycopg.sql.SQL("TRUNCATE {}.jobs").format(
                        psycopg.sql.Identifier(box.schema)))
                self.enqueue_setup(box, n)
                analyze_backlog(box)
            seconds = self._drain_on(store, box, variant, n)
            if otel and ratio is None:  # the best case's other half, with the same provider
                from benchmarks.systems.otel_cost import sdk_span_cpu_us  # noqa: PLC0415

                self.drain_figures = {**self.drain_figures,
                                      "sdk_span_us": sdk_span_cpu_us(provider)}
            return seconds

    def drain_twice(self, box: Sandbox, variant: Variant, n: int,
                    between: Callable[[], object]) -> tuple[float, float]:
        # One store, so one pool, for both drains, set up as drain() sets up its own: the
        # statements psycopg prepared on the pool's connections during the first drain are
        # the ones the second drain runs, after whatever between() did to the table (the
        # after-vacuum scenario's VACUUM ANALYZE). That is the production state this
        # measures: long-lived pooled connections whose prepared claim and completion
        # statements may settle on a generic plan. Each drain has a Worker of its own, as
        # drain()'s has (run_until_empty stops its worker); the pool outlives both.
        with self._store(box, min_size=WARM_CONNECTIONS) as store:
            store.pool.wait()
            first = self._drain_on(store, box, variant, n)
            between()
            second = self._drain_on(store, box, variant, n, before=_finished(box))
        return first, second

    def _drain_on(self, store: Any, box: Sandbox, variant: Variant, n: int,
                  before: tuple[int, int] = (0, 0)) -> float:
        """Seconds a new worker on ``store`` takes to drain ``n`` due jobs; ``before``: the
        succeeded rows and stored results the table held already (:func:`_finished`)."""
        counter = _Counter()
        worker = self._worker(store, variant, lambda _job: counter.add())
        started, cpu, busy = time.perf_counter(), time.process_time(), machine_busy_seconds()
        worker.run_until_empty(timeout=900)
        elapsed = time.perf_counter() - started
        # CPU per job: the client's, every thread of this process (the worker's, the span
        # processor's), and the whole host's (client + PostgreSQL, on a quiet host): what
        # tracing's best case is stated on.
        self.drain_figures = {"cpu_us_per_job": (time.process_time() - cpu) / n * 1e6,
                              "host_cpu_us_per_job": (machine_busy_seconds() - busy) / n * 1e6}
        # Not timed: every acknowledgement must have landed when run_until_empty returned.
        succeeded = _api()[1](store).count_by_status()[_succeeded()] - before[0]
        if counter.value != n or succeeded != n:
            raise RuntimeError(f"golemq-pg ran {counter.value} and recorded {succeeded} "
                               f"succeeded of {n} jobs")
        if variant.options.get("result"):
            stored = _finished(box)[1] - before[1]
            if stored != n:
                raise RuntimeError(f"golemq-pg stored {stored} results of {n} jobs")
        return elapsed

    def drain_partial(self, box: Sandbox, variant: Variant, k: int) -> float:
        # Timed from the 10th percentile to k handler calls, so worker start-up is excluded.
        counter = _Counter()
        with self._store(box) as store:
            worker = self._worker(store, variant, lambda _job: counter.add())
            worker.start()
            try:
                if not wait_until(lambda: counter.value >= k // 10, timeout=300, interval=0.001):
                    raise RuntimeError("golemq-pg scale drain did not start")
                first, started = counter.value, time.perf_counter()
                if not wait_until(lambda: counter.value >= k, timeout=900, interval=0.001):
                    raise RuntimeError(f"golemq-pg scale drain stalled at {counter.value}")
                elapsed = time.perf_counter() - started
                done = counter.value
            finally:
                worker.stop()
        return elapsed * k / max(1, done - first)

    def steady(self, box: Sandbox, variant: Variant, seconds: float) -> SteadyResult:
        queue_cls = _api()[1]
        counter = _Counter()
        stop = threading.Event()
        enqueued = [0]
        with self._store(box) as store:
            queue = queue_cls(store)

            def produce() -> None:
                while not stop.is_set():
                    enqueued[0] += queue.add_many(JOB_TYPE, [{"i": i} for i in range(100)])

            worker = self._worker(store, variant, lambda _job: counter.add())
            producer = threading.Thread(target=produce, daemon=True)
            worker.start()
            try:
                started = time.perf_counter()
                producer.start()
                time.sleep(seconds)
                result = SteadyResult(enqueued=enqueued[0], processed=counter.value,
                                      seconds=time.perf_counter() - started)
                stop.set()
                producer.join()
            finally:
                stop.set()
                worker.stop()
        return result

    def loaded(self, box: Sandbox, variant: Variant, plan: LoadPlan) -> LoadedResult:
        queue_cls = _api()[1]
        probe = LatencyProbe(plan.total)
        with self._store(box) as store:
            queue = queue_cls(store)

            def send(first: int, count: int) -> None:
                queue.add_many(JOB_TYPE, [{"i": i} for i in range(first, first + count)])

            worker = self._worker(store, variant, lambda job: probe.start(job.payload["i"]))
            worker.start()
            try:
                time.sleep(0.3)  # let the worker reach its idle wait
                window = produce_paced(plan, probe, send)
                wait_until(probe.done, timeout=10 + 2 * variant.options["poll"], interval=0.02)
            finally:
                worker.stop()
        return LoadedResult(probe, *window)

    def _workflow_worker(self, store: Any, variant: Variant, probe: WorkflowProbe,
                         pickup: LatencyProbe | None = None,
                         chain: _ChainProbe | None = None) -> Any:
        """A worker with a no-op handler per workflow job type (and, with ``pickup``, the
        plain no-op whose commit -> start latency it records); with the variant's ``read``,
        the extract and index handlers read ``job.parents`` and check their number."""
        worker_cls = _api()[2]
        from golemq_pg.worker import runtime  # noqa: PLC0415 - see _worker

        runtime.DEFER_START = True
        opts = variant.options
        worker = worker_cls(store, notify=opts["notify"], poll_interval=opts["poll"],
                            batch_size=opts["batch_size"])

        def step(job: Any) -> None:
            probe.record(job.payload)

        def step_reading(job: Any) -> None:
            if job.type != "wf.fetch" and len(job.parents) != PARENTS[job.type]:
                raise RuntimeError(f"job {job.id} read {len(job.parents)} parents")
            probe.record(job.payload)

        if opts.get("read"):
            step = step_reading

        for job_type in sorted({step_type(node) for node, _parents in WORKFLOW_SHAPE}):
            worker.handler(job_type, concurrency=opts["concurrency"])(step)
        if pickup is not None:
            worker.handler(JOB_TYPE, concurrency=opts["concurrency"])(
                lambda job: pickup.start(job.payload["i"]))
        if chain is not None:
            worker.handler(CHAIN_PARENT, concurrency=opts["concurrency"])(lambda job: None)
            worker.handler(CHAIN_CHILD, concurrency=opts["concurrency"])(
                lambda job: chain.ran.add(job.payload["i"]))
        return worker

    def workflows(self, box: Sandbox, variant: Variant, count: int) -> WorkflowResult:
        queue_cls = _api()[1]
        mode = variant.options["mode"]
        probe = WorkflowProbe(count)
        jobs = count * JOBS_PER_WORKFLOW
        plain = {t: [{"wf": w, "node": node} for w in range(count)
                     for node, _parents in WORKFLOW_SHAPE if step_type(node) == t]
                 for t in sorted({step_type(node) for node, _parents in WORKFLOW_SHAPE})}
        # the idle probes: once per run, beside the main variant
        first = variant.key == "workflow"
        pickup = LatencyProbe(IDLE_PROBES) if first else None
        chain = _ChainProbe(IDLE_PROBES) if first else None
        with self._store(box, min_size=WARM_CONNECTIONS) as store:
            store.pool.wait()
            queue = queue_cls(store)
            history = queue.count_by_status()[_succeeded()]  # rows loaded before (not timed)
            worker = self._workflow_worker(store, variant, probe, pickup, chain)
            if mode == "drain":
                for job_type, payloads in plain.items():  # the backlog, not timed
                    queue.add_many(job_type, payloads)
                analyze_backlog(box)
                started = time.perf_counter()
                worker.run_until_empty(timeout=900)
                elapsed, added = time.perf_counter() - started, 0.0
            else:
                graphs = _graphs(count) if mode == "workflow" else []  # built before the clock
                worker.start()
                try:
                    time.sleep(0.3)  # let the worker reach its idle wait
                    if pickup is not None and chain is not None:
                        _idle_pickup(queue, pickup)
                        _idle_chain(queue, chain)
                    started = time.perf_counter()
                    if mode == "workflow":
                        _add_concurrently(queue, graphs, variant.options["chunk"])
                    else:
                        for job_type, payloads in plain.items():
                            queue.add_many(job_type, payloads)
                    added = time.perf_counter() - started
                    wait_until(probe.done, timeout=900, interval=0.002)
                    elapsed = time.perf_counter() - started
                finally:
                    worker.stop()
            succeeded = queue.count_by_status()[_succeeded()] - history
            chained = chain.latencies(queue) if chain is not None else None
        # the idle probes' jobs (single jobs, two-job chains) succeeded too
        expected = jobs + (3 * IDLE_PROBES if pickup is not None else 0)
        if probe.calls != jobs or succeeded != expected:
            raise RuntimeError(f"golemq-pg ran {probe.calls} and recorded {succeeded} "
                               f"succeeded of {expected} jobs")
        return WorkflowResult(elapsed, probe, add_seconds=added, linked=mode == "workflow",
                              idle_pickup=pickup.latencies() if pickup is not None else None,
                              idle_chain=chained)

    def latency(self, box: Sandbox, variant: Variant, count: int, interval: float) -> list[float]:
        queue_cls = _api()[1]
        probe = LatencyProbe(count)
        with self._store(box) as store:
            queue = queue_cls(store)
            worker = self._worker(store, variant, lambda job: probe.start(job.payload["i"]))
            worker.start()
            try:
                time.sleep(0.3)  # let the worker reach its idle wait
                started = time.perf_counter()
                for i in range(count):
                    time.sleep(paced(started, i, interval))
                    probe.committed[i] = time.perf_counter()
                    queue.add(JOB_TYPE, {"i": i})
                wait_until(probe.done, timeout=10 + 2 * variant.options["poll"])
            finally:
                worker.stop()
        return probe.latencies()
