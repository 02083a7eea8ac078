"""Normalized adjacency powers and random-walk matrices.

``Â = D^-1/2 (A + I) D^-1/2`` with ``D`` the degrees of ``A + I``; head ``h``
of X-LogSMask reads ``Â^{k_h}``. Large graphs keep a truncated, sparse
version of every power ``k >= 2``; the rule is explicit (:class:`Truncation`)
and is recorded in the cache, with the share of each row's mass it drops
(:func:`dropped_share` against the exact row sums of :func:`power_row_sums`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from xmask_cli.structure.csr_kernels import canonical, product_rows, union_rows
from xmask_cli.structure.graph import inv_sqrt
from xmask_cli.structure.jit import numba
from xmask_cli.structure.walks import ball_pairs, power_rows

# Multiply-adds per row chunk of a product (the unit of work a thread takes).
_ROW_BLOCK_NNZ = 8_000_000


@dataclass(frozen=True)
class Truncation:
    """Which entries of a matrix power ``k >= 2`` are kept (large graphs).

    ``P_1 = M`` whole (``M = Â``), and ``P_k = trunc(P_{k-1} @ cap(M))`` for
    ``k >= 2``. ``cap(M)`` is ``M`` with every row of more than ``fanout``
    entries cut to its diagonal and the ``fanout - 1`` neighbours of smallest
    degree (ties: the smaller node id) -- for ``Â`` these are the row's largest
    entries, since ``Â_jl = (d_j d_l)^-1/2``. So a hub passes its mass on to at
    most ``fanout`` nodes per product, and no product expands a hub's whole
    row into each of its neighbours' rows: a row of ``P_k`` costs at most
    ``fanout`` multiply-adds per entry of the same row of ``P_{k-1}``.
    Rows of at most ``fanout`` entries (nodes of degree ``< fanout``) are used
    whole, so on a graph without such hubs ``cap(M) = M``.

    The protected entries of a row -- its diagonal and its real edges, i.e. the
    support of ``Â`` (``A + I``) -- are never dropped by ``trunc``:

    1. every other entry with ``|x| < tau`` is dropped;
    2. a row with more than ``topk`` entries left keeps its protected entries
       and then the largest others until it holds ``topk`` entries in total
       (equal values: the smaller column id first). A row with
       ``deg + 1 >= topk`` protected entries keeps exactly those.

    Since ``Â >= 0`` has a positive diagonal, which ``cap`` keeps,
    ``(P_{k-1} cap(Â))_ij >= (P_{k-1})_ij Â_jj > 0`` wherever ``P_{k-1}`` has
    an entry, so by induction every stored power holds every real edge and the
    self loop, and the union support any head attends over is never thinner
    than one hop. Every stored entry is at most the exact ``Â^k`` entry (dropped
    mass also stops propagating into later powers); the row mass lost, by the
    cap and by ``trunc`` together, ``1 - (P_k 1)_i / (Â^k 1)_i``, is what
    prepare records. With ``tau = 0``, ``topk = 0`` and ``fanout = 0`` every
    power is exact.

    Attributes:
        tau: drop unprotected entries with absolute value below ``tau``.
        topk: row budget of rule 2 (0: no budget).
        fanout: row width of the right-hand factor ``cap(M)`` (0: no cap).
    """

    tau: float = 0.0
    topk: int = 0
    fanout: int = 0

    @property
    def exact(self) -> bool:
        return self.tau <= 0.0 and self.topk <= 0 and self.fanout <= 0


def cap_rows(m: sp.spmatrix, fanout: int, deg: np.ndarray) -> sp.csr_matrix:
    """``cap(m)`` of :class:`Truncation`: every row of more than ``fanout`` stored entries keeps its diagonal
    (where stored) and then the columns ``l`` of smallest ``(deg[l], l)`` until it holds ``fanout``; other
    rows whole. ``fanout <= 0`` returns ``m`` (canonical). Columns stay sorted.

    Work is O(entries of the capped rows x log): the rows of the hubs only.
    """
    c = canonical(m)
    if fanout <= 0:
        return c
    counts = np.diff(c.indptr)
    over = counts > fanout
    if not over.any():
        return c
    row = np.repeat(np.arange(c.shape[0], dtype=np.int64), counts)
    idx = np.flatnonzero(over[row])  # entries of the rows to cap
    r, col = row[idx], c.indices[idx].astype(np.int64)
    d = np.asarray(deg)[col]
    order = np.lexsort((col, d, col != r, r))  # per row: the diagonal, then smallest degree, then smaller id
    rs = r[order]
    rank = np.arange(rs.shape[0], dtype=np.int64) - np.searchsorted(rs, rs, side="left")
    keep = np.ones(c.nnz, dtype=bool)
    keep[idx[order[rank >= fanout]]] = False
    kept_before = np.concatenate([[0], np.cumsum(keep, dtype=np.int64)])
    out = sp.csr_matrix((c.data[keep], c.indices[keep], kept_before[c.indptr]), shape=c.shape)
    out.has_canonical_format = True  # a subset of sorted, duplicate-free rows
    return out


def degrees(a: sp.spmatrix) -> np.ndarray:
    """Stored entries per row of a binary adjacency (its degrees, self loops aside): the ranking of :func:`cap_rows`."""
    return np.diff(a.tocsr().indptr).astype(np.int64)


def capped_rows(a: sp.spmatrix, rule: Truncation) -> int:
    """How many rows :func:`cap_rows` cuts on ``a``'s ``A + I`` under ``rule`` (nodes of degree ``>= fanout``)."""
    if rule.fanout <= 0:
        return 0
    return int(np.count_nonzero(degrees(a) + 1 > rule.fanout))


