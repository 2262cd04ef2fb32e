"""A worker Runtime with default options on an InMemoryStore, for unit tests of its parts."""

from __future__ import annotations

from collections.abc import Sequence

from golemq_pg import InMemoryStore, Resource
from golemq_pg.worker.completer import Completer
from golemq_pg.worker.config import build_config
from golemq_pg.worker.execution import Executor
from golemq_pg.worker.handlers import HandlerSpec
from golemq_pg.worker.outcomes import Outcomes
from golemq_pg.worker.pool import TypePool
from golemq_pg.worker.progress import ProgressReporter
from golemq_pg.worker.runtime import Runtime, delete_types, unblocked_by
from golemq_pg.worker.supervisor import Supervisor


def bare_runtime(*, batch_size: int | None = None,
                 resources: dict[str, Resource] | None = None,
                 handlers: Sequence[HandlerSpec] = ()) -> Runtime:
    """A Runtime as ``Worker`` builds it (nothing started), with the default options."""
    config = build_config({"batch_size": batch_size, "worker_id": "w", "resources": resources})
    return Runtime(config, InMemoryStore(), handlers=handlers, pools={}, tx_pools={})


def bare_completer(runtime: Runtime) -> Completer:
    """The completer ``Worker`` wires to ``runtime`` (not started)."""
    return Completer(runtime.store, runtime.owner, runtime.hub,
                     unblocks=unblocked_by(runtime), hint=runtime.hint,
                     wake=runtime.wake_claimer, deletes=delete_types(runtime))


def bare_pool(runtime: Runtime, spec: HandlerSpec, *, batch_size: int | None) -> TypePool:
    """A buffered pool wired as ``Worker`` wires it (nothing started)."""
    outcomes = Outcomes(runtime, bare_completer(runtime))
    supervisor = Supervisor(runtime, outcomes)
    reporter = ProgressReporter(runtime.store, runtime.owner, schedule=supervisor.call_at)
    executor = Executor(runtime, outcomes, supervisor, reporter)
    return TypePool(runtime, spec, executor, outcomes, batch_size=batch_size)
