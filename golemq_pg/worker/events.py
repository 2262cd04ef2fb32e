"""What a handler receives: :class:`JobEvent`, :class:`BatchEvent` and :class:`CancelSignal`.

These objects sit on the hot path (one ``JobEvent`` per job), so they use ``__slots__`` and
create nothing they may not need: the ``threading.Event`` behind a signal exists only once
someone waits on it.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Generic, Protocol, TypeVar

from golemq_pg._types import JobSummary, Scope
from golemq_pg._validation import encode_payload
from golemq_pg.errors import JobAborted, QueuePayloadError
from golemq_pg.store.port import JobLinks

P = TypeVar("P", bound=Mapping[str, Any])

#: Why a signal fired. Handlers can switch on these values.
TIMEOUT = "timeout"
CANCELLED = "cancelled"
LEASE_LOST = "lease-lost"
SHUTDOWN = "shutdown"

# One lock for the rare moments a signal fires or lazily grows its Event, instead of a lock
# per job: firing is rare, and the hot path (checking ``cancelled``) takes no lock at all.
_FIRE_LOCK = threading.Lock()


class CancelSignal:
    """Tells a running handler to stop: on timeout, cancellation, lease loss or shutdown.

    Handlers poll :attr:`cancelled`, block on :meth:`wait` instead of ``time.sleep``, or call
    :meth:`raise_if_cancelled` at safe points. An ``async def`` handler needs none of them
    (its task is cancelled when the signal fires) and must not call :meth:`wait`, which
    blocks the event loop. :attr:`reason` is one of ``"timeout"``,
    ``"cancelled"``, ``"lease-lost"`` or ``"shutdown"`` once fired, ``None`` before.
    """

    __slots__ = ("_event", "_reason")

    def __init__(self) -> None:
        self._reason: str | None = None
        self._event: threading.Event | None = None

    @property
    def cancelled(self) -> bool:
        """Whether the signal has fired."""
        return self._reason is not None

    @property
    def reason(self) -> str | None:
        """Why it fired (``"timeout"``, ``"cancelled"``, ``"lease-lost"``, ``"shutdown"``)."""
        return self._reason

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the signal fires or ``timeout`` seconds pass; True when it fired."""
        if self._reason is not None:
            return True
        with _FIRE_LOCK:
            if self._reason is not None:
                return True
            event = self._event
            if event is None:
                event = self._event = threading.Event()
        return event.wait(timeout)

    def raise_if_cancelled(self) -> None:
        """Raise :class:`golemq_pg.errors.JobAborted` (carrying the reason) if fired."""
        reason = self._reason
        if reason is not None:
            raise JobAborted(reason)

    def fire(self, reason: str) -> bool:
        """Fire the signal (the worker does this); False when it had already fired."""
        with _FIRE_LOCK:
            if self._reason is not None:
                return False
            self._reason = reason
            event = self._event
        if event is not None:
            event.set()
        return True

    def __repr__(self) -> str:
        return f"CancelSignal(reason={self._reason!r})"


class ProgressSink(Protocol):
    """Where ``JobEvent.progress`` sends a validated value (the worker's progress reporter),
    and where the event reads its links (``JobEvent.parents`` / ``workflow_id``)."""

    def report(self, event: JobEvent[Any], value: float | dict[str, Any]) -> None:
        """Record ``value`` as the progress of ``event``'s job."""

    def links(self, job_id: str) -> JobLinks:
        """The job's workflow and parents (the store's ``job_links``)."""


class LinkReader(Protocol):
    """What reads a job's links for its event: ``job_links`` of a store."""

    def job_links(self, job_id: str) -> JobLinks:
        """The job's workflow, parents and children."""