def with_self_loops(a: sp.spmatrix) -> sp.csr_matrix:
    """``A + I`` for a binary adjacency without self loops."""
    return (a + sp.identity(a.shape[0], format="csr")).tocsr()


def normalized_adjacency(a: sp.spmatrix) -> sp.csr_matrix:
    """``Â = D^-1/2 (A + I) D^-1/2`` with ``D`` the degrees of ``A + I``."""
    a_hat = with_self_loops(a)
    d = inv_sqrt(np.asarray(a_hat.sum(axis=1)).ravel())
    out = sp.diags(d) @ a_hat @ sp.diags(d)
    out = out.tocsr()
    out.sort_indices()
    return out


def random_walk_matrix(a: sp.spmatrix) -> sp.csr_matrix:
    """Row-stochastic ``D^-1 A`` (rows of isolated nodes stay zero)."""
    deg = np.asarray(a.sum(axis=1)).ravel()
    inv = np.zeros_like(deg)
    inv[deg > 0] = 1.0 / deg[deg > 0]
    out = (sp.diags(inv) @ a).tocsr()
    out.sort_indices()  # canonical, so that products sum in one order however they are blocked
    return out


@numba.njit(cache=True, parallel=True)
def _keep_mask(indptr, indices, data, pptr, pind, row_offset, tau, topk):  # pragma: no cover - compiled
    """Which entries of a CSR block survive the rule (see :class:`Truncation`), row by row.

    ``pptr``/``pind``: protected pattern, global rows, sorted columns. Per row
    O(nnz): protected entries kept, tau on the others, then the budget filled
    by the largest others (a partition, not a sort), ties by smaller column.
    """
    n = indptr.shape[0] - 1
    keep = np.zeros(indices.shape[0], dtype=np.bool_)
    for r in numba.prange(n):
        s, e = indptr[r], indptr[r + 1]
        g = r + row_offset
        prow = pind[pptr[g]:pptr[g + 1]]
        prot = np.zeros(e - s, dtype=np.bool_)
        nprot = 0
        nkept = 0
        for j in range(s, e):
            c = indices[j]
            isp = c == g
            if not isp and prow.shape[0] > 0:
                pos = np.searchsorted(prow, c)
                isp = pos < prow.shape[0] and prow[pos] == c
            prot[j - s] = isp
            if isp:
                keep[j] = True
                nprot += 1
                nkept += 1
            elif tau <= 0.0 or abs(data[j]) >= tau:
                keep[j] = True
                nkept += 1
        if topk <= 0 or nkept <= topk:
            continue
        budget = max(topk - nprot, 0)
        ncand = nkept - nprot
        vals = np.empty(ncand, dtype=np.float64)
        cols = np.empty(ncand, dtype=np.int64)
        where = np.empty(ncand, dtype=np.int64)
        t = 0
        for j in range(s, e):
            if keep[j] and not prot[j - s]:
                vals[t] = abs(data[j])
                cols[t] = indices[j]
                where[t] = j
                t += 1
        if budget == 0:
            for t in range(ncand):
                keep[where[t]] = False
            continue
        thr = -np.partition(-vals, budget - 1)[budget - 1]  # the budget-th largest value
        n_gt = 0
        n_eq = 0
        for t in range(ncand):
            if vals[t] > thr:
                n_gt += 1
            elif vals[t] == thr:
                n_eq += 1
        tie_cols = np.empty(n_eq, dtype=np.int64)
        q = 0
        for t in range(ncand):
            if vals[t] == thr:
                tie_cols[q] = cols[t]
                q += 1
        last_col = np.sort(tie_cols)[budget - n_gt - 1]  # ties: the smaller columns first
        for t in range(ncand):
            if vals[t] < thr or (vals[t] == thr and cols[t] > last_col):
                keep[where[t]] = False
    return keep


