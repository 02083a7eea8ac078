"""Normalized adjacency powers and random-walk matrices.

``Â = D^-1/2 (A + I) D^-1/2`` with ``D`` the degrees of ``A + I``; head ``h``
of X-LogSMask reads ``Â^{k_h}``. Large graphs keep a truncated, sparse
version of every power; the rule is explicit (:class:`Truncation`) and is
recorded in the cache.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from xmask_cli.structure.graph import inv_sqrt

# Rows multiplied per block when truncating, so that the intermediate product
# of one block stays small even on the largest supported graphs.
_ROW_BLOCK_NNZ = 8_000_000


@dataclass(frozen=True)
class Truncation:
    """Which entries of a matrix power are kept.

    Applied after every multiplication (``P_k = trunc(P_{k-1} @ Â)``), so the
    stored ``P_k`` approximates ``Â^k``; with ``tau = 0`` and ``topk = 0`` it
    is exact.

    Attributes:
        tau: drop entries with absolute value below ``tau``.
        topk: keep at most the ``topk`` largest entries of each row (0: all).
            The diagonal is never dropped by ``topk``.
    """

    tau: float = 0.0
    topk: int = 0

    @property
    def exact(self) -> bool:
        return self.tau <= 0.0 and self.topk <= 0


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
    return (sp.diags(inv) @ a).tocsr()


def truncate_rows(m: sp.csr_matrix, rule: Truncation, *, row_offset: int = 0) -> sp.csr_matrix:
    """Apply ``rule`` to a CSR matrix row by row.

    ``row_offset``: global index of ``m``'s first row, when ``m`` is a block of
    rows of a larger matrix (so that the diagonal is found in the right column).
    """
    m = m.tocsr()
    if rule.exact:
        return m
    n = m.shape[0]
    indptr, indices, data = m.indptr, m.indices, m.data
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    diag = rows + row_offset == indices
    keep = np.ones(data.shape[0], dtype=bool)
    if rule.tau > 0:
        keep &= np.abs(data) >= rule.tau
        keep |= diag  # the diagonal always survives: it is the node itself
    if rule.topk > 0 and np.diff(indptr).max(initial=0) > rule.topk:
        # Rank entries inside each row by decreasing magnitude; the diagonal ranks first.
        score = np.where(diag, np.inf, np.abs(data))
        score = np.where(keep, score, -1.0)
        order = np.lexsort((-score, rows))
        rank = np.empty_like(order)
        rank[order] = np.arange(order.shape[0]) - indptr[rows[order]]
        keep &= rank < rule.topk
    out = sp.csr_matrix((data[keep], indices[keep], np.concatenate([[0], np.cumsum(np.bincount(rows[keep], minlength=n))])), shape=m.shape)
    return out


def _product(left: sp.csr_matrix, right: sp.csr_matrix, rule: Truncation) -> sp.csr_matrix:
    """``trunc(left @ right)``, in row blocks so the raw product never has to fit at once."""
    if rule.exact:
        out = (left @ right).tocsr()
        out.sort_indices()
        return out
    n = left.shape[0]
    # Upper bound of the product's nnz per row: the number of multiply-adds.
    entry_rows = np.repeat(np.arange(n), np.diff(left.indptr))
    per_row = np.bincount(entry_rows, weights=np.diff(right.indptr)[left.indices], minlength=n).astype(np.int64)
    blocks = []
    start = 0
    cum = np.cumsum(per_row)
    while start < n:
        base = cum[start - 1] if start else 0
        stop = int(np.searchsorted(cum, base + _ROW_BLOCK_NNZ, side="right"))
        stop = max(stop, start + 1)
        blocks.append(truncate_rows((left[start:stop] @ right).tocsr(), rule, row_offset=start))
        start = stop
    out = sp.vstack(blocks, format="csr")
    out.sort_indices()
    return out


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
        truncation: rule applied after every multiplication.

    Returns:
        ``k`` CSR matrices, ``out[j]`` approximating the ``(j+1)``-th power.
    """
    if k < 1:
        raise ValueError("k must be >= 1")
    if normalization == "sym":
        a_hat = normalized_adjacency(a)
        out = [truncate_rows(a_hat, truncation)]
        for _ in range(1, k):
            out.append(_product(out[-1], a_hat, truncation))
        return out
    if normalization == "no-symnorm":
        a_i = with_self_loops(a)
        n = a.shape[0]
        ones = np.ones(n)
        raw = a_i
        row_sum = a_i @ ones  # exact row sums of (A+I)^j even when entries are truncated
        out = []
        for j in range(1, k + 1):
            if j > 1:
                raw = (raw @ a_i).tocsr()
                row_sum = a_i @ row_sum  # symmetric, so (A+I)^j 1 = (A+I) (A+I)^(j-1) 1
            d = inv_sqrt(row_sum)
            norm = (sp.diags(d) @ raw @ sp.diags(d)).tocsr()
            norm = truncate_rows(norm, truncation)
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
    """``[I, P, P^2, ..., P^steps]`` with ``P = D^-1 A`` (RRWP input)."""
    p = random_walk_matrix(a)
    out = [sp.identity(a.shape[0], format="csr"), truncate_rows(p, truncation)]
    for _ in range(1, steps):
        out.append(_product(out[-1], p, truncation))
    return out[: steps + 1]


