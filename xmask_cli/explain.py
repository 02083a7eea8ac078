"""Per-layer, per-head attention maps of a trained run (the library side of ``xmask explain``).

In the spirit of the paper's Fig. 3 (§5.4.2), for every layer and head of a
run's best checkpoint it records, from the very forward the model runs
(:meth:`XMaskNet.encode_dense` / :meth:`~XMaskNet.encode_sparse` with
``return_terms=True``):

- ``energy``: ``q·k / sqrt(d_h)``;
- ``structural``: the structural term as it enters the logits: X-LogSMask
  (``log(Â^k + eps)``, ``-inf`` outside the head's support under
  ``outside_support='hard'``) plus the head's learned biases (SPD, RRWP, magnetic,
  eigen), divided by ``sqrt(d_h)`` under ``mask_scale='paper'``; 0 for a head
  with no bias. Every head is labelled with its bias types (``Â^2 + SPD``);
- ``logits``: their sum (``-inf`` at keys the query does not attend);
- ``attention``: the softmax of ``logits`` (before attention dropout).

Targets:

- ``graph I`` (graph-level runs): graph ``I`` alone, padded as one batch;
  graphs above ``max_nodes`` nodes are cropped to the ``max_nodes`` nodes
  closest to node 0 (the forward still runs on the whole graph).
- ``node I`` (node-, link- and edge-level runs): the full-graph forward (or
  the METIS part holding ``I`` when the run evaluates on partitions), cropped
  to ``I``'s neighbourhood: the nodes within the cache's SPD cut-off, closest
  first (ties by id), at most ``max_nodes``.
- ``edge U,V`` (same levels): the union of both endpoints' neighbourhoods
  (distance = the smaller of the two), same cropping.

Cropping keeps the forward's numbers; it only selects rows and columns, so a
cropped attention row sums to at most 1 (its mass outside the crop is left out).
On the sparse path pairs the forward did not attend have ``energy`` and
``structural`` NaN, ``logits`` ``-inf`` and ``attention`` 0. A plain head
(``k_h = 0``, or ``use_bias: false``) attends over every node there too, but
its maps and hop summary hold its weights at the cached pairs only (its mass
beyond them is not recorded); the dense path records all of it.

Hop summary: for every layer and head, the attention mass by shortest-path
hop distance between query and key, averaged over the targets' query rows
(graph: all its nodes; node: the node; edge: both endpoints), taken over the
*full* attention rows (not the crop). Buckets, with ``D`` the cache's SPD
cut-off (``structure.spd.max_distance``, or the large-graph radius): ``"0"``
.. ``"D-1"`` exact distances, ``">=D"`` (distance ``D`` or beyond the cut-off,
same connected component) and ``"unreachable"`` (another component). Each
head's masses are normalised to sum to 1. Distances come from the cache's SPD
pairs, or a breadth-first search on the support of the cached ``Â^1`` when
the cache has no SPD.

Files written to ``out_dir``: ``maps.h5`` (see :func:`write_maps`) and one
``<target>.png`` grid per target (see :func:`plot_target`).
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from xmask_cli.errors import UsageError
from xmask_cli.model.network import head_labels

__all__ = ["KINDS", "TargetMaps", "explain_run", "hop_buckets", "record_terms", "plot_target", "write_maps"]

#: Map kinds recorded per layer and head, in plotting order (rows of the grid).
KINDS = ("energy", "structural", "logits", "attention")
KIND_TITLES = {"energy": "energy q·k/√d", "structural": "structural term", "logits": "sum (logits)",
               "attention": "attention"}
#: SPD cut-off assumed when the cache records none.
DEFAULT_MAX_DISTANCE = 8


# ----------------------------------------------------------------- recording
@dataclass
class _Recorded:
    """Every layer's terms of one forward over ``n`` nodes, as numpy.

    Dense: ``layers[l][kind]`` is ``[H, n, n]``. Sparse: ``[E, H]`` on ``pairs`` (``[2, E]`` local ids).
    """

    n: int
    layers: list[dict[str, np.ndarray]]
    pairs: np.ndarray | None = None

    @property
    def dense(self) -> bool:
        return self.pairs is None

    @property
    def heads(self) -> int:
        a = self.layers[0]["attention"]
        return int(a.shape[0] if self.dense else a.shape[1])

    def crop(self, sel: np.ndarray) -> list[dict[str, np.ndarray]]:
        """``[H, m, m]`` maps per layer and kind on the local nodes ``sel`` (in that order)."""
        out = []
        if self.dense:
            for terms in self.layers:
                out.append({k: np.ascontiguousarray(terms[k][:, sel][:, :, sel]) for k in KINDS})
            return out
        m = len(sel)
        pos = np.full(self.n, -1, dtype=np.int64)
        pos[sel] = np.arange(m)
        r, c = pos[self.pairs[0]], pos[self.pairs[1]]
        keep = (r >= 0) & (c >= 0)
        r, c = r[keep], c[keep]
        fill = {"energy": np.nan, "structural": np.nan, "logits": -np.inf, "attention": 0.0}
        for terms in self.layers:
            maps = {}
            for k in KINDS:
                a = np.full((self.heads, m, m), fill[k], dtype=np.float32)
                a[:, r, c] = terms[k][keep].T
                maps[k] = a
            out.append(maps)
        return out

    def rows(self, layer: int, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(query position in queries, key, attention [.., H])`` of every attended pair of rows ``queries``."""
        att = self.layers[layer]["attention"]
        if self.dense:
            qi, key = np.meshgrid(np.arange(len(queries)), np.arange(self.n), indexing="ij")
            w = att[:, queries, :].transpose(1, 2, 0).reshape(-1, att.shape[0])  # [nq * n, H]
            return qi.reshape(-1), key.reshape(-1), w
        where = np.full(self.n, -1, dtype=np.int64)
        where[queries] = np.arange(len(queries))
        q = where[self.pairs[0]]
        keep = q >= 0
        return q[keep], self.pairs[1][keep], att[keep]


