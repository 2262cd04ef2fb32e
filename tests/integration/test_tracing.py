"""OpenTelemetry tracing (golemq_pg.tracing), recorded by the SDK's in-memory exporter: a send
span per add / add_many with its context stored apart from the payload, a process span per
attempt through a real Worker (plain, grouped, transactional) linked to the producer spans,
errors recorded without the payload, and nothing at all once uninstrumented."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import SpanKind, StatusCode
from psycopg import sql

from golemq_pg import BatchEvent, JobEvent, Queue, Worker, tracing
from tests.support.in_process import add_job, fast_worker
from tests.support.waiting import wait_until

CANARY = "canary-7c1e-payload-secret"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing instrumented with an SDK provider exporting into memory (uninstrumented
    afterwards, whatever the test did)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.instrument(tracer_provider=provider)
    try:
        yield exporter
    finally:
        tracing.uninstrument()
        provider.shutdown()


def _named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.name == name]


def _stored_contexts(dsn: str, schema: str) -> dict[str, Any]:
    """Job id -> the trace_context column, read from the table."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(sql.SQL("SELECT id, trace_context, payload FROM {}.jobs_all")
                            .format(sql.Identifier(schema))).fetchall()
    for _id, _context, payload in rows:
        assert "traceparent" not in payload
    return {str(job_id): context for job_id, context, _payload in rows}


def _traceparent(span: ReadableSpan) -> str:
    context = span.get_span_context()
    assert context is not None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def _ids(context: trace.SpanContext | None) -> tuple[int, int]:
    assert context is not None
    return context.trace_id, context.span_id


def _linked(span: ReadableSpan) -> list[tuple[int, int]]:
    """The (trace id, span id) of each span ``span`` links to."""
    return [_ids(link.context) for link in span.links]


def _assert_no_canary(exporter: InMemorySpanExporter) -> None:
    """Nothing any span carries (name, attributes, events, links, status) quotes the payload."""
    finished = exporter.get_finished_spans()
    assert finished
    for span in finished:
        assert CANARY not in span.to_json()


def test_add_and_add_many_make_one_send_span_each_and_store_its_context(
    spans: InMemorySpanExporter, pg_store: Any, pg_dsn: str, schema: str
) -> None:
    queue = Queue(pg_store)
    single = add_job(queue, "mail", {"secret": CANARY})
    assert queue.add_many("mail", [{"secret": CANARY, "n": n} for n in range(3)]) == 3
    with psycopg.connect(pg_dsn) as conn:  # the caller's transaction: stored at its commit
        in_tx = add_job(queue, "mail", {"n": 9}, connection=conn)
    sends = _named(spans, "send mail")
    assert len(sends) == 3
    one, many, tx = sends
    assert {s.kind for s in sends} == {SpanKind.PRODUCER}
    assert dict(one.attributes or {}) == {
        "messaging.system": "golemq", "messaging.destination.name": "mail",
        "messaging.message.id": single}
    assert dict(many.attributes or {}) == {
        "messaging.system": "golemq", "messaging.destination.name": "mail",
        "messaging.batch.message_count": 3}
    assert (tx.attributes or {})["messaging.message.id"] == in_tx
    stored = _stored_contexts(pg_dsn, schema)
    assert stored[single] == {"traceparent": _traceparent(one)}
    assert stored[in_tx] == {"traceparent": _traceparent(tx)}
    bulk = [context for job_id, context in stored.items() if job_id not in (single, in_tx)]
    assert bulk == [{"traceparent": _traceparent(many)}] * 3  # one context for the call
    _assert_no_canary(spans)


def test_the_send_span_is_a_child_of_the_callers_span(
    spans: InMemorySpanExporter, pg_store: Any
) -> None:
    queue = Queue(pg_store)
    with app_tracer(spans).start_as_current_span("request") as request:
        add_job(queue, "mail", {})
    (send,) = _named(spans, "send mail")
    assert send.parent is not None
    assert send.parent.span_id == request.get_span_context().span_id
    assert send.context.trace_id == request.get_span_context().trace_id


