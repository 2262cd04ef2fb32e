"""Graceful shutdown, step by step.

1. Stop claiming (a claim in flight is distributed first).
2. Give back every buffered, never-started job (``job_release_many``: due now, attempt
   refunded) and tell idle handler threads to exit.
3. Let running handlers finish for up to the grace (``shutdown_grace`` or ``stop(timeout)``).
4. Fire the remaining handlers' signals with reason ``"shutdown"``; a handler that still
   succeeds is completed, one that fails or is abandoned after ``abandon_grace`` is released
   (attempt refunded: the shutdown is not the job's fault).
5. Stop the renewer, maintenance and listener, then flush every queued outcome.

A second SIGINT/SIGTERM (``hurry``) skips the remaining grace periods.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import structlog

from golemq_pg.worker.events import SHUTDOWN
from golemq_pg.worker.units import RUNNING

if TYPE_CHECKING:
    from golemq_pg.worker.completer import Completer
    from golemq_pg.worker.dispatcher import ClaimLoop
    from golemq_pg.worker.pool import TypePool
    from golemq_pg.worker.runtime import Runtime
    from golemq_pg.worker.service import Service
    from golemq_pg.worker.supervisor import Supervisor
    from golemq_pg.worker.transactional import TransactionalPool

log = structlog.get_logger("golemq_pg.worker.shutdown")

#: How long a claim or a write in flight may hold up shutdown before it moves on.
JOIN_SECONDS = 30.0
#: How long the final flush keeps retrying a failing store before giving up.
FLUSH_GIVE_UP = 10.0
_TICK = 0.01


def _running(runtime: Runtime) -> list[Any]:
    return [unit for unit in runtime.units() + runtime.tx_units() if unit.state == RUNNING]


def _wait_idle(
    runtime: Runtime,
    supervisor: Supervisor,
    seconds: float,
    hurry: threading.Event,
    refire: bool,
) -> bool:
    """Wait until no handler runs, up to ``seconds``; True when idle."""
    deadline = time.monotonic() + seconds
    while True:
        running = _running(runtime)
        if not running:
            return True
        if hurry.is_set() or time.monotonic() >= deadline:
            return False
        if refire:  # a handler that picked a job up just before the stop gets the signal too
            supervisor.fire_all(SHUTDOWN)
        hurry.wait(_TICK)


def shut_down(
    runtime: Runtime,
    *,
    claim_loop: ClaimLoop,
    pools: Mapping[str, TypePool],
    tx_pools: Mapping[str, TransactionalPool],
    supervisor: Supervisor,
    completer: Completer,
    services: Sequence[Service],
    grace: float,
    hurry: threading.Event,
) -> None:
    """Run the shutdown sequence of the module docstring.

    ``services`` are the loops stopped before the final flush (renewer, maintenance,
    listener); the claim loop, the supervisor and the completer are stopped at their own
    steps.
    """
    runtime.stopping = True
    claim_loop.stop(JOIN_SECONDS)
    released = 0
    for pool in pools.values():
        for unit in pool.drain_buffer():
            pool.release_unstarted(unit)
            released += len(unit.jobs)
        pool.stop_threads()
    for tx_pool in tx_pools.values():
        tx_pool.stop_threads()
    if released:
        log.info("buffered_jobs_released", worker_id=runtime.owner, count=released)
    if not _wait_idle(runtime, supervisor, grace, hurry, refire=False):
        fired = supervisor.fire_all(SHUTDOWN)
        log.info("shutdown_signalled", worker_id=runtime.owner, handlers=fired)
        abandon_after = 0.0 if hurry.is_set() else runtime.config.abandon_grace + 0.5
        if not _wait_idle(runtime, supervisor, abandon_after, hurry, refire=True):
            for unit in _running(runtime):
                if not unit.pool.abandonable:
                    job = unit.jobs[0]
                    log.warning(
                        "transactional_handler_left_running", worker_id=runtime.owner,
                        job_id=job.id, type=job.type, attempt=job.attempt,
                    )
                    continue
                if supervisor.abandon(unit):
                    job = unit.jobs[0]
                    log.warning(
                        "handler_abandoned", worker_id=runtime.owner, job_id=job.id,
                        type=job.type, attempt=job.attempt, reason=SHUTDOWN,
                    )
    for service in services:
        service.stop(JOIN_SECONDS)
    supervisor.stop(JOIN_SECONDS)
    completer.give_up_at = time.monotonic() + FLUSH_GIVE_UP
    completer.stop(JOIN_SECONDS + FLUSH_GIVE_UP)


__all__ = ["shut_down"]
