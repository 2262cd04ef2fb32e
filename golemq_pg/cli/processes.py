"""``golemq-pg worker``: load a Worker from ``module:attr`` and run it, in one process or N.

With N processes the parent only supervises: it starts N children (each runs
``golemq-pg worker`` itself), forwards SIGINT/SIGTERM to them once, and exits when all have
exited, with the worst exit code.
"""

from __future__ import annotations

import gc
import importlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from types import FrameType
from typing import Any

from golemq_pg._errortext import error_text

STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})


class TargetError(ValueError):
    """The target is malformed, missing or not a Worker (a usage error)."""


class TargetImportError(RuntimeError):
    """Importing the target's module (or calling its factory) failed (a runtime error)."""


def load_worker(target: str) -> Any:
    """Import ``module:attr`` and return the Worker there (calling a zero-argument factory)."""
    from golemq_pg import Worker  # noqa: PLC0415 - the CLI starts without the worker

    module_name, attr = split_target(target)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`: the project dir is importable
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name == exc.name
                                     or module_name.startswith(exc.name + ".")):
            raise TargetError(f"cannot import {module_name!r}: no such module") from None
        raise TargetImportError(f"importing {module_name!r} failed: {error_text(exc)}") from exc
    except Exception as exc:
        raise TargetImportError(
            f"importing {module_name!r} failed: {type(exc).__name__}: {error_text(exc)}"
        ) from exc
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise TargetError(f"{module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not isinstance(obj, Worker) and callable(obj):
        try:
            obj = obj()
        except Exception as exc:
            raise TargetImportError(
                f"{target} failed: {type(exc).__name__}: {error_text(exc)}"
            ) from exc
    if not isinstance(obj, Worker):
        raise TargetError(f"{target} is not a golemq_pg.Worker")
    return obj


def split_target(target: str) -> tuple[str, str]:
    """``package.module:attribute`` -> (module, attribute path), validated."""
    module_name, _, attr = target.partition(":")
    parts_ok = all(p.isidentifier() for p in module_name.split("."))
    if not module_name or not attr or not parts_ok or not all(
        p.isidentifier() for p in attr.split(".")
    ):
        raise TargetError(f"TARGET must look like package.module:attribute, got {target!r}")
    return module_name, attr


class _StartupInterrupted(BaseException):
    """SIGINT/SIGTERM arrived before the Worker took over signal handling."""


def _interrupt_startup(signum: int, _frame: FrameType | None) -> None:
    raise _StartupInterrupted(signum)


def run_worker(
    target: str,
    announce: Callable[[str], None],
    prepare: Callable[[Any], None] | None = None,
) -> None:
    """Load the target and ``run()`` it until SIGINT/SIGTERM (graceful shutdown).

    ``prepare`` gets the loaded Worker before it runs (``--metrics-port`` attaches its
    observer there)."""
    # Until Worker.run() installs its own handlers, SIGINT/SIGTERM end the process cleanly:
    # nothing has been claimed yet, so there is nothing to shut down.
    previous = {sig: signal.signal(sig, _interrupt_startup) for sig in STOP_SIGNALS}
    try:
        # A child of run_processes starts with these signals blocked: one that arrived
        # meanwhile is pending and is delivered here, to the handler just installed.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        worker = load_worker(target)
        if prepare is not None:
            prepare(worker)
        # This process is ours: everything the application built while loading (modules,
        # handlers, its own state) lives until exit. Freezing it keeps the cyclic garbage
        # collector's full passes, which a fast drain triggers every second or so, from
        # rescanning all of it each time, with every thread stopped meanwhile (measured on a
        # bare 100k-job drain: ~40 ms a pass, ~2-5 ms frozen; a big application's heap
        # costs more).
        gc.collect()
        gc.freeze()
        worker.run()
    except _StartupInterrupted:
        announce("interrupted before the worker started; exiting")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_processes(
    target: str,
    count: int,
    announce: Callable[[str], None],
    *,
    child_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    on_exit: Callable[[int], None] | None = None,
) -> int:
    """Start ``count`` children running ``target``; forward SIGINT/SIGTERM; wait for all.

    ``child_args`` are appended to each child's command line and ``env`` replaces its
    environment; ``on_exit`` gets each child's pid once it has exited (``--metrics-port``
    uses the three). Returns the worst exit code (a child killed by signal N counts as
    128 + N).
    """
    split_target(target)
    command = [sys.executable, "-m", "golemq_pg.cli", "worker", target, *child_args]
    children: list[subprocess.Popen[bytes]] = []
    received: list[int] = []

    def forward(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)
        for child in children:
            if child.returncode is None:
                child.send_signal(signum)

    # Handlers first, so that a signal during start-up is forwarded too, never lost.
    previous = {sig: signal.signal(sig, forward) for sig in STOP_SIGNALS}
    try:
        for _ in range(count):
            if received:
                break
            # Own process groups: a terminal Ctrl-C reaches only this parent, which forwards
            # it once, so a child never sees a second SIGINT (that would cut its grace short).
            # Children inherit the signal mask: they start with SIGINT/SIGTERM blocked, so a
            # signal forwarded while one is still importing stays pending until run_worker
            # is ready for it (instead of killing the child with the default action).
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
            try:
                # S603: this interpreter, this package's CLI, a validated target, our own flags.
                children.append(
                    subprocess.Popen(command, process_group=0, env=env)  # noqa: S603
                )
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        announce(f"started {len(children)} worker processes: "
                 + ", ".join(str(c.pid) for c in children))
        codes = []
        for child in children:
            codes.append(child.wait())
            if on_exit is not None:
                on_exit(child.pid)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return max((128 - code if code < 0 else code for code in codes), default=0)
