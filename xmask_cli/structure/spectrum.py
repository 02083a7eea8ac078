"""Eigenpairs of the normalized Laplacian and of the magnetic Laplacian.

Both use ``L = I - D^-1/2 W D^-1/2`` with ``deg^-1/2 = 0`` for isolated nodes
(their row of ``L`` is the unit vector, eigenvalue 1), so that the magnetic
Laplacian with ``q = 0``, or of a symmetric graph, is exactly the ordinary one.
Small graphs get every eigenpair from a dense solver; large graphs get the
lowest ``m`` from ARPACK in shift-invert mode, with LOBPCG and then a dense
solve as fallbacks when ARPACK does not converge.
"""
from __future__ import annotations

import warnings

import numpy as np
import scipy.linalg
import scipy.sparse as sp
from scipy.sparse.linalg import ArpackError, ArpackNoConvergence, eigsh, lobpcg

from xmask_cli.structure.graph import inv_sqrt

# Shift for shift-invert: just below the spectrum's lower end (0), so that
# L - sigma*I is positive definite and the factorization never meets a singular matrix.
_SIGMA = -1e-3
# Above this size a dense fallback would cost too much memory; LOBPCG's answer stands.
_DENSE_FALLBACK_MAX = 6000
# Up to this size a dense solve (lowest m only) beats ARPACK's iterations.
DENSE_MAX = 192
# Above this size the sparse LU of shift-invert can fill in to gigabytes (Coauthor-Physics:
# minutes and > 5 GB): use the largest eigenpairs of 2I - L instead, which need only products.
_SHIFT_INVERT_MAX = 5000


def normalized_laplacian(a: sp.spmatrix) -> sp.csr_matrix:
    """``I - D^-1/2 A D^-1/2`` for a symmetric adjacency ``A`` without self loops."""
    d = inv_sqrt(np.asarray(a.sum(axis=1)).ravel())
    n = a.shape[0]
    return (sp.identity(n, format="csr") - sp.diags(d) @ a @ sp.diags(d)).tocsr()


def magnetic_laplacian(a_directed: sp.spmatrix, q: float = 0.25) -> sp.csr_matrix:
    """Normalized magnetic Laplacian of a directed graph (GTLM Appendix A.2).

    ``A_s = (A + A^T) / 2``, ``Θ = 2πq (A - A^T)``,
    ``L = I - (D_s^-1/2 A_s D_s^-1/2) ⊙ exp(iΘ)``; complex Hermitian.

    Args:
        a_directed: binary adjacency, ``A[u, v] = 1`` for an edge ``u -> v``.
        q: charge; ``q = 0`` (or symmetric input) gives the ordinary Laplacian.
    """
    a = sp.csr_matrix(a_directed, dtype=np.float64)
    a_s = ((a + a.T) * 0.5).tocsr()
    theta = (2.0 * np.pi * q) * (a - a.T).tocsr()
    d = inv_sqrt(np.asarray(a_s.sum(axis=1)).ravel())
    norm = (sp.diags(d) @ a_s @ sp.diags(d)).tocoo()
    # Θ lives on the support of A_s, so read it at norm's pairs.
    th = np.asarray(theta[norm.row, norm.col]).ravel() if norm.nnz else np.zeros(0)
    h = sp.csr_matrix((norm.data * np.exp(1j * th), (norm.row, norm.col)), shape=a.shape)
    n = a.shape[0]
    return (sp.identity(n, format="csr", dtype=np.complex128) - h).tocsr()


def _canonical_signs(vecs: np.ndarray) -> np.ndarray:
    """Fix each eigenvector's free phase so the output is deterministic: the
    entry of largest modulus becomes real and positive."""
    return _canonical_signs_batched(vecs[None])[0]


def _canonical_signs_batched(vecs: np.ndarray) -> np.ndarray:
    """:func:`_canonical_signs` for a stack ``[B, n, m]`` at once."""
    if vecs.size == 0:
        return vecs
    idx = np.argmax(np.abs(vecs), axis=1)  # [B, m]
    pivot = np.take_along_axis(vecs, idx[:, None, :], axis=1)[:, 0, :]
    phase = pivot / np.abs(pivot)
    phase[~np.isfinite(phase)] = 1.0
    return vecs / phase[:, None, :]


