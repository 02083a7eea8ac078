"""Canonical sparse adjacency from an edge list.

Every structure function starts from the same canonical form so that
self loops, duplicate edges and edge direction are handled in one place.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def adjacency(edge_index: np.ndarray, num_nodes: int, *, symmetric: bool = True) -> sp.csr_matrix:
    """Binary CSR adjacency of a graph, without self loops or duplicates.

    Args:
        edge_index: integer array of shape ``[2, E]`` (source, target).
        num_nodes: number of nodes ``n``; ids must lie in ``[0, n)``.
        symmetric: symmetrize (``A or A^T``). Only the magnetic Laplacian
            asks for the directed form.

    Returns:
        ``n x n`` float64 CSR matrix with entries in ``{0, 1}`` and sorted indices.
    """
    edge_index = np.asarray(edge_index, dtype=np.int64).reshape(2, -1)
    if edge_index.size and (edge_index.min() < 0 or edge_index.max() >= num_nodes):
        raise ValueError(f"edge ids must lie in [0, {num_nodes}), got [{edge_index.min()}, {edge_index.max()}]")
    row, col = edge_index
    keep = row != col  # self loops are added back explicitly as I where the math wants them
    row, col = row[keep], col[keep]
    if symmetric:
        row, col = np.concatenate([row, col]), np.concatenate([col, row])
    a = sp.csr_matrix((np.ones(row.shape[0]), (row, col)), shape=(num_nodes, num_nodes))
    a.sum_duplicates()
    a.data[:] = 1.0  # duplicates collapse to one edge
    a.sort_indices()
    return a


def inv_sqrt(deg: np.ndarray) -> np.ndarray:
    """``deg^-1/2`` with zero where ``deg`` is zero (isolated nodes)."""
    out = np.zeros_like(deg, dtype=np.float64)
    nz = deg > 0
    out[nz] = 1.0 / np.sqrt(deg[nz])
    return out


def connected_components(a: sp.spmatrix) -> np.ndarray:
    """Component label per node (weak connectivity). Two nodes are mutually
    unreachable exactly when their labels differ."""
    from scipy.sparse.csgraph import connected_components as cc

    return cc(a, directed=True, connection="weak")[1].astype(np.int32)
