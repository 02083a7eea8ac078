"""Targets of ``xmask explain``: a graph, a node or an edge, recorded and cropped.

- ``graph I`` (graph-level runs): graph ``I`` alone, padded as one batch;
  graphs above ``max_nodes`` nodes are cropped to the ``max_nodes`` nodes
  closest to node 0 (the forward still runs on the whole graph).
- ``node I`` (node-, link- and edge-level runs): the full-graph forward (or
  the METIS part holding ``I`` when the run evaluates on partitions), cropped
  to ``I``'s neighbourhood: the nodes within the cache's SPD cut-off, closest
  first (ties by id), at most ``max_nodes``.
- ``edge U,V`` (same levels): the union of both endpoints' neighbourhoods
  (distance = the smaller of the two), same cropping.

The hop summary of a target is taken over the *full* attention rows of its
query nodes (graph: all its nodes; node: the node; edge: both endpoints), not
over the crop.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from xmask_cli.cache import StructureCache
from xmask_cli.errors import UsageError
from xmask_cli.explain.graph_view import crop_edges
from xmask_cli.explain.hops import distance_rows, hop_mass, layer_masses, neighbourhood
from xmask_cli.explain.record import Recorded, SingleGraph, record_terms, to_numpy
from xmask_cli.model.batches import DenseBatch

__all__ = ["TargetMaps", "explain_graph", "explain_nodes", "parse_edge", "target_dict"]


@dataclass
class TargetMaps:
    """The recorded maps of one target.

    Attributes:
        name: ``graph_17``, ``node_5`` or ``edge_3_9`` (the HDF5 group and PNG name).
        kind: ``graph``, ``node`` or ``edge``.
        spec: the target as given (``{"graph": 17}``, ``{"node": 5}``, ``{"edge": [3, 9]}``).
        node_ids: ``[m]`` global node ids of the maps' rows and columns (graph targets: ids inside the graph).
        cropped_from: nodes of the forward the maps were cropped from (``m`` when not cropped).
        maps: per layer, kind -> ``[H, m, m]`` float32.
        hop: per layer, ``[H, buckets]`` attention mass summed over the query rows.
        queries: global ids of the query rows the hop summary reads.
        source: where the maps were cropped from (said in :meth:`describe`).
        query: the id (as ``node_ids``) of the node whose attention the graph view draws; in ``node_ids``.
        edges: ``[2, E]`` positions in ``node_ids`` of the structure's edges among them (``Â^1`` support, u < v).
        hops: ``[m]`` hop distance of each node from ``query`` (``-1`` beyond the cut-off, ``-2`` unreachable).
        x: ``[m, F]`` the model's input features of the ``node_ids`` (for :func:`~xmask_cli.explain.pyg.to_explanation`).
    """

    name: str
    kind: str
    spec: dict[str, Any]
    node_ids: np.ndarray
    cropped_from: int
    maps: list[dict[str, np.ndarray]]
    hop: list[np.ndarray] = field(default_factory=list)
    queries: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    source: str = ""
    query: int = 0
    edges: np.ndarray = field(default_factory=lambda: np.zeros((2, 0), dtype=np.int64))
    hops: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int16))
    x: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))

    @property
    def cropped(self) -> bool:
        return len(self.node_ids) < self.cropped_from

    def describe(self) -> str:
        head = {"graph": f"graph {self.spec.get('graph')}", "node": f"node {self.spec.get('node')}",
                "edge": "edge {}-{}".format(*self.spec.get("edge", ("?", "?")))}[self.kind]
        if self.cropped:
            of = f" ({self.source})" if self.source else ""
            return f"{head}: cropped to {len(self.node_ids)} of {self.cropped_from} nodes{of}"
        return f"{head}: {len(self.node_ids)} nodes"


def parse_edge(edge: Any) -> tuple[int, int]:
    """``(u, v)`` of an ``"U,V"`` string or a pair; :class:`UsageError` for anything else."""
    if isinstance(edge, str):
        parts = edge.replace(" ", "").split(",")
        if len(parts) != 2 or not all(p.lstrip("-").isdigit() for p in parts):
            raise UsageError(f"--edge '{edge}': expected two node ids U,V such as 3,9")
        return int(parts[0]), int(parts[1])
    try:
        u, v = edge
        return int(u), int(v)
    except (TypeError, ValueError):
        raise UsageError(f"--edge {edge!r}: expected two node ids U,V such as 3,9") from None


def explain_graph(model: Any, task: Any, g: int, max_nodes: int, query: int | None = None) -> tuple[TargetMaps, int]:
    """Graph ``g`` of a graph-level run's test stream: ``(its maps, the SPD cut-off D)``.

    ``query`` (default node 0): the graph view's query node, and the centre of the crop of a graph above
    ``max_nodes``.
    """
    stream = task.eval_streams["test"]
    device = next(model.parameters()).device
    batch = stream.collate(np.array([g]), dense_powers=True).to(device)
    n = int(batch.mask[0].sum())
    q = 0 if query is None else int(query)
    if not 0 <= q < n:
        raise UsageError(f"--query {q}: graph {g} has nodes 0..{n - 1}")
    with StructureCache(task.cache_path) as cache:
        everyone = np.arange(n)
        dist, d_max = distance_rows(cache, g, everyone)
        sel = everyone if n <= max_nodes else neighbourhood(dist[q:q + 1], None, max_nodes)
        edges = crop_edges(cache, g, sel)

    def reduce(terms: dict[str, Any]) -> tuple[dict[str, np.ndarray], np.ndarray]:
        # One layer's crop and hop mass as soon as it has run: a graph of thousands of nodes has [H, n, n]
        # maps of hundreds of MB per kind, and no two layers' need to be held at once.
        rec = Recorded(n=n, layers=[to_numpy(terms, (0, slice(None), slice(None, n), slice(None, n)))])
        return rec.crop(sel)[0], hop_mass(rec, everyone, dist, d_max)[0]

    _, layers = record_terms(model, DenseBatch(x=batch.x, powers=batch.powers, mask=batch.mask, extras=batch.extras),
                             reduce=reduce)
    t = TargetMaps(name=f"graph_{g}", kind="graph", spec={"graph": g}, node_ids=sel.astype(np.int64),
                   cropped_from=n, maps=[m for m, _ in layers], queries=everyone, source=f"closest to node {q}",
                   query=q, edges=edges, hops=dist[q][sel].astype(np.int16),
                   x=batch.x[0].float().cpu().numpy()[sel])
    t.hop = [mass for _, mass in layers]
    return t, d_max


def explain_nodes(model: Any, source: SingleGraph, kind: str, centre: Sequence[int],
                  max_nodes: int, query: int | None = None) -> tuple[TargetMaps, int]:
    """A node (``centre = [i]``) or edge (``[u, v]``) target of a one-graph run: ``(its maps, D)``.

    ``query`` (default ``centre[0]``): the graph view's query node; it must lie in the target's crop.
    """
    nodes = np.asarray(centre, dtype=np.int64)
    ids, rec = source.forward(model, nodes)
    with StructureCache(source.cache_path) as cache:
        dist, d_max = distance_rows(cache, 0, nodes)
    allowed = None
    if len(ids) < source.num_nodes:
        allowed = np.zeros(source.num_nodes, dtype=bool)
        allowed[ids] = True
    sel_global = neighbourhood(dist, allowed, max(max_nodes, len(nodes)))
    q = int(nodes[0]) if query is None else int(query)
    if q not in sel_global:
        raise UsageError(f"--query {q}: not among the {len(sel_global)} nodes drawn for {kind} "
                         f"{','.join(map(str, nodes))} (the closest to it); pick one of them or raise --max-nodes")
    with StructureCache(source.cache_path) as cache:
        q_dist = dist[0] if q == int(nodes[0]) else distance_rows(cache, 0, np.array([q]))[0][0]
        edges = crop_edges(cache, 0, sel_global)
    local = np.full(source.num_nodes, -1, dtype=np.int64)
    local[ids] = np.arange(len(ids))
    sel = local[sel_global]
    spec: dict[str, int | list[int]]
    if kind == "node":
        name, spec = f"node_{nodes[0]}", {"node": int(nodes[0])}
    else:
        name, spec = f"edge_{nodes[0]}_{nodes[1]}", {"edge": [int(nodes[0]), int(nodes[1])]}
    t = TargetMaps(name=name, kind=kind, spec=spec, node_ids=sel_global, cropped_from=len(ids),
                   maps=rec.crop(sel), queries=nodes,
                   source="full graph" if len(ids) == source.num_nodes else "its METIS part",
                   query=q, edges=edges, hops=q_dist[sel_global].astype(np.int16),
                   x=source.features(sel_global))
    t.hop = hop_mass(rec, local[nodes], dist[:, ids], d_max)
    return t, d_max


def target_dict(t: TargetMaps, ks: Sequence[int], labels: Sequence[Sequence[str]],
                buckets: list[str]) -> dict[str, Any]:
    """The JSON-able row of one target in :func:`~xmask_cli.explain.run.explain_run`'s result."""
    return {"name": t.name, "kind": t.kind, **t.spec, "target": t.describe(), "num_nodes": int(len(t.node_ids)),
            "cropped": bool(t.cropped), "cropped_from": int(t.cropped_from),
            "node_ids": [int(i) for i in t.node_ids], "query_nodes": [int(i) for i in t.queries],
            "hop_summary": layer_masses(t.hop, ks, labels, buckets)}