def truncate_rows(m: sp.csr_matrix, rule: Truncation, *, row_offset: int = 0,
                  protect: sp.spmatrix | None = None) -> sp.csr_matrix:
    """Apply ``rule`` to a CSR matrix row by row.

    Args:
        m: the matrix (or a block of consecutive rows of a larger one).
        rule: tau and top-k, see :class:`Truncation`.
        row_offset: global index of ``m``'s first row, when ``m`` is a block of
            rows of a larger matrix (so that the diagonal and ``protect`` are
            read at the right rows).
        protect: pattern (whole matrix, global rows) whose entries are never
            dropped and rank first for top-k; the diagonal always is.
    """
    m = m.tocsr()
    if rule.exact:
        return m
    n = m.shape[0]
    if protect is None:
        pptr, pind = np.zeros(row_offset + n + 1, dtype=np.int64), np.zeros(0, dtype=np.int32)
    else:
        p = canonical(protect)  # sorted columns for the binary search
        pptr, pind = p.indptr, p.indices
    data = m.data if m.data.dtype == np.float64 else m.data.astype(np.float64)
    keep = _keep_mask(m.indptr, m.indices, data, pptr, pind, int(row_offset), float(rule.tau), int(rule.topk))
    kept_before = np.concatenate([[0], np.cumsum(keep, dtype=np.int64)])  # kept entries before each position
    return sp.csr_matrix((m.data[keep], m.indices[keep], kept_before[m.indptr]), shape=m.shape)


def _product(left: sp.csr_matrix, right: sp.csr_matrix, rule: Truncation,
             protect: sp.spmatrix | None = None, row_offset: int = 0) -> sp.csr_matrix:
    """``trunc(left @ right)``, columns sorted, each row truncated as it is formed (the raw product is never held).

    ``row_offset``: global index of ``left``'s first row when ``left`` is a block of rows (``protect`` and the
    diagonal are read at global rows). Every output row depends on its own input row only; the numbers are
    scipy's product's (see :func:`~xmask_cli.structure.csr_kernels.product_rows`).
    """
    if rule.exact:
        return product_rows(left, right, chunk_flops=_ROW_BLOCK_NNZ)
    return product_rows(left, right, float(rule.tau), int(rule.topk), protect=protect, row_offset=row_offset,
                        chunk_flops=_ROW_BLOCK_NNZ)


