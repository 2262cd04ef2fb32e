"""The handler registry: options validated at registration, consistency checked at start.

Registration rejects bad options at once (:class:`QueueConfigError`). At start the registry
checks what only the whole set can show: ``waits_for`` cycles among this process's handlers
(an error: those types would wait for each other forever) and one-sided
``not_while_running`` pairs (a warning: the exclusion only holds in one direction).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import structlog

from golemq_pg._types import JobType, type_name
from golemq_pg._validation import check_delete_on, check_job_type, check_name, to_seconds
from golemq_pg.errors import QueueConfigError

log = structlog.get_logger("golemq_pg.worker.handlers")

#: A per-type concurrency beyond this is a mistake (one thread per slot).
MAX_CONCURRENCY = 4096


@dataclass(frozen=True, slots=True)
class HandlerSpec:
    """One registered handler and its validated options."""

    type: str
    fn: Callable[[Any], object]
    concurrency: int = 1
    timeout: float | None = None
    serialize_by_scope: bool = False
    not_while_running: tuple[str, ...] = ()
    waits_for: tuple[str, ...] = ()
    grouped: bool = False
    max_batch: int | None = None
    transactional: bool = False
    #: "never", "success" or "always"; None: the Worker's ``delete_on``.
    delete_on: str | None = None
    #: An ``async def`` handler: run as a task on the worker's event loop thread.
    is_async: bool = False
    #: Transactional handlers only: seconds the claim's transaction may stay open before
    #: the worker logs ``transaction_slow`` and reports a "transaction-slow" WorkerError.
    transaction_warning: float | None = None
    #: False: claim only what free handler threads start at once (no buffered jobs).
    prefetch: bool = True

    @property
    def guarded(self) -> bool:
        """Whether claims of this type take the serialised (advisory-locked) path."""
        return bool(
            self.serialize_by_scope or self.not_while_running or self.waits_for or self.grouped
        )


def _type_list(value: object, what: str) -> tuple[str, ...]:
    """A single type or an iterable of types (str or JobType) as a tuple of names."""
    if value is None:
        return ()
    if not isinstance(value, str | JobType | Iterable):
        raise QueueConfigError(f"{what} must be a job type or a list of job types")
    items: Iterable[Any] = (value,) if isinstance(value, str | JobType) else value
    names: list[str] = []
    for item in items:
        if not isinstance(item, str | JobType):
            raise QueueConfigError(f"{what} must contain job type names or JobType objects")
        try:
            names.append(check_name(type_name(item), f"{what} entry"))
        except ValueError as exc:
            raise QueueConfigError(str(exc)) from None
    return tuple(dict.fromkeys(names))


def is_coroutine_handler(fn: object) -> bool:
    """Whether calling ``fn`` returns a coroutine to await: an ``async def`` function (or a
    ``functools.partial`` of one), or an object whose ``__call__`` is ``async def``."""
    if inspect.iscoroutinefunction(fn):
        return True
    # An instance's __call__, looked up on its class as the call itself does.
    call = getattr(type(fn), "__call__", None)  # noqa: B004 - the method, not callability
    return not inspect.isfunction(fn) and inspect.iscoroutinefunction(call)


def _flag(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise QueueConfigError(f"{what} must be True or False")
    return value


def check_concurrency(name: str, concurrency: object) -> int:
    """A handler's ``concurrency``: a positive integer up to :data:`MAX_CONCURRENCY`."""
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency <= 0:
        raise QueueConfigError(f"concurrency of {name!r} must be a positive integer")
    if concurrency > MAX_CONCURRENCY:
        raise QueueConfigError(f"concurrency of {name!r} must be at most {MAX_CONCURRENCY}")
    return concurrency


def _max_batch(name: str, max_batch: object, grouped: bool) -> int | None:
    if max_batch is None:
        return None
    if not grouped:
        raise QueueConfigError(f"max_batch of {name!r} only applies to grouped handlers")
    if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch <= 0:
        raise QueueConfigError(f"max_batch of {name!r} must be a positive integer")
    return max_batch


def _transaction_warning(name: str, value: object, transactional: bool) -> float | None:
    if value is None:
        return None
    if not transactional:
        raise QueueConfigError(
            f"transaction_warning of {name!r} only applies to transactional handlers"
        )
    try:
        return to_seconds(value, f"transaction_warning of {name!r}", allow_zero=False)
    except ValueError as exc:
        raise QueueConfigError(str(exc)) from None


