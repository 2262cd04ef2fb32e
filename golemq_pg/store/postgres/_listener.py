"""The LISTEN side of the wake-up hints: one dedicated connection per worker (and one per
store for ``queue.wait``, see ``_waiters``).

The connection lives outside the pool (it holds session state: its LISTENs) and in
autocommit mode. Losing it is never fatal: ``wait`` logs the error (never a payload),
reconnects with a capped exponential backoff, LISTENs again and reports a ``reconnected``
notification so the worker re-polls for whatever it missed meanwhile. The loss itself is
reported once, as a ``lost`` notification carrying the error's bounded text (its type and
first line), before the ``reconnected`` that ends it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

import orjson
import psycopg
import structlog

from golemq_pg._errortext import error_text
from golemq_pg.store.port import Notification
from golemq_pg.store.postgres._sql import listen_statement

log = structlog.get_logger("golemq_pg.store.listener")

Kind = Literal["jobs", "cancel", "done"]

MIN_BACKOFF = 0.1
MAX_BACKOFF = 5.0


def parse_notification(kind: Kind, payload: str) -> Notification:
    """Turn a NOTIFY payload into a :class:`Notification`.

    ``jobs`` payloads are a JSON array of type names; an empty or unreadable payload means
    "any type" (empty tuple). ``cancel`` payloads are a JSON array of job ids; ``done``
    payloads too (jobs that became terminal or were deleted), empty meaning "any job".
    """
    try:
        decoded = orjson.loads(payload) if payload else []
    except orjson.JSONDecodeError:
        decoded = []
    if not isinstance(decoded, list):
        decoded = []
    items = tuple(str(item) for item in decoded if isinstance(item, str | int))
    return Notification(kind=kind, items=items)


class PgListener:
    """LISTENs on some of the queue's channels (``jobs``, ``cancel``, ``done``); see the
    module docstring."""

    def __init__(
        self,
        conninfo: str,
        channels: Mapping[str, Kind],
        *,
        connect_kwargs: Mapping[str, Any] | None = None,
        setup: Callable[[psycopg.Connection[Any]], None] | None = None,
        min_backoff: float = MIN_BACKOFF,
        max_backoff: float = MAX_BACKOFF,
    ) -> None:
        self._conninfo = conninfo
        self._channels = dict(channels)
        self._kwargs = {k: v for k, v in (connect_kwargs or {}).items() if k != "autocommit"}
        self._setup = setup
        self._min_backoff = min_backoff
        self._max_backoff = max_backoff
        self._backoff = min_backoff
        # No reconnect attempt before this (monotonic): the backoff holds across wait() calls,
        # which are short (the worker's listener thread waits a fraction of a second at a time).
        self._retry_at = 0.0
        self._failures = 0
        #: A loss was reported (a ``lost`` note) and no connection made since.
        self._down = False
        #: The error text of a loss not yet reported (the next ``wait`` reports it).
        self._loss: str | None = None
        self._conn: psycopg.Connection[Any] | None = None
        self._closed = threading.Event()
        # Held while a thread waits on the connection; close() leaves the connection to it.
        self._busy = threading.Lock()
        # Held while the connection is closed, and while close() cuts a wait short through
        # its socket: that socket is never one the connection has already given up.
        self._socket_lock = threading.Lock()
        self._connect_once()

    @property
    def connection(self) -> psycopg.Connection[Any] | None:
        """The current LISTEN connection (None while disconnected); for tests and diagnostics."""
        return self._conn

    def _lost(self, exc: psycopg.Error) -> None:
        """Note a loss of the connection for the next ``wait`` to report (once per loss)."""
        if not self._down:
            self._down = True
            self._loss = error_text(exc, with_type=True)

    def _with_loss(self, found: list[Notification]) -> list[Notification]:
        """``found``, after the ``lost`` note of a loss not yet reported."""
        loss, self._loss = self._loss, None
        if loss is None:
            return found
        return [Notification(kind="lost", items=(loss,)), *found]

    def _failed(self, event: str, exc: psycopg.Error) -> None:
        self._lost(exc)
        self._failures += 1
        # Rate-limited: an outage means one attempt per backoff step, not one line each.
        if self._failures == 1 or self._failures % 20 == 0:
            log.warning(event, error=type(exc).__name__, failures=self._failures)

    def _connect_once(self) -> bool:
        try:
            conn = psycopg.connect(self._conninfo, autocommit=True, **self._kwargs)
        except psycopg.Error as exc:
            self._failed("listener_connect_failed", exc)
            return False
        try:
            if self._setup is not None:
                self._setup(conn)  # the store's session settings (its timeouts)
            for channel in self._channels:
                conn.execute(listen_statement(channel))
        except psycopg.Error as exc:
            self._failed("listener_listen_failed", exc)
            conn.close()
            return False
        self._conn = conn
        self._down = False
        self._backoff = self._min_backoff
        self._retry_at = 0.0
        self._failures = 0
        return True

    def _drop(self) -> None:
        with self._socket_lock:
            conn, self._conn = self._conn, None
            if conn is not None:
                with contextlib.suppress(psycopg.Error):  # closing a broken connection
                    conn.close()

    def _cut_wait_short(self) -> None:
        """End a wait blocked on the socket now rather than at its timeout.

        Shutting down the read side of the socket makes the blocked wait see end-of-file
        (psycopg raises, ``wait`` sees the listener closed and drops the connection). Nothing
        is sent to the server; the waiting thread still closes the connection properly. Done
        on a duplicate of the descriptor, under the lock ``_drop`` holds, so it can only ever
        reach this connection's own socket.
        """
        with self._socket_lock:
            conn = self._conn
            if conn is None or conn.closed:
                return
            try:
                fd = os.dup(conn.pgconn.socket)
            except (psycopg.Error, OSError):
                return
            with socket.socket(fileno=fd) as sock, contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RD)

    def _reconnect(self, deadline: float) -> bool:
        """Try to reconnect until ``deadline``, backing off between attempts (the backoff
        carries over to the next call when the deadline comes first)."""
        while not self._closed.is_set():
            if time.monotonic() >= self._retry_at:
                failures = self._failures
                if self._connect_once():
                    log.info("listener_reconnected", failures=failures)
                    return True
                self._retry_at = time.monotonic() + self._backoff
                self._backoff = min(self._backoff * 2, self._max_backoff)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            pause = min(self._retry_at - time.monotonic(), remaining)
            if pause > 0 and self._closed.wait(pause):
                return False
        return False

    def wait(self, timeout: float) -> list[Notification]:
        """Block up to ``timeout`` seconds for hints; never raises for connection errors."""
        deadline = time.monotonic() + max(timeout, 0.0)
        with self._busy:
            if self._closed.is_set():
                return []
            if self._conn is None:
                if self._reconnect(deadline):
                    return self._with_loss([Notification(kind="reconnected", items=())])
                return self._with_loss([])
            conn = self._conn
            found: list[Notification] = []
            try:
                for item in conn.notifies(timeout=max(timeout, 0.0), stop_after=1):
                    kind = self._channels.get(item.channel)
                    if kind is not None:
                        found.append(parse_notification(kind, item.payload))
            except psycopg.Error as exc:
                if self._closed.is_set():
                    return found
                log.warning("listener_connection_lost", error=type(exc).__name__)
                self._lost(exc)
                self._drop()
                if self._reconnect(deadline):
                    found.append(Notification(kind="reconnected", items=()))
            finally:
                if self._closed.is_set():
                    self._drop()
            return self._with_loss(found)

    def close(self) -> None:
        """Stop listening and close the connection (idempotent)."""
        self._closed.set()
        if self._busy.acquire(blocking=False):
            try:
                self._drop()
            finally:
                self._busy.release()
        else:
            # A thread is waiting on the connection: wake it; it closes the connection itself
            # (a stopping worker need not sit out the rest of the wait's timeout).
            self._cut_wait_short()