def adjacency_powers(
    a: sp.spmatrix,
    k: int,
    *,
    normalization: str = "sym",
    truncation: Truncation = Truncation(),
) -> list[sp.csr_matrix]:
    """Powers ``1..k`` of the normalized adjacency.

    Args:
        a: binary symmetric adjacency without self loops.
        k: highest power ``K``.
        normalization: ``"sym"`` gives ``Â^k`` (normalize, then raise: the
            paper's method). ``"no-symnorm"`` gives ``N((A+I)^k)`` with
            ``N(M) = D_M^-1/2 M D_M^-1/2`` and ``D_M`` the row sums of ``M``:
            raise first, normalize afterwards (the ablation of seed 000 §4.2.3).
        truncation: rule applied after every multiplication (powers ``>= 2``;
            the first power and the support of ``A + I`` are kept whole), with
            the right-hand factor capped to ``truncation.fanout`` entries per row.

    Returns:
        ``k`` CSR matrices, ``out[j]`` approximating the ``(j+1)``-th power
        (``out[0]`` exact).
    """
    if k < 1:
        raise ValueError("k must be >= 1")
    if normalization == "sym":
        a_hat = normalized_adjacency(a)
        right = cap_rows(a_hat, truncation.fanout, degrees(a))
        out = [a_hat]
        for _ in range(1, k):
            out.append(_product(out[-1], right, truncation, protect=a_hat))
        return out
    if normalization == "no-symnorm":
        a_i = with_self_loops(a)
        right = cap_rows(a_i, truncation.fanout, degrees(a))  # the same columns as cap(Â): Â and A + I share a support
        n = a.shape[0]
        ones = np.ones(n)
        raw = a_i
        row_sum = a_i @ ones  # exact row sums of (A+I)^j even when entries are truncated
        out = []
        for j in range(1, k + 1):
            if j > 1:
                raw = product_rows(raw, right)
                row_sum = a_i @ row_sum  # symmetric, so (A+I)^j 1 = (A+I) (A+I)^(j-1) 1
            d = inv_sqrt(row_sum)
            norm = (sp.diags(d) @ raw @ sp.diags(d)).tocsr()
            if j > 1:  # the first power is N(A + I) = Â, kept whole; later ones keep its support
                norm = truncate_rows(norm, truncation, protect=a_i)
            norm.sort_indices()
            out.append(norm)
            if not truncation.exact:
                # Keep only the surviving support in the raw power before the next product.
                mask = norm.copy()
                mask.data[:] = 1.0
                raw = raw.multiply(mask).tocsr()
        return out
    raise ValueError(f"unknown normalization {normalization!r}; expected 'sym' or 'no-symnorm'")


def random_walk_powers(a: sp.spmatrix, steps: int, *, truncation: Truncation = Truncation()) -> list[sp.csr_matrix]:
    """``[I, P, P^2, ..., P^steps]`` with ``P = D^-1 A`` (RRWP input).

    ``truncation`` applies to ``P^k``, ``k >= 2``, as for :func:`adjacency_powers`
    (``P_k = trunc(P_{k-1} cap(P))``): ``P`` is kept whole and no later power
    drops an entry on a real edge or the diagonal (where the walk has one).
    """
    p = random_walk_matrix(a)
    right = cap_rows(p, truncation.fanout, degrees(a))
    out = [sp.identity(a.shape[0], format="csr"), p]
    for _ in range(1, steps):
        out.append(_product(out[-1], right, truncation, protect=p))
    return out[: steps + 1]


def power_row_sums(a: sp.spmatrix, k: int, *, normalization: str = "sym") -> np.ndarray:
    """Exact row sums of powers ``1..k``, ``[n, k]``, by sparse mat-vecs only.

    ``Â^j 1 = Â (Â^{j-1} 1)``: no power is ever formed, so this is exact on
    any graph and cheap (``k`` products with a vector). For ``no-symnorm``
    the row sums of ``N((A+I)^j) = D_j^-1/2 (A+I)^j D_j^-1/2`` are
    ``d_i ((A+I)^j d)_i`` with ``d = D_j^-1/2``, again mat-vecs only.
    """
    if normalization == "sym":
        a_hat = normalized_adjacency(a)
        out, v = [], np.ones(a.shape[0])
        for _ in range(k):
            v = a_hat @ v
            out.append(v)
        return np.stack(out, axis=1) if out else np.zeros((a.shape[0], 0))
    if normalization == "no-symnorm":
        a_i = with_self_loops(a)
        out, deg = [], np.ones(a.shape[0])
        for j in range(1, k + 1):
            deg = a_i @ deg  # (A+I)^j 1 (symmetric)
            d = inv_sqrt(deg)
            v = d
            for _ in range(j):
                v = a_i @ v
            out.append(d * v)
        return np.stack(out, axis=1) if out else np.zeros((a.shape[0], 0))
    raise ValueError(f"unknown normalization {normalization!r}; expected 'sym' or 'no-symnorm'")


def random_walk_row_sums(a: sp.spmatrix, steps: int) -> np.ndarray:
    """Exact row sums of ``I, P, ..., P^steps``, ``[n, steps + 1]`` (1, or 0 for isolated nodes)."""
    p = random_walk_matrix(a)
    out, v = [np.ones(a.shape[0])], np.ones(a.shape[0])
    for _ in range(steps):
        v = p @ v
        out.append(v)
    return np.stack(out, axis=1)


