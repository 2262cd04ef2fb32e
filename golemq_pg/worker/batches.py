"""The completer's batches: how outcomes are cut into statements, and split when refused.

:func:`chunks` / :func:`result_chunks` cut a flush's items into statements of bounded size
(items, and bytes of results). A batch is an optimisation, never a fate-sharing unit. When
the store refuses a batch write for its data (:class:`~golemq_pg.store.port.WriteRefused`: a
text or a result the database cannot hold), :class:`SplitWrite` writes the two halves apart,
and so on, until each refused item stands alone; every other item is written. The completer
dead-letters each refused item with a minimal write of its own (:func:`unwritable_fail`: the
id, the lease and a text of golemq-pg's own, no traceback, nothing the handler produced), so
the item's data cannot refuse it again. A failure that is not a refusal (the connection, the
server) is left to the caller, which retries: :meth:`SplitWrite.run` then carries on with
the parts not yet written.

:class:`WriteStall` is the other half: while writes keep failing for the connection, the
completer tells the claim loop to stop claiming once the failures have lasted longer than a
bound (new leases would only join outcomes that cannot be written), and to resume when a
write succeeds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from golemq_pg._errortext import error_text
from golemq_pg.store.port import FailItem, ResultRef, WriteRefused

if TYPE_CHECKING:
    from golemq_pg.worker.units import Unit


class OutcomeUnwritable(Exception):  # noqa: N818 - named after what happened
    """Stands for an outcome (a completion with its result, a retry or failure with its
    error text) that the database refused to store: the job is dead-lettered instead. The
    message is the refusing error's class and first line, never the item's content."""


def unwritable_text(refusal: WriteRefused) -> str:
    """``"OutcomeUnwritable: <error class>: <first line>"``, the dead letter's
    ``last_error``."""
    return error_text(OutcomeUnwritable(str(refusal)), with_type=True)


def unwritable_fail(item: Any, refusal: WriteRefused) -> FailItem:
    """The minimal dead-letter write of a refused item (any item of the four outcome kinds:
    each has ``id`` and ``token``): golemq-pg's own text, no traceback."""
    return FailItem(item.id, item.token, unwritable_text(refusal), None)


#: Writes items ``[lo, hi)`` of a batch; returns the ids it wrote.
PartWrite = Callable[[int, int], set[str]]


class SplitWrite:
    """The writes of one batch of ``size`` items, split on refusals (see the module)."""

    __slots__ = ("refused", "size", "todo", "written")

    def __init__(self, size: int) -> None:
        self.size = size
        #: Parts still to write, as ``[lo, hi)`` ranges, the next one last.
        self.todo: list[tuple[int, int]] = [(0, size)] if size else []
        #: The ids written so far.
        self.written: set[str] = set()
        #: The index of each item refused alone, with the refusal.
        self.refused: list[tuple[int, WriteRefused]] = []

    def run(self, write: PartWrite) -> None:
        """Write every part left; an error other than a refusal propagates, and the next
        call resumes with the part it interrupted (the parts written stay written)."""
        todo = self.todo
        while todo:
            lo, hi = todo[-1]
            try:
                done = write(lo, hi)
            except WriteRefused as refusal:
                todo.pop()
                if hi - lo == 1:
                    self.refused.append((lo, refusal))
                else:
                    mid = (lo + hi) // 2
                    todo.append((mid, hi))
                    todo.append((lo, mid))
                continue
            todo.pop()
            self.written |= done

    def whole(self, lo: int, hi: int) -> bool:
        """Whether ``[lo, hi)`` is the whole batch, unsplit."""
        return lo == 0 and hi == self.size


class WriteStall:
    """How long the completer's writes have been failing, and whether the claims must hold
    off for it (after ``after`` seconds of failures without a success)."""

    __slots__ = ("after", "clock", "reported", "since")

    def __init__(self, after: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.after = after
        self.clock = clock
        #: Monotonic time of the first failure since the last success (None: writing).
        self.since: float | None = None
        #: Whether this stall was reported (logged, and told to ``on_error``).
        self.reported = False

    def failed(self) -> bool:
        """A write failed; True the first time the failures outlast the bound (report it)."""
        now = self.clock()
        if self.since is None:
            self.since = now
        if not self.reported and now - self.since >= self.after:
            self.reported = True
            return True
        return False

    def succeeded(self) -> bool:
        """A write succeeded; True when that ends a reported stall (report the resumption)."""
        ended = self.reported
        self.since = None
        self.reported = False
        return ended

    def stalled(self) -> bool:
        """Whether the writes have failed for longer than the bound."""
        since = self.since
        return since is not None and self.clock() - since >= self.after

    def seconds(self) -> float:
        """How long the writes have been failing (0 while they succeed)."""
        since = self.since
        return 0.0 if since is None else self.clock() - since


#: Most items per statement.
_CHUNK = 1000
#: Most bytes of results per statement (a result may be up to 1 MiB).
_CHUNK_RESULT_BYTES = 8 * 1024 * 1024


def stored_result(item: object) -> Any:
    """The result a completion item stores, decoded as ``JobSummary.result`` reads it back
    (None: the handler returned nothing to store). Built only for observers that take a
    :class:`~golemq_pg.Transition`; the counters never pay for it."""
    encoded = item.result if type(item) is ResultRef else None
    return None if encoded is None else orjson.loads(encoded)


def handler_starts(group: Sequence[tuple[Any, Unit, Sequence[Any], bool]]) -> list[float | None]:
    """Per item of ``group`` (in order), seconds since its unit's handler started (None: it
    never did)."""
    now = time.monotonic()
    started: list[float | None] = []
    for _, unit, items, _ in group:
        began = unit.started_at
        started.extend([now - began if began else None] * len(items))
    return started


def chunks(items: list[Any]) -> list[list[Any]]:
    """``items`` in statements of at most ``_CHUNK`` items."""
    return [items[start : start + _CHUNK] for start in range(0, len(items), _CHUNK)]


def result_chunks(items: list[Any]) -> list[list[Any]]:
    """Completions in statements of at most ``_CHUNK`` items and, when they carry results,
    about ``_CHUNK_RESULT_BYTES`` of them (so large results never make a huge statement)."""
    if ResultRef not in set(map(type, items)):  # C speed: no per-item Python loop
        return chunks(items)
    sizes = [len(item.result) if type(item) is ResultRef and item.result else 0
             for item in items]
    if sum(sizes) <= _CHUNK_RESULT_BYTES:  # the usual small results: no size split
        return chunks(items)
    parts: list[list[Any]] = [[]]
    size = 0
    for item, extra in zip(items, sizes, strict=True):
        if parts[-1] and (len(parts[-1]) >= _CHUNK or size + extra > _CHUNK_RESULT_BYTES):
            parts.append([])
            size = 0
        parts[-1].append(item)
        size += extra
    return parts


__all__ = [
    "OutcomeUnwritable",
    "PartWrite",
    "SplitWrite",
    "WriteStall",
    "chunks",
    "handler_starts",
    "result_chunks",
    "stored_result",
    "unwritable_fail",
    "unwritable_text",
]
