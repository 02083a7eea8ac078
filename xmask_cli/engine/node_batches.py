"""Node-level batches cut from one cached graph: the batch type and the CSR slicing behind it.

Powers are never recomputed for a batch: a random subgraph or a METIS part
reads the cached *global* powers restricted to its nodes.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from torch import Tensor

__all__ = ["NodeBatch", "induced_pairs", "dense_block"]


@dataclass
class NodeBatch:
    """One node-level batch on the CPU.

    Attributes:
        nodes: ``[n]`` global ids of the batch's nodes (ascending), or None for the whole graph.
        targets: ``[t]`` batch-local positions whose loss counts (training nodes in it).
        powers: ``[1, K, n, n]`` dense powers (``full`` / ``subgraph``), or None.
        edge_index: ``[2, E]`` batch-local attended pairs (``partition``), or None.
        values: ``[E, K]`` powers at those pairs (``partition``), or None.
        extras: what the learned biases read (dense with a batch axis of 1, or
            per pair / node; see :class:`~xmask_cli.engine.extras.GraphExtras`), or None.
    """

    nodes: Tensor | None
    targets: Tensor
    powers: Tensor | None = None
    edge_index: Tensor | None = None
    values: Tensor | None = None
    extras: dict[str, Tensor] | None = None


def induced_pairs(indptr: np.ndarray, col: np.ndarray, nodes: np.ndarray,
                  local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cached pairs with both ends in ``nodes``, relabelled to batch-local ids.

    Args:
        indptr: ``[N+1]`` CSR row pointers of the graph's pairs.
        col: ``[P]`` global column of each pair.
        nodes: ``[n]`` ascending global ids of the batch.
        local: ``[N]`` scratch map, ``-1`` everywhere; restored before returning
            (reused across calls so no ``[N]`` array is allocated per batch).

    Returns:
        ``(pair_ids [E], edge_index [2, E])``: positions into the CSR arrays
        (to gather values) and local ``(row, col)``, rows ascending as in the cache.
    """
    starts, ends = indptr[nodes], indptr[nodes + 1]
    counts = ends - starts
    # Positions of every pair whose row is in the batch, without a Python loop.
    offsets = np.repeat(starts - np.cumsum(counts) + counts, counts)
    pos = np.arange(int(counts.sum()), dtype=np.int64) + offsets
    local[nodes] = np.arange(len(nodes), dtype=np.int64)
    try:
        lc = local[col[pos]]
        keep = lc >= 0
        rows = np.repeat(np.arange(len(nodes), dtype=np.int64), counts)
        return pos[keep], np.stack([rows[keep], lc[keep]])
    finally:
        local[nodes] = -1


def dense_block(indptr: np.ndarray, col: np.ndarray, values: np.ndarray, nodes: np.ndarray,
                local: np.ndarray) -> np.ndarray:
    """``[K, n, n]`` cached global powers restricted to rows and columns ``nodes``.

    Equal to ``dense_powers[:, nodes][:, :, nodes]`` without ever building the
    ``N x N`` matrix: only the batch rows of the CSR are read.
    """
    pos, (r, c) = induced_pairs(indptr, col, nodes, local)
    out = np.zeros((values.shape[1], len(nodes), len(nodes)), dtype=np.float32)
    out[:, r, c] = values[pos].T
    return out
