"""State shared by the worker's threads, and the operations several of them need.

The :class:`Runtime` holds the configuration, the store, the per-type pools and the lock
that decides each unit's fate exactly once. Its :meth:`Runtime.abort` is the single path by
which a unit is taken away from its handler (cancellation, lease loss): the unit is settled
(so nothing the handler returns is written), its signal fires, and the supervisor is told
to abandon the handler if it does not return within ``abandon_grace``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import structlog

from golemq_pg.store.port import JobStore
from golemq_pg.worker.backoff import BackoffPolicy
from golemq_pg.worker.config import WorkerConfig
from golemq_pg.worker.observers import ObserverHub
from golemq_pg.worker.units import BUFFERED, RUNNING, Unit

if TYPE_CHECKING:
    from golemq_pg.worker.completer import Completer
    from golemq_pg.worker.pool import TypePool
    from golemq_pg.worker.progress import ProgressReporter
    from golemq_pg.worker.supervisor import Supervisor
    from golemq_pg.worker.transactional import TransactionalPool

log = structlog.get_logger("golemq_pg.worker")

#: Most job ids listed in one log line; the count is always logged.
LOG_IDS = 20


class Runtime:
    """Everything the worker's threads share. Built by ``Worker.start``."""

    def __init__(self, config: WorkerConfig, store: JobStore) -> None:
        self.config = config
        self.store = store
        self.owner = config.worker_id
        self.hub = ObserverHub(config.observers, config.worker_id)
        self.policy = BackoffPolicy(
            config.base_backoff, config.max_backoff, config.retry_strategy
        )
        #: Decides unit state transitions and settlement (see :mod:`units`).
        self.lock = threading.Lock()
        self.pools: dict[str, TypePool] = {}
        #: Transactional handler types: claimed by their own threads, one job per
        #: transaction, never renewed or reconciled (see :mod:`transactional`).
        self.tx_pools: dict[str, TransactionalPool] = {}
        #: Wakes the claim loop: capacity freed, a notification, a flush, a stop.
        self.wake = threading.Event()
        #: Set once shutdown begins: nothing new starts.
        self.stopping = False
        #: Set by ``run_until_empty``: the claim loop reports when the queue is drained.
        self.until_empty = False
        #: Set after the first maintenance pass (expired leases reaped once), so that
        #: ``run_until_empty`` also runs the jobs of a crashed worker.
        self.maintained = threading.Event()
        self.completer: Completer
        self.supervisor: Supervisor
        self.reporter: ProgressReporter

    # -- views ------------------------------------------------------------------------------
    def units(self) -> list[Unit]:
        """A snapshot of every unit the worker holds (buffered, running or finishing)."""
        out: list[Unit] = []
        for pool in self.pools.values():
            out.extend(pool.active.copy().values())
        return out

    def tx_units(self) -> list[Unit]:
        """Units running in transactional handlers."""
        out: list[Unit] = []
        for pool in self.tx_pools.values():
            out.extend(pool.active.copy().values())
        return out

    def tx_idle(self) -> bool:
        """Every transactional type is idle and found nothing due last time it looked."""
        return all(pool.idle() for pool in self.tx_pools.values())

    def held_units(self) -> list[Unit]:
        """Units whose outcome is still open (their leases matter)."""
        return [u for u in self.units() if not u.settled]

    def busy(self) -> bool:
        """Whether any unit is held or any outcome waits to be written."""
        return (
            any(pool.active for pool in self.pools.values())
            or any(pool.active for pool in self.tx_pools.values())
            or not self.completer.idle()
        )

    def wake_claimer(self) -> None:
        """Wake the claim loop (cheap when it is already awake)."""
        if not self.wake.is_set():
            self.wake.set()

    def requeued(self, types: Iterable[str]) -> None:
        """Jobs of ``types`` went back to the queue due now: worth a claim."""
        self.hint(tuple(types))

    def hint(self, types: tuple[str, ...]) -> bool:
        """Jobs of ``types`` (empty: any type) may be due; True if any is handled here."""
        hit = False
        for name, pool in self.pools.items():
            if not types or name in types:
                pool.hints += 1
                pool.maybe_more = True
                hit = True
        for name, tx_pool in self.tx_pools.items():
            if not types or name in types:
                tx_pool.hint()
        if hit:
            self.wake_claimer()
        return hit

    # -- aborting ---------------------------------------------------------------------------
    def abort(self, units: Iterable[Unit], reason: str, *, error: str | None = None) -> int:
        """Take ``units`` away from their handlers: settle, fire the signal, notify observers.

        Nothing is written for them: the row is gone (cancelled) or belongs to someone else
        (lease lost). Returns how many units were aborted (already settled ones are skipped).
        """
        aborted: list[Unit] = []
        now = time.monotonic()
        kick = False
        with self.lock:
            # The signal fires under the lock: whoever settles a unit has fired its signal
            # before anyone can see it settled, so a synchronous cancel that lost the race to
            # the NOTIFY path still returns after the handler was signalled.
            for unit in units:
                if unit.settled:
                    continue
                unit.settled = True
                unit.signal.fire(reason)
                if unit.state == RUNNING:
                    unit.abandon_at = now + self.config.abandon_grace
                    kick = True
                aborted.append(unit)
        if not aborted:
            return 0
        if kick:
            self.supervisor.kick()
        for unit in aborted:
            if unit.pool.transactional and unit.state == RUNNING:
                unit.pool.interrupt(unit)  # its transaction must end for the cancel to land
        outcome = "cancelled" if reason == "cancelled" else "lease-lost"
        jobs = [job for unit in aborted for job in unit.jobs]
        event = log.info if outcome == "cancelled" else log.warning
        event(
            "jobs_aborted" if outcome == "cancelled" else "lease_lost",
            worker_id=self.owner,
            reason=reason,
            count=len(jobs),
            job_ids=[job.id for job in jobs[:LOG_IDS]],
            types=sorted({job.type for job in jobs}),
            attempts=[job.attempt for job in jobs[:LOG_IDS]],
        )
        if self.hub:
            for job in jobs:
                self.hub.emit(job.id, job.type, job.scope, outcome, job.attempt, error=error)
        # A buffered unit frees its capacity when its handler thread skips it; wake the
        # claim loop so it can refill sooner.
        if any(unit.state == BUFFERED for unit in aborted):
            self.wake_claimer()
        return len(aborted)

    def abort_ids(self, job_ids: Iterable[str], reason: str, *, error: str | None = None) -> int:
        """Abort every held unit (transactional ones included) containing one of ``job_ids``."""
        wanted = {str(job_id) for job_id in job_ids}
        if not wanted:
            return 0
        units = [u for u in self.held_units() if u.holds(wanted)]
        units += [u for u in self.tx_units() if not u.settled and u.holds(wanted)]
        return self.abort(units, reason, error=error)


