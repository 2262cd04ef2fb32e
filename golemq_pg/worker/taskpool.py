"""Async handler types: each attempt is a task on the worker's event loop thread.

A :class:`TaskPool` is a :class:`~golemq_pg.worker.pool.TypePool` (the same capacity,
prefetch and claim-buffer bookkeeping, so the claim loop, the supervisor and shutdown treat
both alike) whose ``concurrency`` slots are permits for tasks instead of threads:

* the claim loop appends units to a deque and, once per batch, asks the loop to *pump*;
  the pump starts one task per unit while a slot is free (at most :data:`PUMP_BATCH` per
  loop iteration, so a large claim never holds the loop for long);
* a task runs one attempt (:meth:`TaskPool.attempt`): the executor's ``begin``, the
  ``await`` of the handler, ``ended``, ``settle`` — the very steps and outcome path of a
  sync handler, into the same completer;
* :meth:`TaskPool.interrupt` is how every fired signal (timeout, cancel, lease loss,
  shutdown: the supervisor calls it after firing) reaches the task: a
  ``call_soon_threadsafe`` that cancels it, so ``CancelledError`` is raised at the
  handler's next ``await``. No thread waits on any signal;
* a task that ignores its cancellation is written off after ``abandon_grace`` like a
  stuck thread (:meth:`TaskPool.write_off`): its slot is replaced at once, and its late
  result dropped.

``job.progress()`` never blocks the loop (:class:`LoopProgress`).
"""

from __future__ import annotations

import asyncio
import queue
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, cast

import structlog

from golemq_pg import _trace_hook
from golemq_pg.store.port import JobLinks
from golemq_pg.worker.events import BatchEvent, JobEvent
from golemq_pg.worker.pool import TypePool
from golemq_pg.worker.units import ABANDONED, RUNNING, Slot, Unit

if TYPE_CHECKING:
    from golemq_pg.worker.eventloop import EventLoop
    from golemq_pg.worker.execution import Executor
    from golemq_pg.worker.handlers import HandlerSpec
    from golemq_pg.worker.outcomes import Outcomes
    from golemq_pg.worker.progress import ProgressReporter
    from golemq_pg.worker.runtime import Runtime

log = structlog.get_logger("golemq_pg.worker.taskpool")

#: Most tasks one pump starts before it yields the loop (it goes on at the next iteration).
PUMP_BATCH = 64


class LoopProgress:
    """Where ``job.progress()`` of an async handler goes: straight back, without I/O.

    The value is handed to the worker's :class:`~golemq_pg.worker.progress.ProgressReporter`
    on the event loop's helper thread (one thread, so in call order: the latest value wins,
    coalesced as for sync handlers). When the handler returns, :meth:`flush` waits, off the
    loop, until the job's last value is written, before its outcome is.
    """

    def __init__(self, reporter: ProgressReporter, event_loop: EventLoop) -> None:
        self.reporter = reporter
        self.event_loop = event_loop
        #: Events that reported progress during their attempt (identity-keyed).
        self.reported: set[JobEvent[Any]] = set()

    def links(self, job_id: str) -> JobLinks:
        """The job's links (``job.parents``), read through the reporter's store: one brief
        read on the loop, once per event."""
        return self.reporter.links(job_id)

    def report(self, event: JobEvent[Any], value: float | dict[str, Any]) -> None:
        """Hand ``value`` over (called on the loop by ``job.progress``)."""
        try:
            self.event_loop.offload(self.reporter.report, event, value)
        except RuntimeError:  # the worker has stopped: a written-off task reporting late
            return
        self.reported.add(event)

    async def flush(self, argument: JobEvent[Any] | BatchEvent[Any]) -> None:
        """Write the attempt's last progress values (helper thread), and wait for it."""
        events = argument.jobs if isinstance(argument, BatchEvent) else [argument]
        mine = [event for event in events if event in self.reported]
        if not mine:
            return
        self.reported.difference_update(mine)
        try:
            future = asyncio.wrap_future(self.event_loop.offload(self._finish, mine))
        except RuntimeError:  # stopped (the helper is gone): nothing more is written
            return
        while not future.done():
            try:
                await asyncio.shield(future)
            except asyncio.CancelledError:
                # A signal fired after the handler returned: the write goes on, and the
                # outcome must still wait for it.
                continue

    def step_load(self, event: JobEvent[Any]) -> dict[str, Any]:
        """The job's stored steps (``job.astep`` calls this off the loop, in a thread)."""
        return self.reporter.step_load(event)

    def step_save(self, event: JobEvent[Any], name: str, value: bytes) -> bool:
        """Store one step, fenced (``job.astep`` calls this off the loop, in a thread)."""
        return self.reporter.step_save(event, name, value)

    def _finish(self, events: list[JobEvent[Any]]) -> None:
        for event in events:
            self.reporter.finish(event)


class _LoopBuffer:
    """An async type's buffer: any thread appends, the loop takes; the first append after a
    pump asks for the next one (once, however many units a claim brings)."""

    __slots__ = ("_pool", "items")

    def __init__(self, pool: TaskPool) -> None:
        self._pool = pool
        self.items: deque[Unit] = deque()

    def put(self, item: Unit | None, /) -> None:
        if item is None:  # the threads' stop sentinel: tasks need none
            return
        self.items.append(item)
        pool = self._pool
        if not pool.pump_asked:
            pool.pump_asked = True
            pool.event_loop.call_soon(pool.pump)

    def get_nowait(self) -> Unit | None:
        try:
            return self.items.popleft()
        except IndexError:
            raise queue.Empty from None

    def qsize(self) -> int:
        return len(self.items)


