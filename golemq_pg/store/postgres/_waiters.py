"""``job_wait`` on PostgreSQL: every waiting thread of a store shares one LISTEN connection.

A waiter registers its job id with the store's :class:`JobWaiters`, looks at the job once
(one pooled statement, the connection returned at once: a finished job returns, an unknown
one raises) and then sleeps on its own event, holding no connection at all. One background
thread per store, started by the first waiter that has to sleep and gone :data:`LINGER`
seconds after the last one left, owns a dedicated LISTEN connection outside the pool (a
:class:`PgListener`, with its reconnect and backoff) on two channels:

* ``done``: after each completing statement, the ids of the jobs that became terminal or
  were deleted (``notify_jobs_done()`` in migration 0002; a cancel sends it too); an empty
  payload means "any job";
* ``cancel``: the ids of the running jobs a cancel deleted (the workers' abort hint).

On a hint the thread checks the hinted ids someone waits for with ONE statement
(``job_get_many``, on a pooled connection held for that statement only) and wakes the waiters
whose job is terminal (they return its summary) or gone (``LookupError``). Correctness never
depends on a hint: every waited id is checked again every :data:`POLL_INTERVAL` seconds (one
statement for all of them), after each reconnect, on an empty hint, and when the thread
starts (what finished between a waiter's first look and the LISTEN), so a lost notification
or a listener outage only delays a wake-up. Hints that arrive together get one check.

A check concludes "gone" only for waiters registered before its statement was sent (a
sequence number): its snapshot may predate the job of a waiter registered later.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
import structlog
from psycopg import errors as pg_errors
from psycopg_pool import ConnectionPool

from golemq_pg._types import JobSummary
from golemq_pg.store.port import (
    TERMINAL_STATUSES,
    Notification,
    wait_missing,
    wait_timed_out,
)
from golemq_pg.store.postgres import _rows as rows
from golemq_pg.store.postgres._listener import PgListener
from golemq_pg.store.postgres._plans import PlanContext
from golemq_pg.store.postgres._producer import job_get_many
from golemq_pg.store.postgres._run_sync import run_plan

log = structlog.get_logger("golemq_pg.store.waiters")

#: Seconds between two checks of every waited job: the bound on the delay a lost hint or a
#: listener outage adds. Read at every step, so a test may change it on a running store.
POLL_INTERVAL = 1.0
#: Seconds the listener stays connected after the last waiter left (a program waiting for
#: one job after another keeps its connection).
LINGER = 2.0
#: Seconds between attempts to start listening when that fails before the connection (the
#: channel names cannot be read: the server is down).
RETRY_SECONDS = 1.0
#: How long ``close`` waits for the listener thread to close its connection.
JOIN_SECONDS = 5.0
#: At most this many further reads of hints already received before one check answers them.
BURST = 100


class Waiter:
    """One thread (or task) waiting for one job: set once, by a check or by ``close``."""

    __slots__ = ("closed", "event", "job_id", "seq", "sleeping", "summary")

    def __init__(self, job_id: int, seq: int, event: Any) -> None:
        self.job_id = job_id
        self.seq = seq
        self.event = event  # a threading.Event, or an asyncio.Event for AsyncPostgresStore
        self.summary: JobSummary | None = None  # None when set: the job is gone
        self.closed = False
        self.sleeping = False  # past its first look, blocked on the event


def first_look(job_id: str, found: Sequence[JobSummary]) -> JobSummary | None:
    """A waiter's first look at its job: the summary when it is already terminal, None when
    it is to sleep; ``LookupError`` when there is no such job."""
    if not found:
        raise wait_missing(job_id)
    return found[0] if found[0].status in TERMINAL_STATUSES else None


def outcome(job_id: str, waiter: Waiter) -> JobSummary:
    """What a woken waiter returns: its job's summary; ``RuntimeError`` when the store was
    closed, ``LookupError`` when the job is gone."""
    if waiter.closed:
        raise RuntimeError(f"the store was closed while waiting for job {job_id}")
    if waiter.summary is None:
        raise wait_missing(job_id)
    return waiter.summary


class WaiterRegistry:
    """Who waits for which job, and the decision of whom a check wakes: the part of waiting
    shared by :class:`JobWaiters` (threads) and ``_async_waiters.AsyncJobWaiters`` (tasks).

    ``new_event`` makes a waiter's event (``threading.Event`` or ``asyncio.Event``).
    """

    def __init__(self, new_event: Callable[[], Any]) -> None:
        self._new_event = new_event
        self._lock = threading.Lock()
        self._waiting: dict[int, set[Waiter]] = {}
        self._seq = 0  # the sequence number of the last waiter registered
        self._closed = False

    def _register(self, job_id: int) -> Waiter:
        with self._lock:
            if self._closed:
                raise RuntimeError("the store is closed")
            self._seq += 1
            waiter = Waiter(job_id, self._seq, self._new_event())
            self._waiting.setdefault(job_id, set()).add(waiter)
            return waiter

    def _unregister(self, waiter: Waiter) -> None:
        with self._lock:
            group = self._waiting.get(waiter.job_id)
            if group is not None:
                group.discard(waiter)
                if not group:
                    del self._waiting[waiter.job_id]

    def _wanted(self, job_ids: set[int] | None) -> tuple[int, list[int]]:
        """The sequence number now and the waited ids a check is to look at (``None``: all
        of them, else those of ``job_ids``)."""
        with self._lock:
            if job_ids is None:
                return self._seq, list(self._waiting)
            return self._seq, [job_id for job_id in job_ids if job_id in self._waiting]

    def _wake(self, wanted: list[int], found: dict[int, JobSummary], seq: int) -> None:
        """Wake the waiters (registered by ``seq``) of the jobs of ``wanted`` that a check
        found terminal or did not find at all."""
        with self._lock:
            for job_id in wanted:
                summary = found.get(job_id)
                if summary is not None and summary.status not in TERMINAL_STATUSES:
                    continue
                for waiter in self._waiting.get(job_id, ()):
                    if waiter.seq <= seq and not waiter.event.is_set():
                        waiter.summary = summary
                        waiter.event.set()

    def _close_waiters(self) -> None:
        """Mark the store closed and wake every waiter (they raise ``RuntimeError``); called
        with the lock held."""
        self._closed = True
        for group in self._waiting.values():
            for waiter in group:
                waiter.closed = True
                waiter.event.set()

    @property
    def waiting(self) -> int:
        """How many are blocked waiting right now, past their first look at their job (for
        tests and diagnostics)."""
        with self._lock:
            return sum(w.sleeping for group in self._waiting.values() for w in group)


class JobWaiters(WaiterRegistry):
    """The waiters of one store (and of the stores ``with_connection`` derives from it) and
    their listener thread; see the module docstring.

    ``pool`` serves the short checks and tells where the LISTEN connection goes (its conninfo
    and connection options, or ``dsn()`` when the store was given one: its ``listen_dsn``,
    else its DSN). ``on_error`` turns a check's error into the one to raise (the store's
    clear error for a pooler's prepared-statement failure); ``setup()`` what the LISTEN
    connection runs once open (the store's session settings, or None); ``on_checkout`` what
    a pooled connection gets before each check (the store's UTC decoding).
    """

    def __init__(
        self,
        pool: ConnectionPool[Any],
        ctx: PlanContext,
        dsn: Callable[[], str | None],
        *,
        on_error: Callable[[BaseException], BaseException] = lambda exc: exc,
        setup: Callable[[], Callable[[psycopg.Connection[Any]], None] | None] = lambda: None,
        on_checkout: Callable[[psycopg.Connection[Any]], None] = lambda conn: None,
    ) -> None:
        super().__init__(threading.Event)
        self._pool = pool
        self._ctx = ctx
        self._q = ctx.queries
        self._dsn = dsn
        self._translate = on_error
        self._setup = setup
        self._on_checkout = on_checkout
        self._thread: threading.Thread | None = None
        self._listener: PgListener | None = None
        self._stopped = threading.Event()
        self._failures = 0

    # -- the waiting side ----------------------------------------------------------------
    def wait(self, job_id: str, timeout: float | None) -> JobSummary:
        """Block until ``job_id`` is terminal and return its summary (``job_wait``).

        Raises ``LookupError`` (no such job, or deleted meanwhile), ``TimeoutError`` (after
        ``timeout`` seconds), ``RuntimeError`` (the store was closed), and the database's
        error when the first look at the job fails.
        """
        number = rows.int_id(job_id)
        if number is None:
            raise wait_missing(job_id)
        deadline = None if timeout is None else time.monotonic() + timeout
        waiter = self._register(number)
        try:
            # Registered first: whatever finishes after this look is hinted, or found by the
            # listener thread's first check (it starts after this look) or by a poll.
            finished = first_look(job_id, self.fetch([number]))
            if finished is not None:
                return finished
            self._sleep(waiter)
            remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            if not waiter.event.wait(remaining):
                raise wait_timed_out(job_id, timeout or 0.0)
            return outcome(job_id, waiter)
        finally:
            self._unregister(waiter)

    def _sleep(self, waiter: Waiter) -> None:
        """The waiter is about to block: make sure the listener thread runs (a wait for a
        job already finished never opens the LISTEN connection)."""
        with self._lock:
            waiter.sleeping = True
            if self._thread is None and not self._closed:
                thread = threading.Thread(target=self._run, name="golemq-waiters", daemon=True)
                self._thread = thread
                thread.start()

    def fetch(self, job_ids: Sequence[int]) -> list[JobSummary]:
        """The summaries of those of ``job_ids`` that exist: one statement, on a pooled
        connection held for that statement only."""
        return run_plan(self._checked_out, job_get_many(self._ctx, job_ids), True)

    @contextmanager
    def _checked_out(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection for one statement, set up as the store's own checkouts are; a
        prepared-statement error a pooler causes throws it away and names the fix."""
        with self._pool.connection() as conn:
            self._on_checkout(conn)
            try:
                yield conn
            except (pg_errors.DuplicatePreparedStatement, pg_errors.InvalidSqlStatementName) as exc:
                conn.close()  # its prepared statements no longer match its server
                raise self._translate(exc) from exc

    @property
    def listening(self) -> bool:
        """Whether the listener thread runs (for tests and diagnostics)."""
        with self._lock:
            return self._thread is not None

    def close(self) -> None:
        """Wake every waiter (``RuntimeError``), stop the listener thread and close its
        connection; later waits raise ``RuntimeError``. Idempotent."""
        with self._lock:
            self._close_waiters()
            self._stopped.set()
            thread, listener = self._thread, self._listener
        if listener is not None:
            listener.close()  # cuts a wait on its socket short
        if thread is not None and thread is not threading.current_thread():
            thread.join(JOIN_SECONDS)

    # -- the listener thread ---------------------------------------------------------------
    def _open_listener(self) -> PgListener:
        """A LISTEN connection on this schema's ``done`` and ``cancel`` channels."""
        with self._pool.connection() as conn:
            cancel = conn.execute(self._q["channel_names"]).fetchall()[0][1]
            done = conn.execute(self._q["channel_done"]).fetchall()[0][0]
        pool = self._pool
        conninfo = pool.conninfo() if callable(pool.conninfo) else pool.conninfo
        kwargs = pool.kwargs() if callable(pool.kwargs) else pool.kwargs
        return PgListener(
            self._dsn() or conninfo, {done: "done", cancel: "cancel"}, connect_kwargs=kwargs,
            setup=self._setup(),
        )

    def _run(self) -> None:
        me = threading.current_thread()
        listener: PgListener | None = None
        try:
            while listener is None:
                try:
                    listener = self._open_listener()
                except Exception as exc:  # noqa: BLE001 - the server may be down: try again
                    self._failed("wait_listener_open_failed", exc)
                    if self._stopped.wait(RETRY_SECONDS) or self._leave_if_idle(me, 0.0):
                        return
            with self._lock:
                if self._closed:
                    return
                self._listener = listener
            self._serve(me, listener)
        finally:
            with self._lock:
                if self._thread is me:
                    self._thread = None
                if self._listener is listener:
                    self._listener = None
            if listener is not None:
                listener.close()

    def _leave_if_idle(self, me: threading.Thread, idle_for: float) -> bool:
        """Whether the thread is to end now: the store closed, or nobody waited for
        :data:`LINGER` seconds. Deciding to leave and saying so (no thread) is one step under
        the lock, so a waiter registering meanwhile starts a new thread."""
        with self._lock:
            if self._closed:
                return True
            if not self._waiting and idle_for >= LINGER:
                if self._thread is me:
                    self._thread = None
                return True
            return False

    def _serve(self, me: threading.Thread, listener: PgListener) -> None:
        next_poll = 0.0  # at once: covers whatever finished before the LISTEN was in place
        idle_since: float | None = None
        while True:
            now = time.monotonic()
            with self._lock:
                idle = not self._waiting
            if not idle:
                idle_since = None
            elif idle_since is None:
                idle_since = now
            if self._leave_if_idle(me, 0.0 if idle_since is None else now - idle_since):
                return
            try:
                timeout = max(next_poll - now, 0.0)
                if idle_since is not None:
                    timeout = min(POLL_INTERVAL, max(LINGER - (now - idle_since), 0.0))
                notes = listener.wait(timeout) if timeout > 0 else []
                if notes:
                    notes += _more(listener)
                full, hinted = hints_of(notes)
                if full or time.monotonic() >= next_poll:
                    self._check(None)
                    next_poll = time.monotonic() + POLL_INTERVAL
                elif hinted:
                    self._check(hinted)
            except Exception as exc:  # noqa: BLE001 - the loop must outlive any one step
                self._failed("wait_listener_step_failed", exc)
                if self._stopped.wait(RETRY_SECONDS):
                    return

    def _check(self, job_ids: set[int] | None) -> None:
        """Look at the waited jobs (``None``: all of them, else those of ``job_ids``) with one
        statement and wake the waiters of the terminal and the vanished ones."""
        seq, wanted = self._wanted(job_ids)
        if not wanted:
            return
        try:
            found = {int(s.id): s for s in self.fetch(wanted)}
        except Exception as exc:  # noqa: BLE001 - the next poll looks again
            self._failed("wait_check_failed", exc)
            return
        self._failures = 0
        self._wake(wanted, found, seq)

    def _failed(self, event: str, exc: Exception) -> None:
        self._failures += 1
        # Rate-limited: an outage means one attempt per poll, not one line each.
        if self._failures == 1 or self._failures % 20 == 0:
            log.warning(event, error=type(exc).__name__, failures=self._failures)


def _more(listener: PgListener) -> list[Notification]:
    """The hints already received after the first one (a burst of completions), so that one
    check answers them all; bounded, so a flood cannot hold the checks back."""
    found: list[Notification] = []
    for _ in range(BURST):
        arrived = listener.wait(0)
        if not arrived:
            break
        found += arrived
    return found


def hints_of(notes: Iterable[Notification]) -> tuple[bool, set[int]]:
    """What the hints ask for: a check of every waited job (a reconnect, an empty ``done``
    hint), and the job ids named."""
    full = False
    named: set[int] = set()
    for note in notes:
        if note.kind == "reconnected" or (note.kind == "done" and not note.items):
            full = True
        elif note.kind in ("done", "cancel"):
            named.update(i for i in map(rows.int_id, note.items) if i is not None)
    return full, named