class Service:
    """A named background thread that runs ``step`` until stopped and never dies.

    ``step`` does one unit of work and returns how long to wait before the next one (None:
    until woken). An exception is logged and retried with a capped backoff, so a bug or a
    database outage slows the loop down but never leaves the worker alive-but-idle.
    """

    def __init__(self, name: str, owner: str) -> None:
        self.name = name
        self.owner = owner
        self.stop_event = threading.Event()
        self.kick_event = threading.Event()
        self._thread: threading.Thread | None = None

    def step(self) -> float | None:
        """One iteration; returns the wait before the next one (None: until kicked)."""
        raise NotImplementedError

    def start(self) -> None:
        """Start the thread (daemon: an abandoned worker never blocks interpreter exit)."""
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def kick(self) -> None:
        """Run the next step now."""
        self.kick_event.set()

    def stop(self, timeout: float | None = None) -> None:
        """Ask the loop to end and wait up to ``timeout`` seconds for it."""
        self.stop_event.set()
        self.kick_event.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        failures = 0
        while not self.stop_event.is_set():
            try:
                wait = self.step()
                failures = 0
            except BaseException as exc:  # noqa: BLE001 - a service thread must never die
                failures += 1
                wait = min(0.05 * 2 ** min(failures, 10), 5.0)
                if failures == 1 or failures % 20 == 0:
                    log.warning(
                        "service_error", service=self.name, worker_id=self.owner,
                        failures=failures, error_type=type(exc).__name__,
                        error=_short(exc), retry_in=round(wait, 3),
                    )
            if self.stop_event.is_set():
                break
            self.kick_event.wait(wait)
            self.kick_event.clear()


def _short(exc: BaseException, limit: int = 300) -> str:
    """The first line of ``exc``'s message, cut to ``limit``: what a log line may carry.

    Only the first line: a database error's DETAIL and CONTEXT lines may quote the row it
    failed on ("Failing row contains (...)"), payload included.
    """
    try:
        text = str(exc).split("\n", 1)[0]
    except Exception:  # noqa: BLE001 - a broken __str__ must not break logging
        text = "<unprintable>"
    return text if len(text) <= limit else text[:limit] + "..."


Callback = Callable[[], None]

__all__ = ["LOG_IDS", "Callback", "Runtime", "Service"]