def _numpy(terms: dict[str, torch.Tensor], index: Any = None) -> dict[str, np.ndarray]:
    return {k: (terms[k] if index is None else terms[k][index]).detach().float().cpu().numpy() for k in KINDS}


@torch.no_grad()
def record_terms(model: torch.nn.Module, x: torch.Tensor, *, powers: torch.Tensor | None = None,
                 mask: torch.Tensor | None = None, edge_index: torch.Tensor | None = None,
                 values: torch.Tensor | None = None,
                 extras: dict[str, torch.Tensor] | None = None) -> tuple[torch.Tensor, list[dict[str, torch.Tensor]]]:
    """Eval-mode forward of ``model`` with every layer's attention terms.

    Dense when ``edge_index`` is None (``x [1, N, F]``, ``powers``, ``mask``), sparse
    otherwise (``x [N, F]``, ``edge_index``, ``values``); ``extras`` feed the learned
    biases. Returns ``(h, terms per layer)``.
    """
    model.eval()
    if extras is not None:
        device = x.device
        extras = {k: v.to(device) for k, v in extras.items()}
    if edge_index is None:
        return model.encode_dense(x, powers, mask, return_terms=True, extras=extras)
    return model.encode_sparse(x, edge_index, values, return_terms=True, extras=extras)


# ---------------------------------------------------------------- distances
def _spd_cutoff(cache: Any, n: int) -> int:
    try:
        attrs = dict(cache.file["spd"].attrs) if "spd" in cache.file else {}
        params = cache.params
    except Exception:  # an in-memory or odd cache: fall back to the default
        attrs, params = {}, {}
    d = int(attrs.get("max_distance", DEFAULT_MAX_DISTANCE) or DEFAULT_MAX_DISTANCE)
    large = params.get("large", {}) if isinstance(params, dict) else {}
    min_nodes = large.get("min_nodes") if isinstance(large, dict) else None
    if "large_radius" in attrs and min_nodes is not None and n > int(min_nodes):
        d = int(attrs["large_radius"])
    return max(d, 1)


def _has_spd(cache: Any) -> bool:
    try:
        return "spd" in cache.file and "indptr" in cache.file["spd"]
    except Exception:
        return False


