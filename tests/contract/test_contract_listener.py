"""Contract: wake-up notifications (open_listener)."""

from __future__ import annotations

import threading
import time

from golemq_pg._validation import encode_payload
from golemq_pg.store.port import (
    CancelFilter,
    EnqueueManyParams,
    JobStore,
    Listener,
    Notification,
)
from tests.support.store_port import add, claim


def _collect(
    listener: Listener, kind: str, timeout: float = 5.0, until: set[str] | None = None
) -> set[str]:
    """Items of ``kind`` that arrive within ``timeout`` (stop early once ``until`` is seen)."""
    deadline = time.monotonic() + timeout
    seen: set[str] = set()
    while time.monotonic() < deadline:
        for note in listener.wait(max(deadline - time.monotonic(), 0.01)):
            if note.kind == kind:
                seen.update(note.items)
        if until is not None and until <= seen:
            break
    return seen


def _open(store: JobStore) -> Listener:
    listener = store.open_listener()
    assert listener is not None
    # A PostgreSQL listener may announce its (re)connection first; drain that.
    listener.wait(0.05)
    return listener


def test_a_due_enqueue_wakes_a_listener_with_its_type(store: JobStore) -> None:
    listener = _open(store)
    try:
        add(store, "email.send")
        assert _collect(listener, "jobs", until={"email.send"}) >= {"email.send"}
    finally:
        listener.close()


def test_a_future_enqueue_sends_no_jobs_hint(store: JobStore) -> None:
    listener = _open(store)
    try:
        add(store, "later", delay=3600)
        assert _collect(listener, "jobs", timeout=0.5) == set()
    finally:
        listener.close()


def test_bulk_enqueue_sends_a_hint_and_every_listener_gets_it(store: JobStore) -> None:
    listeners = [_open(store) for _ in range(3)]
    try:
        payloads = [encode_payload("bulk", {"i": i}) for i in range(50)]
        store.job_enqueue_many(EnqueueManyParams(type="bulk", payloads=payloads))
        for listener in listeners:
            assert "bulk" in _collect(listener, "jobs", until={"bulk"})
    finally:
        for listener in listeners:
            listener.close()


def test_cancelling_running_jobs_announces_their_ids(store: JobStore) -> None:
    running_id = add(store, "a", scope=("S", "1"))
    add(store, "a", scope=("S", "1"), delay=3600)
    claim(store, "a")
    listener = _open(store)
    try:
        store.job_cancel(CancelFilter(scope=("S", "1")), "gone")  # type: ignore[arg-type]
        assert _collect(listener, "cancel", until={running_id}) == {running_id}
    finally:
        listener.close()


def test_a_blocked_wait_returns_when_a_job_arrives(store: JobStore) -> None:
    listener = _open(store)
    got: list[Notification] = []
    started = threading.Event()

    def waiter() -> None:
        started.set()
        deadline = time.monotonic() + 10
        while not any(n.kind == "jobs" for n in got) and time.monotonic() < deadline:
            got.extend(listener.wait(10))

    thread = threading.Thread(target=waiter)
    thread.start()
    try:
        started.wait(5)
        time.sleep(0.05)  # let the waiter block (nothing to wait on from outside)
        begin = time.monotonic()
        add(store, "a")
        thread.join(10)
        assert not thread.is_alive()
        assert time.monotonic() - begin < 5
        assert any(n.kind == "jobs" and "a" in n.items for n in got)
    finally:
        listener.close()
        thread.join(1)


def test_wait_times_out_with_nothing(store: JobStore) -> None:
    listener = _open(store)
    try:
        begin = time.monotonic()
        assert [n for n in listener.wait(0.2) if n.kind != "reconnected"] == []
        assert time.monotonic() - begin >= 0.15
    finally:
        listener.close()


def test_a_closed_listener_returns_at_once(store: JobStore) -> None:
    listener = _open(store)
    listener.close()
    begin = time.monotonic()
    assert listener.wait(5) == []
    assert time.monotonic() - begin < 1
