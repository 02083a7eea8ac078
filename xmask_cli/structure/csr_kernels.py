"""Compiled row kernels on CSR matrices: a product truncated as each row is formed, and the union of supports.

Both give exactly what the scipy formulation gives (the tests compare bit for bit):

* :func:`product_rows` forms each row of ``left @ right`` in a dense accumulator, summing its terms in the
  order scipy's ``csr_matmat`` does (the left row's entries in stored order, each times the right row in
  stored order, from 0) and dropping exact zeros as it does; the truncation rule
  (:class:`~xmask_cli.structure.powers.Truncation`) then keeps the same entries as applying it to scipy's
  product, and the row is written with sorted columns. No raw product is ever held: memory is the output.
* :func:`union_rows` merges the sorted rows of several matrices and writes pairs and values directly, in
  the dtypes the cache stores.

Work is split over ``numba``'s threads in contiguous row chunks; each worker holds one accumulator of the
matrix width.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from xmask_cli.structure.jit import numba

__all__ = ["canonical", "product_rows", "union_rows"]

#: Multiply-adds per row chunk of :func:`product_rows` (chunks are what the threads share out).
ROW_CHUNK_FLOPS = 8_000_000
#: Cap on the accumulators of all workers together (bytes): wide matrices get fewer workers.
_SCRATCH_BYTES = 1 << 30


def canonical(m: sp.spmatrix) -> sp.csr_matrix:
    """``m`` as CSR with sorted, duplicate-free rows (duplicates summed, as scipy reads them); no copy when
    it already is one, and the argument is never modified."""
    c = m.tocsr()
    if not c.has_canonical_format:
        c = c.copy() if c is m else c
        c.sum_duplicates()
    return c


def _index_dtype(n: int) -> np.dtype:
    return np.dtype(np.int32) if n < 2**31 else np.dtype(np.int64)


@numba.njit(cache=True, nogil=True)
def _row_flops(lptr, lind, rptr):  # pragma: no cover - compiled
    """Multiply-adds of each row of ``left @ right``: an upper bound of its entries."""
    n = lptr.shape[0] - 1
    out = np.empty(n, dtype=np.int64)
    for r in range(n):
        s = 0
        for jj in range(lptr[r], lptr[r + 1]):
            j = lind[jj]
            s += rptr[j + 1] - rptr[j]
        out[r] = s
    return out


@numba.njit(cache=True, nogil=True)
def _merge_runs(a, buf, rs, nr):  # pragma: no cover - compiled
    """Sort ``a[rs[0]:rs[nr]]``, a sequence of ``nr`` ascending runs starting at ``rs[:nr]``, by merging runs
    pairwise (a product row arrives as such runs: the new columns of each right row, in its order); returns
    the array (``a`` or ``buf``) that holds the sorted values."""
    end = rs[nr]
    while nr > 1:
        k = 0
        i = 0
        while i < nr:
            s = rs[i]
            if i + 1 < nr:
                mid = rs[i + 1]
                e = rs[i + 2] if i + 2 < nr else end
                x, y, o = s, mid, s
                while x < mid and y < e:
                    if a[y] < a[x]:
                        buf[o] = a[y]
                        y += 1
                    else:
                        buf[o] = a[x]
                        x += 1
                    o += 1
                while x < mid:
                    buf[o] = a[x]
                    x += 1
                    o += 1
                while y < e:
                    buf[o] = a[y]
                    y += 1
                    o += 1
                i += 2
            else:
                for o in range(s, end):
                    buf[o] = a[o]
                i += 1
            rs[k] = s
            k += 1
        nr = k
        a, buf = buf, a
    return a


@numba.njit(cache=True, nogil=True)
def _truncate_sorted(cols, vals, m, prow, g, tau, topk, prot, cand, out_ind, out_val, pos):  # pragma: no cover
    """Write the entries of one row (``m`` entries, columns ascending) that the rule keeps at ``pos``; returns
    how many. The same set as :func:`~xmask_cli.structure.powers._keep_mask`: protected entries (the diagonal
    ``g`` and the sorted ``prow``) always, others with ``|x| >= tau``, then at most ``topk`` in all, the
    largest others first and, among equal values, the smaller columns."""
    nprot = 0
    nkept = 0
    p = 0
    np_ = prow.shape[0]
    for i in range(m):
        c = cols[i]
        while p < np_ and prow[p] < c:
            p += 1
        isp = c == g or (p < np_ and prow[p] == c)
        prot[i] = isp
        if isp:
            nprot += 1
            nkept += 1
        elif tau <= 0.0 or abs(vals[i]) >= tau:
            nkept += 1
    if topk <= 0 or nkept <= topk:  # no budget to enforce: protected entries and those passing tau
        q = 0
        for i in range(m):
            if prot[i] or tau <= 0.0 or abs(vals[i]) >= tau:
                out_ind[pos + q] = cols[i]
                out_val[pos + q] = vals[i]
                q += 1
        return q
    budget = max(topk - nprot, 0)
    ncand = 0
    for i in range(m):
        if not prot[i] and (tau <= 0.0 or abs(vals[i]) >= tau):
            cand[ncand] = abs(vals[i])
            ncand += 1
    thr = 0.0
    n_take_tie = 0
    if budget > 0:
        thr = -np.partition(-cand[:ncand], budget - 1)[budget - 1]  # the budget-th largest value
        n_gt = 0
        for t in range(ncand):
            if cand[t] > thr:
                n_gt += 1
        n_take_tie = budget - n_gt  # ties at the cut: the first ones in column order
    q = 0
    for i in range(m):
        take = prot[i]
        if not take and budget > 0 and (tau <= 0.0 or abs(vals[i]) >= tau):
            a = abs(vals[i])
            if a > thr:
                take = True
            elif a == thr and n_take_tie > 0:
                take = True
                n_take_tie -= 1
        if take:
            out_ind[pos + q] = cols[i]
            out_val[pos + q] = vals[i]
            q += 1
    return q


@numba.njit(cache=True, nogil=True, parallel=True)
def _product_fill(lptr, lind, ldata, rptr, rind, rdata, right_sorted, n_cols, pptr, pind, row_offset, tau, topk,
                  flops, chunks, slots, n_workers, out_ind, out_val, counts):  # pragma: no cover - compiled
    """Rows of ``trunc(left @ right)``; chunk ``c`` (rows ``chunks[c]:chunks[c+1]``) writes its rows one after
    another from ``slots[chunks[c]]``, row ``r``'s count in ``counts[r]``. ``right_sorted``: ``right``'s rows
    have ascending columns, so a product row arrives as ascending runs (merged, not sorted)."""
    nchunks = chunks.shape[0] - 1
    has_prot = pptr.shape[0] > 0
    empty = np.zeros(0, dtype=pind.dtype)
    for w in numba.prange(n_workers):
        acc = np.zeros(n_cols, dtype=np.float64)
        seen = np.zeros(n_cols, dtype=np.bool_)
        widest = 0
        for c in range(w, nchunks, n_workers):
            for r in range(chunks[c], chunks[c + 1]):
                widest = max(widest, flops[r])
        widest = min(widest, n_cols)
        touched = np.empty(widest, dtype=np.int64)
        spare = np.empty(widest, dtype=np.int64)
        cols = np.empty(widest, dtype=np.int64)
        vals = np.empty(widest, dtype=np.float64)
        prot = np.empty(widest, dtype=np.bool_)
        cand = np.empty(widest, dtype=np.float64)
        widest_left = 0
        for c in range(w, nchunks, n_workers):
            for r in range(chunks[c], chunks[c + 1]):
                widest_left = max(widest_left, lptr[r + 1] - lptr[r])
        rs = np.empty(widest_left + 1, dtype=np.int64)
        for c in range(w, nchunks, n_workers):
            pos = slots[chunks[c]]
            for r in range(chunks[c], chunks[c + 1]):
                t = 0
                nr = 0
                for jj in range(lptr[r], lptr[r + 1]):
                    j = lind[jj]
                    v = ldata[jj]
                    t0 = t
                    for kk in range(rptr[j], rptr[j + 1]):
                        col = rind[kk]
                        acc[col] += v * rdata[kk]
                        if not seen[col]:
                            seen[col] = True
                            touched[t] = col
                            t += 1
                    if t > t0:  # this right row's new columns: one ascending run
                        rs[nr] = t0
                        nr += 1
                rs[nr] = t
                if not right_sorted:
                    touched[:t].sort()
                    srt = touched
                elif nr > 1:
                    srt = _merge_runs(touched, spare, rs, nr)
                else:
                    srt = touched
                m = 0
                for i in range(t):  # columns ascending; scipy keeps the nonzero sums only
                    col = srt[i]
                    seen[col] = False
                    x = acc[col]
                    acc[col] = 0.0
                    if x != 0.0:
                        cols[m] = col
                        vals[m] = x
                        m += 1
                g = r + row_offset
                prow = pind[pptr[g]:pptr[g + 1]] if has_prot else empty
                q = _truncate_sorted(cols, vals, m, prow, g, tau, topk, prot, cand, out_ind, out_val, pos)
                counts[r] = q
                pos += q


def _chunks(flops: np.ndarray, per_chunk: int, threads: int) -> np.ndarray:
    """Starts of contiguous row chunks of about ``per_chunk`` multiply-adds (at least ``threads`` chunks when
    there are rows enough), ending with the row count."""
    n = flops.shape[0]
    cum = np.cumsum(flops)
    total = int(cum[-1]) if n else 0
    if n == 0:
        return np.zeros(1, dtype=np.int64)
    step = max(1, min(per_chunk, -(-total // max(threads, 1))))
    cuts = np.searchsorted(cum, np.arange(step, total, step, dtype=np.int64), side="left") + 1
    return np.unique(np.concatenate([[0], cuts, [n]])).astype(np.int64)


def product_rows(left: sp.csr_matrix, right: sp.csr_matrix, tau: float = 0.0, topk: int = 0, *,
                 protect: sp.csr_matrix | None = None, row_offset: int = 0,
                 chunk_flops: int = ROW_CHUNK_FLOPS) -> sp.csr_matrix:
    """``trunc(left @ right)`` in float64, columns sorted: the same numbers and entries as scipy's product
    followed by the rule applied row by row (tau and top-k as in
    :class:`~xmask_cli.structure.powers.Truncation`; ``tau <= 0`` and ``topk <= 0`` keep every nonzero).

    Args:
        left, right: CSR matrices (``left`` may be a block of rows of a larger matrix).
        tau, topk: the rule.
        protect: canonical pattern (whole matrix, global rows) never dropped; the diagonal always is.
        row_offset: global index of ``left``'s first row (diagonal and ``protect`` rows).
        chunk_flops: multiply-adds per row chunk (the unit of work of a thread).
    """
    left, right = left.tocsr(), right.tocsr()  # stored order, as scipy's product reads it
    n, n_cols = left.shape[0], right.shape[1]
    lptr, lind = left.indptr, left.indices
    ldata = left.data if left.data.dtype == np.float64 else left.data.astype(np.float64)
    rdata = right.data if right.data.dtype == np.float64 else right.data.astype(np.float64)
    flops = _row_flops(lptr, lind, right.indptr)
    if protect is None:
        pptr, pind = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)
        plen = np.zeros(n, dtype=np.int64)
    else:
        p = canonical(protect)
        pptr, pind = p.indptr, p.indices
        plen = np.diff(pptr[row_offset:row_offset + n + 1]).astype(np.int64)
    cap = np.minimum(flops, n_cols)
    if topk > 0:  # a row over budget keeps max(topk, its protected entries): at most topk or plen + 1
        cap = np.minimum(cap, np.maximum(topk, plen + 1))
    slots = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(cap, out=slots[1:])
    threads = numba.get_num_threads()
    chunks = _chunks(flops, chunk_flops, threads)
    workers = int(max(1, min(threads, chunks.shape[0] - 1, _SCRATCH_BYTES // max(9 * n_cols, 1))))
    out_ind = np.empty(int(slots[-1]), dtype=_index_dtype(n_cols))
    out_val = np.empty(int(slots[-1]), dtype=np.float64)
    counts = np.zeros(n, dtype=np.int64)
    _product_fill(lptr, lind, ldata, right.indptr, right.indices, rdata, bool(right.has_sorted_indices), n_cols, pptr, pind, int(row_offset),
                  float(tau), int(topk), flops, chunks, slots, workers, out_ind, out_val, counts)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    total = int(indptr[-1])
    if total != int(slots[-1]):  # chunks wrote from their first row's slot: close the gaps between them
        ind, val = np.empty(total, dtype=out_ind.dtype), np.empty(total, dtype=np.float64)
        for a, b in zip(chunks[:-1], chunks[1:]):
            s, d, k = int(slots[a]), int(indptr[a]), int(indptr[b] - indptr[a])
            ind[d:d + k] = out_ind[s:s + k]
            val[d:d + k] = out_val[s:s + k]
        out_ind, out_val = ind, val
    out = sp.csr_matrix((out_val, out_ind, indptr), shape=(n, n_cols))
    out.has_canonical_format = True  # sorted, one entry per column
    return out


@numba.njit(cache=True, nogil=True, inline="always")
def _smallest_next(ptrs, ind, pos, r):  # pragma: no cover - compiled
    """The smallest column not yet passed in row ``r`` of any of the matrices (``pos[j]``: matrix ``j``'s
    cursor), or -1 when every row is used up: one step of the k-way merge."""
    best = -1
    for j in range(pos.shape[0]):
        if pos[j] < ptrs[j, r + 1]:
            c = ind[pos[j]]
            if best < 0 or c < best:
                best = c
    return best


@numba.njit(cache=True, nogil=True, parallel=True)
def _union_count(ptrs, ind, bounds):  # pragma: no cover - compiled
    """Per row, the number of distinct columns over the ``k`` matrices (``ptrs[j]``: matrix ``j``'s row
    starts into ``ind``)."""
    k = ptrs.shape[0]
    rows = ptrs.shape[1] - 1
    counts = np.zeros(rows, dtype=np.int64)
    for w in numba.prange(bounds.shape[0] - 1):
        pos = np.empty(k, dtype=np.int64)
        for r in range(bounds[w], bounds[w + 1]):
            for j in range(k):
                pos[j] = ptrs[j, r]
            cnt = 0
            while True:
                best = _smallest_next(ptrs, ind, pos, r)
                if best < 0:
                    break
                cnt += 1
                for j in range(k):
                    if pos[j] < ptrs[j, r + 1] and ind[pos[j]] == best:
                        pos[j] += 1
            counts[r] = cnt
    return counts


@numba.njit(cache=True, nogil=True, parallel=True)
def _union_fill(ptrs, ind, data, bounds, off, out_col, out_val):  # pragma: no cover - compiled
    """Columns of each row's union in ascending order, and every matrix's value there (0 where absent)."""
    k = ptrs.shape[0]
    for w in numba.prange(bounds.shape[0] - 1):
        pos = np.empty(k, dtype=np.int64)
        for r in range(bounds[w], bounds[w + 1]):
            for j in range(k):
                pos[j] = ptrs[j, r]
            o = off[r]
            while True:
                best = _smallest_next(ptrs, ind, pos, r)
                if best < 0:
                    break
                out_col[o] = best
                for j in range(k):
                    if pos[j] < ptrs[j, r + 1] and ind[pos[j]] == best:
                        out_val[o, j] = data[pos[j]]
                        pos[j] += 1
                    else:
                        out_val[o, j] = 0.0
                o += 1


@numba.njit(cache=True, nogil=True, parallel=True)
def _union2(aptr, aind, adata, bptr, bind, bdata, bounds, off, out_col, out_val, counting):  # pragma: no cover
    """:func:`_union_count` (``counting``: counts returned) and :func:`_union_fill` for two matrices, read
    where they are (no concatenated copy)."""
    rows = aptr.shape[0] - 1
    counts = np.zeros(rows if counting else 0, dtype=np.int64)
    for w in numba.prange(bounds.shape[0] - 1):
        for r in range(bounds[w], bounds[w + 1]):
            x, xe, y, ye = aptr[r], aptr[r + 1], bptr[r], bptr[r + 1]
            o = 0 if counting else off[r]
            while x < xe or y < ye:
                if y >= ye or (x < xe and aind[x] < bind[y]):
                    if not counting:
                        out_col[o] = aind[x]
                        out_val[o, 0] = adata[x]
                        out_val[o, 1] = 0.0
                    x += 1
                elif x >= xe or bind[y] < aind[x]:
                    if not counting:
                        out_col[o] = bind[y]
                        out_val[o, 0] = 0.0
                        out_val[o, 1] = bdata[y]
                    y += 1
                else:
                    if not counting:
                        out_col[o] = aind[x]
                        out_val[o, 0] = adata[x]
                        out_val[o, 1] = bdata[y]
                    x += 1
                    y += 1
                o += 1
            if counting:
                counts[r] = o
    return counts


def union_rows(mats: list[sp.spmatrix], col_dtype: np.dtype = np.dtype(np.int64),
               value_dtype: np.dtype = np.dtype(np.float64)) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The union of the matrices' supports, row by row: ``(counts, col, values)``.

    ``counts[i]`` pairs for row ``i``, their columns ascending in ``col`` (``col_dtype``), and
    ``values[:, j]`` (``value_dtype``, converted as numpy's ``astype`` does) the entry of ``mats[j]`` there:
    its stored value (duplicates summed; an explicitly stored zero is a pair), 0 where it has none.
    """
    cs = [canonical(m) for m in mats]
    rows = cs[0].shape[0]
    k = len(cs)
    workers = max(1, min(numba.get_num_threads(), rows))
    bounds = np.linspace(0, rows, workers + 1).astype(np.int64)
    if k == 2:
        (a, b), none = cs, np.zeros(0, dtype=np.int64)
        ad, bd = (np.asarray(c.data, dtype=np.float64) for c in cs)
        counts = _union2(a.indptr, a.indices, ad, b.indptr, b.indices, bd, bounds, none,
                         np.zeros(0, dtype=col_dtype), np.zeros((0, 2), dtype=value_dtype), True)
        off = np.zeros(rows + 1, dtype=np.int64)
        np.cumsum(counts, out=off[1:])
        col = np.empty(int(off[-1]), dtype=col_dtype)
        values = np.empty((int(off[-1]), 2), dtype=value_dtype)
        _union2(a.indptr, a.indices, ad, b.indptr, b.indices, bd, bounds, off, col, values, False)
        return counts, col, values
    ptrs = np.empty((k, rows + 1), dtype=np.int64)
    base = 0
    for j, c in enumerate(cs):
        ptrs[j] = c.indptr
        ptrs[j] += base
        base += int(c.indptr[-1])
    ind = np.concatenate([c.indices[:c.indptr[-1]] for c in cs]) if k > 1 else cs[0].indices
    data = np.concatenate([np.asarray(c.data[:c.indptr[-1]], dtype=np.float64) for c in cs]) if k > 1 \
        else np.asarray(cs[0].data, dtype=np.float64)
    counts = _union_count(ptrs, ind, bounds)
    off = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(counts, out=off[1:])
    col = np.empty(int(off[-1]), dtype=col_dtype)
    values = np.empty((int(off[-1]), k), dtype=value_dtype)
    _union_fill(ptrs, ind, data, bounds, off, col, values)
    return counts, col, values
