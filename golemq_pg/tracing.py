"""OpenTelemetry tracing: a PRODUCER span per add, a CONSUMER span per attempt, linked.

``pip install 'golemq-pg[otel]'`` (the OpenTelemetry API only; the application brings the SDK
and its exporter), then::

    from golemq_pg import tracing
    tracing.instrument()              # or instrument(tracer_provider=provider)

From then on, in this process:

* ``Queue.add`` makes a PRODUCER span ``send {type}`` around its insert, and stores the span's
  W3C trace context (``traceparent``, ``tracestate``) with the job, in ``jobs.trace_context``,
  never in the payload; ``Queue.add_many`` makes one span, and stores one context, for the
  whole call (the COPY). The span is a child of whatever span is current where ``add`` is
  called (a web request's, typically) and is current itself while the insert runs.
* every attempt a Worker runs (plain, grouped and transactional handlers) is a CONSUMER span
  ``process {type}``, current while the handler runs (so the handler's own spans are its
  children), starting a trace of its own and *linked* to the producer span of each job it
  runs: one link for a job, one per member for a grouped batch (each link carrying that
  member's ``messaging.message.id``). A job added while tracing was off has no link.

Attributes (span names, kinds and attributes are the contract of the README's "Tracing"
section): ``messaging.system`` = ``"golemq"``, ``messaging.destination.name`` = the job type,
``messaging.message.id`` = the job id (a single job; the send span of an ``add`` once the id
is known), ``golemq.attempt`` = the attempt number (the batch's attempt for a grouped one),
``messaging.batch.message_count`` on an ``add_many`` span and a batch's span. A failed
attempt gets an ``exception`` event with ``exception.type`` and ``exception.message`` and
status ERROR; the message is the bounded first line golemq-pg writes everywhere
(:func:`golemq_pg._errortext.error_text`), never a traceback, so a handler that quotes its
payload in a later line does not put it in a span. An attempt whose signal fired for a
timeout, a cancel or a lost lease is ERROR too. No payload is ever read here.

Sampling: a job whose producer span was not sampled (its stored ``traceparent``'s
trace-flags say so, as they do under ``ParentBased(TraceIdRatioBased(r))`` for the
``1 - r`` of traces it drops) runs with no CONSUMER span at all: ``attempt`` reads those two
characters and returns at once, before any span, attribute or link is made (a few
microseconds a job), so the consumer side follows the decision taken where the job was
added. A job with no stored context (added untraced, or with no SDK) or an unreadable one
gets its span as before, sampled by the provider's sampler as a new root; a grouped batch is
traced when any member's trace is sampled or has no context.

When not instrumented nothing is imported from OpenTelemetry (this module is the only one
that imports it) and every traced path costs one ``is None`` test: see
:mod:`golemq_pg._trace_hook`. :func:`uninstrument` turns it off again.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from importlib import metadata
from types import TracebackType
from typing import Any

import structlog

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError as _missing:  # pragma: no cover - the extra is not installed
    raise ImportError(
        "golemq_pg.tracing needs the OpenTelemetry API: pip install 'golemq-pg[otel]'"
    ) from _missing

from golemq_pg import _trace_hook
from golemq_pg._errortext import error_text
from golemq_pg.store.port import ClaimedJob
from golemq_pg.worker.events import CANCELLED, LEASE_LOST, TIMEOUT

log = structlog.get_logger("golemq_pg.tracing")

#: The instrumentation scope's name (the tracer's name).
TRACER_NAME = "golemq_pg"
#: ``messaging.system`` of every span.
MESSAGING_SYSTEM = "golemq"

_SYSTEM = "messaging.system"
_DESTINATION = "messaging.destination.name"
_MESSAGE_ID = "messaging.message.id"
_BATCH_COUNT = "messaging.batch.message_count"
_ATTEMPT = "golemq.attempt"

_PRODUCER = trace.SpanKind.PRODUCER
_CONSUMER = trace.SpanKind.CONSUMER
_ERROR = trace.StatusCode.ERROR
#: A consumer span starts a trace of its own (it is linked, not parented, to the producer:
#: a job may run hours after, and many times), whatever context the runner's thread has.
_ROOT = otel_context.Context()
#: W3C Trace Context, always: the stored column holds exactly traceparent / tracestate (no
#: baggage, whatever the application's global propagator adds to its HTTP headers).
_PROPAGATOR = TraceContextTextMapPropagator()
#: Signal reasons whose attempt does not succeed whatever the handler returned.
_FAILED_REASONS = frozenset({TIMEOUT, CANCELLED, LEASE_LOST})
#: Extracted producer contexts kept, by traceparent/tracestate (every job of an add_many
#: shares one); cleared when full.
_CACHE_LIMIT = 1024

_lock = threading.Lock()


def instrument(tracer_provider: trace.TracerProvider | None = None) -> None:
    """Trace every ``add`` / ``add_many`` and every attempt in this process from now on.

    ``tracer_provider``: where the spans go (default: the global provider, followed even if
    it is set after this call). Calling it again replaces the provider.
    """
    try:
        version = metadata.version("golemq-pg")
    except metadata.PackageNotFoundError:  # pragma: no cover - run from a source tree
        version = None
    tracer = trace.get_tracer(TRACER_NAME, version, tracer_provider)
    with _lock:
        _trace_hook.tracer = _Tracer(tracer)


def uninstrument() -> None:
    """Stop tracing: later adds store no context and later attempts record no span (spans
    already started still end)."""
    with _lock:
        _trace_hook.tracer = None


def instrumented() -> bool:
    """Whether :func:`instrument` is in effect."""
    return _trace_hook.tracer is not None


def _sampled(carrier: object) -> bool:
    """False only when ``carrier`` (a job's stored trace context) holds a W3C
    ``traceparent`` whose trace-flags say the producer's trace was not sampled; every other
    value (none, unreadable) leaves the decision to the provider's sampler. Reads the flags'
    two hex digits and nothing else."""
    if carrier is None:
        return True
    parent = carrier.get("traceparent") if isinstance(carrier, dict) else None
    # version "-" trace-id(32) "-" parent-id(16) "-" flags(2): the flags at [53:55]
    if not isinstance(parent, str) or len(parent) < 55 or parent[52] != "-":
        return True
    try:
        return bool(int(parent[53:55], 16) & 1)
    except ValueError:
        return True


def _exception_type(error: BaseException) -> str:
    cls = type(error)
    module = cls.__module__
    if not module or module == "builtins":
        return cls.__qualname__
    return f"{module}.{cls.__qualname__}"


def _record(span: trace.Span, error: BaseException) -> None:
    """The exception's type and bounded first line as an ``exception`` event; status ERROR.

    Not ``Span.record_exception``: it adds the traceback (``exception.stacktrace``) and the
    whole message, either of which may quote a payload.
    """
    message = error_text(error)
    span.add_event(
        "exception", {"exception.type": _exception_type(error), "exception.message": message}
    )
    span.set_status(_ERROR, error_text(error, with_type=True))


class _Send:
    """The send span of one add / add_many (:class:`golemq_pg._trace_hook.SendSpan`)."""

    __slots__ = ("_span", "_token", "carrier")

    def __init__(self, span: trace.Span) -> None:
        self._span = span
        self._token: object = None
        self.carrier: Mapping[str, str] | None = None

    def __enter__(self) -> _Send:
        context = trace.set_span_in_context(self._span)
        self._token = otel_context.attach(context)
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=context)
        self.carrier = carrier or None  # nothing to link to (no SDK): store NULL
        return self

    def sent(self, job_id: str | None) -> None:
        if job_id is not None:
            self._span.set_attribute(_MESSAGE_ID, job_id)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if exc is not None:
                _record(self._span, exc)
        finally:
            otel_context.detach(self._token)  # type: ignore[arg-type]
            self._span.end()


class _Attempt:
    """The process span of one attempt (:class:`golemq_pg._trace_hook.AttemptSpan`)."""

    __slots__ = ("_span", "_token")

    def __init__(self, span: trace.Span) -> None:
        self._span = span
        self._token: object = None

    def activate(self) -> None:
        self._token = otel_context.attach(trace.set_span_in_context(self._span))

    def end(self, error: BaseException | None, reason: str | None) -> None:
        span = self._span
        try:
            if error is not None:
                _record(span, error)
            elif reason in _FAILED_REASONS:
                span.set_status(_ERROR, f"attempt aborted: {reason}")
        except Exception:
            log.warning("trace_span_failed", exc_info=True)
        finally:
            token, self._token = self._token, None
            if token is not None:
                otel_context.detach(token)  # type: ignore[arg-type]
            span.end()


class _Untraced:
    """What ``attempt`` returns if starting its span failed: ends nothing."""

    __slots__ = ()

    def activate(self) -> None:
        """Nothing to activate."""

    def end(self, error: BaseException | None, reason: str | None) -> None:
        """Nothing to end."""


_UNTRACED = _Untraced()


class _Tracer:
    """The installed :class:`golemq_pg._trace_hook.Tracer`, over one OpenTelemetry tracer."""

    __slots__ = ("_contexts", "_tracer")

    def __init__(self, tracer: trace.Tracer) -> None:
        self._tracer = tracer
        self._contexts: dict[Any, trace.SpanContext | None] = {}

    def send(self, job_type: str, count: int | None = None) -> _Send:
        attributes: dict[str, str | int] = {_SYSTEM: MESSAGING_SYSTEM, _DESTINATION: job_type}
        if count is not None:
            attributes[_BATCH_COUNT] = count
        span = self._tracer.start_span(f"send {job_type}", kind=_PRODUCER, attributes=attributes)
        return _Send(span)

    def attempt(
        self, jobs: Sequence[ClaimedJob], attempt: int, *, activate: bool = True
    ) -> _Attempt | _Untraced:
        if len(jobs) == 1:
            if not _sampled(jobs[0].trace_context):
                return _UNTRACED  # the producer's trace was sampled out: nothing to record
        elif not any(_sampled(member.trace_context) for member in jobs):
            return _UNTRACED
        try:
            job = jobs[0]
            attributes: dict[str, str | int] = {
                _SYSTEM: MESSAGING_SYSTEM, _DESTINATION: job.type, _ATTEMPT: attempt,
            }
            links: list[trace.Link] = []
            if len(jobs) == 1:
                attributes[_MESSAGE_ID] = job.id
                linked = self._producer(job.trace_context)
                if linked is not None:
                    links.append(trace.Link(linked))
            else:
                attributes[_BATCH_COUNT] = len(jobs)
                for member in jobs:
                    linked = self._producer(member.trace_context)
                    if linked is not None:
                        links.append(trace.Link(linked, {_MESSAGE_ID: member.id}))
            span = self._tracer.start_span(
                f"process {job.type}", context=_ROOT, kind=_CONSUMER, attributes=attributes,
                links=links,
            )
            traced = _Attempt(span)
            if activate:
                traced.activate()
        except Exception:
            log.warning("trace_span_failed", exc_info=True)
            return _UNTRACED
        return traced

    def _producer(self, carrier: object) -> trace.SpanContext | None:
        """The producer span's context from a job's stored trace context (None: none, or
        not a W3C trace context). Whatever the column holds, this never raises."""
        if not isinstance(carrier, dict):
            return None
        parent = carrier.get("traceparent")
        if not isinstance(parent, str):
            return None
        state = carrier.get("tracestate")
        key: Any = parent if not isinstance(state, str) else (parent, state)
        contexts = self._contexts
        try:
            return contexts[key]
        except KeyError:
            pass
        clean = {"traceparent": parent} if not isinstance(state, str) else {
            "traceparent": parent, "tracestate": state}
        found = trace.get_current_span(_PROPAGATOR.extract(clean)).get_span_context()
        linked = found if found.is_valid else None
        if len(contexts) >= _CACHE_LIMIT:
            contexts.clear()
        contexts[key] = linked
        return linked


__all__ = ["MESSAGING_SYSTEM", "TRACER_NAME", "instrument", "instrumented", "uninstrument"]