def union_pairs(mats: list[sp.csr_matrix]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stack matrices on the union of their supports.

    Returns:
        ``(row, col, values)`` with pairs sorted by ``(row, col)`` and
        ``values[:, j]`` the entry of ``mats[j]`` at each pair (0 where absent).
    """
    n = mats[0].shape[1]
    pattern = None
    for m in mats:
        p = m.tocsr().copy()
        p.data = np.ones_like(p.data)  # union of supports: add patterns so no value can cancel
        pattern = p if pattern is None else pattern + p
    pattern = pattern.tocsr()
    pattern.sum_duplicates()  # canonical: rows ascending, columns sorted within a row
    row = np.repeat(np.arange(n, dtype=np.int64), np.diff(pattern.indptr))
    col = pattern.indices.astype(np.int64)
    union = row * n + col  # sorted, because the CSR is canonical
    values = np.zeros((union.shape[0], len(mats)), dtype=np.float64)
    for j, m in enumerate(mats):
        c = m.tocsr()
        c.sum_duplicates()
        key = np.repeat(np.arange(n, dtype=np.int64), np.diff(c.indptr)) * n + c.indices
        values[np.searchsorted(union, key), j] = c.data
    return row, col, values


def ball_structure(
    a: sp.spmatrix,
    k: int,
    *,
    normalization: str = "sym",
    spd_radius: int = 0,
    base: np.ndarray | None = None,
    col_dtype: np.dtype = np.dtype(np.int64),
) -> dict[str, np.ndarray]:
    """Exact powers ``1..k`` (and hop distances up to ``spd_radius``) as per-node pair lists.

    One breadth-first search per node gives both (see
    :func:`~xmask_cli.structure.walks.ball_pairs` for the returned keys and
    ``base``); ``values`` hold ``Â^1..Â^k`` or, for ``no-symnorm``, ``N((A+I)^j)``.
    """
    from xmask_cli.structure.walks import ball_pairs

    if normalization not in ("sym", "no-symnorm"):
        raise ValueError(f"unknown normalization {normalization!r}; expected 'sym' or 'no-symnorm'")
    m = normalized_adjacency(a) if normalization == "sym" else with_self_loops(a)
    out = ball_pairs(m, k, spd_radius=spd_radius, base=base, col_dtype=col_dtype)
    if normalization == "no-symnorm":
        n = a.shape[0]
        row = np.repeat(np.arange(n, dtype=np.int64), out["counts"])
        col = out["col"].astype(np.int64) + (0 if base is None else np.asarray(base, dtype=np.int64)[row])
        raw = out["values"]
        for j in range(k):
            # Row sums of (A+I)^j are exact here: the whole ball is kept.
            d = inv_sqrt(np.bincount(row, weights=raw[:, j], minlength=n))
            raw[:, j] *= d[row] * d[col]
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
    from xmask_cli.structure.walks import power_rows

    return power_rows(random_walk_matrix(a), steps, include_identity=True)
