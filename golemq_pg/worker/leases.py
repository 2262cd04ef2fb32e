"""The lease renewer: one ``lease_renew`` statement per tick for the leases that need it.

Lease lengths (decided per type when the worker starts):

* ``lease_duration`` set: every lease is ``lease_duration`` long and every held job
  (buffered or running, any type) is renewed every ``lease_renew_interval`` (default
  ``lease_duration / 3``) in one call.
* ``lease_duration`` unset, type **with** ``timeout``: the lease is ``timeout + lease_grace``,
  written once by the claim (no heartbeat while it runs: the timeout bounds the run).
* ``lease_duration`` unset, type **without** ``timeout``: the lease is ``lease_grace`` and is
  renewed every ``lease_grace / 3`` while the job runs. Without this, a long job with no
  timeout would be reaped (and run twice) after ``lease_grace``; with it, a crashed worker's
  jobs are still recovered within ``lease_grace`` of its death.

Jobs still waiting in a local buffer are renewed as well, whatever their type, so prefetch
never eats into the lease a job needs once it starts. A job the store did not renew (its
lease expired and was reclaimed, or it was cancelled), or whose renewals keep failing until
its lease must have run out, is aborted through its signal with reason ``"lease-lost"``;
whatever its handler returns later is dropped (and the fenced store would change 0 rows).
A failing renewal is reported to observers' ``on_error`` (kind ``"renew"``) once per
incident.

A finished unit whose outcome the completer has not written yet (``unwritten``: its writes
are failing, or slow) keeps its lease too: once a third of its lease has passed it is renewed
like a running job, so a completer that cannot write for a while does not let the reaper give
its finished jobs to be run again. Such a lease not renewed is not aborted (there is nothing
left to abort): its outcome was written meanwhile, or the completer's fenced write will find
it lost.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog

from golemq_pg._errortext import error_text
from golemq_pg.store.port import LeaseRef
from golemq_pg.worker.batches import SplitWrite, unwritable_fail
from golemq_pg.worker.events import LEASE_LOST
from golemq_pg.worker.service import Service
from golemq_pg.worker.units import BUFFERED, RUNNING, Unit

if TYPE_CHECKING:
    from golemq_pg.worker.runtime import Runtime
    from golemq_pg.worker.supervisor import Abort

log = structlog.get_logger("golemq_pg.worker.leases")


def renew_interval(runtime: Runtime) -> float:
    """How often the renewer runs: a third of the shortest lease it keeps alive."""
    cfg = runtime.config
    if cfg.lease_duration is not None:
        return cfg.lease_renew_interval or cfg.lease_duration / 3
    leases = [pool.lease_seconds for pool in runtime.pools.values() if pool.lease_seconds > 0]
    return min(leases) / 3 if leases else 10.0


class LeaseRenewer(Service):
    """Renews held leases in one call per lease length; aborts the ones that were lost
    through ``abort``."""

    def __init__(
        self, runtime: Runtime, *, abort: Abort,
        unwritten: Callable[[], list[Unit]] = list,
    ) -> None:
        super().__init__("golemq-renewer", runtime.owner)
        self.runtime = runtime
        self._abort = abort
        #: The finished units whose outcomes wait to be written (the completer's).
        self._unwritten = unwritten
        self.interval = renew_interval(runtime)
        self._failures = 0

    def step(self) -> float:
        """Renew once; wait one interval."""
        self.renew_once()
        return self.interval

    def due(self) -> dict[float, list[Unit]]:
        """The units to renew now, grouped by lease length in seconds."""
        cfg = self.runtime.config
        groups: dict[float, list[Unit]] = {}
        for unit in self.runtime.held_units():
            state = unit.state
            if state not in (BUFFERED, RUNNING):
                continue
            pool = unit.pool
            if cfg.lease_duration is not None:
                seconds = cfg.lease_duration
            elif state == RUNNING and pool.spec.timeout is not None:
                continue  # written once: the timeout bounds the run
            else:
                seconds = pool.lease_seconds
            groups.setdefault(seconds, []).append(unit)
        return groups

    def finished_due(self) -> dict[float, list[Unit]]:
        """The finished units whose outcome waits to be written and a third of whose lease
        has passed, grouped by lease length in seconds."""
        cfg = self.runtime.config
        now = time.monotonic()
        groups: dict[float, list[Unit]] = {}
        for unit in self._unwritten():
            seconds = cfg.lease_duration or unit.pool.lease_seconds
            if seconds > 0 and unit.lease_deadline - now < seconds * 2 / 3:
                groups.setdefault(seconds, []).append(unit)
        return groups

    def renew_once(self) -> None:
        """One renewal pass over every lease that needs it."""
        self._renew_finished()
        runtime = self.runtime
        for seconds, units in self.due().items():
            refs = [ref for unit in units for ref in unit.refs]
            started = time.monotonic()
            try:
                renewed = self._renew(refs, seconds)
            except Exception as exc:  # noqa: BLE001 - retried next tick; expiry aborts
                self._failures += 1
                runtime.hub.errors.failed("renew", exc)
                if self._failures == 1 or self._failures % 10 == 0:
                    log.warning(
                        "lease_renew_failed", worker_id=runtime.owner, jobs=len(refs),
                        failures=self._failures, error_type=type(exc).__name__,
                        error=error_text(exc),
                    )
                now = time.monotonic()
                expired = [u for u in units if u.lease_deadline <= now]
                if expired:
                    self._abort(expired, LEASE_LOST)
                continue
            if self._failures:
                self._failures = 0
                runtime.hub.errors.recovered("renew")
            lost: list[Unit] = []
            for unit in units:
                if all(ref.id in renewed for ref in unit.refs):
                    unit.lease_deadline = started + seconds
                else:
                    lost.append(unit)
            if lost:
                self._abort(lost, LEASE_LOST)

    def _renew(self, refs: list[LeaseRef], seconds: float) -> set[str]:
        """``lease_renew`` of ``refs``, split if the store refuses it for its data
        (``WriteRefused``): each refused lease is dead-lettered alone (``OutcomeUnwritable``)
        and, not renewed, its unit aborted as lost; the others are renewed."""
        runtime = self.runtime
        split = SplitWrite(len(refs))
        split.run(lambda lo, hi: runtime.store.lease_renew(runtime.owner, refs[lo:hi], seconds))
        if split.refused:
            fails = [unwritable_fail(refs[index], refusal) for index, refusal in split.refused]
            log.warning("lease_unrenewable", worker_id=runtime.owner,
                        job_ids=[fail.id for fail in fails], error=fails[0].error)
            try:
                runtime.store.job_fail_many(runtime.owner, fails)
            except Exception as exc:  # noqa: BLE001 - its lease expires; the reaper has it
                log.warning("lease_unrenewable_fail_failed", worker_id=runtime.owner,
                            error_type=type(exc).__name__, error=error_text(exc))
        return split.written

    def _renew_finished(self) -> None:
        """Renew the leases of finished units whose outcomes wait to be written."""
        runtime = self.runtime
        for seconds, units in self.finished_due().items():
            refs = [ref for unit in units for ref in unit.refs]
            started = time.monotonic()
            try:
                renewed = self._renew(refs, seconds)
            except Exception as exc:  # noqa: BLE001 - retried next tick
                log.warning("unwritten_lease_renew_failed", worker_id=runtime.owner,
                            jobs=len(refs), error_type=type(exc).__name__,
                            error=error_text(exc))
                continue
            for unit in units:
                if all(ref.id in renewed for ref in unit.refs):
                    unit.lease_deadline = started + seconds
            log.info("unwritten_leases_renewed", worker_id=runtime.owner,
                     jobs=len(renewed), waiting=len(refs))


__all__ = ["LeaseRenewer", "renew_interval"]
