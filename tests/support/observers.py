"""A LifecycleObserver for tests: records transitions (and a worker's system errors) and
waits for them."""

from __future__ import annotations

import threading
import time

from golemq_pg import Transition, WorkerError


class Recorder:
    """Collects transitions; ``wait_for`` blocks until enough of an outcome arrived. Also
    collects the worker's system errors (``on_error``): ``errors_of``, ``wait_for_error``."""

    def __init__(self) -> None:
        self.transitions: list[Transition] = []
        self.errors: list[WorkerError] = []
        self._cond = threading.Condition()

    def on_error(self, e: WorkerError) -> None:
        with self._cond:
            self.errors.append(e)
            self._cond.notify_all()

    def errors_of(self, kind: str) -> list[WorkerError]:
        with self._cond:
            return [e for e in self.errors if e.kind == kind]

    def wait_for_error(self, kind: str, count: int = 1, timeout: float = 10.0) -> list[WorkerError]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                found = [e for e in self.errors if e.kind == kind]
                if len(found) >= count:
                    return found
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(
                        f"waited {timeout}s for {count} x {kind!r}; got "
                        f"{[(e.kind, e.error) for e in self.errors]}"
                    )
                self._cond.wait(remaining)

    def on_transition(self, t: Transition) -> None:
        with self._cond:
            self.transitions.append(t)
            self._cond.notify_all()

    def outcomes(self, job_id: str | None = None) -> list[str]:
        with self._cond:
            return [t.outcome for t in self.transitions if job_id is None or t.job_id == job_id]

    def of(self, outcome: str) -> list[Transition]:
        with self._cond:
            return [t for t in self.transitions if t.outcome == outcome]

    def wait_for(self, outcome: str, count: int = 1, timeout: float = 10.0) -> list[Transition]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                found = [t for t in self.transitions if t.outcome == outcome]
                if len(found) >= count:
                    return found
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(
                        f"waited {timeout}s for {count} x {outcome!r}; got "
                        f"{[t.outcome for t in self.transitions]}"
                    )
                self._cond.wait(remaining)