def _distance_rows(cache: Any, g: int, rows: np.ndarray) -> tuple[np.ndarray, int]:
    """``([len(rows), n] int16 distances, D)`` of graph ``g``: ``-1`` beyond ``D``, ``-2`` unreachable."""
    from xmask_cli.structure.spd import BEYOND, UNREACHABLE

    n = cache.num_nodes(g)
    d_max = _spd_cutoff(cache, n)
    rows = np.asarray(rows, dtype=np.int64)
    if _has_spd(cache):
        comp = np.asarray(cache.component(g))
        out = np.where(comp[rows][:, None] == comp[None, :], BEYOND, UNREACHABLE).astype(np.int16)
        start = cache._node_slice(g).start
        for i, r in enumerate(rows):
            ip = cache._read("spd/indptr", slice(start + int(r), start + int(r) + 2))
            sl = slice(int(ip[0]), int(ip[1]))
            out[i, cache._read("spd/col", sl).astype(np.int64)] = cache._read("spd/dist", sl)
        return out, d_max
    # No SPD in the cache: breadth-first search on the support of Â^1.
    import scipy.sparse as sp
    from scipy.sparse.csgraph import shortest_path

    r, c, vals = cache.powers(g)
    keep = vals[:, 0] > 0
    adj = sp.csr_matrix((np.ones(int(keep.sum())), (r[keep], c[keep])), shape=(n, n))
    dist = shortest_path(adj, unweighted=True, indices=rows)
    reach = shortest_path(adj, unweighted=True, indices=rows, directed=False)
    out = np.full(dist.shape, BEYOND, dtype=np.int16)
    out[np.isinf(reach)] = UNREACHABLE
    near = np.isfinite(dist) & (dist <= d_max)
    out[near] = dist[near].astype(np.int16)
    return out, d_max


def hop_buckets(d_max: int) -> list[str]:
    """Bucket names of the hop summary: ``"0"`` .. ``"D-1"``, ``">=D"``, ``"unreachable"``."""
    return [str(i) for i in range(d_max)] + [f">={d_max}", "unreachable"]


def _bucket_index(dist: np.ndarray, d_max: int) -> np.ndarray:
    b = np.where(dist >= d_max, d_max, dist).astype(np.int64)
    b[dist == -1] = d_max
    b[dist == -2] = d_max + 1
    return b


def _neighbourhood(dist: np.ndarray, allowed: np.ndarray | None, max_nodes: int) -> np.ndarray:
    """Ids within the cut-off of any row of ``dist`` (min over rows), closest first, ties by id, capped."""
    d = np.where(dist >= 0, dist.astype(np.int64), np.iinfo(np.int64).max).min(0)
    cand = np.flatnonzero(d < np.iinfo(np.int64).max)
    if allowed is not None:
        cand = cand[allowed[cand]]
    order = np.lexsort((cand, d[cand]))
    return cand[order][:max_nodes]


# ------------------------------------------------------------------ targets
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


def _hop_mass(rec: _Recorded, queries_local: np.ndarray, dist_rows: np.ndarray, d_max: int) -> list[np.ndarray]:
    """Per layer ``[H, buckets]`` attention mass of rows ``queries_local``; ``dist_rows[i]`` is row i's distances
    to the forward's nodes (local order)."""
    out = []
    nb = d_max + 2
    for layer in range(len(rec.layers)):
        qi, key, w = rec.rows(layer, queries_local)
        w = np.nan_to_num(w.astype(np.float64), nan=0.0)
        b = _bucket_index(dist_rows[qi, key], d_max)
        mass = np.zeros((w.shape[1], nb))
        for h in range(w.shape[1]):
            mass[h] = np.bincount(b, weights=w[:, h], minlength=nb)
        out.append(mass)
    return out


def _parse_edge(edge: Any) -> tuple[int, int]:
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


def _explain_graph(model: Any, task: Any, g: int, max_nodes: int) -> tuple[TargetMaps, int]:
    from xmask_cli.cache import StructureCache

    stream = task.eval_streams["test"]
    device = next(model.parameters()).device
    batch = stream.collate(np.array([g])).to(device)
    _, layers = record_terms(model, batch.x, powers=batch.powers, mask=batch.mask, extras=batch.extras)
    n = int(batch.mask[0].sum())
    rec = _Recorded(n=n, layers=[_numpy(t, (0, slice(None), slice(None, n), slice(None, n))) for t in layers])
    with StructureCache(task.cache_path) as cache:
        everyone = np.arange(n)
        dist, d_max = _distance_rows(cache, g, everyone)
    sel = everyone if n <= max_nodes else _neighbourhood(dist[:1], None, max_nodes)
    t = TargetMaps(name=f"graph_{g}", kind="graph", spec={"graph": g}, node_ids=sel.astype(np.int64),
                   cropped_from=n, maps=rec.crop(sel), queries=everyone, source="closest to node 0")
    t.hop = _hop_mass(rec, everyone, dist, d_max)
    return t, d_max


