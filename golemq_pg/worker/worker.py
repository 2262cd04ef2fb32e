"""The public ``Worker``: register handlers, then ``run()``, ``start()``/``stop()`` or
``run_until_empty()``.

A started worker runs these threads (ARCHITECTURE.md, "Threads of a worker"): one claim loop,
``concurrency`` handler threads per type, one completion flusher, one lease renewer, one
supervisor (timeouts, aborts, abandoned handlers), one listener (unless ``notify=False``)
and one maintenance loop (reaper, reconcile, schedules, retention); with an ``async def``
handler registered, also one event loop thread on which every async attempt runs as a task
(:mod:`golemq_pg.worker.taskpool`). Every loop waits on an event or a timer; none spins.

This module is the composition root: :meth:`Worker.start` builds the shared ``Runtime``, then
every service with its collaborators passed to its constructor, bottom layer first
(ARCHITECTURE.md, "Threads of a worker", lists the layers), and starts them.

In-process cancellation: a started worker registers with :mod:`golemq_pg._local` under its
store's identity, so ``Queue.cancel*`` in the same process aborts the matching handlers
synchronously (signal reason ``"cancelled"``) before it returns.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import FrameType, TracebackType
from typing import Any, Generic, TypeVar, Unpack, overload

import structlog

from golemq_pg import _local
from golemq_pg._errortext import error_text
from golemq_pg._types import (
    Duration,
    JobType,
)
from golemq_pg._validation import check_job_type, to_seconds
from golemq_pg.errors import QueueConfigError, SchemaNotMigrated
from golemq_pg.store.port import JobStore, Listener
from golemq_pg.worker.blocked import BlockedReporter
from golemq_pg.worker.completer import Completer
from golemq_pg.worker.config import DeleteOn, WorkerConfig, WorkerOptions, build_config
from golemq_pg.worker.dispatcher import ClaimLoop
from golemq_pg.worker.eventloop import EventLoop
from golemq_pg.worker.events import CANCELLED, SHUTDOWN, BatchEvent, JobEvent
from golemq_pg.worker.execution import Executor
from golemq_pg.worker.handlers import (
    HandlerRegistry,
    HandlerSpec,
    build_spec,
    check_concurrency,
)
from golemq_pg.worker.heap import freeze_startup_heap
from golemq_pg.worker.leases import LeaseRenewer, renew_interval
from golemq_pg.worker.listener import ListenerThread, open_listener
from golemq_pg.worker.maintenance import Maintenance
from golemq_pg.worker.middleware import check_covered, with_middleware
from golemq_pg.worker.outcomes import Outcomes
from golemq_pg.worker.pool import TypePool
from golemq_pg.worker.poolclaim import CompletionClaims, claim_targets
from golemq_pg.worker.progress import ProgressReporter
from golemq_pg.worker.runtime import Runtime, delete_types, unblocked_by
from golemq_pg.worker.service import Service
from golemq_pg.worker.shutdown import shut_down
from golemq_pg.worker.starts import StartMarker
from golemq_pg.worker.supervisor import Supervisor
from golemq_pg.worker.taskpool import LoopProgress, TaskPool
from golemq_pg.worker.transactional import (
    TransactionalPool,
    lock_warnings,
    supports_transactional,
)

log = structlog.get_logger("golemq_pg.worker")

#: How long a start waits for the database to answer its schema check, and for the LISTEN
#: connection, before it goes on without them (an unreachable database: the services retry
#: on their own). A stop requested meanwhile cuts either wait short.
STARTUP_WAIT = 5.0
#: SQLSTATEs of a schema that ``migrate`` has not created (or not completed): undefined
#: table, invalid schema name, undefined function.
_NOT_MIGRATED = frozenset({"42P01", "3F000", "42883"})
#: How often ``remove_handler`` looks whether the removed type's running jobs are done.
_RETIRE_TICK = 0.01

P = TypeVar("P", bound=Mapping[str, Any])
R = TypeVar("R")
H = TypeVar("H", bound=Callable[..., object])
T = TypeVar("T")


@dataclass(slots=True)
class _Parts:
    """What one start built: the shared state and the services that stop (and a handler
    added or removed while the worker runs) needs again. ``pools`` and ``tx_pools`` are
    replaced, never changed in place, once the threads run (see :meth:`Worker._rewire`)."""

    runtime: Runtime
    pools: dict[str, TypePool]
    tx_pools: dict[str, TransactionalPool]
    completer: Completer
    supervisor: Supervisor
    claim_loop: ClaimLoop
    #: Stopped together before the final flush: renewer, maintenance, listener, and the
    #: event loop (when an async handler is registered). Appended to when a late handler
    #: needs the listener or the event loop.
    services: list[Service]
    outcomes: Outcomes
    executor: Executor
    reporter: ProgressReporter
    renewer: LeaseRenewer
    maintenance: Maintenance
    event_loop: EventLoop | None
    claims: CompletionClaims | None
    listening: bool


class TypedHandler(Generic[P]):
    """The decorator returned by ``worker.handler(SomeJobType)``: checks the handler's
    event type against the JobType's payload type (for mypy), registers it, returns it."""

    __slots__ = ("_register",)

    def __init__(self, register: Callable[[Callable[..., object]], None]) -> None:
        self._register = register

    @overload
    def __call__(self, fn: Callable[[JobEvent[P]], R]) -> Callable[[JobEvent[P]], R]: ...

    @overload
    def __call__(self, fn: Callable[[BatchEvent[P]], R]) -> Callable[[BatchEvent[P]], R]: ...

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        self._register(fn)
        return fn


