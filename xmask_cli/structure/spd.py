"""Shortest-path distances up to a cut-off, as sparse pairs.

A bounded breadth-first search from every node, compiled with numba and run
in parallel over sources. Pairs farther than the cut-off are not listed;
"unreachable" is told apart from "farther than the cut-off" by the
connected-component labels stored beside them (see :func:`pair_distance`).
"""
from __future__ import annotations

import numba
import numpy as np
import scipy.sparse as sp

from xmask_cli.structure.walks import _ball

#: Stored code for a pair in the same component but beyond the cut-off.
BEYOND = -1
#: Stored code for a pair in different components.
UNREACHABLE = -2


@numba.njit(cache=True, parallel=True)
def _count(indptr, indices, max_dist, sources, n_workers):
    n = indptr.shape[0] - 1
    counts = np.zeros(sources.shape[0], dtype=np.int64)
    # One scratch buffer per worker; sources are dealt round-robin.
    for w in numba.prange(n_workers):
        dist = np.full(n, -1, dtype=np.int32)
        queue = np.empty(n, dtype=np.int64)
        for s in range(w, sources.shape[0], n_workers):
            t = _ball(indptr, indices, sources[s], max_dist, dist, queue)
            counts[s] = t
            for i in range(t):
                dist[queue[i]] = -1  # restore the scratch array for the next source
    return counts


@numba.njit(cache=True, parallel=True)
def _fill(indptr, indices, max_dist, sources, n_workers, offsets, out_row, out_col, out_dist):
    n = indptr.shape[0] - 1
    for w in numba.prange(n_workers):
        dist = np.full(n, -1, dtype=np.int32)
        queue = np.empty(n, dtype=np.int64)
        for s in range(w, sources.shape[0], n_workers):
            t = _ball(indptr, indices, sources[s], max_dist, dist, queue)
            a = offsets[s]
            # BFS order (by distance) within a row: sorting every row cost more than the search itself.
            for i in range(t):
                v = queue[i]
                out_row[a + i] = sources[s]
                out_col[a + i] = v
                out_dist[a + i] = dist[v]
                dist[v] = -1


def shortest_path_pairs(a: sp.spmatrix, max_distance: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All pairs at hop distance ``<= max_distance``, the diagonal included.

    Args:
        a: adjacency (symmetric for undirected distances).
        max_distance: cut-off, at most 254.

    Returns:
        ``(row, col, dist)`` as int32, int32, uint8; grouped by ascending
        ``row``, and within a row in breadth-first order (not by column).
    """
    if not 0 <= max_distance <= 254:
        raise ValueError("max_distance must lie in [0, 254]")
    a = sp.csr_matrix(a)
    a.sort_indices()
    indptr = a.indptr.astype(np.int64)
    indices = a.indices.astype(np.int64)
    n = a.shape[0]
    sources = np.arange(n, dtype=np.int64)
    workers = numba.get_num_threads()
    counts = _count(indptr, indices, max_distance, sources, workers)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    rows = np.empty(offsets[-1], dtype=np.int32)
    cols = np.empty(offsets[-1], dtype=np.int32)
    dists = np.empty(offsets[-1], dtype=np.uint8)
    _fill(indptr, indices, max_distance, sources, workers, offsets, rows, cols, dists)
    return rows, cols, dists


def pair_distance(
    row: np.ndarray, col: np.ndarray, dist: np.ndarray, component: np.ndarray, i: np.ndarray, j: np.ndarray
) -> np.ndarray:
    """Distance of arbitrary pairs ``(i, j)`` from stored sparse pairs.

    Returns the hop distance where listed, :data:`BEYOND` for pairs in the
    same component beyond the cut-off, and :data:`UNREACHABLE` otherwise.
    """
    n = int(component.shape[0])
    stored = row.astype(np.int64) * n + col
    order = np.argsort(stored, kind="stable")
    stored, dist = stored[order], dist[order]
    query = np.asarray(i, dtype=np.int64) * n + np.asarray(j, dtype=np.int64)
    pos = np.searchsorted(stored, query)
    pos_c = np.minimum(pos, max(stored.shape[0] - 1, 0))
    hit = (stored.shape[0] > 0) & (stored[pos_c] == query) if stored.shape[0] else np.zeros(query.shape, dtype=bool)
    out = np.where(component[np.asarray(i)] == component[np.asarray(j)], BEYOND, UNREACHABLE).astype(np.int64)
    out[hit] = dist[pos_c[hit]]
    return out