class _SingleGraph:
    """The forward over one graph's nodes for node-, link- and edge-level tasks (full graph or a part)."""

    def __init__(self, task: Any, level: str):
        self.task, self.level = task, level
        self.num_nodes = int(task.num_nodes) if hasattr(task, "num_nodes") else int(task.x.size(0))
        self.cache_path = task.cache_path
        self._memo: dict[Any, tuple[np.ndarray, _Recorded]] = {}

    def _batch_for(self, nodes: Sequence[int]) -> tuple[Any, np.ndarray]:
        """(batch key, global ids of the batch's nodes) holding all ``nodes``."""
        t = self.task
        if self.level == "node" and t.eval_mode == "partition":
            for i, b in enumerate(t.eval_batches):
                ids = b.nodes.numpy()
                if np.isin(nodes, ids).all():
                    return i, ids
            raise UsageError(f"nodes {list(map(int, nodes))} lie in different METIS parts of this run's evaluation "
                             f"batches; explain them one at a time (--node I)")
        return "full", np.arange(self.num_nodes)

    def forward(self, model: Any, nodes: Sequence[int]) -> tuple[np.ndarray, _Recorded]:
        key, ids = self._batch_for(nodes)
        if key in self._memo:
            return self._memo[key]
        t = self.task
        device = next(model.parameters()).device
        if self.level == "node":
            b = t.whole_graph_batch() if key == "full" else t.eval_batches[key]
            x = (t.x if b.nodes is None else t.x[b.nodes]).to(device)
            if b.powers is not None:
                _, layers = record_terms(model, x.unsqueeze(0), powers=b.powers.to(device), extras=b.extras)
                pairs = None
            else:
                _, layers = record_terms(model, x, edge_index=b.edge_index.to(device), values=b.values.to(device),
                                         extras=b.extras)
                pairs = b.edge_index.cpu().numpy()
        else:
            s = t.structure
            x = t.x.to(device)
            if s.dense:
                _, layers = record_terms(model, x.unsqueeze(0), powers=s.powers, extras=s.extras)
                pairs = None
            else:
                _, layers = record_terms(model, x, edge_index=s.pairs, values=s.values, extras=s.extras)
                pairs = s.pairs.cpu().numpy()
        if pairs is None:
            rec = _Recorded(n=len(ids), layers=[_numpy(terms, 0) for terms in layers])
        else:
            rec = _Recorded(n=len(ids), layers=[_numpy(terms) for terms in layers], pairs=pairs)
        self._memo = {key: (ids, rec)}  # keep one forward: a full-graph one can be large
        return ids, rec


def _explain_nodes(model: Any, source: _SingleGraph, kind: str, centre: Sequence[int],
                   max_nodes: int) -> tuple[TargetMaps, int]:
    from xmask_cli.cache import StructureCache

    centre = np.asarray(centre, dtype=np.int64)
    ids, rec = source.forward(model, centre)
    with StructureCache(source.cache_path) as cache:
        dist, d_max = _distance_rows(cache, 0, centre)
    allowed = None
    if len(ids) < source.num_nodes:
        allowed = np.zeros(source.num_nodes, dtype=bool)
        allowed[ids] = True
    sel_global = _neighbourhood(dist, allowed, max(max_nodes, len(centre)))
    local = np.full(source.num_nodes, -1, dtype=np.int64)
    local[ids] = np.arange(len(ids))
    sel = local[sel_global]
    if kind == "node":
        name, spec = f"node_{centre[0]}", {"node": int(centre[0])}
    else:
        name, spec = f"edge_{centre[0]}_{centre[1]}", {"edge": [int(centre[0]), int(centre[1])]}
    t = TargetMaps(name=name, kind=kind, spec=spec, node_ids=sel_global, cropped_from=len(ids),
                   maps=rec.crop(sel), queries=centre,
                   source="full graph" if len(ids) == source.num_nodes else "its METIS part")
    t.hop = _hop_mass(rec, local[centre], dist[:, ids], d_max)
    return t, d_max


