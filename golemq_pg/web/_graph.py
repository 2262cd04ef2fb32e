"""The workflow page's graph, laid out server-side (no script, no library): pure functions of
a :class:`~golemq_pg.WorkflowSummary`'s jobs and edges, drawn as SVG by the template.

Layered: a job's layer is the longest path to it from a root (a job with no parent in the
workflow), so every edge points down. Inside a layer, jobs are ordered by where their parents
stand (the mean of their ranks), then by id, which keeps a fan-out under its parent and
untangles most crossings. A layer wider than :data:`MAX_COLUMNS` wraps onto several rows, so
a fan-out of a hundred jobs stays readable (the SVG scales down to the page's width, never
below its text's legibility). An edge whose job is gone (cancelled jobs are deleted, pruned
ones too) still shows, its missing end drawn as a dashed "gone" node with no link.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from golemq_pg._types import JobSummary
from golemq_pg.web._render import shown_status

#: Jobs a layer shows side by side before it wraps onto another row.
MAX_COLUMNS = 7
#: The most jobs drawn; a larger workflow shows its table only.
MAX_DRAWN = 600
NODE_WIDTH = 156
NODE_HEIGHT = 40
#: Space between two nodes of a row, between two rows of a layer, between two layers.
COLUMN_GAP = 14
ROW_GAP = 12
LAYER_GAP = 46
MARGIN = 16
#: The longest type name a node shows whole (a longer one is cut, whole on hover).
LABEL_CHARS = 22


@dataclass(frozen=True, slots=True)
class GraphNode:
    """One job on the graph: its box's top-left corner, what it says, and its shown status
    ("gone" when the job no longer exists: no link)."""

    id: str
    x: float
    y: float
    label: str
    title: str
    status: str
    layer: int

    @property
    def gone(self) -> bool:
        """Whether the job no longer exists (cancelled or pruned)."""
        return self.status == "gone"


@dataclass(frozen=True, slots=True)
class GraphEdge:
    """One dependency, ``parent`` to ``child``, as an SVG path from the parent's bottom to
    the child's top (the arrow's tip)."""

    parent: str
    child: str
    path: str


@dataclass(frozen=True, slots=True)
class Graph:
    """The laid-out graph: an SVG of ``width`` x ``height``; ``drawn`` is False when the
    workflow has more than :data:`MAX_DRAWN` jobs (nothing is laid out, the page says so)."""

    nodes: tuple[GraphNode, ...]
    edges: tuple[GraphEdge, ...]
    width: int
    height: int
    layers: int
    drawn: bool = True
    node_width: int = NODE_WIDTH
    node_height: int = NODE_HEIGHT


def _key(job_id: str) -> tuple[int, str]:
    """Ids sort numerically (a shorter id is a smaller one)."""
    return (len(job_id), job_id)


def depths(ids: Iterable[str], edges: Sequence[tuple[str, str]]) -> dict[str, int]:
    """Each id's layer: the number of edges on the longest path to it from a root. Edges
    naming an id not in ``ids`` are ignored; a cycle (which no store writes) leaves its
    members on the layer after their deepest placed parent."""
    known = set(ids)
    children: dict[str, list[str]] = {i: [] for i in known}
    indegree = dict.fromkeys(known, 0)
    for parent, child in edges:
        if parent in known and child in known and parent != child:
            children[parent].append(child)
            indegree[child] += 1
    depth = dict.fromkeys(known, 0)
    ready = sorted((i for i, n in indegree.items() if n == 0), key=_key)
    done: set[str] = set()
    while ready:
        node = ready.pop()
        done.add(node)
        for child in children[node]:
            depth[child] = max(depth[child], depth[node] + 1)
            indegree[child] -= 1
            if indegree[child] == 0:
                ready.append(child)
    for node in sorted(known - done, key=_key):  # a cycle: never written, never a hang
        depth[node] = max(depth[node], 1)
    return depth


def _ordered_layers(
    depth: Mapping[str, int], parents: Mapping[str, Sequence[str]]
) -> list[list[str]]:
    """The layers, top first, each ordered by its jobs' parents' mean rank, then by id."""
    count = max(depth.values(), default=-1) + 1
    layers: list[list[str]] = [[] for _ in range(count)]
    for node, d in depth.items():
        layers[d].append(node)
    rank: dict[str, int] = {}
    for layer in layers:
        def order(node: str) -> tuple[float, tuple[int, str]]:
            placed = [rank[p] for p in parents.get(node, ()) if p in rank]
            return (sum(placed) / len(placed) if placed else -1.0, _key(node))

        layer.sort(key=order)
        for node in layer:
            rank[node] = len(rank)
    return layers


def _edge_path(x1: float, y1: float, x2: float, y2: float) -> str:
    """A vertical S-curve from (x1, y1) down to (x2, y2)."""
    bend = max((y2 - y1) / 2, 12.0)
    return (f"M{x1:.1f},{y1:.1f} C{x1:.1f},{y1 + bend:.1f} "
            f"{x2:.1f},{y2 - bend:.1f} {x2:.1f},{y2:.1f}")


def _short(text: str, limit: int = LABEL_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def layout(
    jobs: Sequence[JobSummary], edges: Sequence[tuple[str, str]], now: datetime
) -> Graph:
    """The graph of a workflow's ``jobs`` and ``edges`` (``(parent id, child id)``),
    each job coloured by the status a page shows (:func:`~golemq_pg.web._render.shown_status`
    against ``now``)."""
    by_id = {j.id: j for j in jobs}
    ids = set(by_id)
    for parent, child in edges:
        ids.update((parent, child))
    if len(ids) > MAX_DRAWN:
        return Graph((), (), 0, 0, 0, drawn=False)
    if not ids:
        return Graph((), (), 0, 0, 0)
    parents: dict[str, list[str]] = {}
    for parent, child in edges:
        parents.setdefault(child, []).append(parent)
    depth = depths(ids, edges)
    layers = _ordered_layers(depth, parents)
    columns = min(max(len(layer) for layer in layers), MAX_COLUMNS)
    width = 2 * MARGIN + columns * NODE_WIDTH + (columns - 1) * COLUMN_GAP
    nodes: dict[str, GraphNode] = {}
    y = float(MARGIN)
    for number, layer in enumerate(layers):
        for start in range(0, len(layer), MAX_COLUMNS):
            row = layer[start:start + MAX_COLUMNS]
            span = len(row) * NODE_WIDTH + (len(row) - 1) * COLUMN_GAP
            x = (width - span) / 2
            for node in row:
                job = by_id.get(node)
                if job is None:
                    status, label = "gone", "(gone)"
                    title = f"job {node}: cancelled or pruned"
                else:
                    status, label = shown_status(job, now), _short(job.type)
                    title = f"job {node} {job.type}: {status}"
                nodes[node] = GraphNode(node, round(x, 1), y, label, title, status, number)
                x += NODE_WIDTH + COLUMN_GAP
            y += NODE_HEIGHT + ROW_GAP
        y += LAYER_GAP - ROW_GAP
    height = int(y - LAYER_GAP + MARGIN)
    drawn_edges = []
    for parent, child in edges:
        a, b = nodes.get(parent), nodes.get(child)
        if a is None or b is None or a is b:
            continue
        drawn_edges.append(GraphEdge(parent, child, _edge_path(
            a.x + NODE_WIDTH / 2, a.y + NODE_HEIGHT, b.x + NODE_WIDTH / 2, b.y - 2)))
    ordered = sorted(nodes.values(), key=lambda n: (n.layer, n.y, n.x))
    return Graph(tuple(ordered), tuple(drawn_edges), width, height, len(layers))


def parents_of(edges: Sequence[tuple[str, str]]) -> dict[str, list[str]]:
    """Each child's parents (by id, numerically), from ``(parent id, child id)`` edges."""
    out: dict[str, list[str]] = {}
    for parent, child in edges:
        out.setdefault(child, []).append(parent)
    return {child: sorted(found, key=_key) for child, found in out.items()}
