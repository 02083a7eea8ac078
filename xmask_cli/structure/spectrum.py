"""Eigenpairs of the normalized Laplacian and of the magnetic Laplacian.

Both use ``L = I - D^-1/2 W D^-1/2`` with ``deg^-1/2 = 0`` for isolated nodes
(their row of ``L`` is the unit vector, eigenvalue 1), so that the magnetic
Laplacian with ``q = 0``, or of a symmetric graph, is exactly the ordinary one.

What the cache stores (:func:`graph_spectra`) is computed per connected
component, so that the stored pairs are the true lowest eigenpairs of any
graph, disconnected ones included:

* a graph of at most ``full_max_nodes`` nodes keeps every eigenpair;
* a larger graph keeps its whole zero eigenspace -- one unit null vector per
  component with edges (``D^1/2 1_c / sqrt(vol c)`` for the normalized
  Laplacian; one per balanced component for the magnetic one) -- and then the
  ``m`` lowest non-zero eigenpairs of the whole graph, except that an
  eigenvalue whose eigenspace would be cut by the ``m``-th position is left out
  whole (so a graph can keep fewer than ``m``).

So "the lowest ``m``" on a graph with more components than ``m`` means: every
zero pair (as many as components, whatever ``m``) plus ``m`` non-zero ones;
the stored set is always a union of complete eigenspaces, the only thing a
basis-free consumer (the eigen and magnetic biases, which read
``Σ_k f(λ_k) v_k v_k^†``) can depend on, and it depends on structure only:
permuting the nodes permutes it. A component is solved densely up to
:data:`DENSE_MAX` nodes and with ARPACK above (shift-invert, or ``2I - L`` for
very large ones; LOBPCG or a dense solve when ARPACK fails). ARPACK never sees
a repeated zero eigenvalue this way (one per connected component); a
degenerate non-zero eigenvalue inside one large component can still be
under-resolved by a Krylov solver (the tests compare against dense ``eigh`` on
Cora, PROTEINS graphs and random graphs with 1 to 50 components). Dense
subsets use LAPACK's ``evx`` driver: the default MRRR (``evr``) returned
zero-space vectors with 2e-4 residuals on Cora's 78-fold zero eigenvalue.
"""
from __future__ import annotations

import warnings

import numpy as np
import scipy.linalg
import scipy.sparse as sp
from scipy.sparse.linalg import ArpackError, ArpackNoConvergence, LinearOperator, eigsh, lobpcg, splu

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

    Meant for one connected component (:func:`graph_spectra` calls it so): on a
    disconnected graph ARPACK misses copies of the repeated zero eigenvalue.

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
        vals, vecs = scipy.linalg.eigh(lap.toarray(), check_finite=False, subset_by_index=subset,
                                        driver="evx" if subset else None)
        return vals, _canonical_signs(vecs), "dense"
    # A fixed start vector keeps the result reproducible run to run.
    v0 = np.cos(np.arange(n) * 0.7 + 0.1).astype(lap.dtype)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if n <= _SHIFT_INVERT_MAX:
                vals, vecs = eigsh(lap, k=m, sigma=_SIGMA, which="LM", v0=v0, tol=1e-8,
                                   OPinv=_ShiftInverse(lap, _SIGMA))
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


class _ShiftInverse(LinearOperator):
    """``(L - sigma I)^-1`` for ARPACK's shift-invert mode, from one sparse LU of ``L - sigma I``.

    With ``sigma < 0`` that matrix is Hermitian positive definite, so it needs no pivoting:
    SuperLU's symmetric mode with a minimum-degree ordering of ``A^T + A`` fills in less than
    the default column ordering that ``eigsh`` itself would use (its factor and its solves,
    about 50 per component, are most of the work). The solve is called directly, without
    :class:`LinearOperator`'s per-call checks: ARPACK always passes one vector of length ``n``.
    """

    def __init__(self, lap: sp.spmatrix, sigma: float):
        n = lap.shape[0]
        shifted = (lap - sigma * sp.identity(n, dtype=lap.dtype, format="csc")).tocsc()
        self._lu = splu(shifted, permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0, options={"SymmetricMode": True})
        super().__init__(dtype=np.dtype(lap.dtype), shape=(n, n))

    def _matvec(self, x: np.ndarray) -> np.ndarray:
        return self._lu.solve(np.asarray(x).reshape(-1))

    def matvec(self, x: np.ndarray) -> np.ndarray:
        return self._lu.solve(x)