# ------------------------------------------------------------------ outputs
def write_maps(path: Path, targets: Sequence[TargetMaps], model_cfg: Any, meta: dict[str, Any]) -> Path:
    """Write ``maps.h5`` atomically (a temporary name, then ``os.replace``).

    Layout: ``/<target>/node_ids`` (int64 global ids of rows and columns) and
    ``/<target>/layer_<l>/head_<h>/<kind>`` (float32 ``[m, m]``, kind in
    :data:`KINDS`). Target groups carry ``target``, ``kind``, ``cropped``,
    ``cropped_from``, ``num_nodes`` and ``query_nodes``; every map carries
    ``k`` (the head's power of Â, 0 without the log mask), ``bias`` (the head's
    bias types, e.g. ``Â^2 + SPD``, or ``none``),
    ``mask_scale``, ``target``, ``cropped_from``, ``layer``, ``head``, ``kind``.
    Root attributes: ``meta`` (JSON: run, level, seed, head powers, bias, and the
    hop summary) and ``kinds``.
    """
    import h5py

    labels = head_labels(model_cfg)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with h5py.File(tmp, "w") as f:
            f.attrs["meta"] = json.dumps(meta, sort_keys=True)
            f.attrs["kinds"] = json.dumps(list(KINDS))
            for t in targets:
                g = f.create_group(t.name)
                g.create_dataset("node_ids", data=np.asarray(t.node_ids, dtype=np.int64))
                g.attrs.update({"target": t.describe(), "kind": t.kind, "cropped": t.cropped,
                                "cropped_from": t.cropped_from, "num_nodes": len(t.node_ids),
                                "query_nodes": np.asarray(t.queries, dtype=np.int64)})
                for l, maps in enumerate(t.maps):
                    for h in range(maps["attention"].shape[0]):
                        hg = g.create_group(f"layer_{l}/head_{h}")
                        for kind in KINDS:
                            ds = hg.create_dataset(kind, data=maps[kind][h].astype(np.float32), compression="gzip")
                            ds.attrs.update({"k": int(model_cfg.head_powers[h]) if model_cfg.use_bias else 0,
                                             "bias": labels[l][h],
                                             "mask_scale": model_cfg.mask_scale, "target": t.name,
                                             "cropped_from": t.cropped_from, "layer": l, "head": h, "kind": kind})
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def plot_target(t: TargetMaps, model_cfg: Any) -> tuple[Any, np.ndarray]:
    """Fig. 3-style grid of one target: rows = layers × kinds, columns = heads, one colour bar each.

    Returns ``(figure, axes [layers * len(KINDS), heads])``; the caller saves and closes the figure.
    """
    from matplotlib.figure import Figure

    layers, heads = len(t.maps), t.maps[0]["attention"].shape[0]
    labels = head_labels(model_cfg)
    rows = layers * len(KINDS)
    fig = Figure(figsize=(2.8 * heads + 0.8, 2.3 * rows + 0.8), layout="constrained")
    axes = np.asarray(fig.subplots(rows, heads, squeeze=False))
    for l, maps in enumerate(t.maps):
        for i, kind in enumerate(KINDS):
            for h in range(heads):
                ax = axes[l * len(KINDS) + i, h]
                a = np.ma.masked_invalid(maps[kind][h])
                finite = a.compressed()
                lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
                if hi <= lo:
                    hi = lo + 1e-12
                im = ax.imshow(a, cmap="viridis", vmin=lo, vmax=hi, interpolation="nearest")
                fig.colorbar(im, ax=ax, fraction=0.046, pad=0.02)
                ax.set_title(f"L{l} {KIND_TITLES[kind]} · head {h} · {labels[l][h]}", fontsize=7)
                ax.set_xticks([])
                ax.set_yticks([])
    fig.suptitle(f"{t.describe()} (rows/cols: node ids {'closest first' if t.kind != 'graph' else 'in order'})",
                 fontsize=9)
    return fig, axes


def save_png(fig: Any, path: Path) -> Path:
    """Write a figure as PNG under a temporary name, then rename: no half-written figure."""
    tmp = path.with_name(f".{path.stem}.tmp{os.getpid()}.png")
    try:
        fig.savefig(tmp, dpi=80)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