def dropped_share(mats: list[sp.csr_matrix], exact_row_sums: np.ndarray) -> np.ndarray:
    """Share of each row's exact mass that truncated matrices miss, ``[n, len(mats)]``.

    ``1 - (P_j 1)_i / (exact_j)_i``, in ``[0, 1]``; 0 for rows whose exact
    mass is 0, and shares below ``1e-12`` (summation-order rounding of an
    untruncated row) are reported as 0. For nonnegative matrices kept entrywise below
    the exact ones (every truncation here) this is the attention mass of row
    ``i`` that the stored support loses.
    """
    n = exact_row_sums.shape[0]
    out = np.zeros((n, len(mats)))
    for j, m in enumerate(mats):
        kept = np.asarray(m.sum(axis=1)).ravel()
        ex = exact_row_sums[:, j]
        nz = ex > 0
        out[nz, j] = 1.0 - kept[nz] / ex[nz]
    out[np.abs(out) < 1e-12] = 0.0
    return np.clip(out, 0.0, 1.0)


def union_pairs(mats: list[sp.csr_matrix]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stack matrices on the union of their supports.

    Returns:
        ``(row, col, values)`` with pairs sorted by ``(row, col)`` and
        ``values[:, j]`` the entry of ``mats[j]`` at each pair (0 where absent). ``row`` counts from the
        matrices' first row (blocks of rows of a larger matrix work the same). :func:`union_rows` gives
        the same pairs as per-row counts, in the dtypes asked for.
    """
    counts, col, values = union_rows(mats)
    return np.repeat(np.arange(counts.shape[0], dtype=np.int64), counts), col, values


def ball_structure(
    a: sp.spmatrix,
    k: int,
    *,
    normalization: str = "sym",
    spd_radius: int = 0,
    base: np.ndarray | None = None,
    col_dtype: np.dtype = np.dtype(np.int64),
    values_dtype: np.dtype = np.dtype(np.float64),
) -> dict[str, np.ndarray]:
    """Exact powers ``1..k`` (and hop distances up to ``spd_radius``) as per-node pair lists.

    One breadth-first search per node gives both (see
    :func:`~xmask_cli.structure.walks.ball_pairs` for the returned keys and
    ``base``); ``values`` hold ``Â^1..Â^k`` or, for ``no-symnorm``, ``N((A+I)^j)``, computed in
    float64 and rounded once to ``values_dtype``.
    """
    if normalization not in ("sym", "no-symnorm"):
        raise ValueError(f"unknown normalization {normalization!r}; expected 'sym' or 'no-symnorm'")
    m = normalized_adjacency(a) if normalization == "sym" else with_self_loops(a)
    # sym: the kernel rounds on writing; no-symnorm normalizes the float64 values first.
    direct = np.dtype(values_dtype) if normalization == "sym" else np.dtype(np.float64)
    out = ball_pairs(m, k, spd_radius=spd_radius, base=base, col_dtype=col_dtype, values_dtype=direct)
    if normalization == "no-symnorm":
        n = a.shape[0]
        row = np.repeat(np.arange(n, dtype=np.int64), out["counts"])
        col = out["col"].astype(np.int64) + (0 if base is None else np.asarray(base, dtype=np.int64)[row])
        raw = out["values"]
        for j in range(k):
            # Row sums of (A+I)^j are exact here: the whole ball is kept.
            d = inv_sqrt(np.bincount(row, weights=raw[:, j], minlength=n))
            raw[:, j] *= d[row] * d[col]
    out["values"] = out["values"].astype(values_dtype, copy=False)
    return out


def power_pairs(a: sp.spmatrix, k: int, *, normalization: str = "sym") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact powers ``1..k`` as pairs on their union support (the ball of radius ``k``).

    Same numbers as :func:`adjacency_powers` followed by :func:`union_pairs`
    with no truncation; rows ascending, each row's columns in breadth-first order.
    """
    out = ball_structure(a, k, normalization=normalization)
    row = np.repeat(np.arange(a.shape[0], dtype=np.int64), out["counts"])
    return row, out["col"], out["values"]


def walk_pairs(a: sp.spmatrix, steps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact ``I, P, ..., P^steps`` (``P = D^-1 A``) as pairs on their union support."""
    return power_rows(random_walk_matrix(a), steps, include_identity=True)