def _fallback(lap: sp.spmatrix, m: int) -> tuple[np.ndarray, np.ndarray, str]:
    n = lap.shape[0]
    if n <= _DENSE_FALLBACK_MAX:
        vals, vecs = scipy.linalg.eigh(lap.toarray(), subset_by_index=[0, m - 1], check_finite=False, driver="evx")
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
    for i, (s, size) in enumerate(zip(starts, sizes)):
        owner[s:s + size] = i
    g = owner[coo.row]
    keep = g >= 0
    g, r, c, d = g[keep], coo.row[keep], coo.col[keep], coo.data[keep]
    out: list[tuple[np.ndarray, np.ndarray]] = [None] * len(sizes)  # type: ignore[list-item]
    for n in np.unique(sizes):
        members = np.flatnonzero(sizes == n)
        if n == 0:
            for k in members:
                out[k] = (np.zeros(0), np.zeros((0, 0), dtype=lap.dtype))
            continue
        slot = np.full(len(sizes), -1, dtype=np.int64)
        slot[members] = np.arange(len(members))
        sel = slot[g] >= 0
        dense = np.zeros((len(members), n, n), dtype=lap.dtype)
        gs = g[sel]
        dense[slot[gs], r[sel] - starts[gs], c[sel] - starts[gs]] = d[sel]
        subset = m is not None and n > max(full_max_nodes, m)
        if m is None or not subset:
            # One batched LAPACK loop in numpy for every block of this size (single-threaded BLAS:
            # the caller limits it, since threads on tiny matrices only contend).
            vals, vecs = np.linalg.eigh(dense)
            vecs = _canonical_signs_batched(vecs)
            for j, k in enumerate(members):
                out[k] = (vals[j], vecs[j])
        else:
            for j, k in enumerate(members):
                vals, vecs = scipy.linalg.eigh(dense[j], check_finite=False, subset_by_index=[0, m - 1], driver="evx")
                out[k] = (vals, _canonical_signs(vecs))
    return out


#: Eigenvalues at or below this are zero: one per connected component (per balanced component
#: for the magnetic Laplacian). :class:`~xmask_cli.model.biases.eigen.EigenBias` uses the same bound.
ZERO_TOL = 1e-6
#: Eigenvalues closer than this belong to one eigenspace: a cut never splits one.
TIE_TOL = 1e-6
# Solver names, from exact to least exact: a graph reports the least exact one any component used.
_METHOD_RANK = {"dense": 0, "arpack": 1, "dense-fallback": 2, "lobpcg": 3}


def graph_spectra(
    lap: sp.spmatrix, offs: np.ndarray, component: np.ndarray, m: int, *, full_max_nodes: int = 64
) -> list[tuple[np.ndarray, np.ndarray, str]]:
    """The stored spectrum of each graph of a block-diagonal Laplacian, computed per connected component.

    What is stored for a graph of ``n`` nodes (the definition of "the lowest
    ``m``" on a graph with any number of components):

    * ``n <= full_max_nodes``: every eigenpair.
    * otherwise: the whole zero eigenspace, as one unit null vector per
      component (per balanced component for the magnetic Laplacian; for the
      normalized Laplacian it is ``D^1/2 1_c / sqrt(vol c)``), followed by the
      ``m`` lowest non-zero eigenpairs of the whole graph. If the ``m``-th and
      ``(m+1)``-th non-zero eigenvalues are equal (within :data:`TIE_TOL`), that
      eigenspace straddles the cut and is left out whole, so fewer than ``m``
      are stored: the stored pairs are always complete eigenspaces.

    Every pair is computed inside its component (dense ``eigh`` up to
    :data:`DENSE_MAX` nodes, ARPACK above, see :func:`lowest_eigenpairs`), so a
    solver never meets a repeated zero eigenvalue, and a graph's stored
    eigenspaces -- hence ``Σ_k f(λ_k) v_k v_k^†`` for any ``f``, what the
    eigen and magnetic biases read -- are permutation-equivariant. Zero pairs
    come first, ordered by component size (descending) then smallest node id;
    then the non-zero pairs by eigenvalue (ties: the same component order).
    An isolated node is a component whose only eigenvalue is 1 (``deg^-1/2 = 0``).

    Args:
        lap: block-diagonal Laplacian (real symmetric or complex Hermitian) of a block of graphs.
        offs: ``[G+1]`` node offsets of the graphs.
        component: component label per node (components never span two graphs).
        m: non-zero eigenpairs kept per graph above ``full_max_nodes``.
        full_max_nodes: graphs up to this size keep every eigenpair.

    Returns:
        One ``(eigenvalues ascending, eigenvectors [n, count], method)`` per graph.
    """
    offs = np.asarray(offs, dtype=np.int64)
    num_graphs = len(offs) - 1
    n_total = int(offs[-1])
    _, comp = np.unique(np.asarray(component, dtype=np.int64), return_inverse=True)
    perm = np.lexsort((np.arange(n_total), comp))  # nodes grouped by component, ascending inside one
    sizes = np.bincount(comp, minlength=int(comp.max(initial=-1)) + 1).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    graph_of_node = np.repeat(np.arange(num_graphs), np.diff(offs))
    first = perm[starts] if sizes.size else np.zeros(0, dtype=np.int64)  # smallest node id of each component
    graph_c = graph_of_node[first]
    want_all = np.diff(offs)[graph_c] <= full_max_nodes
    lp = sp.csr_matrix(lap)[perm][:, perm].tocsr() if n_total else sp.csr_matrix(lap)
    pairs, methods = _component_eigenpairs(lp, starts, sizes, want_all, m, full_max_nodes)

    order_c = np.lexsort((first, -sizes))  # structure first (size), node id only among equal sizes
    rank_c = np.empty_like(order_c)
    rank_c[order_c] = np.arange(len(order_c))
    by_graph = np.argsort(graph_c, kind="stable")
    bounds = np.searchsorted(graph_c[by_graph], np.arange(num_graphs + 1))
    out = []
    for g in range(num_graphs):
        cs = by_graph[bounds[g]:bounds[g + 1]]
        n = int(offs[g + 1] - offs[g])
        lam = np.concatenate([np.real(pairs[c][0]) for c in cs]) if len(cs) else np.zeros(0)
        cid = np.concatenate([np.full(len(pairs[c][0]), c) for c in cs]) if len(cs) else np.zeros(0, np.int64)
        j = np.concatenate([np.arange(len(pairs[c][0])) for c in cs]) if len(cs) else np.zeros(0, np.int64)
        keep = _kept_pairs(lam, rank_c[cid], j, m if n > full_max_nodes else None)
        vecs = np.zeros((n, len(keep)), dtype=np.result_type(lap.dtype, np.float64))
        col = np.arange(len(keep))
        for c in np.unique(cid[keep]):
            mine = cid[keep] == c
            rows = perm[starts[c]:starts[c] + sizes[c]] - offs[g]
            vecs[np.ix_(rows, col[mine])] = pairs[c][1][:, j[keep][mine]]
        how = max((methods[c] for c in cs), key=_METHOD_RANK.__getitem__, default="dense")
        out.append((lam[keep], vecs, how))
    return out


