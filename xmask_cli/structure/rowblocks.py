"""Rows ``start:stop`` of the (truncated) powers and walk matrices, without forming the whole matrices.

``P_k = trunc(P_{k-1} cap(Â))`` multiplies from the right by ``cap(Â)`` (held whole, at most ``nnz(Â)``), and
truncation is row-wise: the rows of a block of every power need only the same rows of the power before and
``cap(Â)``. So a large graph is prepared block
by block, in memory bounded by the block, and every row comes out exactly as in
:func:`~xmask_cli.structure.powers.adjacency_powers` / :func:`~xmask_cli.structure.powers.random_walk_powers`
(each output row depends on its own input row only; the tests compare the two bit for bit).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from xmask_cli.structure.csr_kernels import product_rows
from xmask_cli.structure.graph import inv_sqrt
from xmask_cli.structure.powers import (
    Truncation,
    _product,
    cap_rows,
    degrees,
    normalized_adjacency,
    random_walk_matrix,
    truncate_rows,
    with_self_loops,
)

__all__ = ["PowerRows", "WalkRows", "rows_per_block"]


class PowerRows:
    """Rows of powers ``1..k`` of the normalized adjacency (as :func:`adjacency_powers`), a block at a time.

    Holds ``Â`` (or ``A + I`` and the exact row sums of ``(A+I)^j`` for ``no-symnorm``) and its capped copy
    (:func:`~xmask_cli.structure.powers.cap_rows`, the right-hand factor of every product): O(nnz + n k).
    """

    def __init__(self, a: sp.spmatrix, k: int, *, normalization: str = "sym", truncation: Truncation = Truncation()):
        if k < 1:
            raise ValueError("k must be >= 1")
        self.k, self.normalization, self.truncation = int(k), normalization, truncation
        self.n = int(a.shape[0])
        if normalization == "sym":
            self.m = normalized_adjacency(a)
        elif normalization == "no-symnorm":
            self.m = with_self_loops(a)
            sums, row_sum = [], self.m @ np.ones(self.n)
            for j in range(1, k + 1):
                if j > 1:
                    row_sum = self.m @ row_sum
                sums.append(inv_sqrt(row_sum))
            self._d = sums
        else:
            raise ValueError(f"unknown normalization {normalization!r}; expected 'sym' or 'no-symnorm'")
        self.right = cap_rows(self.m, truncation.fanout, degrees(a))

    def rows(self, start: int, stop: int) -> list[sp.csr_matrix]:
        """Rows ``start:stop`` of every power, ``k`` CSR matrices ``[stop - start, n]`` (columns sorted)."""
        if self.normalization == "sym":
            out = [self.m[start:stop]]
            for _ in range(1, self.k):
                out.append(_product(out[-1], self.right, self.truncation, protect=self.m, row_offset=start))
            return out
        raw = self.m[start:stop]
        out = []
        for j in range(1, self.k + 1):
            if j > 1:
                raw = product_rows(raw, self.right)
            d = self._d[j - 1]
            norm = (sp.diags(d[start:stop]) @ raw @ sp.diags(d)).tocsr()
            if j > 1:
                norm = truncate_rows(norm, self.truncation, protect=self.m, row_offset=start)
            norm.sort_indices()
            out.append(norm)
            if not self.truncation.exact:
                mask = norm.copy()
                mask.data[:] = 1.0
                raw = raw.multiply(mask).tocsr()
        return out


class WalkRows:
    """Rows of ``I, P, ..., P^steps`` (``P = D^-1 A``, as :func:`random_walk_powers`), a block at a time."""

    def __init__(self, a: sp.spmatrix, steps: int, *, truncation: Truncation = Truncation()):
        self.p = random_walk_matrix(a)
        self.right = cap_rows(self.p, truncation.fanout, degrees(a))
        self.steps, self.truncation, self.n = int(steps), truncation, int(a.shape[0])

    def rows(self, start: int, stop: int) -> list[sp.csr_matrix]:
        """Rows ``start:stop`` of ``P^0..P^steps``."""
        ident = sp.csr_matrix((np.ones(stop - start), np.arange(start, stop), np.arange(stop - start + 1)),
                              shape=(stop - start, self.n))
        out = [ident, self.p[start:stop]]
        for _ in range(1, self.steps):
            out.append(_product(out[-1], self.right, self.truncation, protect=self.p, row_offset=start))
        return out[: self.steps + 1]


#: Largest single array of a row block (its pairs' values, a power's entries). Under glibc's ceiling for
#: mapping a large allocation on its own (32 MiB), block after block reuses the same memory: larger arrays
#: are fresh pages every block, which the kernel zeroes (and, for numpy's huge pages, compacts memory
#: for) -- measured on an 80k-node SBM: 0.4-1.4 s of system time with 40k-row blocks, 0.07 s with 16k.
ARRAY_BYTES = 24 << 20


def rows_per_block(deg: np.ndarray, k: int, topk: int, budget_bytes: float) -> int:
    """Rows of one block so that its products and stored pairs stay near ``budget_bytes``, and each of its
    arrays under :data:`ARRAY_BYTES`.

    ``deg``: (an estimate of) each node's degree; ``k``: the matrices a block holds. A row of a stored power
    holds at most ``topk`` entries (without a budget: as many as the two-hop products of the row, a bound);
    one product step of a row touches that many times the mean degree. Smaller blocks also let the cache
    writer start on a block sooner.
    """
    n = int(deg.shape[0])
    if n == 0:
        return 1
    deg = np.asarray(deg, dtype=np.float64) + 1.0
    mean_deg = float(deg.mean())
    width = float(topk) if topk > 0 else float(np.mean(deg * mean_deg))
    per_row = width * (40.0 * k + 64.0 + 24.0 * mean_deg)
    # Per row, the largest array: a power's entries (index + float64) or the pairs' float32 values, k wide.
    widest = width * max(12.0, 4.0 * k)
    return int(max(256, min(n, budget_bytes // max(per_row, 1.0), ARRAY_BYTES // max(widest, 1.0))))
