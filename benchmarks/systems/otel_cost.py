"""What one OpenTelemetry SDK span costs, measured in the harness's run (issue 44).

The traced drain's target is stated against the best case the SDK allows: the plain drain's
CPU per job plus exactly one span's. That span is measured here with the shape golemq-pg's
CONSUMER span has (name, kind, the contract's four attributes, one link to a producer span,
an empty root context, made current and ended) through the provider the traced drain uses,
its batch processor's export included (``force_flush`` before the clock stops).
"""

from __future__ import annotations

import time
from typing import Any

#: Spans a measurement starts; below the batch processor's queue (2,048) so none is dropped
#: unexported, which would flatter the figure.
SPANS = 2_000
#: Measurements of SPANS each; the lowest is kept (the SDK's own cost, not the host's noise).
ROUNDS = 3


def sdk_span_cpu_us(provider: Any, spans: int = SPANS, rounds: int = ROUNDS) -> float:
    """Microseconds of process CPU (every thread: the export thread too) one SDK span of
    golemq-pg's CONSUMER shape costs, start to export, through ``provider``."""
    from opentelemetry import context, trace  # noqa: PLC0415 - the otel extra

    tracer = provider.get_tracer("golemq_pg.bench")
    root = context.Context()
    producer = trace.SpanContext(
        trace_id=0x5B8AA5A2D2C872E8321CF37308D69DF2, span_id=0x051581BF3CB55C13,
        is_remote=True, trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED))
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        for i in range(spans):
            span = tracer.start_span(
                "process bench.noop", context=root, kind=trace.SpanKind.CONSUMER,
                attributes={"messaging.system": "golemq",
                            "messaging.destination.name": "bench.noop",
                            "messaging.message.id": str(i), "golemq.attempt": 1},
                links=[trace.Link(producer)])
            token = context.attach(trace.set_span_in_context(span))
            context.detach(token)
            span.end()
        provider.force_flush()
        best = min(best, (time.process_time() - started) / spans * 1e6)
    return best