def _component_eigenpairs(lp: sp.csr_matrix, starts: np.ndarray, sizes: np.ndarray, want_all: np.ndarray, m: int,
                          full_max_nodes: int) -> tuple[list[tuple[np.ndarray, np.ndarray]], list[str]]:
    """Each component's eigenpairs (all of them where ``want_all``, else the lowest ``m + 2``) and its method.

    ``lp`` holds the components as consecutive diagonal blocks (``starts``, ``sizes``). Small components go
    through :func:`block_eigenpairs` together; the others one by one through :func:`lowest_eigenpairs`.
    """
    k = m + 2  # m + 1 non-zero pairs per component decide the global cut; +1 for its zero pair
    dense_max = max(full_max_nodes, k, DENSE_MAX)
    pairs: list[tuple[np.ndarray, np.ndarray]] = [None] * len(sizes)  # type: ignore[list-item]
    methods = ["dense"] * len(sizes)
    small = sizes <= dense_max
    for sel, mm in ((want_all & small, None), (~want_all & small, k)):
        idx = np.flatnonzero(sel)
        for i, r in zip(idx, block_eigenpairs(lp, starts[idx], sizes[idx], m=mm, full_max_nodes=0)):
            pairs[i] = r
    for i in np.flatnonzero(~small):
        s, e = starts[i], starts[i] + sizes[i]
        lv, vv, how = lowest_eigenpairs(lp[s:e, s:e], k, full_max_nodes=0)
        pairs[i], methods[i] = (lv, vv), how
    return pairs, methods


def _kept_pairs(lam: np.ndarray, rank: np.ndarray, j: np.ndarray, m: int | None) -> np.ndarray:
    """Positions of one graph's stored pairs, in stored order: the zero pairs, then the lowest non-zero ones.

    ``lam``, ``rank`` (its component's rank) and ``j`` (its index inside the component) describe each pair of
    the graph's components. ``m``: keep at most ``m`` non-zero pairs, never splitting an eigenspace at the cut
    (``None``: keep all).
    """
    zero = lam <= ZERO_TOL
    zsel = np.flatnonzero(zero)[np.lexsort((j[zero], rank[zero]))]
    nsel = np.flatnonzero(~zero)[np.lexsort((j[~zero], rank[~zero], lam[~zero]))]
    if m is not None and len(nsel) > m:
        nz = lam[nsel]
        cut = m
        if m > 0 and nz[m] - nz[m - 1] <= TIE_TOL:  # an eigenspace straddles the cut: leave it out whole
            cut = m - 1
            while cut > 0 and nz[cut] - nz[cut - 1] <= TIE_TOL:
                cut -= 1
        nsel = nsel[:cut]
    return np.concatenate([zsel, nsel])
