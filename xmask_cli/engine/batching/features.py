"""Node features every task level feeds the model: the dataset's, else a one-hot degree; optional structural channels.

Example::

    x = node_features(graphs)[0]                  # [N, F] of a one-graph dataset
    x = one_hot_degree(train_edge_index, n)        # a featureless edge file, training edges only
    xs, s = input_features(graphs, "degree+rwse", cache_path)   # [n_g, F + s] per graph (model.node_struct)

``model.node_struct`` appends structural columns to the node
features: softmax attention averages over neighbours, so with categorical
features alone (MUTAG's atom types) the model cannot count them. ``degree`` is
the one-hot degree of the symmetrised simple graph (the graph the structure is
computed on), capped at :data:`MAX_DEGREE` like the featureless fallback;
``rwse`` is the random-walk return probability ``diag(P^k)``, ``k = 1..S``,
``P = D^-1 A`` (GraphGPS's RWSE), read from the diagonal of the cache's RRWP
(``structure.rrwp``): nothing is recomputed.
"""
from __future__ import annotations

import os
from typing import TypedDict

import numpy as np
import torch
from torch import Tensor

from xmask_cli.cache import StructureCache
from xmask_cli.data.graphset import MAX_DEGREE, GraphSet, one_hot, one_hot_degrees, one_hot_width
from xmask_cli.engine.batching.pair_structure import canonical_edges

__all__ = ["node_features", "one_hot_degree", "MAX_DEGREE", "NODE_STRUCT_CHANNELS", "struct_channels", "StructInfo",
           "undirected_degrees", "rwse_from_cache", "structural_features", "input_features", "struct_info"]

#: The channels ``model.node_struct`` may combine (``"degree+rwse"``: both, in this order).
NODE_STRUCT_CHANNELS = ("degree", "rwse")


def node_features(graphs: GraphSet) -> list[Tensor]:
    """Float ``[n_g, F]`` node features of every graph.

    The dataset's ``x`` when its loader gives one (TU node labels/attributes as
    PyG's ``TUDataset`` reads them, OGB atom features, Planetoid bag-of-words);
    otherwise (IMDB-BINARY, COLLAB: no node features) a one-hot node degree,
    capped at :data:`MAX_DEGREE`, as PyG's ``OneHotDegree`` transform does.
    ``GraphSet.feature_info()`` says which one a dataset gets.
    """
    ds = graphs.dataset
    if graphs.has_features():
        return [ds[i].x.float() for i in range(len(ds))]
    return one_hot_degrees(graphs.edge_index, graphs.num_nodes)


def one_hot_degree(edge_index: np.ndarray, num_nodes: int, cap: int = MAX_DEGREE) -> Tensor:
    """``[N, min(max degree, cap) + 1]`` one-hot degree of the (undirected, canonicalised) graph.

    The featureless fallback, as for TU sets; computed on training edges so
    held-out edges cannot leak through the features.
    """
    ei = canonical_edges(edge_index, num_nodes)
    deg = np.bincount(ei[0], minlength=int(num_nodes)) if ei.size else np.zeros(int(num_nodes), dtype=np.int64)
    width = min(int(deg.max(initial=0)), cap) + 1
    return torch.eye(width)[torch.from_numpy(np.minimum(deg, width - 1).astype(np.int64))]


def struct_channels(node_struct: str) -> tuple[str, ...]:
    """``'none'`` -> ``()``, ``'degree+rwse'`` -> ``('degree', 'rwse')``; an unknown channel raises ValueError."""
    if node_struct == "none":
        return ()
    parts = tuple(node_struct.split("+"))
    bad = [p for p in parts if p not in NODE_STRUCT_CHANNELS]
    if bad or len(set(parts)) != len(parts):
        raise ValueError(f"node_struct must be 'none' or a '+'-list of {NODE_STRUCT_CHANNELS}, got {node_struct!r}")
    return tuple(c for c in NODE_STRUCT_CHANNELS if c in parts)


def undirected_degrees(edge_index: list[np.ndarray], num_nodes: np.ndarray) -> list[np.ndarray]:
    """Per-graph node degree in the symmetrised simple graph (no self loops, no duplicate edges).

    The graph ``xmask prepare`` computes the structure on; for TU / OGB sets, which
    store both directions once, it equals the stored out-degree. All graphs in one
    vectorised pass (offset ids), so 41k molecules cost one ``np.unique``.
    """
    nn = np.asarray(num_nodes, dtype=np.int64).reshape(-1)
    offs = np.concatenate([[0], np.cumsum(nn)])
    total = int(offs[-1])
    parts = [np.asarray(e, dtype=np.int64).reshape(2, -1) + offs[g] for g, e in enumerate(edge_index)]
    ei = np.concatenate(parts, axis=1) if parts else np.zeros((2, 0), dtype=np.int64)
    deg = np.bincount(canonical_edges(ei, total)[0], minlength=total) if total else np.zeros(0, dtype=np.int64)
    return np.split(deg, offs[1:-1])