def lowest_eigenpairs(lap: sp.spmatrix, m: int, *, full_max_nodes: int = 64) -> tuple[np.ndarray, np.ndarray, str]:
    """The ``m`` smallest eigenpairs of a Hermitian PSD matrix.

    Args:
        lap: sparse Hermitian matrix (real or complex).
        m: number of eigenpairs wanted for large inputs.
        full_max_nodes: at or below this size every eigenpair is returned.

    Returns:
        ``(eigenvalues ascending, eigenvectors as columns, method)`` where
        ``method`` names the solver that produced them (``dense``, ``arpack``,
        ``lobpcg`` or ``dense-fallback``).
    """
    n = lap.shape[0]
    if n == 0:
        return np.zeros(0), np.zeros((0, 0), dtype=lap.dtype), "dense"
    if n <= max(full_max_nodes, m + 1, DENSE_MAX):
        subset = [0, m - 1] if n > max(full_max_nodes, m) else None
        vals, vecs = scipy.linalg.eigh(lap.toarray(), check_finite=False, subset_by_index=subset)
        return vals, _canonical_signs(vecs), "dense"
    # A fixed start vector keeps the result reproducible run to run.
    v0 = np.cos(np.arange(n) * 0.7 + 0.1).astype(lap.dtype)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if n <= _SHIFT_INVERT_MAX:
                vals, vecs = eigsh(lap.tocsc(), k=m, sigma=_SIGMA, which="LM", v0=v0, tol=1e-8)
            else:
                # The spectrum of a normalized Laplacian lies in [0, 2]: the top of 2I - L is the bottom of L.
                flipped = 2.0 * sp.identity(n, dtype=lap.dtype, format="csr") - lap
                top, vecs = eigsh(flipped, k=m, which="LA", v0=v0, tol=1e-8, maxiter=max(5000, 20 * n))
                vals = 2.0 - top
        method = "arpack"
    except (ArpackNoConvergence, ArpackError, RuntimeError):
        vals, vecs, method = _fallback(lap, m)
    order = np.argsort(vals)
    return vals[order], _canonical_signs(vecs[:, order]), method


def _fallback(lap: sp.spmatrix, m: int) -> tuple[np.ndarray, np.ndarray, str]:
    n = lap.shape[0]
    if n <= _DENSE_FALLBACK_MAX:
        vals, vecs = scipy.linalg.eigh(lap.toarray(), subset_by_index=[0, m - 1], check_finite=False)
        return vals, vecs, "dense-fallback"
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, m)).astype(lap.dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vals, vecs = lobpcg(lap, x, largest=False, tol=1e-6, maxiter=500)
    return np.real(vals), vecs, "lobpcg"


def block_eigenpairs(
    lap: sp.spmatrix, starts: np.ndarray, sizes: np.ndarray, *, m: int | None = None, full_max_nodes: int = 0
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Eigenpairs of each diagonal block ``lap[s:s+n, s:s+n]`` of a block-diagonal matrix, densely.

    Blocks up to ``full_max_nodes`` get every eigenpair; larger ones the lowest
    ``m`` (every pair when ``m`` is None).

    The dense blocks are scattered out of the sparse matrix in one vectorized
    pass per block size, which for thousands of molecules is far cheaper than
    slicing the sparse matrix once per graph.

    Returns:
        One ``(eigenvalues ascending, eigenvectors as columns)`` per block, in input order.
    """
    starts = np.asarray(starts, dtype=np.int64)
    sizes = np.asarray(sizes, dtype=np.int64)
    coo = sp.coo_matrix(lap)
    owner = np.full(lap.shape[0], -1, dtype=np.int64)
    for i, (s, n) in enumerate(zip(starts, sizes)):
        owner[s:s + n] = i
    g = owner[coo.row]
    keep = g >= 0
    g, r, c, d = g[keep], coo.row[keep], coo.col[keep], coo.data[keep]
    out: list[tuple[np.ndarray, np.ndarray]] = [None] * len(sizes)  # type: ignore[list-item]
    for n in np.unique(sizes):
        members = np.flatnonzero(sizes == n)
        if n == 0:
            for i in members:
                out[i] = (np.zeros(0), np.zeros((0, 0), dtype=lap.dtype))
            continue
        slot = np.full(len(sizes), -1, dtype=np.int64)
        slot[members] = np.arange(len(members))
        sel = slot[g] >= 0
        dense = np.zeros((len(members), n, n), dtype=lap.dtype)
        gs = g[sel]
        dense[slot[gs], r[sel] - starts[gs], c[sel] - starts[gs]] = d[sel]
        subset = m is not None and n > max(full_max_nodes, m)
        if not subset:
            # One batched LAPACK loop in numpy for every block of this size (single-threaded BLAS:
            # the caller limits it, since threads on tiny matrices only contend).
            vals, vecs = np.linalg.eigh(dense)
            vecs = _canonical_signs_batched(vecs)
            for j, i in enumerate(members):
                out[i] = (vals[j], vecs[j])
        else:
            for j, i in enumerate(members):
                vals, vecs = scipy.linalg.eigh(dense[j], check_finite=False, subset_by_index=[0, m - 1])
                out[i] = (vals, _canonical_signs(vecs))
    return out
