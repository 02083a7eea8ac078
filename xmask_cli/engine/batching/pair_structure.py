"""The structure a pair task may see: the cache of its TRAINING edges, prepared and checked.

Link prediction and edge regression see only the training edges as structure
(DESIGN.md, "The math, pinned"): :func:`prepare_pair_structure` caches the
powers, SPD and spectrum of the training-edge graph under its own key, and
:class:`PairStructure` refuses a cache whose fingerprint is not that of the
training edges, so no validation or test edge can reach a mask, a distance or
an eigenvector.

Node embeddings come from the whole training-edge graph at every step: the
dense path (``encode_dense`` on cached ``Â^1..Â^K``) when ``N <=
dense_max_nodes``, else the sparse path over the cached pairs (same numbers,
see :mod:`~xmask_cli.model.attention.path`; a model that needs the dense grid,
``dense_only``, is refused above ``dense_max_nodes``).

Example::

    split = edge_split(data.edge_index, data.num_nodes, seed=0)
    path = prepare_pair_structure("cora", split.train_edge_index, data.num_nodes, cfg.structure, cache_dir)
    structure = PairStructure(path, split.train_edge_index, data.num_nodes, 5000, torch.device("cpu"))
    h = structure.encode(model, x)  # [N, hidden]
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np
import torch
from torch import Tensor

from xmask_cli.cache import StructureCache, cache_key, cache_path
from xmask_cli.config import StructureSection
from xmask_cli.data.graphset import graphs_fingerprint
from xmask_cli.engine.batching.extras import GraphExtras, to_tensors
from xmask_cli.engine.scoring.metrics import ArrayInput
from xmask_cli.engine.scoring.splits import pair_keys
from xmask_cli.model.attention.path import full_graph_attention
from xmask_cli.prepare import prepare_graphs, structure_params

if TYPE_CHECKING:
    from xmask_cli.model.network import XMaskNet

__all__ = ["PairStructure", "prepare_pair_structure", "canonical_edges", "structure_fingerprint"]


def canonical_edges(edge_index: ArrayInput, num_nodes: int) -> np.ndarray:
    """``[2, 2U]`` unique undirected edges (no self loops): sorted pairs ``u < v``, then reversed.

    One canonical form, so the cache key (which hashes the edges) and the
    tasks' fingerprint check do not depend on edge order or duplicates.
    """
    ei = np.ascontiguousarray(np.asarray(edge_index), dtype=np.int64).reshape(2, -1)
    n = int(num_nodes)
    if ei.size and (ei.min() < 0 or ei.max() >= n):
        raise ValueError(f"edge ids must lie in [0, {n})")
    keys = np.unique(pair_keys(ei[0], ei[1], n)[ei[0] != ei[1]])
    pairs = np.stack([keys // n, keys % n]).astype(np.int64) if n else np.zeros((2, 0), dtype=np.int64)
    return np.concatenate([pairs, pairs[::-1]], axis=1)


def structure_fingerprint(edge_index: ArrayInput, num_nodes: int) -> str:
    """Fingerprint of the (canonical) graph whose structure a pair task may see."""
    return graphs_fingerprint([canonical_edges(edge_index, num_nodes)], np.asarray([int(num_nodes)]))


def prepare_pair_structure(
    dataset_key: str,
    edge_index: np.ndarray,
    num_nodes: int,
    cfg: StructureSection,
    cache_dir: Path,
    *,
    level: str = "link",
    workers: int = 1,
    force: bool = False,
    log: Callable[[str], None] = lambda m: None,
) -> Path:
    """Prepare (or reuse) the structure cache of the TRAINING-edge graph; returns its path.

    The cache lives under ``<cache_dir>/<dataset_key>-train-edges/``; its key
    hashes these edges, so another split (seed, fractions) gets its own file
    and the full graph's cache is never reused by mistake.

    Args:
        dataset_key: lower-case dataset name, e.g. ``"cora"``.
        edge_index: ``[2, E]`` training edges (both directions, or either; canonicalised).
        num_nodes: ``N``; isolated nodes (all of whose edges are held out) stay in the graph.
        cfg: the structure section of the config.
        level: recorded in the cache (``"link"`` or ``"edge"``).
        log: receives a line when the structure has to be computed.
    """
    edges = canonical_edges(edge_index, num_nodes)
    nn = np.asarray([int(num_nodes)], dtype=np.int64)
    fingerprint = graphs_fingerprint([edges], nn)
    key = f"{dataset_key}-train-edges"
    path = cache_path(Path(cache_dir), key, cache_key(fingerprint, structure_params(cfg, level)))
    if force or not path.exists():
        log(f"preparing the structure of {dataset_key}'s training edges ({edges.shape[1] // 2} undirected edges, "
            f"{int(num_nodes)} nodes) -> {path}")
    summary = prepare_graphs(dataset_key=key, level=level, edges=[edges], num_nodes=nn, fingerprint=fingerprint,
                             cfg=cfg, cache_dir=Path(cache_dir), workers=workers, force=force, log=log)
    if not summary.cached:
        log(f"prepared {summary.path} in {summary.seconds:.1f}s")
    return Path(summary.path)


class PairStructure:
    """Cached structure of the training-edge graph, ready for the model (dense or sparse).

    Refuses a cache whose fingerprint is not that of ``edge_index`` (the
    leakage guard). Attributes: ``dense`` (which path), ``k`` (stored powers),
    ``powers`` ``[1, K, N, N]`` (dense) or ``pairs`` ``[2, P]`` / ``values``
    ``[P, K]`` (sparse), ``extras`` for the learned biases or None.
    """

    def __init__(self, path: str | os.PathLike[str], edge_index: np.ndarray, num_nodes: int, dense_max_nodes: int,
                 device: torch.device, attention: str = "auto", needs: Iterable[str] = (),
                 dense_only: str | None = None):
        with StructureCache(path) as c:
            if c.num_graphs != 1 or c.num_nodes(0) != num_nodes:
                raise ValueError(f"cache {path} does not hold one graph of {num_nodes} nodes")
            # The leakage guard: only a cache of exactly the training edges is accepted.
            if c.fingerprint != structure_fingerprint(edge_index, num_nodes):
                raise ValueError(f"cache {path} was not prepared from this split's training edges; "
                                 f"build it with prepare_pair_structure(..., split training edges, ...)")
            num_pairs = c.num_pairs("powers", 0)
            self.dense = full_graph_attention(attention, num_nodes, num_pairs, device, dense_max_nodes,
                                              dense_only) == "dense"
            extras = GraphExtras(c, 0, needs) if needs else None
            self.extras = None
            if self.dense:
                self.powers = torch.from_numpy(c.dense_powers(0)).unsqueeze(0).to(device)
                self.k = int(self.powers.size(1))
                if extras is not None:
                    self.extras = to_tensors(extras.dense(), device, batch_dim=True)
            else:
                row, col, vals = c.powers(0)
                self.pairs = torch.from_numpy(np.stack([row.astype(np.int64), col.astype(np.int64)])).to(device)
                self.values = torch.from_numpy(np.ascontiguousarray(vals, dtype=np.float32)).to(device)
                self.k = int(self.values.size(1))
                if extras is not None:
                    self.extras = to_tensors(extras.pairs(row, col), device)

    def encode(self, model: XMaskNet, x: Tensor) -> Tensor:
        """``[N, hidden]`` embeddings of every node."""
        cfg = getattr(model, "cfg", None)
        if cfg is not None and cfg.use_bias and cfg.max_power > self.k:
            raise ValueError(f"the model reads Â^{cfg.max_power} but the cache holds powers up to {self.k}; "
                             f"prepare with structure.powers.k >= {cfg.max_power}")
        if self.dense:
            return model.encode_dense(x.unsqueeze(0), self.powers, None, extras=self.extras)[0]
        # Without return_terms the embeddings come alone.
        return cast(Tensor, model.encode_sparse(x, self.pairs, self.values, extras=self.extras))