def rwse_from_cache(cache_path: str | os.PathLike[str]) -> list[np.ndarray]:
    """Per-graph ``[n_g, S]`` float32 ``diag(P^k)``, ``k = 1..S``, from the cache's RRWP pairs.

    RRWP stores ``I, P, ..., P^S`` (``P = D^-1 A``) on each node's walk support,
    which always holds the node itself, so the diagonal is read, never
    recomputed. On large graphs the cache's truncation (``structure.large``)
    applies: a return probability it dropped (below ``tau``) reads 0.

    Raises:
        ValueError: the cache has no RRWP (``structure.rrwp.enabled`` was false).
    """
    with StructureCache(cache_path) as cache:
        if not cache.has("rrwp"):
            raise ValueError(f"the cache {cache_path} has no 'rrwp' structure, which model.node_struct=rwse "
                             f"reads: set structure.rrwp.enabled=true")
        node_ptr = cache.read_array("graphs/node_ptr").astype(np.int64)
        indptr = cache.read_array("rrwp/indptr").astype(np.int64)
        col = cache.read_array("rrwp/col").astype(np.int64)
        vals = cache.read_array("rrwp/values")
    total = len(indptr) - 1
    node = np.repeat(np.arange(total, dtype=np.int64), np.diff(indptr))  # global row of each stored pair
    first = np.repeat(node_ptr[:-1], np.diff(node_ptr))  # first node of each node's graph
    diag = col == node - first[node]  # columns are graph-local ids
    out = np.zeros((total, vals.shape[1] - 1), dtype=np.float32)
    out[node[diag]] = vals[diag, 1:]  # drop step 0 (I: always 1)
    return np.split(out, node_ptr[1:-1])


def structural_features(graphs: GraphSet, node_struct: str,
                        cache_path: str | os.PathLike[str] | None = None) -> list[Tensor] | None:
    """Float ``[n_g, S]`` structural channels of every graph (``model.node_struct``), or None for ``'none'``.

    ``degree``: one-hot :func:`undirected_degrees` capped at :data:`MAX_DEGREE`
    (width ``min(max degree, MAX_DEGREE) + 1`` over the dataset, as the
    featureless fallback); ``rwse``: :func:`rwse_from_cache` (needs ``cache_path``).
    """
    channels = struct_channels(node_struct)
    if not channels:
        return None
    cols: list[list[Tensor]] = []
    if "degree" in channels:
        cols.append(one_hot(undirected_degrees(graphs.edge_index, graphs.num_nodes)))
    if "rwse" in channels:
        if cache_path is None:
            raise ValueError("model.node_struct=rwse reads the structure cache; no cache path was given")
        rw = rwse_from_cache(cache_path)
        if [len(r) for r in rw] != [int(n) for n in graphs.num_nodes]:
            raise ValueError(f"the cache {cache_path} does not hold this dataset's graphs (node counts differ)")
        cols.append([torch.from_numpy(r) for r in rw])
    return [torch.cat(per_graph, dim=1) for per_graph in zip(*cols)]


def input_features(graphs: GraphSet, node_struct: str = "none",
                   cache_path: str | os.PathLike[str] | None = None) -> tuple[list[Tensor], int]:
    """``(features, S)``: :func:`node_features` with the ``S`` structural columns appended (last).

    The model's encoder reads all of them (a linear encoder on the concatenation;
    the atom encoder on the leading atom columns plus a linear map of the last ``S``,
    ``ModelConfig.struct_dim``).
    """
    x = node_features(graphs)
    s = structural_features(graphs, node_struct, cache_path)
    if s is None:
        return x, 0
    return [torch.cat([a, b.to(a.dtype)], dim=1) for a, b in zip(x, s)], int(s[0].size(1))


class StructInfo(TypedDict):
    """What ``model.node_struct`` appends to the node features, as results and logs show it."""

    kind: str
    dim: int
    detail: str


def struct_info(graphs: GraphSet, node_struct: str, rrwp_steps: int) -> StructInfo | None:
    """What ``model.node_struct`` appends, for logs and results (None for ``'none'``)."""
    channels = struct_channels(node_struct)
    if not channels:
        return None
    dims, parts = 0, []
    if "degree" in channels:
        w = degree_width_undirected(graphs)
        dims += w
        parts.append(f"one-hot degree ({w}, capped at {MAX_DEGREE})")
    if "rwse" in channels:
        dims += int(rrwp_steps)
        parts.append(f"RWSE diag(P^1..P^{rrwp_steps}) from the cached RRWP ({rrwp_steps})")
    return {"kind": node_struct, "dim": dims, "detail": ", ".join(parts)}


def degree_width_undirected(graphs: GraphSet) -> int:
    """Width of the ``degree`` channel: ``min(max undirected degree, MAX_DEGREE) + 1``."""
    return one_hot_width(undirected_degrees(graphs.edge_index, graphs.num_nodes))