# --------------------------------------------------------------------- main
def explain_run(
    run_dir: str | os.PathLike,
    *,
    graphs: Sequence[int] = (),
    nodes: Sequence[int] = (),
    edges: Sequence[Any] = (),
    out_dir: str | os.PathLike,
    cache_dir: Path,
    data_root: str | os.PathLike | None = None,
    device: str = "cpu",
    max_nodes: int = 64,
    offline: bool | None = None,
    log: Callable[[str], None] = lambda m: None,
    images: Sequence[int] = (),
    query_patch: int | None = None,
) -> dict[str, Any]:
    """Record, save and plot the attention terms of a run's best checkpoint on the given targets.

    Args:
        run_dir: ``runs/<name>/<seed>`` (``config.json`` and ``best.pt``).
        graphs: graph ids (graph-level runs).
        nodes: node ids (node-, link- and edge-level runs).
        edges: ``(u, v)`` pairs or ``"U,V"`` strings (node-, link- and edge-level runs).
        out_dir: where ``maps.h5`` and ``<target>.png`` go (created).
        cache_dir, data_root, offline: as for :func:`~xmask_cli.engine.experiment.evaluate_run`.
        device: torch device of the forward.
        max_nodes: most nodes a map keeps (neighbourhood crop; graphs above it are cropped too).
        log: progress lines.
        images: test-image indices (image-level runs; see :mod:`xmask_cli.explain_image`).
        query_patch: image runs: one query patch's attention row instead of the mean over queries.

    Returns:
        JSON-able ``{"run_dir", "dataset", "level", "seed", "targets": [{"name", "kind", "target",
        "num_nodes", "cropped", "cropped_from", "node_ids", "query_nodes", "hop_summary"}],
        "files": {"maps": path, "figures": {name: path}}, "hop_buckets": [...],
        "hop_summary": {"layer_0": {"head_0": {"k": 1, "mass": {"0": .., ..., "unreachable": ..}}}}}``.

    Raises:
        RunNotFoundError: ``run_dir`` is not a run.
        UsageError: no target, a target that does not fit the run's level or is out of range.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)  # the figures are built on Figure objects; no GUI backend needed
    from xmask_cli.cache import ensure_writable_dir
    from xmask_cli.engine.experiment import load_run, read_run

    graphs, nodes, images = [int(g) for g in graphs], [int(i) for i in nodes], [int(i) for i in images]
    pairs = [_parse_edge(e) for e in edges]
    if not (graphs or nodes or pairs or images):
        raise UsageError("nothing to explain: give at least one --graph I, --node I, --edge U,V or --image I")
    if max_nodes < 2:
        raise UsageError(f"--max-nodes {max_nodes}: must be at least 2")
    run, saved = read_run(run_dir)
    level = saved.get("level")
    if (level == "image") != bool(images) or (images and (graphs or nodes or pairs)):
        raise UsageError(f"{run_dir} has level '{level}': --image I needs an image-level run, and an image-level "
                         f"run takes --image I only")
    if query_patch is not None and level != "image":
        raise UsageError("--query-patch is for image-level runs (with --image I)")
    if level == "image":
        from xmask_cli.explain_image import explain_images

        exp, task, model = load_run(run, saved, cache_dir=cache_dir, data_root=data_root, offline=offline,
                                    device=device, log=log)
        meta = {"run_dir": str(run.path), "dataset": exp.dataset, "level": level,
                "seed": int(saved["train"]["seed"]), "head_powers": list(model.cfg.head_powers),
                "use_bias": bool(model.cfg.use_bias), "positional": model.cfg.positional,
                "head_biases": head_labels(model.cfg), "mask_scale": model.cfg.mask_scale}
        out = ensure_writable_dir(Path(out_dir), "output folder", "pass another --out")
        return explain_images(model, task, images, query_patch=query_patch, out_dir=out,
                              connectivity=exp.cfg.image.connectivity, meta=meta, log=log)
    # Checked before loading any data: a wrong target fails at once.
    if level == "graph" and (nodes or pairs):
        raise UsageError(f"{run_dir} is a graph-level run: --node/--edge need a node-, link- or edge-level run; "
                         f"use --graph I")
    if level in ("node", "link", "edge") and graphs:
        raise UsageError(f"{run_dir} is a {level}-level run on one graph: --graph needs a graph-level run; "
                         f"use --node I or --edge U,V")
    if saved.get("model", {}).get("experts"):
        raise UsageError(f"{run_dir} uses M3Dphormer attention experts: explain records single-attention heads; "
                         f"read the per-token routing with XMaskNet.routing_weights instead")
    exp, task, model = load_run(run, saved, cache_dir=cache_dir, data_root=data_root, offline=offline,
                                device=device, log=log)
    level, seed, model_cfg = exp.level, int(saved["train"]["seed"]), model.cfg

    results: list[TargetMaps] = []
    d_max = DEFAULT_MAX_DISTANCE
    if level == "graph":
        count = len(task.eval_streams["test"].features)
        for g in graphs:
            if not 0 <= g < count:
                raise UsageError(f"--graph {g}: out of range, {exp.dataset} has graphs 0..{count - 1}")
        for g in graphs:
            t, d_max = _explain_graph(model, task, g, max_nodes)
            results.append(t)
            log(f"recorded {t.describe()}")
    else:
        source = _SingleGraph(task, level)
        n = source.num_nodes
        for i in nodes:
            if not 0 <= i < n:
                raise UsageError(f"--node {i}: out of range, the graph has nodes 0..{n - 1}")
        for u, v in pairs:
            if not (0 <= u < n and 0 <= v < n):
                raise UsageError(f"--edge {u},{v}: out of range, the graph has nodes 0..{n - 1}")
        targets = [("node", [i]) for i in nodes] + [("edge", list(e)) for e in pairs]
        for kind, centre in targets:
            t, d_max = _explain_nodes(model, source, kind, centre, max_nodes)
            results.append(t)
            log(f"recorded {t.describe()}")

    out = ensure_writable_dir(Path(out_dir), "output folder", "pass another --out")
    meta = {"run_dir": str(run.path), "dataset": exp.dataset, "level": level, "seed": seed,
            "head_powers": list(model_cfg.head_powers), "use_bias": bool(model_cfg.use_bias),
            "head_biases": head_labels(model_cfg),
            "mask_scale": model_cfg.mask_scale, "max_nodes": int(max_nodes)}
    buckets = hop_buckets(d_max)
    summary = hop_summary(results, model_cfg, buckets)
    maps_path = write_maps(out / "maps.h5", results, model_cfg, {**meta, "hop_summary": summary})
    figures = {}
    for t in results:
        fig, _ = plot_target(t, model_cfg)
        figures[t.name] = str(save_png(fig, out / f"{t.name}.png"))
    return {**meta, "targets": [_target_dict(t, model_cfg, buckets) for t in results],
            "files": {"maps": str(maps_path), "figures": figures}, "hop_buckets": buckets,
            "hop_summary": summary}


def _normalise(mass: np.ndarray, model_cfg: Any, buckets: list[str], layer: int = 0) -> dict[str, Any]:
    labels = head_labels(model_cfg)[layer]
    out = {}
    for h, row in enumerate(mass):
        total = row.sum()
        p = row / total if total > 0 else row
        out[f"head_{h}"] = {"k": int(model_cfg.head_powers[h]), "bias": labels[h],
                            "mass": {b: float(v) for b, v in zip(buckets, p)}}
    return out


def hop_summary(targets: Sequence[TargetMaps], model_cfg: Any, buckets: list[str]) -> dict[str, Any]:
    """Attention mass by hop distance per layer and head, averaged over every target's query rows."""
    if not targets:
        return {}
    out = {}
    for l in range(len(targets[0].hop)):
        total = sum(t.hop[l] for t in targets)
        out[f"layer_{l}"] = _normalise(total, model_cfg, buckets, l)
    return out


def _target_dict(t: TargetMaps, model_cfg: Any, buckets: list[str]) -> dict[str, Any]:
    return {"name": t.name, "kind": t.kind, **t.spec, "target": t.describe(), "num_nodes": int(len(t.node_ids)),
            "cropped": bool(t.cropped), "cropped_from": int(t.cropped_from),
            "node_ids": [int(i) for i in t.node_ids], "query_nodes": [int(i) for i in t.queries],
            "hop_summary": {f"layer_{l}": _normalise(m, model_cfg, buckets, l) for l, m in enumerate(t.hop)}}
