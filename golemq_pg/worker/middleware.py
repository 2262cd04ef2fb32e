"""Middleware around each attempt: what ``Worker(middleware=[...])`` takes, its checks, and
the one composition of a handler with it.

A middleware is any object with ``around(job, call_next)`` (wraps plain ``def`` handlers)
and/or ``async def around_async(job, call_next)`` (wraps ``async def`` handlers). The list
is composed once per handler, when the handler is registered (:func:`with_middleware`): the
spec's ``fn`` becomes the chain, outermost first, so the hot path calls one function as it
does without middleware, and a worker without middleware calls the handler itself (no
extra call per job). Whether every middleware covers every handler's kind is checked where
the handler set is checked, at ``start()`` and on a late registration
(:func:`check_covered`, :class:`~golemq_pg.errors.QueueConfigError`).

What a middleware raises is the attempt's error and what it returns is the attempt's
result, as for the handler: a middleware that returns without calling ``call_next``
short-circuits the attempt (the handler does not run; the job's outcome is that value).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, Protocol, TypeAlias

from golemq_pg.errors import QueueConfigError
from golemq_pg.worker.events import BatchEvent, JobEvent
from golemq_pg.worker.handlers import HandlerSpec

#: What a middleware is handed: one job, or a grouped handler's batch.
Attempt: TypeAlias = JobEvent[Any] | BatchEvent[Any]


class SyncMiddleware(Protocol):
    """A middleware around plain ``def`` handlers."""

    def around(self, job: Attempt, call_next: Callable[[Attempt], object]) -> object:
        """Run the attempt (``return call_next(job)``), with whatever around it."""


class AsyncMiddleware(Protocol):
    """A middleware around ``async def`` handlers."""

    async def around_async(
        self, job: Attempt, call_next: Callable[[Attempt], Awaitable[object]]
    ) -> object:
        """Run the attempt (``return await call_next(job)``), with whatever around it."""


#: What ``Worker(middleware=[...])`` takes: objects with ``around``, ``around_async``, or both.
Middleware: TypeAlias = SyncMiddleware | AsyncMiddleware


def check_middleware(value: object) -> tuple[Middleware, ...]:
    """``Worker(middleware=...)``: a sequence of objects each defining ``around`` (a plain
    method) and/or ``around_async`` (an ``async def``); QueueConfigError otherwise."""
    if value is None:
        return ()
    if not isinstance(value, Sequence) or isinstance(value, str | bytes):
        raise QueueConfigError("middleware must be a list of middleware objects")
    for index, item in enumerate(value):
        _check_one(index, item)
    return tuple(value)


def _check_one(index: int, item: object) -> None:
    what = f"middleware[{index}] ({type(item).__name__})"
    around = getattr(item, "around", None)
    around_async = getattr(item, "around_async", None)
    if around is None and around_async is None:
        raise QueueConfigError(
            f"{what} defines neither around(job, call_next) nor "
            "async around_async(job, call_next)"
        )
    if around is not None and (not callable(around) or inspect.iscoroutinefunction(around)):
        raise QueueConfigError(
            f"{what}.around must be a plain method (async def handlers take around_async)"
        )
    if around_async is not None and not inspect.iscoroutinefunction(around_async):
        raise QueueConfigError(f"{what}.around_async must be an async def method")


def _method(spec: HandlerSpec) -> str:
    """The middleware method that wraps ``spec``'s kind of handler."""
    return "around_async" if spec.is_async else "around"


def check_covered(specs: Iterable[HandlerSpec], middleware: Sequence[object]) -> None:
    """Refuse (QueueConfigError) a handler whose kind some middleware has no method for:
    it would run without that middleware's guarantees."""
    for spec in specs:
        method = _method(spec)
        for index, item in enumerate(middleware):
            if getattr(item, method, None) is None:
                kind = "async def" if spec.is_async else "plain def"
                raise QueueConfigError(
                    f"middleware[{index}] ({type(item).__name__}) has no {method}() for "
                    f"the {kind} handler of {spec.type!r}: define {method} on it, or "
                    "register that handler on a worker without this middleware"
                )


def with_middleware(spec: HandlerSpec, middleware: Sequence[object]) -> HandlerSpec:
    """``spec`` whose ``fn`` runs through ``middleware``, outermost first (``spec`` itself
    without middleware; unchanged when some middleware does not cover it, which
    :func:`check_covered` refuses before it can run)."""
    if not middleware:
        return spec
    method = _method(spec)
    arounds = [getattr(item, method, None) for item in middleware]
    fn: Callable[[Any], Any] = spec.fn
    link = _link_async if spec.is_async else _link
    for around in reversed(arounds):
        if around is None:
            return spec
        fn = link(around, fn)
    return replace(spec, fn=fn)


def _link(around: Callable[[Any, Any], object], inner: Callable[[Any], object]
          ) -> Callable[[Any], object]:
    def call(job: Any) -> object:
        return around(job, inner)

    return call


def _link_async(around: Callable[[Any, Any], Awaitable[object]],
                inner: Callable[[Any], Awaitable[object]]) -> Callable[[Any], Awaitable[object]]:
    async def call(job: Any) -> object:
        return await around(job, inner)

    return call


__all__ = [
    "AsyncMiddleware",
    "Attempt",
    "Middleware",
    "SyncMiddleware",
    "check_covered",
    "check_middleware",
    "with_middleware",
]
