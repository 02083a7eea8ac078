"""Hop distances for explain: SPD rows from the cache, neighbourhood crops, the hop summary.

Buckets, with ``D`` the cache's SPD cut-off (``structure.spd.max_distance``, or
the large-graph radius): ``"0"`` .. ``"D-1"`` exact distances, ``">=D"``
(distance ``D`` or beyond the cut-off, same connected component) and
``"unreachable"`` (another component). Distances come from the cache's SPD
pairs, or a breadth-first search on the support of the cached ``Â^1`` when the
cache has no SPD.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from xmask_cli.explain.record import Recorded
from xmask_cli.structure.spd import BEYOND, UNREACHABLE, PairDistances

__all__ = ["DEFAULT_MAX_DISTANCE", "distance_rows", "head_masses", "hop_buckets", "hop_mass", "hop_summary",
           "layer_masses", "neighbourhood"]

#: SPD cut-off assumed when the cache records none.
DEFAULT_MAX_DISTANCE = 8


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


def distance_rows(cache: Any, g: int, rows: np.ndarray) -> tuple[np.ndarray, int]:
    """``([len(rows), n] int16 distances, D)`` of graph ``g``: ``-1`` beyond ``D``, ``-2`` unreachable."""
    n = cache.num_nodes(g)
    d_max = _spd_cutoff(cache, n)
    rows = np.asarray(rows, dtype=np.int64)
    if _has_spd(cache):
        # Only these rows' stored pairs are read (a large graph's SPD need not fit in memory), then the one
        # lookup with the component fallback (structure.spd.PairDistances) fills the rows.
        uniq, inverse = np.unique(rows, return_inverse=True)
        start = cache.node_slice(g).start
        src, col, dist = [], [], []
        for r in uniq:
            ip = cache.read_array("spd/indptr", slice(start + int(r), start + int(r) + 2))
            sl = slice(int(ip[0]), int(ip[1]))
            col.append(cache.read_array("spd/col", sl).astype(np.int64))
            dist.append(cache.read_array("spd/dist", sl))
            src.append(np.full(len(col[-1]), r, dtype=np.int64))
        lookup = PairDistances(np.concatenate(src), np.concatenate(col), np.concatenate(dist), cache.component(g))
        return lookup.block(uniq)[inverse], d_max
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
    b[dist == BEYOND] = d_max
    b[dist == UNREACHABLE] = d_max + 1
    return b


def neighbourhood(dist: np.ndarray, allowed: np.ndarray | None, max_nodes: int) -> np.ndarray:
    """Ids within the cut-off of any row of ``dist`` (min over rows), closest first, ties by id, capped."""
    d = np.where(dist >= 0, dist.astype(np.int64), np.iinfo(np.int64).max).min(0)
    cand = np.flatnonzero(d < np.iinfo(np.int64).max)
    if allowed is not None:
        cand = cand[allowed[cand]]
    order = np.lexsort((cand, d[cand]))
    return cand[order][:max_nodes]


def hop_mass(rec: Recorded, queries_local: np.ndarray, dist_rows: np.ndarray, d_max: int) -> list[np.ndarray]:
    """Per layer ``[H, buckets]`` attention mass of rows ``queries_local``; ``dist_rows[i]`` is row i's distances
    to the forward's nodes (local order)."""
    nb = d_max + 2
    queries_local = np.asarray(queries_local, dtype=np.int64)
    if rec.dense:
        # Dense maps are read as the [queries, n] row block itself: per-pair index and weight arrays would cost
        # several GB on a graph of a few thousand nodes (every query row spans all n keys).
        b = _bucket_index(np.asarray(dist_rows), d_max).ravel()
        every = len(queries_local) == rec.n and bool((queries_local == np.arange(rec.n)).all())
    out = []
    for layer, terms in enumerate(rec.layers):
        if rec.dense:
            att = terms["attention"]
            heads = ((att[h] if every else att[h][queries_local]).ravel() for h in range(att.shape[0]))
        else:
            qi, key, w = rec.rows(layer, queries_local)
            b = _bucket_index(dist_rows[qi, key], d_max)
            heads = (w[:, h] for h in range(w.shape[1]))
        out.append(np.stack([np.bincount(b, weights=np.nan_to_num(w.astype(np.float64), nan=0.0), minlength=nb)
                             for w in heads]))
    return out


def head_masses(mass: np.ndarray, ks: Sequence[int], labels: Sequence[str], buckets: list[str]) -> dict[str, Any]:
    """One layer's ``{"head_h": {"k", "bias", "mass": {bucket: share}}}``, each head's row normalised to sum to 1.

    One function for the graph/node summary and the image one (:mod:`xmask_cli.explain.image`); each
    caller passes the ``k`` it reports per head (``ks[h]``) and the layer's head labels.
    """
    out = {}
    for h, row in enumerate(mass):
        total = row.sum()
        p = row / total if total > 0 else row
        out[f"head_{h}"] = {"k": int(ks[h]), "bias": labels[h], "mass": {b: float(v) for b, v in zip(buckets, p)}}
    return out


def layer_masses(masses: Sequence[np.ndarray], ks: Sequence[int], labels: Sequence[Sequence[str]],
                 buckets: list[str]) -> dict[str, Any]:
    """``{"layer_l": head_masses(...)}`` of per-layer ``[H, buckets]`` masses (``labels[l][h]``: head labels)."""
    return {f"layer_{l}": head_masses(m, ks, labels[l], buckets) for l, m in enumerate(masses)}


def hop_summary(targets: Sequence[Any], ks: Sequence[int], labels: Sequence[Sequence[str]],
                buckets: list[str]) -> dict[str, Any]:
    """Attention mass by hop distance per layer and head, averaged over every target's query rows.

    ``targets`` carry ``hop``: per layer ``[H, buckets]`` masses (:class:`~xmask_cli.explain.targets.TargetMaps`).
    """
    if not targets:
        return {}
    return layer_masses([sum(t.hop[l] for t in targets) for l in range(len(targets[0].hop))], ks, labels, buckets)