class JobEvent(Generic[P]):
    """One job as a handler sees it.

    ``attempt`` is 1-based; ``max_attempts`` is the job's budget, None when unlimited
    (``max_attempts=UNLIMITED``). ``connection`` is the claim transaction for transactional
    handlers and ``None`` otherwise. The ``repr`` never shows the payload, so logging an
    event cannot leak it.
    """

    __slots__ = (
        "_links",
        "_progress_at",
        "_progress_lock",
        "_progress_pending",
        "_progress_scheduled",
        "_reader",
        "_reporter",
        "_token",
        "attempt",
        "connection",
        "enqueued_at",
        "id",
        "max_attempts",
        "payload",
        "priority",
        "scope",
        "signal",
        "type",
    )

    def __init__(
        self,
        *,
        id: str,
        type: str,
        payload: P,
        attempt: int = 1,
        max_attempts: int | None = 1,
        scope: Scope | None = None,
        signal: CancelSignal | None = None,
        priority: int = 0,
        enqueued_at: datetime | None = None,
        connection: Any = None,
    ) -> None:
        self.id = id
        self.type = type
        self.payload = payload
        self.attempt = attempt
        self.max_attempts: int | None = max_attempts
        self.scope = scope
        self.signal = signal if signal is not None else CancelSignal()
        self.priority = priority
        self.enqueued_at = enqueued_at
        self.connection = connection
        self._reporter: ProgressSink | None = None
        self._token = 0
        self._progress_lock: threading.Lock | None = None
        self._progress_pending: float | dict[str, Any] | None = None
        self._progress_at = -math.inf
        self._progress_scheduled = False
        self._links: JobLinks | None = None
        self._reader: LinkReader | None = None

    @property
    def parents(self) -> Mapping[str, JobSummary]:
        """The jobs this one waited for (``depends_on``, or its nodes' ``after`` in a
        workflow), by id, each with its ``status`` and ``result``: read from the store on
        first access (one read, from an ``async def`` handler too: it is brief), then
        cached. Empty for a job without parents (and for the jobs of a grouped batch)."""
        return {p.id: p for p in self._read_links().parents}

    @property
    def workflow_id(self) -> str | None:
        """The id of the workflow this job belongs to, or None (read as :attr:`parents`)."""
        return self._read_links().workflow_id

    def _read_links(self) -> JobLinks:
        links = self._links
        if links is None:
            links = JobLinks()
            reader = self._reader
            if reader is not None:
                links = reader.job_links(self.id)
            elif self._reporter is not None:
                links = self._reporter.links(self.id)
            self._links = links
        return links

    def progress(self, value: float | dict[str, Any]) -> None:
        """Record progress (a number, or a JSON-safe dict) visible in ``JobSummary.progress``.

        Writes are coalesced: at most one every few hundred milliseconds per job, and the
        latest value is always written before the job's outcome. From an ``async def``
        handler the call never blocks the event loop: the write is made on a helper thread.
        Raises ``ValueError`` for a non-finite number or a dict that is not JSON-safe (the
        message never shows it).
        """
        if isinstance(value, bool) or not isinstance(value, int | float | dict):
            raise ValueError("progress must be a number or a JSON-safe dict")
        if isinstance(value, dict):
            try:
                encode_payload(self.type, value)
            except QueuePayloadError as exc:
                raise ValueError(f"progress is not JSON-safe: {exc.category}") from None
        elif not math.isfinite(value):
            raise ValueError("progress must be a finite number")
        else:
            value = float(value)
        reporter = self._reporter
        if reporter is None:  # built by hand (e.g. to unit-test a handler): keep it local
            self._progress_pending = value
            return
        reporter.report(self, value)

    def __repr__(self) -> str:
        return (
            f"JobEvent(id={self.id!r}, type={self.type!r}, attempt={self.attempt}/"
            f"{'unlimited' if self.max_attempts is None else self.max_attempts}, "
            f"scope={self.scope!r})"
        )


_new = object.__new__


def claimed_event(job: Any, signal: CancelSignal, reporter: ProgressSink) -> JobEvent[Any]:
    """The JobEvent of a claimed job (a ``ClaimedJob``) whose progress goes to ``reporter``.

    Built once per job on the drain's hot path, so it sets the slots directly: the keyword
    ``__init__`` cost three times as much (1.8 us against 0.57 us under timeit).
    """
    event: JobEvent[Any] = _new(JobEvent)
    event.id = job.id
    event.type = job.type
    event.payload = job.payload
    event.attempt = job.attempt
    event.max_attempts = job.max_attempts
    event.scope = job.scope
    event.signal = signal
    event.priority = job.priority
    event.enqueued_at = job.enqueued_at
    event.connection = None
    event._reporter = reporter
    event._token = job.token
    event._progress_lock = None
    event._progress_pending = None
    event._progress_at = -math.inf
    event._progress_scheduled = False
    event._links = None
    event._reader = None
    return event


class BatchEvent(Generic[P]):
    """All due jobs of one ``(type, scope)`` group, delivered to a grouped handler at once.

    ``jobs`` are in arrival order and share one :class:`CancelSignal`. Returning normally
    completes every job of the batch; failing retries every one of them. ``attempt`` is the
    highest attempt among the jobs.
    """

    __slots__ = ("attempt", "jobs", "scope", "signal", "type")

    def __init__(
        self,
        *,
        type: str,
        scope: Scope | None,
        jobs: list[JobEvent[P]],
        attempt: int,
        signal: CancelSignal,
    ) -> None:
        self.type = type
        self.scope = scope
        self.jobs = jobs
        self.attempt = attempt
        self.signal = signal

    def __repr__(self) -> str:
        return (
            f"BatchEvent(type={self.type!r}, scope={self.scope!r}, jobs={len(self.jobs)}, "
            f"attempt={self.attempt})"
        )


__all__ = [
    "CANCELLED",
    "LEASE_LOST",
    "SHUTDOWN",
    "TIMEOUT",
    "BatchEvent",
    "CancelSignal",
    "JobEvent",
    "LinkReader",
    "ProgressSink",
]
