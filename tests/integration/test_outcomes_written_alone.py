"""A job's outcome is written or dead-lettered on its own (docs/RELIABILITY.md, S23), on a
real PostgreSQL: whatever a handler's exception says (NUL characters, lone surrogates, a
``__str__`` or a ``__repr__`` that raises, a ``__str__`` returning no string), sync,
``async def`` and transactional handlers store a readable ``last_error`` and the worker
goes on; a completion the database refuses (its result) dead-letters that job alone with
``OutcomeUnwritable`` while the rest of its batch is written."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from golemq_pg import JobEvent, JobStatus, PostgresStore, Queue, Worker
from golemq_pg.metrics import PrometheusObserver
from golemq_pg.store.port import LeaseRef, WriteRefused
from golemq_pg.worker.backoff import describe_error
from golemq_pg.worker.completer import Completer
from golemq_pg.worker.observers import ObserverHub
from golemq_pg.worker.units import Unit
from tests.support.in_process import add_job, fast_worker
from tests.support.observers import Recorder
from tests.support.store_port import claim, slots

KINDS = ("sync", "async", "transactional")


class StrRaisesError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ is broken")


class StrNotAStringError(Exception):
    def __str__(self) -> Any:
        return 42  # noqa: PLE0307 - the point: str() of it raises TypeError


class OddlyNamedError(Exception):
    """Its qualified name (what a traceback prints) holds a NUL and a lone surrogate: a
    class's ``__name__`` may hold neither, its ``__qualname__`` both."""


OddlyNamedError.__qualname__ = "Oddly\x00Named\udcffError"


class _ReprRaises:
    def __repr__(self) -> str:
        raise RuntimeError("__repr__ is broken")


def _key_error_of_a_broken_repr() -> BaseException:
    # str(KeyError(x)) is repr(x): a key whose __repr__ raises.
    return KeyError(_ReprRaises())


def _unstorable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return "\x00" in text


#: Messages with what PostgreSQL's text refuses mixed into any other text.
MESSAGES = st.text(
    st.one_of(
        st.characters(),
        st.sampled_from(["\x00", "\udcff", "\ud800", "\udfff", "\n", "\r"]),
        st.integers(0xD800, 0xDFFF).map(chr),
    ),
    max_size=40,
)
#: How an exception is made: from a message, or broken whatever the message.
SHAPES = st.sampled_from(
    ["message", "str-raises", "str-not-a-string", "repr-raises", "odd-qualname"])


def _exception(shape: str, message: str) -> BaseException:
    if shape == "str-raises":
        return StrRaisesError(message)
    if shape == "str-not-a-string":
        return StrNotAStringError(message)
    if shape == "repr-raises":
        return _key_error_of_a_broken_repr()
    if shape == "odd-qualname":
        return OddlyNamedError(message)
    return ValueError(message)


@dataclass
class _Raising:
    """What each poison job's handler raises, by the job's number in its payload."""

    makers: dict[int, Callable[[], BaseException]]

    def raise_for(self, job: JobEvent[Any]) -> None:
        n = job.payload["n"]
        if n in self.makers:
            raise self.makers[n]()


@pytest.fixture
def raising_worker(pg_store: PostgresStore) -> Iterator[tuple[Queue, _Raising]]:
    """A started worker with a sync, an ``async def`` and a transactional handler, each
    raising what the test registered for a job's number (nothing: success)."""
    raising = _Raising({})
    worker = fast_worker(pg_store)

    @worker.handler("sync")
    def sync_handler(job: JobEvent[Any]) -> None:
        raising.raise_for(job)

    @worker.handler("async")
    async def async_handler(job: JobEvent[Any]) -> None:
        raising.raise_for(job)

    @worker.handler("transactional", transactional=True)
    def transactional_handler(job: JobEvent[Any]) -> None:
        raising.raise_for(job)

    worker.start()
    try:
        yield Queue(pg_store), raising
    finally:
        worker.stop(timeout=10)


