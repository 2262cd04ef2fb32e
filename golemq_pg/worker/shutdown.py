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

Every wait is bounded, so a stop ends in time even while the database is unreachable (each
store call of a service thread then waits out the pool's connection timeout, 30 s by default):
the claim in flight gets :data:`CLAIM_JOIN` seconds, and steps 5 and the final flush share
:data:`WIND_DOWN` seconds after the grace. A thread still inside a store call past its
deadline is left to finish on its own (daemon threads: a worker process exits regardless);
a claim that returns after its loop was given up on is released at once.
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

#: How long a claim in flight may hold up the start of a shutdown before it moves on.
CLAIM_JOIN = 1.5
#: What the end of a shutdown (stopping the service threads, the final flush) may take
#: after the grace: a stop returns within ``grace + CLAIM_JOIN + WIND_DOWN`` (plus
#: ``abandon_grace`` when a handler ignores its shutdown signal), even with the database
#: down.
WIND_DOWN = 2.5
#: How long the final flush keeps retrying a failing store before giving up (capped by the
#: wind-down's deadline).
FLUSH_GIVE_UP = 10.0
#: The least any one join is given, even past the deadline (a healthy thread ends at once).
_MIN_JOIN = 0.05
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
) -> float:
    """Run the shutdown sequence of the module docstring; returns its deadline (monotonic
    seconds), which the registry row's removal keeps to as well.

    ``services`` are the loops stopped before the final flush (renewer, maintenance,
    listener); the claim loop, the supervisor and the completer are stopped at their own
    steps.
    """
    started = time.monotonic()
    runtime.stopping = True
    claim_loop.stop(CLAIM_JOIN)
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
    deadline = max(started + grace, time.monotonic()) + WIND_DOWN

    def left() -> float:
        return max(deadline - time.monotonic(), _MIN_JOIN)

    for service in services:
        service.stop(left())
    supervisor.stop(left())
    completer.give_up_at = min(time.monotonic() + FLUSH_GIVE_UP, deadline)
    completer.stop(left())
    return deadline


__all__ = ["shut_down"]
