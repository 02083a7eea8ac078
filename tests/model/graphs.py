"""Tiny graphs and an independent numpy Â^k for the model tests."""
from __future__ import annotations

import numpy as np
import torch

EPS = 1e-30


def adjacency(n: int, edges: list[tuple[int, int]]) -> np.ndarray:
    """Symmetric 0/1 adjacency of an undirected edge list."""
    a = np.zeros((n, n))
    for i, j in edges:
        a[i, j] = a[j, i] = 1.0
    return a


def norm_powers(a: np.ndarray, k: int) -> np.ndarray:
    """``[k, n, n]`` float64 ``Â^1..Â^k``, ``Â = D^-1/2 (A + I) D^-1/2``."""
    a_hat = a + np.eye(len(a))
    d = a_hat.sum(1) ** -0.5
    a_hat = d[:, None] * a_hat * d[None, :]
    return np.stack([np.linalg.matrix_power(a_hat, p) for p in range(1, k + 1)])


def a_hat_of(edges: np.ndarray, n: int) -> np.ndarray:
    """Dense float64 ``Â`` of a ``[2, E]`` edge array (self loops in the input ignored, both directions taken)."""
    return norm_powers(adjacency(n, [(int(u), int(v)) for u, v in edges.T if u != v]), 1)[0]


def union_pairs(powers: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """``edge_index [2, E]`` of the union support of the powers and ``values [E, K]`` there."""
    row, col = np.nonzero((powers != 0).any(0))
    values = powers[:, row, col].T
    return torch.from_numpy(np.stack([row, col])).long(), torch.from_numpy(values)


def padded(graphs: list[np.ndarray], k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense batch of adjacencies: powers ``[B, K, N, N]`` float64 (zero-padded), mask ``[B, N]``."""
    n = max(len(a) for a in graphs)
    powers = torch.zeros(len(graphs), k, n, n, dtype=torch.float64)
    mask = torch.zeros(len(graphs), n, dtype=torch.bool)
    for b, a in enumerate(graphs):
        powers[b, :, : len(a), : len(a)] = torch.from_numpy(norm_powers(a, k))
        mask[b, : len(a)] = True
    return powers, mask


def disjoint_union(graphs: list[np.ndarray], k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Union-support pairs of ``Â^1..Â^K`` over the disjoint union of the graphs, in order."""
    edges, values, offset = [], [], 0
    for a in graphs:
        e, v = union_pairs(norm_powers(a, k))
        edges.append(e + offset)
        values.append(v)
        offset += len(a)
    return torch.cat(edges, 1), torch.cat(values)


# A 6-node path with a triangle at one end: Â^1, Â^2 leave many zero pairs.
PATH_TRIANGLE = adjacency(6, [(0, 1), (1, 2), (2, 0), (2, 3), (3, 4), (4, 5)])
# A second, larger graph (two components) to share a batch with.
TWO_PARTS = adjacency(8, [(0, 1), (1, 2), (2, 3), (3, 0), (4, 5), (5, 6), (6, 7)])