class Worker:
    """Claims jobs from a :class:`~golemq_pg.store.port.JobStore` and runs their handlers.

    The keyword options are :class:`~golemq_pg.worker.config.WorkerOptions` (declared there
    once; defaults: ``poll_interval=0.5, notify=True, batch_size=None, lease_duration=None,
    lease_renew_interval=None, lease_grace=30, base_backoff=2, max_backoff=300,
    abandon_grace=5, shutdown_grace=15, default_max_attempts=3, worker_id=None,
    resources=None, retention=None, observers=(), retry_strategy=None, delete_on="never",
    listen_dsn=None, max_concurrency=None, middleware=()``), each validated here
    (``QueueConfigError``); README.md documents their meaning.
    Leases: without ``lease_duration``, a type with a ``timeout`` gets ``timeout +
    lease_grace`` written once at claim, and a type without one gets ``lease_grace``
    renewed every ``lease_grace / 3`` while it runs (so long jobs are never reaped while
    their worker lives); with ``lease_duration``, every held job is renewed every
    ``lease_renew_interval``. See :mod:`golemq_pg.worker.leases`.

    ``default_max_attempts`` (an int or ``UNLIMITED``) is the budget of the jobs the worker
    enqueues itself: the ticks of schedules declared without a ``max_attempts`` of their own
    (nor their JobType's). Every other job carries the ``max_attempts`` it was enqueued with
    (the producer's default applied then), and that is the budget the worker honours; an
    unlimited one is never exhausted, its retries still waiting at most ``max_backoff``.
    Only :meth:`run` installs signal handlers (main thread only).

    ``max_concurrency``: the most jobs this worker holds (claimed and running) at once
    across all its types, dealt out round robin between the types (None: no worker-wide
    cap). Handlers can be added (:meth:`handler`), removed (:meth:`remove_handler`) and
    resized (:meth:`set_concurrency`) while the worker runs.

    ``middleware``: objects run around each attempt, outermost first: ``around(job,
    call_next)`` around plain handlers, ``async def around_async(job, call_next)`` around
    ``async def`` ones (``job``: the JobEvent, or a grouped handler's BatchEvent). What one
    raises or returns is the attempt's outcome, as for the handler; a handler whose kind
    some middleware has no method for is refused at :meth:`start` (and when registered on a
    running worker) with ``QueueConfigError``. See :mod:`golemq_pg.worker.middleware`.

    ``listen_dsn``: where the worker's LISTEN connection goes instead of the store's
    database, e.g. PostgreSQL directly while the store's pool goes through PgBouncer
    (validated here; it needs ``notify=True``).
    """

    def __init__(self, store: JobStore, **options: Unpack[WorkerOptions]) -> None:
        for verb in ("job_claim", "job_complete_many", "lease_renew", "open_listener"):
            if not callable(getattr(store, verb, None)):
                raise QueueConfigError("store must implement the JobStore port")
        self.store = store
        self.config: WorkerConfig = build_config(options)
        if self.config.listen_dsn is not None and not getattr(
            store, "listen_dsn_supported", True
        ):
            raise QueueConfigError(
                "listen_dsn is for a store on a database; this store has no LISTEN "
                "connection to point elsewhere: drop listen_dsn"
            )
        self._handlers = HandlerRegistry()
        self._state = "new"  # new -> running -> stopping -> stopped
        self._state_lock = threading.Lock()
        #: Serialises handler changes on a running worker (add, remove, set_concurrency).
        self._change_lock = threading.Lock()
        self._stop_lock = threading.Lock()
        self._stop_requested = threading.Event()
        self._hurry = threading.Event()
        self._parts: _Parts | None = None
        self._unregister: Callable[[], None] | None = None
        self._until_empty_requested = False
        self._schema_checked = False

    # -- introspection ----------------------------------------------------------------------
    @property
    def worker_id(self) -> str:
        """The lease owner this worker writes (``host-pid-random`` unless given)."""
        return self.config.worker_id

    @property
    def handler_types(self) -> tuple[str, ...]:
        """The job types this worker handles, in registration order."""
        return self._handlers.types

    @property
    def running(self) -> bool:
        """Whether the worker has started and not stopped."""
        return self._state == "running"

    def __repr__(self) -> str:
        return f"Worker(id={self.worker_id!r}, types={list(self.handler_types)}, {self._state})"

    # -- registration -----------------------------------------------------------------------
    @overload
    def handler(
        self,
        job_type: JobType[P],
        *,
        concurrency: int = ...,
        timeout: Duration | None = ...,
        serialize_by_scope: bool = ...,
        not_while_running: Sequence[str | JobType[Any]] | str = ...,
        waits_for: Sequence[str | JobType[Any]] | str = ...,
        grouped: bool = ...,
        max_batch: int | None = ...,
        transactional: bool = ...,
        delete_on: DeleteOn | None = ...,
        transaction_warning: Duration | None = ...,
        prefetch: bool = ...,
    ) -> TypedHandler[P]: ...

    @overload
    def handler(
        self,
        job_type: str,
        *,
        concurrency: int = ...,
        timeout: Duration | None = ...,
        serialize_by_scope: bool = ...,
        not_while_running: Sequence[str | JobType[Any]] | str = ...,
        waits_for: Sequence[str | JobType[Any]] | str = ...,
        grouped: bool = ...,
        max_batch: int | None = ...,
        transactional: bool = ...,
        delete_on: DeleteOn | None = ...,
        transaction_warning: Duration | None = ...,
        prefetch: bool = ...,
    ) -> Callable[[H], H]: ...

    def handler(
        self,
        job_type: str | JobType[Any],
        *,
        concurrency: int = 1,
        timeout: Duration | None = None,
        serialize_by_scope: bool = False,
        not_while_running: Sequence[str | JobType[Any]] | str = (),
        waits_for: Sequence[str | JobType[Any]] | str = (),
        grouped: bool = False,
        max_batch: int | None = None,
        transactional: bool = False,
        delete_on: DeleteOn | None = None,
        transaction_warning: Duration | None = None,
        prefetch: bool = True,
    ) -> Any:
        """Register the decorated function as the handler of ``job_type``.

        Options are validated now (``QueueConfigError``); registering a type twice is an
        error. On a running worker the handler is added at once and its jobs are claimed
        within one poll; it passes the checks ``start()`` makes (``waits_for`` cycles, the
        lease of an untimed handler), else ``QueueConfigError``. The function is returned
        unchanged. An
        ``async def`` handler runs as a task on the worker's event loop thread, with the
        same semantics (README.md, "Async handlers"); ``transactional=True`` needs a plain
        function (``QueueConfigError`` otherwise). ``transaction_warning`` (seconds, > 0;
        transactional handlers only, else ``QueueConfigError``): when the claim's
        transaction stays open longer, the worker logs ``transaction_slow`` (no payload)
        and reports a ``WorkerError`` of kind ``"transaction-slow"`` to observers'
        ``on_error``, once per attempt. ``prefetch=False``: claim only the jobs free handler
        threads start at once (none waits in the worker's buffer); by default the worker
        buffers jobs ahead of its threads, except for a type whose handlers take a second or
        more.
        """
        options = {
            "concurrency": concurrency, "timeout": timeout,
            "serialize_by_scope": serialize_by_scope, "not_while_running": not_while_running,
            "waits_for": waits_for, "grouped": grouped, "max_batch": max_batch,
            "transactional": transactional, "delete_on": delete_on,
            "transaction_warning": transaction_warning, "prefetch": prefetch,
        }
        # Validate the options before the function is known, so a bad option fails at the
        # decorator line.
        build_spec(job_type, _placeholder, **options)
        if transactional and not supports_transactional(self.store):
            raise QueueConfigError(
                "transactional handlers need a store with a transactional claim "
                "(job_claim_transactional, e.g. PostgresStore); this store has none"
            )

        def register(fn: Callable[..., object]) -> None:
            spec = with_middleware(build_spec(job_type, fn, **options), self.config.middleware)
            with self._change_lock, self._state_lock:
                if self._state == "stopping":
                    raise QueueConfigError("the worker is stopping: no handler can be added")
                if self._state != "running":
                    self._handlers.add(spec)
                    return
                self._add_running(spec)

        if isinstance(job_type, JobType):
            return TypedHandler[Any](register)

        def decorate(fn: H) -> H:
            register(fn)
            return fn

        return decorate

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        """Start the background threads and return at once (idempotent while running).

        A stopped worker may be started again (fresh threads, same handlers and id): this
        is what lets tests call ``run_until_empty`` repeatedly, e.g. after moving a fake
        clock past a retry backoff.
        """
        self._start(reset_stop=True)

    def _start(self, *, reset_stop: bool) -> None:
        """:meth:`start`; ``reset_stop=False`` (from :meth:`run`) keeps a stop that a signal
        requested while the worker was starting, instead of forgetting it."""
        with self._stop_lock, self._state_lock:
            if self._state == "running":
                return
            if self._state == "stopping":  # pragma: no cover - excluded by _stop_lock
                raise RuntimeError("the worker is stopping")
            self._check_startup()
            # The heap that exists before the first worker starts is left out of the
            # cyclic collector's scans from now on (see golemq_pg.worker.heap).
            freeze_startup_heap()
            if reset_stop:
                self._stop_requested.clear()
                self._hurry.clear()
            self._check_schema()
            self._launch()
            self._state = "running"
        log.info(
            "worker_started", worker_id=self.worker_id, types=list(self.handler_types),
            notify=self.config.notify, poll_interval=self.config.poll_interval,
        )

    def _check_startup(self, handlers: HandlerRegistry | None = None) -> None:
        handlers = self._handlers if handlers is None else handlers
        handlers.check_startup()
        cfg = self.config
        check_covered(handlers, cfg.middleware)
        if cfg.lease_duration is None and cfg.lease_grace <= 0:
            untimed = [spec.type for spec in handlers if spec.timeout is None]
            if untimed:
                raise QueueConfigError(
                    "lease_grace must be > 0 for handlers without a timeout (their lease is "
                    f"lease_grace): {untimed[:5]}; set lease_grace, a timeout or lease_duration"
                )
        if not len(handlers):
            log.warning("worker_without_handlers", worker_id=self.worker_id)
        for text in lock_warnings(handlers, cfg.resources):
            log.warning("transactional_claim_holds_locks", worker_id=self.worker_id,
                        detail=text)

    def _check_schema(self) -> None:
        """Refuse to start on a schema that is not migrated (``SchemaNotMigrated``), with
        one cheap read (``type_paused``); an unreachable database is not checked here (the
        services wait for it), and a store without the verb is trusted."""
        probe = getattr(self.store, "type_paused", None)
        if not callable(probe) or self._schema_checked:
            return
        answered, _, exc = _call_bounded(probe, STARTUP_WAIT, self._stop_requested,
                                         "golemq-schema-check")
        if not answered:
            log.warning("schema_check_skipped", worker_id=self.worker_id,
                        reason="the database did not answer", waited=STARTUP_WAIT)
            return
        if exc is None:
            self._schema_checked = True
            return
        if getattr(exc, "sqlstate", None) in _NOT_MIGRATED:
            schema = getattr(self.store, "schema", None)
            raise SchemaNotMigrated(schema if isinstance(schema, str) else None) from None
        # Anything else (the database went away meanwhile): the services retry.
        log.warning("schema_check_failed", worker_id=self.worker_id,
                    error_type=type(exc).__name__, error=error_text(exc))

    def _open_listener(self) -> Listener | None:
        """The LISTEN connection, waiting at most ``STARTUP_WAIT`` (or until a stop is
        requested): past that the listener thread opens it itself, and one that connects
        late is closed."""
        store, dsn = self.store, self.config.listen_dsn
        answered, listener, exc = _call_bounded(
            lambda: open_listener(store, dsn), STARTUP_WAIT, self._stop_requested,
            "golemq-listener-open", late=_close_listener,
        )
        if exc is not None or not answered:
            log.warning("listener_open_failed", worker_id=self.worker_id,
                        error_type=type(exc).__name__ if exc is not None else "Timeout",
                        error=error_text(exc) if exc is not None else "no answer in time")
            return None
        return listener

    def _launch(self) -> None:
        """Build the shared state and every service, wire them, start the threads."""
        cfg = self.config
        store = self.store
        owner = cfg.worker_id
        specs = tuple(self._handlers)
        # The pool registry: the runtime sees it through its protocols, the claim loop and
        # shutdown through the concrete pools. Filled below, before any thread starts.
        pools: dict[str, TypePool] = {}
        tx_pools: dict[str, TransactionalPool] = {}
        runtime = Runtime(cfg, store, handlers=specs, pools=pools, tx_pools=tx_pools,
                          until_empty=self._until_empty_requested)
        # Services, bottom layer first: each gets what it needs from the ones built before.
        completer = Completer(
            store, owner, runtime.hub, unblocks=unblocked_by(runtime), hint=runtime.hint,
            wake=runtime.wake_claimer, max_items=max(cfg.batch_size or 0, 500),
            deletes=delete_types(runtime), starts=runtime.defer_start,
        )
        outcomes = Outcomes(runtime, completer)
        supervisor = Supervisor(runtime, outcomes)
        reporter = ProgressReporter(store, owner, schedule=supervisor.call_at)
        marker = StartMarker(runtime) if runtime.defer_start else None
        executor = Executor(runtime, outcomes, supervisor, reporter,
                            started=None if marker is None else marker.started,
                            kick_marker=None if marker is None else marker.kick)
        # One event loop thread for every async type, and none without one.
        event_loop = EventLoop(owner) if any(spec.is_async for spec in specs) else None
        claim_loop = ClaimLoop(runtime, pools, writes_idle=completer.idle,
                               writes_backlogged=completer.backlogged,
                               blocked=BlockedReporter(owner), batch_size=cfg.batch_size)
        renewer = LeaseRenewer(runtime, abort=supervisor.abort, unwritten=completer.unwritten)
        maintenance = Maintenance(runtime, abort=supervisor.abort)
        services: list[Service] = [renewer, maintenance]
        parts = _Parts(runtime, pools, tx_pools, completer, supervisor, claim_loop, services,
                       outcomes, executor, reporter, renewer, maintenance, event_loop,
                       claims=None, listening=False)
        for spec in specs:
            if spec.transactional:
                tx_pools[spec.type] = self._tx_pool(parts, spec)
            else:
                pools[spec.type] = self._pool(parts, spec)
        # The renewer's interval follows the pools' leases (built above); writes failing for
        # longer than it hold the claims back.
        renewer.interval = completer.stall.after = renew_interval(runtime)
        claims = CompletionClaims(runtime, pools, claim_loop.take,
                                  batch_cap=claim_loop.batch_size)
        if claims:
            completer.claims = parts.claims = claims
        if marker is not None:
            # Writes the start of jobs still running a moment after their handler began
            # (also for handlers added later, so it runs whatever the pools at start).
            services.append(marker)
        if cfg.notify and (pools or tx_pools):
            # None: the listener thread opens it (and retries); polling covers the gap.
            listener = self._open_listener()
            services.append(
                ListenerThread(runtime, claim_loop, listener, abort_ids=supervisor.abort_ids)
            )
            parts.listening = True
        if event_loop is not None:
            services.append(event_loop)
        self._parts = parts
        self._unregister = _local.register(store, self._abort_local)
        # Start order: what the others report to first, the claim loop (the source of
        # work) last.
        completer.start()
        supervisor.start()
        if event_loop is not None:
            event_loop.watch(supervisor.call_at)
            event_loop.start()
        for pool in pools.values():
            pool.start()
        for tx_pool in tx_pools.values():
            tx_pool.start()
        for service in services:
            if service is not event_loop:
                service.start()
        claim_loop.start()

    def _pool(self, parts: _Parts, spec: HandlerSpec) -> TypePool:
        """The buffered pool of ``spec`` (a task pool on the event loop for an async one)."""
        runtime, cfg = parts.runtime, self.config
        if spec.is_async:
            event_loop = parts.event_loop
            assert event_loop is not None  # noqa: S101 - made before any async pool
            return TaskPool(
                runtime, spec, parts.executor, parts.outcomes, batch_size=cfg.batch_size,
                event_loop=event_loop, progress=LoopProgress(parts.reporter, event_loop),
            )
        return TypePool(runtime, spec, parts.executor, parts.outcomes,
                        batch_size=cfg.batch_size)

    def _tx_pool(self, parts: _Parts, spec: HandlerSpec) -> TransactionalPool:
        """The pool of a transactional ``spec``."""
        return TransactionalPool(parts.runtime, spec, parts.outcomes,
                                 kick_supervisor=parts.supervisor.kick)

    # -- handlers on a running worker -------------------------------------------------------
    def _add_running(self, spec: HandlerSpec) -> None:
        """Add ``spec``'s pool to the running worker (under the change and state locks):
        the same checks as at start, then the pool, the wiring, its threads, a claim."""
        parts = self._parts
        assert parts is not None  # noqa: S101 - set while running
        trial = HandlerRegistry()
        for known in self._handlers:
            trial.add(known)
        trial.add(spec)  # a second handler of the type: QueueConfigError
        old = parts.pools.get(spec.type) or parts.tx_pools.get(spec.type)
        if old is not None and old.busy():
            raise QueueConfigError(
                f"the removed handler of {spec.type!r} still has jobs running: wait for "
                "remove_handler to return (wait=True) before registering the type again"
            )
        self._check_startup(trial)
        runtime = parts.runtime
        if spec.is_async and parts.event_loop is None:
            event_loop = EventLoop(runtime.owner)
            event_loop.watch(parts.supervisor.call_at)
            event_loop.start()
            parts.event_loop = event_loop
            parts.services.append(event_loop)
        pools = {name: pool for name, pool in parts.pools.items() if name != spec.type}
        tx_pools = {name: pool for name, pool in parts.tx_pools.items() if name != spec.type}
        if spec.transactional:
            tx_pool = self._tx_pool(parts, spec)
            tx_pools[spec.type] = tx_pool
            tx_pool.start()
        else:
            pool = self._pool(parts, spec)
            pools[spec.type] = pool
            pool.start()
        self._handlers.add(spec)
        self._rewire(parts, pools, tx_pools)
        if self.config.notify and not parts.listening:
            # Started without a handler: no LISTEN connection yet (its thread opens it).
            listener = ListenerThread(runtime, parts.claim_loop, None,
                                      abort_ids=parts.supervisor.abort_ids)
            parts.services.append(listener)
            parts.listening = True
            listener.start()
        for text in lock_warnings(self._handlers, self.config.resources):
            log.warning("transactional_claim_holds_locks", worker_id=self.worker_id,
                        detail=text)
        log.info("handler_added", worker_id=self.worker_id, type=spec.type,
                 concurrency=spec.concurrency)
        runtime.hint((spec.type,))  # claim it now, not at the next poll

    def _rewire(
        self,
        parts: _Parts,
        pools: dict[str, TypePool],
        tx_pools: dict[str, TransactionalPool],
    ) -> None:
        """Publish a new handler set: new registry objects (never changed in place, so a
        thread iterating the old ones is unaffected), then what is derived from them."""
        runtime = parts.runtime
        # A removed handler whose jobs still run keeps its pool (and its spec here, for
        # its outcomes) until they are done, but is listed as retiring: the registry row
        # shows the change at once.
        specs = [pool.spec for pool in pools.values()]
        specs += [pool.spec for pool in tx_pools.values()]
        runtime.handlers = tuple(specs)
        runtime.retiring = frozenset(
            spec.type for spec in specs if self._handlers.get(spec.type) is not spec
        )
        parts.pools, parts.tx_pools = pools, tx_pools
        runtime.pools, runtime.tx_pools = pools, tx_pools
        parts.claim_loop.pools = pools
        completer = parts.completer
        completer.unblocks = unblocked_by(runtime)
        completer.delete_succeeded, completer.delete_failed = delete_types(runtime)
        claims = parts.claims
        if claims is None:
            claims = CompletionClaims(runtime, pools, parts.claim_loop.take,
                                      batch_cap=parts.claim_loop.batch_size)
            if claims:
                completer.claims = parts.claims = claims
        else:
            claims.pools = pools
            claims.targets = claim_targets(runtime, pools)
        parts.renewer.interval = completer.stall.after = renew_interval(runtime)
        parts.renewer.kick()
        parts.maintenance.beat_soon()

    def remove_handler(
        self,
        job_type: str | JobType[Any],
        *,
        wait: bool = True,
        timeout: Duration | None = None,
    ) -> None:
        """Stop handling ``job_type``: nothing more of it is claimed or started from now on.

        Jobs claimed but not started (buffered) go back to PENDING at once, their attempt
        refunded and their lease cleared, so another worker can take them. With
        ``wait=True`` (the default) this blocks until the type's running jobs have finished;
        past ``timeout`` seconds (None: no limit) they are signalled (reason
        ``"shutdown"``), as at shutdown: one that still succeeds is completed, one that
        fails or ignores the signal past ``abandon_grace`` is released (attempt refunded).
        With ``wait=False`` it returns at once and they finish behind (``timeout`` still
        applies). On a worker that is not running the handler is simply unregistered.
        ``QueueConfigError``: no handler for the type, or a bad ``wait`` / ``timeout``.
        """
        name = self._registered_name(job_type)
        if not isinstance(wait, bool):
            raise QueueConfigError("wait must be True or False")
        limit: float | None = None
        if timeout is not None:
            try:
                limit = to_seconds(timeout, "timeout")
            except ValueError as exc:
                raise QueueConfigError(str(exc)) from None
        with self._change_lock, self._state_lock:
            if self._handlers.get(name) is None:
                raise QueueConfigError(f"no handler for {name!r} is registered")
            self._handlers.remove(name)
            parts = self._parts
            if self._state != "running" or parts is None:
                return
            pool = parts.pools.get(name)
            tx_pool = parts.tx_pools.get(name)
            released = 0
            if pool is not None:
                for unit in pool.close():
                    pool.release_unstarted(unit)
                    released += len(unit.jobs)
            if tx_pool is not None:
                tx_pool.close()
            self._rewire(parts, dict(parts.pools), dict(parts.tx_pools))
        log.info("handler_removed", worker_id=self.worker_id, type=name, released=released)
        retiring = pool if pool is not None else tx_pool
        assert retiring is not None  # noqa: S101 - every running handler has a pool
        if wait:
            self._retire(parts, retiring, limit)
            return
        threading.Thread(target=self._retire, args=(parts, retiring, limit), daemon=True,
                         name=f"golemq-retire-{name[:40]}").start()

    def _retire(
        self, parts: _Parts, pool: TypePool | TransactionalPool, limit: float | None
    ) -> None:
        """Wait for a removed type's running jobs (signalled past ``limit`` seconds, as at
        shutdown), then drop its pool from the registry."""
        deadline = None if limit is None else time.monotonic() + limit
        fired = False
        while pool.busy():
            now = time.monotonic()
            if not fired and deadline is not None and now >= deadline:
                fired = True
                parts.supervisor.fire(list(pool.active.copy().values()), SHUTDOWN)
            time.sleep(_RETIRE_TICK)
        with self._change_lock, self._state_lock:
            pools = {name: p for name, p in parts.pools.items() if p is not pool}
            tx_pools = {name: p for name, p in parts.tx_pools.items() if p is not pool}
            if len(pools) != len(parts.pools) or len(tx_pools) != len(parts.tx_pools):
                self._rewire(parts, pools, tx_pools)

    def set_concurrency(self, job_type: str | JobType[Any], concurrency: int) -> None:
        """Run up to ``concurrency`` jobs of ``job_type`` at once from now on, without a
        restart: more handlers start at once, surplus ones end after their current job.
        ``QueueConfigError``: no handler for the type, or not a positive integer."""
        name = self._registered_name(job_type)
        with self._change_lock, self._state_lock:
            spec = self._handlers.get(name)
            if spec is None:
                raise QueueConfigError(f"no handler for {name!r} is registered")
            updated = replace(spec, concurrency=check_concurrency(name, concurrency))
            self._handlers.replace(updated)
            parts = self._parts
            if self._state != "running" or parts is None:
                return
            pool = parts.pools.get(name)
            tx_pool = parts.tx_pools.get(name)
            if pool is not None:
                pool.set_concurrency(updated)
            if tx_pool is not None:
                tx_pool.spec = updated
                tx_pool.set_concurrency(concurrency)
            self._rewire(parts, parts.pools, parts.tx_pools)
            parts.runtime.hint((name,))
        log.info("handler_concurrency_set", worker_id=self.worker_id, type=name,
                 concurrency=concurrency)

    def _registered_name(self, job_type: object) -> str:
        if not isinstance(job_type, str | JobType):
            raise QueueConfigError("a handler's job type must be a string or a JobType")
        try:
            return check_job_type(job_type)
        except ValueError as exc:
            raise QueueConfigError(str(exc)) from None

    def _abort_local(self, job_ids: Sequence[str], reason: str) -> None:
        # Queue.cancel* calls this for every worker of the process (golemq_pg._local): the
        # handlers of job_ids running here, whose rows are already gone, are aborted.
        parts = self._parts
        if parts is not None:
            parts.supervisor.abort_ids(job_ids, CANCELLED, error=reason)

    def stop(self, timeout: Duration | None = None) -> None:
        """Graceful stop (idempotent): stop claiming, give back buffered jobs, let running
        handlers finish for ``timeout`` seconds (default ``shutdown_grace``), then signal
        them (reason ``"shutdown"``), abandon those that ignore it past ``abandon_grace``
        and release their jobs; flush outcomes; close the listener."""
        grace = self.config.shutdown_grace
        if timeout is not None:
            try:
                grace = to_seconds(timeout, "timeout")
            except ValueError as exc:
                raise QueueConfigError(str(exc)) from None
        self._stop_requested.set()
        with self._stop_lock:
            with self._state_lock:
                if self._state in ("new", "stopped"):
                    return
                self._state = "stopping"
            parts = self._parts
            assert parts is not None  # noqa: S101 - set by start
            started = time.monotonic()
            log.info("worker_stopping", worker_id=self.worker_id, grace=grace)
            registry = [svc for svc in parts.services if isinstance(svc, Maintenance)]
            for maintenance in registry:
                maintenance.announce_stopping()
            try:
                deadline = shut_down(
                    parts.runtime, claim_loop=parts.claim_loop, pools=parts.pools,
                    tx_pools=parts.tx_pools, supervisor=parts.supervisor,
                    completer=parts.completer, services=parts.services, grace=grace,
                    hurry=self._hurry,
                )
                for maintenance in registry:  # a clean stop: the registry row goes
                    maintenance.deregister(deadline - time.monotonic())
            finally:
                if self._unregister is not None:
                    self._unregister()
                    self._unregister = None
                with self._state_lock:
                    self._state = "stopped"
            log.info("worker_stopped", worker_id=self.worker_id,
                     seconds=round(time.monotonic() - started, 3))

    def run(self) -> None:
        """Start and block until SIGINT/SIGTERM (or ``stop()`` from another thread), then
        shut down gracefully. A second signal cuts the shutdown grace short."""
        previous: dict[signal.Signals, Any] = {}
        # Cleared before the handlers are installed: a signal from then on, even one that
        # arrives while the worker is still starting, stops it (start() used to clear the
        # request it made, and the worker ran on until killed).
        self._stop_requested.clear()
        self._hurry.clear()
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                previous[signum] = signal.signal(signum, self._on_signal)
        try:
            self._start(reset_stop=False)
            while not self._stop_requested.wait(1.0):
                pass
        finally:
            try:
                self.stop()
            finally:
                for signum, handler in previous.items():
                    signal.signal(signum, handler)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        del frame
        if self._stop_requested.is_set():
            self._hurry.set()
            log.warning("worker_shutdown_hurried", worker_id=self.worker_id, signal=signum)
            return
        log.info("worker_signal", worker_id=self.worker_id, signal=signum)
        self._stop_requested.set()

    def run_until_empty(
        self, timeout: Duration | None = None, *, with_scheduled: bool = False
    ) -> None:
        """Process until nothing is due and nothing runs, then stop and return.

        Jobs parked in the future (``delay=``, retry backoff) are not due, unless
        ``with_scheduled=True``: then they are run as if due, until no pending or running
        job of a handled type is left. A paused type's jobs are never due here. Due jobs
        held back by a guard (a lease held by another process, a pool's budget, a waited-for
        type) are still due: the worker keeps polling for them. With ``timeout`` (seconds)
        the worker stops after that long even if work remains.
        """
        if not isinstance(with_scheduled, bool):
            raise QueueConfigError("with_scheduled must be True or False")
        limit = None
        if timeout is not None:
            try:
                limit = to_seconds(timeout, "timeout")
            except ValueError as exc:
                raise QueueConfigError(str(exc)) from None
        with self._state_lock:
            self._until_empty_requested = True
            if self._state == "running" and self._parts is not None:
                self._parts.runtime.until_empty = True
                self._parts.runtime.wake.set()
        self.start()
        parts = self._parts
        assert parts is not None  # noqa: S101 - set by start
        try:
            if not parts.claim_loop.wait_drained(limit, with_scheduled=with_scheduled):
                log.warning("run_until_empty_timed_out", worker_id=self.worker_id,
                            timeout=limit)
        finally:
            self._until_empty_requested = False
            self.stop()

    def __enter__(self) -> Worker:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _call_bounded(
    fn: Callable[[], T],
    seconds: float,
    stop: threading.Event,
    name: str,
    *,
    late: Callable[[T], None] | None = None,
) -> tuple[bool, T | None, BaseException | None]:
    """Run ``fn`` on a daemon thread and wait for it at most ``seconds``, or until ``stop``
    is set: (answered, result, exception). A call still running when the wait ends is left
    to finish (a store call stuck on the pool's connection timeout); ``late`` then gets
    what it returns."""
    lock = threading.Lock()
    box: dict[str, Any] = {}
    done = threading.Event()

    def call() -> None:
        try:
            result: Any = fn()
            box["result"] = result
        except Exception as exc:  # noqa: BLE001 - handed to the caller
            box["exc"] = exc
        with lock:
            done.set()
            abandoned = box.get("abandoned", False)
        if abandoned and late is not None and "result" in box:
            late(box["result"])

    threading.Thread(target=call, name=name, daemon=True).start()
    deadline = time.monotonic() + seconds
    while not done.wait(0.02):
        if stop.is_set() or time.monotonic() >= deadline:
            with lock:
                if not done.is_set():
                    box["abandoned"] = True
                    return False, None, None
            break
    return True, box.get("result"), box.get("exc")


def _close_listener(listener: Listener | None) -> None:
    """Close a LISTEN connection that was opened too late to be used."""
    if listener is not None:
        try:
            listener.close()
        except Exception as exc:  # noqa: BLE001 - closing is best effort
            log.debug("listener_close_failed", error_type=type(exc).__name__)


def _placeholder(event: Any) -> None:
    """Stands in for the handler while its options are validated."""


__all__ = ["TypedHandler", "Worker"]