class TaskPool(TypePool):
    """The slots and buffer of one async handler type, on the worker's event loop."""

    def __init__(
        self,
        runtime: Runtime,
        spec: HandlerSpec,
        executor: Executor,
        outcomes: Outcomes,
        *,
        batch_size: int | None,
        event_loop: EventLoop,
        progress: LoopProgress,
    ) -> None:
        super().__init__(runtime, spec, executor, outcomes, batch_size=batch_size)
        self.event_loop = event_loop
        self.loop = event_loop.loop
        self.progress = progress
        #: The handler (an ``async def``: calling it returns what the task awaits).
        self._fn = cast("Callable[[Any], Awaitable[object]]", spec.fn)
        #: Set while a pump is scheduled (read and written without a lock: a lost race
        #: only schedules one pump too many).
        self.pump_asked = False
        self._items = _LoopBuffer(self)
        self.buffer = self._items
        #: Free slots (loop thread only).
        self._free: list[Slot] = []
        #: The task of every unit whose attempt is under way (loop thread only).
        self._tasks: dict[Unit, asyncio.Task[None]] = {}
        #: Slots that exist, free or running a task (loop thread only).
        self._owned = 0

    # -- slots --------------------------------------------------------------------------------
    def start(self) -> None:
        """Make ``concurrency`` slots; tasks are started as units arrive."""
        self._free = [self._new_slot() for _ in range(self.spec.concurrency)]

    def _new_slot(self) -> Slot:
        self._numbers += 1
        self._owned += 1
        return Slot(self._numbers)

    def resize(self) -> None:
        """Match the slots to ``spec.concurrency`` (``Worker.set_concurrency``), on the loop."""
        self.event_loop.call_soon(self._resize)

    def _resize(self) -> None:
        want = 0 if self.closed else self.spec.concurrency
        while self._owned < want:
            self._free.append(self._new_slot())
        while self._owned > want and self._free:
            self._free.pop()
            self._owned -= 1
        if self._items.items:
            self._ask_pump()

    def stop_threads(self) -> None:
        """No thread waits for work here: nothing to wake."""

    def live_slots(self) -> list[Slot]:
        """Free slots (those running a task are not listed)."""
        return list(self._free)

    def interrupt(self, unit: Unit) -> bool:
        """Cancel ``unit``'s task (its signal fired): ``CancelledError`` at its next await."""
        return self.event_loop.call_soon(self._cancel, unit)

    def write_off(self, slot: Slot) -> None:
        """The task on ``slot`` ignored its signal: free a slot now (unless shutting down)."""
        slot.abandoned = True
        if not self.runtime.stopping:
            self.event_loop.call_soon(self._replace)

    # -- on the loop --------------------------------------------------------------------------
    def pump(self) -> None:
        """Start a task for each buffered unit while a slot is free (loop thread)."""
        self.pump_asked = False
        items = self._items.items
        free = self._free
        create = self.loop.create_task
        tasks = self._tasks
        runtime = self.runtime
        started = 0
        while free and items:
            if started >= PUMP_BATCH:
                self._ask_pump()
                return
            unit = items.popleft()
            if runtime.stopping or self.closed:
                self.release_unstarted(unit)
                continue
            slot = free.pop()
            tasks[unit] = create(self.attempt(slot, unit))
            started += 1

    def _ask_pump(self) -> None:
        if not self.pump_asked:
            self.pump_asked = True
            self.loop.call_soon(self.pump)

    async def attempt(self, slot: Slot, unit: Unit) -> None:
        """One attempt of ``unit`` on ``slot``, from its start to its outcome handed on.

        The one place an async attempt starts and ends (a hook wrapping attempts, such as a
        tracing span, goes here and around ``Executor.execute``).
        """
        executor = self.executor
        try:
            argument = executor.begin(self, slot, unit, self.progress)
            if argument is None:
                return
            error: BaseException | None
            # golemq_pg.tracing: the attempt's CONSUMER span, current in this task only.
            tracer = _trace_hook.tracer
            span = None if tracer is None else tracer.attempt(unit.jobs, unit.attempt)
            try:
                result = await self._fn(argument)
            except BaseException as exc:  # noqa: BLE001 - every handler failure is an outcome
                result, error = None, exc
            else:
                error = None
            error = executor.ended(self, unit, result, error)
            if span is not None:
                span.end(error, unit.signal.reason)
            if self.progress.reported:
                await self.progress.flush(argument)
            executor.settle(self, unit, error)
        except Exception as exc:  # a bug here must not lose the slot
            log.exception("slot_internal_error", type=self.type, job_id=unit.key[0],
                          error_type=type(exc).__name__)
        finally:
            self._done(slot, unit)

    def _done(self, slot: Slot, unit: Unit) -> None:
        self._tasks.pop(unit, None)
        if unit.state != ABANDONED:  # an abandoned slot was replaced by write_off
            if self.closed or self._owned > self.spec.concurrency:
                self._owned -= 1  # surplus after set_concurrency lowered it: not reused
            else:
                self._free.append(slot)
        items = self._items.items
        if items:
            self._ask_pump()
        wake = self.runtime.wake
        if len(items) <= self.watermark and not wake.is_set():
            wake.set()

    def _cancel(self, unit: Unit) -> None:
        task = self._tasks.get(unit)
        if task is not None and unit.state == RUNNING:
            task.cancel()

    def _replace(self) -> None:
        self._owned -= 1  # the written-off slot
        self._free.append(self._new_slot())
        if self._items.items:
            self._ask_pump()


__all__ = ["PUMP_BATCH", "LoopProgress", "TaskPool"]
