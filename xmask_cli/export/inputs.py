"""The inputs of an exported program built from a run's own data: its features and its structure cache.

What a program takes is in :func:`~xmask_cli.export.program.program_spec`; these builders give the
run's graphs in that form, so the program can be checked against ``xmask eval`` and a user can see how
inputs are laid out. The features are the run's input features (the dataset's, with the structural
columns ``model.node_struct`` appends), the powers the cache's ``Â^1..Â^K`` (the first ``K`` channels:
the highest power a head reads).

Example::

    for ids, (x, powers, mask) in graph_inputs(cache_path, features, test_ids, k=4):
        logits = program.module()(x, powers, mask)      # [len(ids), classes]
"""
from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

import numpy as np
import torch
from torch import Tensor

from xmask_cli.cache import StructureCache

__all__ = ["graph_inputs", "dense_graph", "pairs_graph", "pad_graphs"]


def pad_graphs(features: Sequence[Tensor], powers: Sequence[np.ndarray], min_nodes: int = 1,
               ) -> tuple[Tensor, Tensor, Tensor]:
    """``(x [B, N, F], powers [B, K, N, N], mask [B, N])`` of graphs padded to the largest (at least ``min_nodes``).

    Args:
        features: per graph, its ``[n_b, F]`` features.
        powers: per graph, its ``[K, n_b, n_b]`` dense powers (zero off the stored support).
    """
    if len(features) != len(powers) or not features:
        raise ValueError(f"pad_graphs needs as many features as powers (>= 1), got {len(features)} and {len(powers)}")
    sizes = [int(x.size(0)) for x in features]
    n, k, width = max(max(sizes), min_nodes), int(powers[0].shape[0]), int(features[0].size(1))
    x = torch.zeros(len(sizes), n, width, dtype=features[0].dtype)
    p = torch.zeros(len(sizes), k, n, n, dtype=torch.float32)
    mask = torch.zeros(len(sizes), n, dtype=torch.bool)
    for b, (feat, pw, size) in enumerate(zip(features, powers, sizes)):
        x[b, :size] = feat
        p[b, :, :size, :size] = torch.from_numpy(np.ascontiguousarray(pw, dtype=np.float32))
        mask[b, :size] = True
    return x, p, mask


def graph_inputs(cache_path: str | os.PathLike[str], features: Sequence[Tensor], ids: Sequence[int], k: int,
                 batch_size: int = 32) -> Iterator[tuple[list[int], tuple[Tensor, Tensor, Tensor]]]:
    """The dense program's inputs of graphs ``ids``, ``batch_size`` graphs at a time, in the order given.

    Args:
        cache_path: the run's structure cache (``config.json``'s ``cache_path``).
        features: the run's input features of every graph of the dataset (indexed by graph id).
        ids: the graphs, e.g. a split part.
        k: the powers the program takes (the cache's first ``k`` channels).

    Yields:
        ``(graph ids, (x, powers, mask))`` per batch.
    """
    with StructureCache(cache_path) as cache:
        for start in range(0, len(ids), batch_size):
            chunk = [int(g) for g in ids[start:start + batch_size]]
            yield chunk, pad_graphs([features[g] for g in chunk], [cache.dense_powers(g)[:k] for g in chunk])


def dense_graph(cache_path: str | os.PathLike[str], x: Tensor, k: int) -> tuple[Tensor, Tensor, Tensor]:
    """The dense program's inputs of a one-graph (node-level) dataset: ``([1, N, F], [1, K, N, N], [1, N])``."""
    with StructureCache(cache_path) as cache:
        powers = cache.dense_powers(0)[:k]
    return pad_graphs([x], [powers])


def pairs_graph(cache_path: str | os.PathLike[str], x: Tensor, k: int) -> tuple[Tensor, Tensor, Tensor]:
    """The pairs program's inputs of a one-graph dataset: ``(x [N, F], edge_index [2, E], values [E, K])``.

    The pairs are the cache's stored support (every pair within the cached powers' reach), rows ascending.
    """
    with StructureCache(cache_path) as cache:
        row, col, values = cache.powers(0)
    edge_index = torch.from_numpy(np.stack([row.astype(np.int64), col.astype(np.int64)]))
    return x, edge_index, torch.from_numpy(np.ascontiguousarray(values[:, :k], dtype=np.float32))
