"""The one switch between golemq-pg's hot paths and its tracing (:mod:`golemq_pg.tracing`).

:data:`tracer` is None until ``golemq_pg.tracing.instrument()`` sets it, and None again after
``uninstrument()``. Every traced path reads it once and branches, so a process that never
instruments pays one attribute load and one ``is None`` test per add and per attempt, and
never imports OpenTelemetry (this module imports nothing of it; only ``golemq_pg.tracing``
does). The protocols below are all a producer or a handler runner needs, so a new path (an
async producer, an async handler runner) is traced with the same few lines:

Producer (around the store call; the span is current while it runs)::

    tracer = _trace_hook.tracer
    if tracer is None:
        result = store.job_enqueue(params)
    else:
        with tracer.send(params.type) as span:
            result = store.job_enqueue(dataclasses.replace(params, trace_context=span.carrier))
            span.sent(result.id)

Consumer (around the handler call; ``error`` as the outcome sees it)::

    tracer = _trace_hook.tracer
    span = None if tracer is None else tracer.attempt(unit.jobs, unit.attempt)
    ...  # run the handler
    if span is not None:
        span.end(error, unit.signal.reason)

``attempt(..., activate=False)`` leaves the span out of the current context, for a runner
that activates it where the handler runs (an asyncio task: :meth:`AttemptSpan.activate`
inside the task, then ``end`` in that task too).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

from golemq_pg.store.port import ClaimedJob


class SendSpan(Protocol):
    """The PRODUCER span of one ``add`` or ``add_many``, while the insert runs."""

    @property
    def carrier(self) -> Mapping[str, str] | None:
        """The span's W3C trace context, to store with the job(s); None when the span is not
        recorded (no SDK, or sampled out), so nothing is stored."""

    def sent(self, job_id: str | None) -> None:
        """The insert returned ``job_id`` (None: rejected as a duplicate, or many jobs)."""


class AttemptSpan(Protocol):
    """The CONSUMER span of one attempt (one job, or one grouped batch)."""

    def activate(self) -> None:
        """Make the span current in this context (done by ``attempt`` unless told not to)."""

    def end(self, error: BaseException | None, reason: str | None) -> None:
        """End the attempt: ``error`` is what the handler raised or returned as a failure
        (None: it succeeded), ``reason`` why its signal fired (None: it did not). Deactivates
        the span if it was activated, so call it in the context that activated it."""


class Tracer(Protocol):
    """What ``golemq_pg.tracing`` installs as :data:`tracer`."""

    def send(self, job_type: str, count: int | None = None) -> AbstractContextManager[SendSpan]:
        """A PRODUCER span ``send {job_type}`` (``count``: how many jobs, for ``add_many``);
        an exception leaving the block is recorded on it (type and bounded message)."""

    def attempt(
        self, jobs: Sequence[ClaimedJob], attempt: int, *, activate: bool = True
    ) -> AttemptSpan:
        """Start the CONSUMER span ``process {type}`` of an attempt of ``jobs``, linked to
        each job's producer span."""


#: The installed tracer; None (the default) while tracing is not instrumented.
tracer: Tracer | None = None

__all__ = ["AttemptSpan", "SendSpan", "Tracer", "tracer"]