_numbers = itertools.count()


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(message=MESSAGES, shape=SHAPES)
def test_any_exception_text_is_stored_readably_by_every_handler_kind(
    raising_worker: tuple[Queue, _Raising], message: str, shape: str
) -> None:
    queue, raising = raising_worker
    for kind in KINDS:
        poison, good = next(_numbers), next(_numbers)
        raising.makers[poison] = lambda: _exception(shape, message)
        poison_id = add_job(queue, kind, {"n": poison}, max_attempts=1)
        good_id = add_job(queue, kind, {"n": good})
        failed = queue.wait(poison_id, timeout=20)
        assert failed.status is JobStatus.FAILED, (kind, failed)
        assert failed.attempts == 1
        text = failed.last_error
        assert text is not None
        assert text == describe_error(_exception(shape, message)), (kind, text)
        assert not _unstorable(text)
        trace = failed.errors[-1].traceback
        assert trace is not None
        assert not _unstorable(trace)
        if shape in ("message", "odd-qualname"):
            assert text.startswith("ValueError" if shape == "message" else "OddlyNamedError")
            first = message.strip().splitlines()[0] if message.strip() else ""
            if "\x00" in first:
                assert "\\x00" in text  # escaped visibly, not dropped
            if shape == "odd-qualname":
                assert "Oddly\\x00Named\\udcffError" in trace
        else:
            assert text.endswith("<unprintable error>"), text
        assert queue.wait(good_id, timeout=20).status is JobStatus.SUCCEEDED


@pytest.mark.parametrize("kind", KINDS)
def test_a_poison_message_leaves_the_worker_completing_later_jobs(
    raising_worker: tuple[Queue, _Raising], kind: str
) -> None:
    queue, raising = raising_worker
    poison = next(_numbers)
    raising.makers[poison] = lambda: ValueError("nul \x00 and lone \udcff surrogate")
    poison_id = add_job(queue, kind, {"n": poison}, max_attempts=2)
    failed = queue.wait(poison_id, timeout=20)
    assert failed.status is JobStatus.FAILED
    assert failed.attempts == 2
    assert failed.last_error == "ValueError: nul \\x00 and lone \\udcff surrogate"
    assert [e.error for e in failed.errors] == [failed.last_error] * 2
    later = [add_job(queue, kind, {"n": next(_numbers)}) for _ in range(20)]
    for job_id in later:
        assert queue.wait(job_id, timeout=20).status is JobStatus.SUCCEEDED


class _Pool:
    """The part of a pool the completer reads: the type."""

    def __init__(self, job_type: str) -> None:
        self.type = job_type
        self.lease_seconds = 30.0


def _completer(store: PostgresStore, hub: ObserverHub) -> Completer:
    return Completer(store, "w1", hub, unblocks={}, hint=lambda types: None,
                     wake=lambda: None)


def test_a_result_the_database_refuses_dead_letters_only_its_job(
    pg_store: PostgresStore,
) -> None:
    queue = Queue(pg_store)
    ids = [add_job(queue, "report", {"n": n}) for n in range(9)]
    jobs = claim(pg_store, slots("report", limit=9))
    assert sorted(job.id for job in jobs) == sorted(ids)
    recorder = Recorder()
    completer = _completer(pg_store, ObserverHub([recorder], "w1"))
    pool = _Pool("report")
    poison = jobs[4]
    for job in jobs:
        unit = Unit(pool, (job,), lease_deadline=time.monotonic() + 30)  # type: ignore[arg-type]
        # A JSON text with an escaped NUL: valid JSON that jsonb refuses (22P05). Handlers'
        # results never get here (encode_result refuses NUL), which is why the store must
        # still not let one item take its batch down.
        unit.result = b'"\\u0000 refused"' if job is poison else b'{"ok": true}'
        completer.complete(unit)
    completer.flush()
    for job in jobs:
        summary = queue.get(job.id)
        assert summary is not None
        if job is poison:
            assert summary.status is JobStatus.FAILED
            assert summary.last_error == (
                "OutcomeUnwritable: UntranslatableCharacter: "
                "unsupported Unicode escape sequence"
            )
            assert summary.result is None
        else:
            assert summary.status is JobStatus.SUCCEEDED, summary
            assert summary.result == {"ok": True}
    outcomes = {t.job_id: t.outcome for t in recorder.transitions}
    assert outcomes[poison.id] == "failed-terminal"
    assert sum(o == "succeeded" for o in outcomes.values()) == 8


def test_a_refused_item_among_thousands_costs_a_few_writes(pg_store: PostgresStore) -> None:
    queue = Queue(pg_store)
    queue.add_many("bulk", [{"n": n} for n in range(2000)])
    jobs = claim(pg_store, slots("bulk", limit=2000))
    assert len(jobs) == 2000
    calls: list[int] = []
    store_write = pg_store.job_complete_many

    def counted(owner: str, items: Any, **kwargs: Any) -> set[str]:
        calls.append(len(items))
        return store_write(owner, items, **kwargs)

    pg_store.job_complete_many = counted  # type: ignore[method-assign]
    completer = _completer(pg_store, ObserverHub([], "w1"))
    pool = _Pool("bulk")
    bad = {jobs[10].id, jobs[1500].id}
    for job in jobs:
        unit = Unit(pool, (job,), lease_deadline=time.monotonic() + 30)  # type: ignore[arg-type]
        if job.id in bad:
            unit.result = b'"\\u0000"'
        completer.complete(unit)
    completer.flush()
    counts = queue.stats()
    assert counts["succeeded"] == 1998
    assert counts["failed"] == 2
    # Two chunks of 1,000, each bisected down to its one refused item: about 2 log2(1000)
    # writes each, not one per item.
    assert len(calls) < 50, calls


