"""What ``Queue`` and ``AsyncQueue`` share besides their plans (``queue.plans``,
``queue.control``): the constructor's validation, the helpers the plans use, the two drivers
of a plan's store calls, and how one plan becomes a method of either class.

A plan is a generator function ``plan(queue, *args, **kwargs)`` that delegates to typed
store calls (``yield from calls.job_get(job_id)``, see :mod:`golemq_pg.store.calls`),
receives each call's result and returns the method's value.
:class:`QueueMethod` turns a plan into a method of both classes at once (``Queue``: the value;
``AsyncQueue``: a coroutine of it), so a method is declared once; only ``add`` and
``add_many``, whose overloads a descriptor cannot carry, are declared per class, by
:func:`sync_method` and :func:`async_method`.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Coroutine, Generator, Mapping, Sequence
from typing import Any, Concatenate, Generic, ParamSpec, TypedDict, TypeVar, overload

import structlog

from golemq_pg._stepping import drive, drive_async, start
from golemq_pg._types import (
    JobType,
    LifecycleObserver,
    MaxAttempts,
    Transition,
    Unlimited,
    check_attempt_budget,
)
from golemq_pg.store import calls
from golemq_pg.store.calls import AnyStore, StoreCall
from golemq_pg.store.port import NO_BUDGET, JobStore

log = structlog.get_logger("golemq_pg.queue")

P = TypeVar("P", bound=Mapping[str, Any])
R = TypeVar("R")
S = TypeVar("S")
A = ParamSpec("A")
_T = TypeVar("_T")


class _InferPayloadLast(TypedDict, Generic[_T]):
    """Typing aid only, never built: in ``add(job_type: JobType[P], payload: P | ...)``
    mypy infers a dict literal before it has solved ``P`` from the JobType, so the literal
    gets no TypedDict context and the call fails to infer (python/mypy#19201). A union
    member holding a callable of ``P`` makes mypy infer the payload in its second pass,
    with ``P`` already known: the literal is then checked against the JobType's TypedDict.
    """

    golemq_typing_aid_only: Callable[[], _T]


#: A plan's type: yields store calls, receives their results, returns ``R``.
QueuePlan = Generator[StoreCall[Any], Any, R]


class QueueCore(Generic[S]):
    """The state and helpers of a queue, sync or async (see the module docstring); ``S`` is
    the kind of store it takes."""

    def __init__(
        self,
        store: S,
        *,
        default_max_attempts: int | Unlimited = 3,
        observers: Sequence[LifecycleObserver] = (),
    ) -> None:
        self.store = store
        #: The budget of jobs added without one (neither ``max_attempts=`` nor the
        #: JobType's): None when it is ``UNLIMITED``.
        self.default_max_attempts: int | None = check_attempt_budget(
            default_max_attempts, "default_max_attempts"
        )
        for observer in observers:
            if not callable(getattr(observer, "on_transition", None)):
                raise ValueError("observers must have an on_transition(transition) method")
        self.observers = tuple(observers)

    def _max_attempts(
        self, value: MaxAttempts, job_type: str | JobType[Any], *, default: bool = True
    ) -> int | None:
        """The budget a job gets: ``max_attempts`` as given (validated), else the JobType's,
        else the queue's default; None means unlimited. With ``default=False`` (a schedule)
        a job type without a budget of its own gets :data:`NO_BUDGET`: each tick takes the
        default of whoever enqueues it."""
        if value is None and isinstance(job_type, JobType):
            value = job_type.max_attempts
        if value is None:
            return self.default_max_attempts if default else NO_BUDGET
        return check_attempt_budget(value, "max_attempts")

    def _notify(self, transition: Transition) -> None:
        """Tell every observer; one that raises is logged and contained."""
        for observer in self.observers:
            try:
                observer.on_transition(transition)
            except Exception:
                log.exception(
                    "observer_failed",
                    job_id=transition.job_id,
                    type=transition.type,
                    outcome=transition.outcome,
                )

    #: Whether the methods are coroutines (``AsyncQueue``) or return values (``Queue``).
    asynchronous = False


class SyncRunner(QueueCore[S]):
    """The base of ``Queue``: a plan's store calls made in turn, its value returned."""

    asynchronous = False


class AsyncRunner(QueueCore[S]):
    """The base of ``AsyncQueue``: a plan run as a coroutine, its store calls awaited."""

    asynchronous = True


def run_sync(store: JobStore, plan: QueuePlan[R]) -> R:
    """Drive ``plan`` with a synchronous store: each call made in turn."""
    value: R = drive(plan, functools.partial(calls.run_sync, store), start(plan)).value
    return value


async def run_async(store: AnyStore, plan: QueuePlan[R]) -> R:
    """Drive ``plan`` with an ``AsyncPostgresStore`` (each call awaited), or with a
    synchronous store (an ``InMemoryStore`` in tests) whose verbs then run in a worker
    thread."""
    done = await drive_async(plan, functools.partial(calls.run_async, store), start(plan))
    value: R = done.value
    return value


class QueueMethod(Generic[A, R]):
    """A plan as a method of both ``Queue`` (returns the value) and ``AsyncQueue`` (returns
    a coroutine of it): declared once, in ``golemq_pg.queue.methods.QueueMethods``."""

    def __init__(self, plan: Callable[Concatenate[Any, A], QueuePlan[R]]) -> None:
        self.plan = plan
        self.__doc__ = plan.__doc__
        self.__wrapped__ = plan
        # Built once: the method of each kind of queue.
        self._kinds: tuple[Callable[..., Any], Callable[..., Any]] = (
            sync_method(plan),
            async_method(plan),
        )

    @overload
    def __get__(self, obj: None, owner: type) -> QueueMethod[A, R]: ...
    @overload
    def __get__(
        self, obj: AsyncRunner[Any], owner: type
    ) -> Callable[A, Coroutine[Any, Any, R]]: ...
    @overload
    def __get__(self, obj: SyncRunner[Any], owner: type) -> Callable[A, R]: ...
    def __get__(self, obj: Any, owner: type) -> Any:
        if obj is None:
            return self
        return types.MethodType(self._kinds[obj.asynchronous], obj)


def sync_method(
    plan: Callable[Concatenate[Any, A], QueuePlan[R]],
) -> Callable[Concatenate[Any, A], R]:
    """A plan as a ``Queue`` method (keeps the plan's overloads for type checkers)."""

    def method(self: QueueCore[Any], /, *args: A.args, **kwargs: A.kwargs) -> R:
        return run_sync(self.store, plan(self, *args, **kwargs))

    return functools.wraps(plan)(method)


def async_method(
    plan: Callable[Concatenate[Any, A], QueuePlan[R]],
) -> Callable[Concatenate[Any, A], Coroutine[Any, Any, R]]:
    """A plan as an ``AsyncQueue`` coroutine method (keeps the plan's overloads)."""

    async def method(self: QueueCore[Any], /, *args: A.args, **kwargs: A.kwargs) -> R:
        return await run_async(self.store, plan(self, *args, **kwargs))

    return functools.wraps(plan)(method)