def build_spec(
    job_type: object,
    fn: object,
    *,
    concurrency: object = 1,
    timeout: object = None,
    serialize_by_scope: object = False,
    not_while_running: object = (),
    waits_for: object = (),
    grouped: object = False,
    max_batch: object = None,
    transactional: object = False,
    delete_on: object = None,
    transaction_warning: object = None,
    prefetch: object = True,
) -> HandlerSpec:
    """Validate one handler registration into a :class:`HandlerSpec`."""
    if not isinstance(job_type, str | JobType):
        raise QueueConfigError("a handler's job type must be a string or a JobType")
    try:
        name = check_job_type(job_type)
    except ValueError as exc:
        raise QueueConfigError(str(exc)) from None
    if not callable(fn):
        raise QueueConfigError(f"the handler for {name!r} must be callable")
    slots = check_concurrency(name, concurrency)
    seconds: float | None = None
    if timeout is not None:
        try:
            seconds = to_seconds(timeout, f"timeout of {name!r}", allow_zero=False)
        except ValueError as exc:
            raise QueueConfigError(str(exc)) from None
    is_grouped = _flag(grouped, "grouped") or (isinstance(job_type, JobType) and job_type.grouped)
    batch = _max_batch(name, max_batch, is_grouped)
    is_transactional = _flag(transactional, "transactional")
    warning = _transaction_warning(name, transaction_warning, is_transactional)
    if is_transactional and is_grouped:
        raise QueueConfigError(f"{name!r}: a handler cannot be both grouped and transactional")
    is_async = is_coroutine_handler(fn)
    if is_transactional and is_async:
        raise QueueConfigError(
            f"{name!r}: transactional handlers must be synchronous functions (the claim's "
            "transaction is a blocking psycopg connection); use a plain def"
        )
    excluded = _type_list(not_while_running, f"not_while_running of {name!r}")
    waits = _type_list(waits_for, f"waits_for of {name!r}")
    if name in waits:
        raise QueueConfigError(f"{name!r} cannot wait for itself: it would never run")
    if delete_on is not None:
        try:
            check_delete_on(delete_on, f"delete_on of {name!r}")
        except ValueError as exc:
            raise QueueConfigError(str(exc)) from None
    return HandlerSpec(
        type=name,
        fn=fn,
        concurrency=slots,
        timeout=seconds,
        serialize_by_scope=_flag(serialize_by_scope, "serialize_by_scope"),
        not_while_running=excluded,
        waits_for=waits,
        grouped=is_grouped,
        max_batch=batch,
        transactional=is_transactional,
        delete_on=delete_on if isinstance(delete_on, str) else None,
        is_async=is_async,
        transaction_warning=warning,
        prefetch=_flag(prefetch, "prefetch"),
    )


class HandlerRegistry:
    """The handlers of one Worker, by job type."""

    def __init__(self) -> None:
        self._specs: dict[str, HandlerSpec] = {}

    def add(self, spec: HandlerSpec) -> None:
        """Register ``spec``; a second handler for the same type is a configuration error."""
        if spec.type in self._specs:
            raise QueueConfigError(f"a handler for {spec.type!r} is already registered")
        self._specs[spec.type] = spec

    def remove(self, job_type: str) -> HandlerSpec | None:
        """Unregister ``job_type``'s handler; returns it (None: there was none)."""
        return self._specs.pop(job_type, None)

    def replace(self, spec: HandlerSpec) -> None:
        """Put ``spec`` in place of the registered handler of its type (same position)."""
        if spec.type not in self._specs:
            raise QueueConfigError(f"no handler for {spec.type!r} is registered")
        self._specs[spec.type] = spec

    def __iter__(self) -> Iterator[HandlerSpec]:
        return iter(self._specs.values())

    def __len__(self) -> int:
        return len(self._specs)

    def __contains__(self, job_type: object) -> bool:
        return job_type in self._specs

    def get(self, job_type: str) -> HandlerSpec | None:
        """The handler of ``job_type``, if any."""
        return self._specs.get(job_type)

    @property
    def types(self) -> tuple[str, ...]:
        """Registered job types, in registration order."""
        return tuple(self._specs)

    def check_startup(self) -> list[str]:
        """Raise on ``waits_for`` cycles; return (and log) one-sided exclusion warnings."""
        cycle = self.find_waits_for_cycle()
        if cycle:
            raise QueueConfigError(
                "waits_for cycle among this worker's handlers: " + " -> ".join(cycle)
                + "; these types would wait for each other forever"
            )
        warnings = self.one_sided_exclusions()
        for text in warnings:
            log.warning("one_sided_not_while_running", detail=text)
        return warnings

    def find_waits_for_cycle(self) -> list[str] | None:
        """A cycle of ``waits_for`` edges between local handlers, as a path, or None."""
        edges = {
            spec.type: [t for t in spec.waits_for if t in self._specs] for spec in self
        }
        state: dict[str, int] = {}  # 1: on the current path, 2: fully explored
        path: list[str] = []

        def visit(node: str) -> list[str] | None:
            state[node] = 1
            path.append(node)
            for nxt in edges[node]:
                if state.get(nxt) == 1:
                    return [*path[path.index(nxt):], nxt]
                if nxt not in state:
                    found = visit(nxt)
                    if found:
                        return found
            path.pop()
            state[node] = 2
            return None

        for start in edges:
            if start not in state:
                found = visit(start)
                if found:
                    return found
        return None

    def one_sided_exclusions(self) -> list[str]:
        """Local pairs where A excludes B but B does not exclude A."""
        texts = []
        for spec in self:
            for other in spec.not_while_running:
                peer = self._specs.get(other)
                if peer is None or other == spec.type:
                    continue
                if spec.type not in peer.not_while_running:
                    texts.append(
                        f"{spec.type!r} does not start while {other!r} runs, but {other!r} "
                        f"may start while {spec.type!r} runs; add not_while_running="
                        f"[{spec.type!r}] to {other!r} for mutual exclusion"
                    )
        return texts


__all__ = [
    "MAX_CONCURRENCY", "HandlerRegistry", "HandlerSpec", "build_spec", "check_concurrency",
    "is_coroutine_handler",
]