def test_unwritten_outcomes_keep_their_leases_and_hold_the_claims(
    pg_store: PostgresStore, pg_dsn: str, schema: str
) -> None:
    queue = Queue(pg_store)
    runs: dict[str, int] = {}
    lock = threading.Lock()
    recorder = Recorder()
    registry = CollectorRegistry()
    worker = Worker(pg_store, poll_interval=0.1, lease_duration=1.5,
                    observers=[recorder, PrometheusObserver(registry)])

    @worker.handler("work")
    def work(job: JobEvent[Any]) -> None:
        with lock:
            runs[job.id] = runs.get(job.id, 0) + 1

    rename = "ALTER FUNCTION {s}.complete_jobs(text, bigint[], bigint[], float8[]) RENAME TO {n}"
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        # Completions now fail (no such function: not the items' fault, so retried whole);
        # renewals and claims still work.
        admin.execute(rename.format(s=schema, n="complete_jobs_away").encode())
        first = add_job(queue, "work", {"n": 0})
        worker.start()
        try:
            deadline = time.monotonic() + 10
            while first not in runs and time.monotonic() < deadline:
                time.sleep(0.05)
            assert runs.get(first) == 1
            time.sleep(4 * 1.5)  # four leases: reaped by now unless renewed
            held = queue.get(first)
            assert held is not None
            # Still this attempt's lease (its start is written with the completion, so the
            # summary may call it pending): never reaped, never claimed again.
            assert held.status in (JobStatus.RUNNING, JobStatus.PENDING)
            assert (held.attempts, held.last_error) == (1, None)
            # Past the bound (a renewal interval) the worker stops claiming.
            later = add_job(queue, "work", {"n": 1})
            time.sleep(1.0)
            waiting = queue.get(later)
            assert waiting is not None
            assert (waiting.status, waiting.attempts) == (JobStatus.PENDING, 0)  # unclaimed
            assert later not in runs
            held_back = recorder.wait_for_error("claim")
            assert held_back[0].error.startswith("claims held: outcomes unwritten for "), held_back
            # ... and counts it: the metric an alert on a stuck completer reads.
            errors = registry.get_sample_value("golemq_worker_errors_total", {"kind": "claim"})
            assert errors is not None
            assert errors >= 1
            admin.execute(
                rename.format(s=schema, n="complete_jobs").replace(
                    "complete_jobs(", "complete_jobs_away(", 1).encode()
            )
            assert queue.wait(first, timeout=20).status is JobStatus.SUCCEEDED
            assert queue.wait(later, timeout=20).status is JobStatus.SUCCEEDED
        finally:
            worker.stop(timeout=10)
    assert runs == {first: 1, later: 1}


def test_the_store_refuses_a_batch_for_one_items_data_and_writes_none_of_it(
    pg_store: PostgresStore,
) -> None:
    # A fencing token past bigint is refused by the server (22003, a DataError) whatever
    # the verb: the store says so with WriteRefused, naming the class and first line only,
    # and the statement wrote nothing (the worker then splits the batch).
    queue = Queue(pg_store)
    for n in range(3):
        add_job(queue, "renewed", {"n": n})
    jobs = claim(pg_store, slots("renewed", limit=3))
    refs = [LeaseRef(job.id, job.lease_token) for job in jobs]
    refs[1] = LeaseRef(jobs[1].id, 2**64)
    with pytest.raises(WriteRefused) as refused:
        pg_store.lease_renew("w1", refs, 60)
    assert str(refused.value) == (
        'NumericValueOutOfRange: value "18446744073709551616" is out of range for type bigint')
    assert isinstance(refused.value.__cause__, psycopg.DataError)
    with pytest.raises(WriteRefused):
        pg_store.job_release_many("w1", refs)
    statuses = {queue.get(job.id).status for job in jobs}  # type: ignore[union-attr]
    assert statuses == {JobStatus.RUNNING}  # nothing released
    # A connection's error is not a refusal: the caller retries the batch whole.
    pg_store.close()
    with pytest.raises(psycopg.Error) as closed:
        pg_store.lease_renew("w1", refs[:1], 60)
    assert not isinstance(closed.value, WriteRefused)
