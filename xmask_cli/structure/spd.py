"""Shortest-path distances up to a cut-off, as sparse pairs.

A bounded breadth-first search from every node, compiled with numba and run
in parallel over sources. Pairs farther than the cut-off are not listed;
"unreachable" is told apart from "farther than the cut-off" by the
connected-component labels stored beside them (see :func:`pair_distance`).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from xmask_cli.structure.jit import numba
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


def shortest_path_pairs(a: sp.spmatrix, max_distance: int, *, start: int = 0,
                        stop: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All pairs at hop distance ``<= max_distance``, the diagonal included.

    Args:
        a: adjacency (symmetric for undirected distances).
        max_distance: cut-off, at most 254.
        start, stop: only the rows (sources) ``start:stop`` (a block of a large graph); rows stay global ids.

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
    sources = np.arange(start, n if stop is None else stop, dtype=np.int64)
    workers = numba.get_num_threads()
    counts = _count(indptr, indices, max_distance, sources, workers)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    rows = np.empty(offsets[-1], dtype=np.int32)
    cols = np.empty(offsets[-1], dtype=np.int32)
    dists = np.empty(offsets[-1], dtype=np.uint8)
    _fill(indptr, indices, max_distance, sources, workers, offsets, rows, cols, dists)
    return rows, cols, dists


class PairDistances:
    """Hop distances of any pairs of one graph, from its stored sparse pairs and component labels.

    The one lookup with the component fallback: a stored pair gives its hop
    distance; another pair gives :data:`BEYOND` when both ends share a
    connected component (reachable, beyond the cut-off) and
    :data:`UNREACHABLE` otherwise. The stored pairs are sorted once, so many
    lookups (batches, blocks) cost one ``searchsorted`` each.

    Args:
        row, col, dist: the stored pairs (any order) and their distances.
        component: ``[n]`` connected-component label of every node.
    """

    def __init__(self, row: np.ndarray, col: np.ndarray, dist: np.ndarray, component: np.ndarray):
        self.component = np.asarray(component, dtype=np.int64)
        self.n = int(self.component.shape[0])
        self.row, self.col = np.asarray(row, dtype=np.int64), np.asarray(col, dtype=np.int64)
        self.dist = np.asarray(dist)
        self._keys: np.ndarray | None = None  # sorted pair keys, built on the first sparse lookup

    def _sorted(self) -> tuple[np.ndarray, np.ndarray]:
        if self._keys is None:
            keys = self.row * self.n + self.col
            order = np.argsort(keys, kind="stable")
            self._keys, self._sorted_dist = keys[order], self.dist[order]
        return self._keys, self._sorted_dist

    def pairs(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """``[E]`` int64 distances of the pairs ``(i[e], j[e])``."""
        i, j = np.asarray(i, dtype=np.int64), np.asarray(j, dtype=np.int64)
        keys, dist = self._sorted()
        query = i * self.n + j
        pos = np.minimum(np.searchsorted(keys, query), max(keys.shape[0] - 1, 0))
        hit = keys[pos] == query if keys.shape[0] else np.zeros(query.shape, dtype=bool)
        out = np.where(self.component[i] == self.component[j], BEYOND, UNREACHABLE).astype(np.int64)
        out[hit] = dist[pos[hit]]
        return out

    def block(self, rows: np.ndarray | None = None, cols: np.ndarray | None = None) -> np.ndarray:
        """``[len(rows), len(cols)]`` int16 distances between two sets of distinct nodes (None: all nodes)."""
        rows = np.arange(self.n) if rows is None else np.asarray(rows, dtype=np.int64)
        cols = np.arange(self.n) if cols is None else np.asarray(cols, dtype=np.int64)
        out = np.where(self.component[rows][:, None] == self.component[cols][None, :], BEYOND,
                       UNREACHABLE).astype(np.int16)
        local_r = np.full(self.n, -1, dtype=np.int64)
        local_c = np.full(self.n, -1, dtype=np.int64)
        local_r[rows], local_c[cols] = np.arange(len(rows)), np.arange(len(cols))
        lr, lc = local_r[self.row], local_c[self.col]
        keep = (lr >= 0) & (lc >= 0)
        out[lr[keep], lc[keep]] = self.dist[keep]
        return out


def pair_distance(
    row: np.ndarray, col: np.ndarray, dist: np.ndarray, component: np.ndarray, i: np.ndarray, j: np.ndarray
) -> np.ndarray:
    """Distance of arbitrary pairs ``(i, j)`` from stored sparse pairs (one :meth:`PairDistances.pairs` call).

    Returns the hop distance where listed, :data:`BEYOND` for pairs in the
    same component beyond the cut-off, and :data:`UNREACHABLE` otherwise.
    """
    return PairDistances(row, col, dist, component).pairs(i, j)
