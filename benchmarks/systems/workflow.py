"""The workflow scenario's shape and what its handlers record, shared by every system.

One workflow is ``fetch -> 10 x extract -> index``: ``fetch`` first, the ten ``extract_k``
once it has finished (fan-out), ``index`` once all ten have (fan-in); 12 no-op jobs. Each
handler records the moment it runs (``time.perf_counter`` in the worker's process; a no-op
returns microseconds after it starts, so that moment is both its start and its end). The
parent-to-child latency of a job is its handler's moment minus the latest of its parents'
(for ``index``: the last ``extract`` to finish): what a workflow waits between two steps,
the parent's outcome written, the child made due, woken and claimed.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

#: Fan-out width: the extract steps of one workflow.
EXTRACTS = 10
#: (node, parents) in an order where parents come first.
WORKFLOW_SHAPE: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("fetch", ()),
    *((f"extract_{k}", ("fetch",)) for k in range(EXTRACTS)),
    ("index", tuple(f"extract_{k}" for k in range(EXTRACTS))),
)
JOBS_PER_WORKFLOW = len(WORKFLOW_SHAPE)
#: Producers adding the workflows at once (threads for golemq-pg, tasks for Chancy). One:
#: four were measured no faster on the 2-core reference host (golemq-pg 4.14 s against
#: 4.35 s: the database's CPU, not the commits' WAL flushes, bounds the adds there), and
#: made the loaded run's parent -> child latency a measure of the producers' backlog.
PRODUCERS = 1


def step_type(node: str) -> str:
    """The job type (golemq-pg) of a node: ``wf.fetch``, ``wf.extract`` or ``wf.index``."""
    return "wf." + node.split("_", 1)[0]


class WorkflowProbe:
    """The moment each (workflow, node) handler ran; thread-safe (golemq-pg's handlers run
    on threads)."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.seen: dict[tuple[int, str], float] = {}
        self._lock = threading.Lock()

    @property
    def calls(self) -> int:
        """Distinct jobs whose handler ran."""
        return len(self.seen)

    def record(self, payload: dict[str, Any]) -> None:
        """Called by a handler with its payload ``{"wf": w, "node": name}``; the first
        call of a job counts."""
        now = time.perf_counter()
        with self._lock:
            self.seen.setdefault((int(payload["wf"]), str(payload["node"])), now)

    def done(self) -> bool:
        """Whether every job of every workflow has run."""
        return len(self.seen) >= self.count * JOBS_PER_WORKFLOW

    def edge_latencies(self) -> dict[str, list[float]]:
        """Parent-to-child seconds, per kind: ``fan_out`` (fetch -> extract), ``fan_in``
        (the last extract -> index); children whose parents were not all seen are left out."""
        found: dict[str, list[float]] = {"fan_out": [], "fan_in": []}
        for w in range(self.count):
            for node, parents in WORKFLOW_SHAPE:
                if not parents:
                    continue
                child = self.seen.get((w, node))
                times = [self.seen.get((w, p)) for p in parents]
                if child is None or any(t is None for t in times):
                    continue
                kind = "fan_in" if len(parents) > 1 else "fan_out"
                found[kind].append(child - max(t for t in times if t is not None))
        return found


@dataclass
class WorkflowResult:
    """One run: seconds from the first add to the last job's handler, and the probe (for
    the parent-to-child latencies, when ``linked``: the jobs had their dependencies);
    ``idle_pickup`` are commit -> handler-start seconds of single jobs sent to the same idle
    worker first (golemq-pg's workflow run only)."""

    seconds: float
    probe: WorkflowProbe
    #: Seconds from the first add to the return of the last (inside ``seconds``).
    add_seconds: float = 0.0
    linked: bool = True
    idle_pickup: list[float] | None = None
    #: Parent completion -> child handler start seconds of two-job workflows sent one at a
    #: time to the same idle worker (the parent's ``finished_at``, the commit that released
    #: the child, to the child's ``started_at``): the release latency alone, without the
    #: queueing of the loaded run (golemq-pg's workflow run only).
    idle_chain: list[float] | None = None
    note: str = ""
