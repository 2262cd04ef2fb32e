"""Workflow shapes that the deep and crossed graph tests share: a chain of any depth and
crossed fan-ins (many parents, children each after a few random parents)."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from golemq_pg import Queue, Workflow, WorkflowNode, WorkflowRun
from golemq_pg._types import ParentFailurePolicy


@dataclass(frozen=True)
class AddedChain:
    """A chain added as one workflow: ``root`` first, each later job after the one before."""

    run: WorkflowRun
    root: str
    tail: str
    ids: list[str]


def add_chain(queue: Queue, depth: int, *, root_type: str = "chain.root",
              step_type: str = "chain.step", root_payload: Mapping[str, Any] | None = None,
              root_options: Mapping[str, Any] | None = None,
              policy: ParentFailurePolicy = "fail") -> AddedChain:
    """Add a chain ``depth`` jobs deep (the root, with ``root_payload`` and the add's
    ``root_options``, and ``depth - 1`` dependents, each with ``on_parent_failure=policy``)
    in one ``add_workflow``."""
    wf = Workflow(f"chain of {depth}")
    nodes: list[WorkflowNode] = [
        wf.add(root_type, {"n": 0, **dict(root_payload or {})}, **dict(root_options or {}))]
    for n in range(1, depth):
        nodes.append(wf.add(step_type, {"n": n}, after=[nodes[-1]],
                            on_parent_failure=policy))
    run = queue.add_workflow(wf)
    ids = [run.job_ids[node] for node in nodes]
    return AddedChain(run=run, root=ids[0], tail=ids[-1], ids=ids)


def add_crossed_fan_ins(queue: Queue, parents: int, children: int, per_child: int, *,
                        seed: int, parent_type: str = "cross.parent",
                        child_type: str = "cross.child",
                        payload: Mapping[str, Any] | None = None) -> WorkflowRun:
    """``parents`` independent jobs and ``children`` jobs each after ``per_child`` parents
    drawn at random (``seed``), as one workflow: completion batches then share children in
    every order."""
    rng = random.Random(seed)
    wf = Workflow("crossed fan-ins")
    body = dict(payload or {})
    tops = [wf.add(parent_type, {**body, "p": n}) for n in range(parents)]
    for n in range(children):
        wf.add(child_type, {**body, "c": n}, after=rng.sample(tops, per_child))
    return queue.add_workflow(wf)