def app_tracer(exporter: InMemorySpanExporter) -> trace.Tracer:
    """A tracer of a second provider writing to the same exporter (the application's own)."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("app")


def test_each_attempt_is_a_consumer_span_linked_to_the_send_span(
    spans: InMemorySpanExporter, store: Any
) -> None:
    queue = Queue(store)
    worker = fast_worker(store)
    inner = app_tracer(spans)

    @worker.handler("flaky")
    def flaky(event: JobEvent[Any]) -> None:
        with inner.start_as_current_span("handler work"):
            pass
        if event.attempt == 1:
            # The first line is what a span may show; the payload quoted below it must not.
            raise RuntimeError(f"first try fails\nwhile handling {event.payload['secret']}")

    job_id = add_job(queue, "flaky", {"secret": CANARY})
    worker.run_until_empty(timeout=30)
    (send,) = _named(spans, "send flaky")
    first, second = sorted(_named(spans, "process flaky"),
                           key=lambda s: (s.attributes or {})["golemq.attempt"])
    for attempt, span in ((1, first), (2, second)):
        assert span.kind is SpanKind.CONSUMER
        assert dict(span.attributes or {}) == {
            "messaging.system": "golemq", "messaging.destination.name": "flaky",
            "messaging.message.id": job_id, "golemq.attempt": attempt}
        assert _linked(span) == [_ids(send.context)]
        assert span.parent is None  # a trace of its own, linked to the producer's
    assert first.status.status_code is StatusCode.ERROR
    assert first.status.description == "RuntimeError: first try fails"
    (event,) = first.events
    assert (event.name, dict(event.attributes or {})) == (
        "exception", {"exception.type": "RuntimeError", "exception.message": "first try fails"})
    assert second.status.status_code is StatusCode.UNSET
    assert second.events == ()
    # The handler's own spans are children of the attempt's span.
    works = _named(spans, "handler work")
    assert {w.parent.span_id for w in works if w.parent} == {
        first.context.span_id, second.context.span_id}
    _assert_no_canary(spans)


def test_a_grouped_batch_is_one_span_linking_every_members_send_span(
    spans: InMemorySpanExporter, pg_store: Any
) -> None:
    queue = Queue(pg_store)
    ids = [add_job(queue, "digest", {"seq": n, "secret": CANARY}, scope=("user", "u1"))
           for n in range(3)]
    sends = _named(spans, "send digest")
    worker = fast_worker(pg_store)
    batches: list[int] = []

    @worker.handler("digest", grouped=True)
    def digest(batch: BatchEvent[Any]) -> None:
        batches.append(len(batch.jobs))

    worker.run_until_empty(timeout=30)
    assert batches == [3]
    (process,) = _named(spans, "process digest")
    assert dict(process.attributes or {}) == {
        "messaging.system": "golemq", "messaging.destination.name": "digest",
        "golemq.attempt": 1, "messaging.batch.message_count": 3}
    assert sorted(_linked(process)) == sorted(_ids(s.context) for s in sends)
    by_send = {s.context.span_id: (s.attributes or {})["messaging.message.id"] for s in sends}
    assert {by_send[link.context.span_id] for link in process.links} == set(ids)
    assert {(link.attributes or {})["messaging.message.id"] for link in process.links} == set(ids)
    _assert_no_canary(spans)


def test_transactional_attempts_are_traced_like_any_other(
    spans: InMemorySpanExporter, pg_store: Any
) -> None:
    queue = Queue(pg_store)
    worker = fast_worker(pg_store)

    @worker.handler("charge", transactional=True)
    def charge(event: JobEvent[Any]) -> bool:
        event.connection.execute("SELECT 1")
        return event.attempt > 1  # False: a failed attempt

    job_id = add_job(queue, "charge", {"secret": CANARY})
    worker.run_until_empty(timeout=30)
    (send,) = _named(spans, "send charge")
    first, second = sorted(_named(spans, "process charge"),
                           key=lambda s: (s.attributes or {})["golemq.attempt"])
    assert [_linked(first), _linked(second)] == [[_ids(send.context)]] * 2
    assert (first.attributes or {})["messaging.message.id"] == job_id
    assert first.status.status_code is StatusCode.ERROR
    assert [dict(e.attributes or {}) for e in first.events] == [{
        "exception.type": "golemq_pg.worker.backoff.HandlerReturnedFalse",
        "exception.message": "handler returned False"}]
    assert second.status.status_code is StatusCode.UNSET
    _assert_no_canary(spans)


def test_a_timed_out_attempt_is_an_error_whatever_the_handler_returned(
    spans: InMemorySpanExporter, mem_store: Any
) -> None:
    queue = Queue(mem_store)
    worker = fast_worker(mem_store)

    @worker.handler("slow", timeout=0.05)
    def slow(event: JobEvent[Any]) -> None:
        if event.attempt == 1:
            event.signal.wait(5)  # then returns normally: the attempt still timed out

    add_job(queue, "slow", {})
    worker.run_until_empty(timeout=30)
    first, second = sorted(_named(spans, "process slow"),
                           key=lambda s: (s.attributes or {})["golemq.attempt"])
    assert (first.status.status_code, first.status.description) == (
        StatusCode.ERROR, "attempt aborted: timeout")
    assert second.status.status_code is StatusCode.UNSET


def test_a_job_added_untraced_runs_in_a_span_without_a_link(
    spans: InMemorySpanExporter, pg_store: Any, pg_dsn: str, schema: str
) -> None:
    queue = Queue(pg_store)
    tracing.uninstrument()
    job_id = add_job(queue, "mail", {})
    assert _stored_contexts(pg_dsn, schema) == {job_id: None}
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    tracing.instrument(tracer_provider=provider)
    worker = fast_worker(pg_store)
    worker.handler("mail")(lambda event: None)
    worker.run_until_empty(timeout=30)
    (process,) = spans.get_finished_spans()
    assert process.name == "process mail"
    assert (process.attributes or {})["messaging.message.id"] == job_id
    assert process.links == ()


def test_uninstrument_stops_every_span_and_stored_context(
    spans: InMemorySpanExporter, pg_store: Any, pg_dsn: str, schema: str
) -> None:
    queue = Queue(pg_store)
    traced = add_job(queue, "mail", {})
    assert tracing.instrumented()
    tracing.uninstrument()
    assert not tracing.instrumented()
    untraced = add_job(queue, "mail", {})
    assert queue.add_many("mail", [{}, {}]) == 2
    worker = fast_worker(pg_store)
    worker.handler("mail")(lambda event: None)
    worker.run_until_empty(timeout=30)
    assert [s.name for s in spans.get_finished_spans()] == ["send mail"]  # before uninstrument
    stored = _stored_contexts(pg_dsn, schema)
    assert stored[traced] is not None
    assert [job_id for job_id, context in stored.items() if context is None] == sorted(
        set(stored) - {traced}, key=int)
    assert stored[untraced] is None


def test_a_failed_insert_is_recorded_on_its_send_span(
    spans: InMemorySpanExporter, pg_store: Any, pg_dsn: str, schema: str
) -> None:
    queue = Queue(pg_store)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER TABLE {}.jobs ADD CONSTRAINT no_mail CHECK (type <> 'mail')")
                     .format(sql.Identifier(schema)))
    with pytest.raises(psycopg.errors.CheckViolation):
        queue.add("mail", {"secret": CANARY})
    (send,) = _named(spans, "send mail")
    assert send.status.status_code is StatusCode.ERROR
    (event,) = send.events
    assert (event.attributes or {})["exception.type"] == "psycopg.errors.CheckViolation"
    assert "\n" not in str((event.attributes or {})["exception.message"])  # no DETAIL line
    _assert_no_canary(spans)


def test_a_worker_started_untraced_traces_once_instrumented(
    spans: InMemorySpanExporter, mem_store: Any
) -> None:
    queue = Queue(mem_store)
    tracing.uninstrument()
    worker = Worker(mem_store, poll_interval=0.05)
    seen: list[str] = []
    worker.handler("mail")(lambda event: seen.append(event.id))
    worker.start()
    try:
        first = add_job(queue, "mail", {})
        wait_until(lambda: first in seen, what="the untraced job ran")
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(spans))
        tracing.instrument(tracer_provider=provider)
        second = add_job(queue, "mail", {})
        wait_until(lambda: len(spans.get_finished_spans()) == 2, what="the traced job's spans")
    finally:
        worker.stop()
    assert seen == [first, second]
    names = [(s.name, (s.attributes or {}).get("messaging.message.id"))
             for s in spans.get_finished_spans()]
    assert names == [("send mail", second), ("process mail", second)]


def test_without_an_sdk_nothing_is_stored_and_jobs_run(
    pg_store: Any, pg_dsn: str, schema: str
) -> None:
    tracing.instrument(tracer_provider=trace.NoOpTracerProvider())  # the API alone
    try:
        queue = Queue(pg_store)
        single = add_job(queue, "mail", {})
        assert queue.add_many("mail", [{}]) == 1
        worker = fast_worker(pg_store)
        ran: list[str] = []
        worker.handler("mail")(lambda event: ran.append(event.id))
        worker.run_until_empty(timeout=30)
    finally:
        tracing.uninstrument()
    stored = _stored_contexts(pg_dsn, schema)
    assert single in stored
    assert set(stored.values()) == {None}
    assert sorted(ran, key=int) == sorted(stored, key=int)


def test_a_malformed_stored_context_gives_a_span_without_a_link(
    spans: InMemorySpanExporter, pg_store: Any, pg_dsn: str, schema: str
) -> None:
    queue = Queue(pg_store)
    tracing.uninstrument()
    ids = [add_job(queue, "mail", {}) for _ in range(4)]
    junk = ['[1, 2]', '{"traceparent": 5}', '{"traceparent": "00-garbage"}', '"text"']
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for job_id, value in zip(ids, junk, strict=True):
            conn.execute(sql.SQL("UPDATE {}.jobs SET trace_context = %s::jsonb WHERE id = %s")
                         .format(sql.Identifier(schema)), [value, int(job_id)])
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    tracing.instrument(tracer_provider=provider)
    worker = fast_worker(pg_store)
    worker.handler("mail")(lambda event: None)
    worker.run_until_empty(timeout=30)
    processed = _named(spans, "process mail")
    assert sorted((s.attributes or {})["messaging.message.id"] for s in processed) == ids
    assert [s.links for s in processed] == [()] * 4
    assert [s.status.status_code for s in processed] == [StatusCode.UNSET] * 4


def _added_with(provider: TracerProvider, queue: Queue, job_type: str, **fields: Any) -> str:
    """A job added with ``provider`` instrumented (its sampler decides the send span)."""
    tracing.instrument(tracer_provider=provider)
    return add_job(queue, job_type, {}, **fields)


def test_a_job_whose_producer_trace_was_sampled_out_runs_without_a_consumer_span(
    spans: InMemorySpanExporter, pg_store: Any, pg_dsn: str, schema: str
) -> None:
    sampled_out = TracerProvider(sampler=ALWAYS_OFF)
    always = TracerProvider()
    always.add_span_processor(SimpleSpanProcessor(spans))
    queue = Queue(pg_store)
    dropped = _added_with(sampled_out, queue, "mail")
    kept = _added_with(always, queue, "mail")
    plain = _added_with(always, queue, "other")
    tracing.uninstrument()
    untraced = add_job(queue, "other", {})
    stored = _stored_contexts(pg_dsn, schema)
    # the decision travels with the job: the sampled bit of the stored trace-flags
    assert int(stored[dropped]["traceparent"][-2:], 16) & 1 == 0
    assert int(stored[kept]["traceparent"][-2:], 16) & 1 == 1
    tracing.instrument(tracer_provider=always)
    worker = fast_worker(pg_store)
    ran: list[str] = []
    worker.handler("mail")(lambda event: ran.append(event.id))
    worker.handler("other")(lambda event: ran.append(event.id))
    worker.run_until_empty(timeout=30)
    assert sorted(ran, key=int) == sorted([dropped, kept, plain, untraced], key=int)
    processed = {(s.attributes or {})["messaging.message.id"]
                 for s in spans.get_finished_spans() if s.name.startswith("process ")}
    assert processed == {kept, plain, untraced}  # no context: the provider's sampler decides


def test_a_grouped_batch_is_traced_when_any_members_trace_is_sampled(
    spans: InMemorySpanExporter, pg_store: Any
) -> None:
    always = TracerProvider()
    always.add_span_processor(SimpleSpanProcessor(spans))
    queue = Queue(pg_store)
    out = [_added_with(TracerProvider(sampler=ALWAYS_OFF), queue, "digest",
                       scope=("user", "u1")) for _ in range(2)]
    kept = _added_with(always, queue, "digest", scope=("user", "u1"))
    worker = fast_worker(pg_store)
    batches: list[int] = []
    worker.handler("digest", grouped=True)(lambda batch: batches.append(len(batch.jobs)))
    worker.run_until_empty(timeout=30)
    assert batches == [3]
    (process,) = _named(spans, "process digest")
    # linked to every member (a sampled-out producer span still has a valid context)
    assert {(link.attributes or {})["messaging.message.id"] for link in process.links} == {
        *out, kept}
    worker = fast_worker(pg_store)
    for _ in range(2):
        _added_with(TracerProvider(sampler=ALWAYS_OFF), queue, "digest", scope=("user", "u2"))
    worker.handler("digest", grouped=True)(lambda batch: batches.append(len(batch.jobs)))
    worker.run_until_empty(timeout=30)
    assert batches == [3, 2]
    assert len(_named(spans, "process digest")) == 1  # every member sampled out: no span


@pytest.mark.parametrize(("context", "sampled"), [
    (None, True), ({}, True), ({"traceparent": 5}, True), ("text", True),
    ({"traceparent": "00-garbage"}, True),
    ({"traceparent": "00-5b8aa5a2d2c872e8321cf37308d69df2-051581bf3cb55c13-zz"}, True),
    ({"traceparent": "00-5b8aa5a2d2c872e8321cf37308d69df2-051581bf3cb55c13-01"}, True),
    ({"traceparent": "00-5b8aa5a2d2c872e8321cf37308d69df2-051581bf3cb55c13-03"}, True),
    ({"traceparent": "00-5b8aa5a2d2c872e8321cf37308d69df2-051581bf3cb55c13-00"}, False),
    ({"traceparent": "00-5b8aa5a2d2c872e8321cf37308d69df2-051581bf3cb55c13-02"}, False),
])
def test_only_a_readable_unsampled_traceparent_skips_the_consumer_span(
    context: object, sampled: bool
) -> None:
    assert tracing._sampled(context) is sampled


def test_golemq_pg_imports_no_opentelemetry_unless_tracing_is_used() -> None:
    code = (
        "import sys\n"
        "from golemq_pg import InMemoryStore, Queue, Worker\n"
        "store = InMemoryStore()\n"
        "Queue(store).add('t', {})\n"
        "worker = Worker(store, poll_interval=0.05)\n"
        "worker.handler('t')(lambda event: None)\n"
        "worker.run_until_empty(timeout=20)\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_async_queue_adds_and_async_handlers_are_traced_like_sync_ones(
    spans: InMemorySpanExporter, pg_store: Any, async_pg_store: Any, loop_thread: Any
) -> None:
    from golemq_pg import AsyncQueue  # noqa: PLC0415

    queue = AsyncQueue(async_pg_store)
    one = loop_thread.run(queue.add("echo", {"secret": CANARY}))
    assert loop_thread.run(queue.add_many("echo", [{"n": 1}, {"n": 2}])) == 2
    worker = fast_worker(pg_store)

    @worker.handler("echo", concurrency=4)
    async def echo(event: JobEvent[Any]) -> None:
        if event.id == one and event.attempt == 1:
            raise RuntimeError("async first try fails")

    worker.run_until_empty(timeout=30)
    single, many = _named(spans, "send echo")
    assert (single.attributes or {})["messaging.message.id"] == one
    assert (many.attributes or {})["messaging.batch.message_count"] == 2
    processes = _named(spans, "process echo")
    assert len(processes) == 4  # one failed attempt, then three successes
    by_link = {}
    for span in processes:
        assert span.kind is SpanKind.CONSUMER
        (link,) = _linked(span)
        by_link.setdefault(link, []).append(span)
    assert len(by_link[_ids(single.context)]) == 2
    assert len(by_link[_ids(many.context)]) == 2
    failed = [s for s in processes if s.status.status_code is StatusCode.ERROR]
    assert [(s.attributes or {})["messaging.message.id"] for s in failed] == [one]
    _assert_no_canary(spans)
