"""Rows of matrix powers on the union of their supports, in one compiled pass.

For a non-negative matrix ``M`` whose pattern is a graph, the union of the
supports of ``e_i^T M^0 .. e_i^T M^K`` is the ball of radius ``K`` around
``i``. Propagating a row vector ``K`` times inside that ball gives every
power's row at once, with no sparse matrix products and no set unions:
for the exact (untruncated) powers of the many small graphs of a graph-level
dataset this is several times faster than ``scipy.sparse`` products followed
by :func:`~xmask_cli.structure.powers.union_pairs`.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from xmask_cli.structure.jit import numba


@numba.njit(cache=True, nogil=True)
def _ball(indptr, indices, source, radius, dist, queue):
    """Nodes within ``radius`` hops of ``source`` in BFS order; ``dist`` set for them."""
    head = 0
    tail = 1
    queue[0] = source
    dist[source] = 0
    while head < tail:
        u = queue[head]
        head += 1
        du = dist[u]
        if du == radius:
            continue
        for e in range(indptr[u], indptr[u + 1]):
            v = indices[e]
            if dist[v] < 0:
                dist[v] = du + 1
                queue[tail] = v
                tail += 1
    return tail


@numba.njit(cache=True, nogil=True)
def _grow(buf, need):
    """``buf`` with room for ``need`` rows: the same array, or a copy of it 1.5x larger (at least ``need``)."""
    cap = buf.shape[0]
    if need <= cap:
        return buf
    new_cap = max(need, cap + cap // 2 + 1024)
    if buf.ndim == 1:
        out = np.empty(new_cap, buf.dtype)
    else:
        out = np.empty((new_cap, buf.shape[1]), buf.dtype)
    out[:cap] = buf
    return out


@numba.njit(cache=True, nogil=True)
def _fill(indptr, indices, data, radius, k, first, base, lo, hi, write_dist, col, dist_out, col_k, val):
    """One BFS per source ``lo..hi-1``: distances on the radius ball, powers propagated on the k ball.

    A single pass: the outputs grow as they fill (``col``/``dist_out``/``col_k``/``val``
    are the starting buffers and fix the dtypes), so no counting pass runs first.
    Columns are written graph-local (minus ``base[source]``). BFS order is by
    distance, so the k ball is a prefix of the radius ball.

    Returns:
        ``(counts, counts_k, col, dist, col_k, val, used, used_k)``: the buffers hold ``used``
        (distance) and ``used_k`` (power) rows.
    """
    n = indptr.shape[0] - 1
    counts = np.zeros(hi - lo, dtype=np.int64)
    counts_k = np.zeros(hi - lo, dtype=np.int64)
    dist = np.full(n, -1, dtype=np.int32)
    queue = np.empty(n, dtype=np.int64)
    cur = np.zeros(n, dtype=np.float64)
    nxt = np.zeros(n, dtype=np.float64)
    used = 0
    used_k = 0
    for s in range(lo, hi):
        t = _ball(indptr, indices, s, radius, dist, queue)
        b = base[s]
        counts[s - lo] = t
        tk = 0
        while tk < t and dist[queue[tk]] <= k:
            tk += 1
        counts_k[s - lo] = tk
        col_k = _grow(col_k, used_k + tk)
        val = _grow(val, used_k + tk)
        a = used_k
        for i in range(tk):
            col_k[a + i] = queue[i] - b
        used_k += tk
        cur[s] = 1.0
        if first == 0:  # M^0 = I: 1 at the source (queue[0]), 0 elsewhere; the other columns are all written below
            for i in range(tk):
                val[a + i, 0] = 0.0
            val[a, 0] = 1.0
        # Row vector times M, k times. Before step j the support of cur is the ball of
        # radius j-1, a prefix of the BFS queue, so scanning that prefix suffices.
        reach = 1
        for j in range(1, k + 1):
            while reach < tk and dist[queue[reach]] <= j - 1:
                reach += 1
            for i in range(reach):
                u = queue[i]
                cu = cur[u]
                if cu != 0.0:
                    for e in range(indptr[u], indptr[u + 1]):
                        nxt[indices[e]] += cu * data[e]
            c = j - first
            for i in range(tk):
                v = queue[i]
                cur[v] = nxt[v]
                nxt[v] = 0.0
                if c >= 0:
                    val[a + i, c] = cur[v]
        # The distances go out as the search state is cleared (cur and nxt are non-zero on the k ball only).
        if write_dist:
            col = _grow(col, used + t)
            dist_out = _grow(dist_out, used + t)
            for i in range(t):
                v = queue[i]
                col[used + i] = v - b
                dist_out[used + i] = dist[v]
                dist[v] = -1
            used += t
        else:
            for i in range(t):
                dist[queue[i]] = -1
        for i in range(tk):
            cur[queue[i]] = 0.0
    return counts, counts_k, col, dist_out, col_k, val, used, used_k


#: Sources per piece of work when several threads share a block (pieces are joined in source order).
_PIECE = 2048
#: Starting rows of a piece's output buffers, per source (they grow as needed).
_ROWS_PER_SOURCE = 64


def _trimmed(buf: np.ndarray, used: int) -> np.ndarray:
    """The first ``used`` rows of a grown buffer: a view (growth by 1.5x leaves at most half as much spare
    room as data), copied out only when the starting guess left more room than data."""
    return buf[:used].copy() if buf.shape[0] - used > used + 65536 else buf[:used]


def ball_pairs(
    m: sp.spmatrix,
    k: int,
    *,
    spd_radius: int = 0,
    include_identity: bool = False,
    base: np.ndarray | None = None,
    col_dtype: np.dtype = np.dtype(np.int64),
    values_dtype: np.dtype = np.dtype(np.float64),
) -> dict[str, np.ndarray]:
    """Powers ``M^1..M^k`` on the ball of radius ``k`` and hop distances on the ball of
    radius ``spd_radius``, from one breadth-first search per node.

    Args:
        m: square non-negative sparse matrix whose pattern is the graph.
        k: highest power.
        spd_radius: also list every node within this many hops with its distance (0: no distances).
        include_identity: prepend the column ``M^0 = I`` to the powers.
        base: per node, a value subtracted from its pairs' columns (the first node
            of its graph in a block-diagonal matrix) so that columns come out graph-local.
        col_dtype: dtype of the columns written.
        values_dtype: dtype of the values written (computed in float64, rounded once on writing:
            ``float32`` gives what ``astype(np.float32)`` of the float64 values gives, without the copy).

    Returns:
        ``counts``/``col``/``values`` for the powers (``counts[i]`` pairs for node ``i``,
        in breadth-first order), and with ``spd_radius`` also
        ``spd_counts``/``spd_col``/``spd_dist``.
    """
    m = sp.csr_matrix(m, dtype=np.float64)
    m.sort_indices()
    n = m.shape[0]
    indptr = m.indptr.astype(np.int64)
    indices = m.indices.astype(np.int64)
    radius = max(k, spd_radius)
    if spd_radius and spd_radius < k:
        raise ValueError("spd_radius must be 0 or at least k")
    first = 0 if include_identity else 1
    base = np.zeros(n, dtype=np.int64) if base is None else np.asarray(base, dtype=np.int64)
    data = m.data.astype(np.float64)
    width = k + 1 - first
    write_dist = bool(spd_radius)

    def piece(lo: int, hi: int) -> tuple:
        rows = max(16, (hi - lo) * _ROWS_PER_SOURCE)
        return _fill(indptr, indices, data, radius, k, first, base, lo, hi, write_dist,
                     np.empty(rows if write_dist else 0, dtype=col_dtype), np.empty(rows if write_dist else 0, dtype=np.uint8),
                     np.empty(rows, dtype=col_dtype), np.empty((rows, width), dtype=values_dtype))

    workers = numba.get_num_threads()
    if workers <= 1 or n <= _PIECE:
        parts = [piece(0, n)]
    else:
        # Contiguous pieces, handed out in turn to threads (the kernel releases the GIL), joined in order.
        from concurrent.futures import ThreadPoolExecutor

        bounds = list(range(0, n, _PIECE)) + [n]
        with ThreadPoolExecutor(max_workers=workers) as pool:
            parts = list(pool.map(piece, bounds[:-1], bounds[1:]))
    parts = [(c, ck, _trimmed(sc, u), _trimmed(sd, u), _trimmed(kc, uk), _trimmed(v, uk))
             for c, ck, sc, sd, kc, v, u, uk in parts]
    if len(parts) == 1:
        counts, counts_k, spd_col, spd_dist, col, values = parts[0]
    else:
        counts, counts_k, spd_col, spd_dist, col, values = (np.concatenate(x) for x in zip(*parts))
    out = {"counts": counts_k, "col": col, "values": values}
    if spd_radius:
        out.update(spd_counts=counts, spd_col=spd_col, spd_dist=spd_dist)
    return out


def power_rows(m: sp.spmatrix, k: int, *, include_identity: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every row of ``M^1..M^k`` (and ``M^0 = I`` first if asked) on the ball of radius ``k``.

    Returns:
        ``(row, col, values)``: int64 rows ascending, each row's columns in
        breadth-first order, and ``values[:, j]`` the entry of ``M^(j+1)``
        (or ``M^j`` with the identity) at each pair; 0 where that power has none.
    """
    out = ball_pairs(m, k, include_identity=include_identity)
    rows = np.repeat(np.arange(m.shape[0], dtype=np.int64), out["counts"])
    return rows, out["col"], out["values"]
