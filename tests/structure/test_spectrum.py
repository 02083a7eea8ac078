"""Normalized and magnetic Laplacians and their lowest eigenpairs, against
networkx, dense numpy formulas written here, and hand-worked values."""
from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
import scipy.linalg
import scipy.sparse as sp

from xmask_cli.structure import (
    adjacency,
    connected_components,
    graph_spectra,
    lowest_eigenpairs,
    magnetic_laplacian,
    normalized_laplacian,
)


def dense_magnetic(a: np.ndarray, q: float) -> np.ndarray:
    """``I - (D_s^-1/2 A_s D_s^-1/2) ⊙ exp(i 2πq (A - A^T))``, ``A_s = (A + A^T)/2``,
    with ``deg^-1/2 = 0`` for isolated nodes (their row is the unit vector)."""
    a_s = (a + a.T) / 2
    deg = a_s.sum(axis=1)
    d = np.zeros_like(deg)
    d[deg > 0] = deg[deg > 0] ** -0.5
    phase = np.exp(1j * 2 * np.pi * q * (a - a.T))
    return np.eye(a.shape[0]) - (d[:, None] * a_s * d[None, :]) * phase


# --- normalized Laplacian ------------------------------------------------------


def test_normalized_laplacian_matches_networkx(graph_no_isolated):
    g = graph_no_isolated.nx_graph()
    ref = nx.normalized_laplacian_matrix(g, nodelist=range(graph_no_isolated.n)).toarray()
    lap = normalized_laplacian(adjacency(graph_no_isolated.edge_index, graph_no_isolated.n))
    np.testing.assert_allclose(lap.toarray(), ref, rtol=1e-12, atol=1e-15)


def test_normalized_laplacian_isolated_node_convention(graph):
    # Our convention: deg^-1/2 = 0 for an isolated node, so L = I - D^-1/2 A D^-1/2
    # has L_ii = 1 there (eigenvalue 1, unit eigenvector). networkx builds
    # D^-1/2 (D - A) D^-1/2 and gives 0 instead; everywhere else the two agree.
    iso = graph.isolated
    lap = normalized_laplacian(adjacency(graph.edge_index, graph.n)).toarray()
    ref = nx.normalized_laplacian_matrix(graph.nx_graph(), nodelist=range(graph.n)).toarray()
    ref[iso, iso] = 1.0
    np.testing.assert_allclose(lap, ref, rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(lap[iso], np.eye(graph.n)[iso])


def test_normalized_laplacian_path3_hand_worked():
    lap = normalized_laplacian(adjacency(np.array([[0, 1], [1, 2]]), 3)).toarray()
    np.testing.assert_allclose(np.diag(lap), [1.0, 1.0, 1.0])
    assert lap[0, 1] == pytest.approx(-1 / math.sqrt(2), rel=1e-12)
    assert lap[0, 2] == 0.0
    # Path P_3: eigenvalues 0, 1, 2.
    np.testing.assert_allclose(np.linalg.eigvalsh(lap), [0.0, 1.0, 2.0], atol=1e-12)


# --- lowest eigenpairs -----------------------------------------------------------


def _check_pairs(lap: np.ndarray, vals: np.ndarray, vecs: np.ndarray, atol: float) -> None:
    assert np.all(np.diff(vals) >= 0), "eigenvalues must ascend"
    np.testing.assert_allclose(lap @ vecs, vecs * vals[None, :], atol=atol)
    np.testing.assert_allclose(vecs.conj().T @ vecs, np.eye(vecs.shape[1]), atol=atol)
    # Canonical phase: the entry of largest modulus is real and positive.
    pivot = vecs[np.argmax(np.abs(vecs), axis=0), np.arange(vecs.shape[1])]
    np.testing.assert_allclose(pivot.imag, 0.0, atol=1e-12)
    assert np.all(pivot.real > 0)


def test_lowest_eigenpairs_dense(graph):
    lap = normalized_laplacian(adjacency(graph.edge_index, graph.n))
    vals, vecs, method = lowest_eigenpairs(lap, m=3, full_max_nodes=64)
    assert method == "dense"
    dense = lap.toarray()
    # Small graphs: every eigenpair, whatever m says.
    assert vals.shape == (graph.n,) and vecs.shape == (graph.n, graph.n)
    np.testing.assert_allclose(vals, np.linalg.eigvalsh(dense), atol=1e-10)
    np.testing.assert_allclose(vecs @ np.diag(vals) @ vecs.T, dense, atol=1e-10)
    _check_pairs(dense, vals, vecs, atol=1e-10)
    # Multiplicity of eigenvalue 0 is the number of components without isolated nodes;
    # each isolated node contributes an eigenvalue 1 under our convention.
    g = graph.nx_graph()
    n_comp = sum(1 for c in nx.connected_components(g) if len(c) > 1)
    assert np.sum(np.abs(vals) < 1e-9) == n_comp


def test_lowest_eigenpairs_dense_just_above_full_max_nodes():
    # n > full_max_nodes but n <= m + 1: a dense solve, cut to the m lowest.
    case_lap = normalized_laplacian(adjacency(np.stack([np.arange(9), np.arange(1, 10)]), 10))
    vals, vecs, method = lowest_eigenpairs(case_lap, m=9, full_max_nodes=4)
    assert method == "dense"
    assert vals.shape == (9,) and vecs.shape == (10, 9)
    np.testing.assert_allclose(vals, np.linalg.eigvalsh(case_lap.toarray())[:9], atol=1e-10)
    # Path P_n: eigenvalues 1 - cos(pi k / (n - 1)).
    np.testing.assert_allclose(vals, 1 - np.cos(np.pi * np.arange(9) / 9), atol=1e-10)


def test_lowest_eigenpairs_empty():
    vals, vecs, method = lowest_eigenpairs(sp.csr_matrix((0, 0)), m=4)
    assert vals.shape == (0,) and vecs.shape == (0, 0)


def test_lowest_eigenpairs_arpack(make_connected):
    case = make_connected(11, 300, 0.015)
    lap = normalized_laplacian(adjacency(case.edge_index, case.n))
    vals, vecs, method = lowest_eigenpairs(lap, m=6, full_max_nodes=64)
    assert method == "arpack"  # 300 nodes: above the dense-solve bound
    assert vals.shape == (6,) and vecs.shape == (300, 6)
    dense = lap.toarray()
    np.testing.assert_allclose(vals, np.linalg.eigvalsh(dense)[:6], atol=1e-6)
    _check_pairs(dense, vals, vecs, atol=1e-6)
    # Deterministic: a second call gives the same bits.
    vals2, vecs2, method2 = lowest_eigenpairs(lap, m=6, full_max_nodes=64)
    assert method2 == method
    np.testing.assert_array_equal(vals2, vals)
    np.testing.assert_array_equal(vecs2, vecs)


@pytest.mark.parametrize("complex_", [False, True])
def test_shift_inverse_solves_the_shifted_system_and_matches_scipys_shift_invert(make_connected, make_directed, complex_):
    """Shift-invert uses its own LU of L - sigma I (symmetric mode, no pivoting); against numpy's dense
    solve, and its eigenpairs against scipy's own shift-invert (default LU) as eigenspaces."""
    from scipy.sparse.linalg import eigsh

    from xmask_cli.structure import spectrum

    if complex_:
        case = make_directed(3, n=260, p=0.02)
        lap = magnetic_laplacian(adjacency(case.edge_index, case.n, symmetric=False), q=0.25)
    else:
        case = make_connected(5, 260, 0.02)
        lap = normalized_laplacian(adjacency(case.edge_index, case.n))
    dense = lap.toarray()
    rng = np.random.default_rng(0)
    b = rng.standard_normal(case.n) + (1j * rng.standard_normal(case.n) if complex_ else 0.0)
    op = spectrum._ShiftInverse(lap, spectrum._SIGMA)
    x = op.matvec(b)
    np.testing.assert_allclose(x, np.linalg.solve(dense - spectrum._SIGMA * np.eye(case.n), b), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(op @ b, x, rtol=0, atol=0)  # LinearOperator's own entry point: the same solve
    vals, vecs, method = lowest_eigenpairs(lap, m=8, full_max_nodes=64)
    assert method == "arpack"
    ref_vals, ref_vecs = eigsh(lap.tocsc(), k=8, sigma=spectrum._SIGMA, which="LM", tol=1e-8,
                               v0=np.cos(np.arange(case.n) * 0.7 + 0.1).astype(lap.dtype))
    order = np.argsort(np.real(ref_vals))
    np.testing.assert_allclose(np.real(vals), np.real(ref_vals[order]), atol=1e-10)
    # Simple eigenvalues here (random graphs): each vector spans the same line as scipy's.
    for j in range(8):
        overlap = abs(np.vdot(vecs[:, j], ref_vecs[:, order[j]]))
        assert overlap == pytest.approx(1.0, abs=1e-8)


def test_lowest_eigenpairs_dense_is_deterministic(graph):
    lap = normalized_laplacian(adjacency(graph.edge_index, graph.n))
    v1, x1, _ = lowest_eigenpairs(lap, m=3)
    v2, x2, _ = lowest_eigenpairs(lap, m=3)
    np.testing.assert_array_equal(v1, v2)
    np.testing.assert_array_equal(x1, x2)


def test_lowest_eigenpairs_arpack_complex(make_directed):
    case = make_directed(7, n=300, p=0.015)
    lap = magnetic_laplacian(adjacency(case.edge_index, case.n, symmetric=False), q=0.25)
    vals, vecs, method = lowest_eigenpairs(lap, m=6, full_max_nodes=64)
    assert method == "arpack"
    dense = lap.toarray()
    assert np.iscomplexobj(vecs)
    np.testing.assert_allclose(np.real(vals), np.linalg.eigvalsh(dense)[:6], atol=1e-6)
    np.testing.assert_allclose(np.imag(vals), 0.0, atol=1e-9)
    _check_pairs(dense, np.real(vals), vecs, atol=1e-6)


# --- magnetic Laplacian ------------------------------------------------------------


@pytest.mark.parametrize("q", [0.0, 0.1, 0.25, 0.5])
def test_magnetic_laplacian_matches_dense_formula(digraph, q):
    a = adjacency(digraph.edge_index, digraph.n, symmetric=False)
    lap = magnetic_laplacian(a, q=q)
    assert lap.shape == (digraph.n, digraph.n)
    assert np.iscomplexobj(lap.toarray())
    dense = lap.toarray()
    np.testing.assert_allclose(dense, dense_magnetic(digraph.dense(symmetric=False), q), rtol=1e-12, atol=1e-15)
    # Hermitian, with real eigenvalues in [0, 2].
    np.testing.assert_allclose(dense, dense.conj().T, rtol=0, atol=1e-15)
    ev = np.linalg.eigvals(dense)
    np.testing.assert_allclose(ev.imag, 0.0, atol=1e-10)
    w = np.linalg.eigvalsh(dense)
    assert w.min() >= -1e-10 and w.max() <= 2 + 1e-10


def test_magnetic_laplacian_symmetric_graph_is_ordinary(graph):
    a = adjacency(graph.edge_index, graph.n)
    for q in (0.0, 0.25, 0.4):
        np.testing.assert_allclose(
            magnetic_laplacian(a, q=q).toarray(), normalized_laplacian(a).toarray().astype(complex), rtol=1e-12, atol=1e-15
        )


def test_magnetic_laplacian_q0_is_ordinary_on_a_directed_graph(digraph):
    a_dir = adjacency(digraph.edge_index, digraph.n, symmetric=False)
    lap = magnetic_laplacian(a_dir, q=0.0).toarray()
    # q = 0: the ordinary normalized Laplacian of A_s = (A + A^T) / 2 (weighted).
    a_s = sp.csr_matrix((digraph.dense(symmetric=False) + digraph.dense(symmetric=False).T) / 2)
    np.testing.assert_allclose(lap, normalized_laplacian(a_s).toarray().astype(complex), rtol=1e-12, atol=1e-15)
    assert np.abs(lap.imag).max() == 0.0


def test_magnetic_laplacian_q0_without_reciprocal_edges():
    # Without reciprocal edges A_s = A_sym / 2, and the 1/2 cancels in the normalization.
    ei = np.array([[0, 1, 2, 3, 0], [1, 2, 3, 4, 2]])
    lap = magnetic_laplacian(adjacency(ei, 5, symmetric=False), q=0.0).toarray()
    np.testing.assert_allclose(lap, normalized_laplacian(adjacency(ei, 5)).toarray(), rtol=1e-12, atol=1e-15)


def test_magnetic_laplacian_directed_3_cycle_hand_worked():
    # 0 -> 1 -> 2 -> 0. A_s has 1/2 on each undirected edge, every A_s degree is 1,
    # so each normalized weight is 1/2; with q = 1/4 the phase of u -> v is exp(i pi/2) = i.
    a = adjacency(np.array([[0, 1, 2], [1, 2, 0]]), 3, symmetric=False)
    lap = magnetic_laplacian(a, q=0.25).toarray()
    assert lap[0, 1] == pytest.approx(-0.5j, abs=1e-15)  # -(1/2) exp(i 2pi q (A01 - A10))
    assert lap[1, 0] == pytest.approx(0.5j, abs=1e-15)
    assert lap[2, 0] == pytest.approx(-0.5j, abs=1e-15)
    np.testing.assert_allclose(np.diag(lap), 1.0)
    # L = I - (i/2)(C - C^T), C the cyclic shift: eigenvalues 1 + sin(2 pi k / 3).
    np.testing.assert_allclose(np.linalg.eigvalsh(lap), [1 - math.sqrt(3) / 2, 1.0, 1 + math.sqrt(3) / 2], atol=1e-12)
    # q = 1/8: phase exp(i pi/4).
    lap8 = magnetic_laplacian(a, q=0.125).toarray()
    assert lap8[1, 2] == pytest.approx(-0.5 * complex(math.cos(math.pi / 4), math.sin(math.pi / 4)), abs=1e-15)


def test_magnetic_laplacian_mixed_hand_worked():
    # 0 -> 1 one way, 1 <-> 2 both ways, node 3 isolated.
    a = adjacency(np.array([[0, 1, 2], [1, 2, 1]]), 4, symmetric=False)
    lap = magnetic_laplacian(a, q=0.25).toarray()
    # A_s degrees: d0 = 1/2, d1 = 1/2 + 1 = 3/2, d2 = 1.
    assert lap[0, 1] == pytest.approx(-(0.5 / math.sqrt(0.5 * 1.5)) * 1j, abs=1e-15)
    assert lap[1, 0] == pytest.approx((0.5 / math.sqrt(0.5 * 1.5)) * 1j, abs=1e-15)
    # The reciprocal edge carries no phase.
    assert lap[1, 2] == pytest.approx(-1 / math.sqrt(1.5), abs=1e-15)
    assert lap[2, 1] == pytest.approx(-1 / math.sqrt(1.5), abs=1e-15)
    # Isolated node: unit row, same convention as the ordinary Laplacian.
    np.testing.assert_array_equal(lap[3], [0, 0, 0, 1])


def test_block_eigenpairs_equal_per_block_dense_solves():
    """Batched solves of a block-diagonal Laplacian equal independent numpy eigh per block."""
    import networkx as nx
    import scipy.sparse as sp_

    from xmask_cli.structure import block_eigenpairs

    rng = np.random.default_rng(7)
    mats, sizes = [], []  # several blocks of equal size share one scatter
    for _ in range(9):
        n = int(rng.choice([1, 3, 3, 5, 8]))
        a = nx.to_numpy_array(nx.gnp_random_graph(n, 0.5, seed=int(rng.integers(1 << 30))))
        d = a.sum(1)
        inv = np.where(d > 0, 1 / np.sqrt(np.maximum(d, 1e-300)), 0)
        mats.append(np.eye(n) - inv[:, None] * a * inv[None, :])
        sizes.append(n)
    block = sp_.block_diag(mats, format="csr")
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    for (vals, vecs), lap in zip(block_eigenpairs(block, starts, np.array(sizes)), mats):
        np.testing.assert_allclose(vals, np.linalg.eigvalsh(lap), atol=1e-10)
        np.testing.assert_allclose(vecs @ np.diag(vals) @ vecs.T, lap, atol=1e-10)
        np.testing.assert_allclose(vecs.T @ vecs, np.eye(len(vals)), atol=1e-10)


def test_lowest_eigenpairs_on_a_large_graph_without_factorization(monkeypatch):
    """Above the shift-invert bound the solver works on 2I - L; check it against shift-invert."""
    import networkx as nx
    from scipy.sparse.linalg import eigsh

    import xmask_cli.structure.spectrum as spectrum

    monkeypatch.setattr(spectrum, "_SHIFT_INVERT_MAX", 500)  # the same path as a 5000+ node graph, smaller
    g = nx.random_regular_graph(4, 800, seed=3)
    e = np.array(list(g.edges())).T
    lap = normalized_laplacian(adjacency(e, 800))
    vals, vecs, method = lowest_eigenpairs(lap, m=4)
    assert method == "arpack" and vals.shape == (4,) and vecs.shape == (800, 4)
    ref = np.sort(eigsh(lap.tocsc(), k=4, sigma=-1e-3, which="LM")[0])
    np.testing.assert_allclose(vals, ref, atol=1e-6)
    assert abs(vals[0]) < 1e-8  # connected: exactly one zero eigenvalue
    np.testing.assert_allclose(lap @ vecs, vecs * vals, atol=1e-5)
    np.testing.assert_allclose(vecs.T @ vecs, np.eye(4), atol=1e-6)


# --- per-component spectra -------------------------------------------


def _dense_norm_lap(a: np.ndarray) -> np.ndarray:
    deg = a.sum(1)
    d = np.where(deg > 0, 1.0 / np.sqrt(np.maximum(deg, 1e-300)), 0.0)
    return np.eye(a.shape[0]) - d[:, None] * a * d[None, :]


def _dense_adj(e: np.ndarray, n: int) -> np.ndarray:
    a = np.zeros((n, n))
    a[e[0], e[1]] = a[e[1], e[0]] = 1.0
    np.fill_diagonal(a, 0.0)
    return a


def _shuffle(parts: list[np.ndarray], sizes: list[int], seed: int) -> tuple[np.ndarray, int]:
    """Disjoint union of graphs (edge lists on 0..s-1), node ids shuffled so components interleave."""
    n = int(sum(sizes))
    offs = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    e = np.concatenate([p + o for p, o in zip(parts, offs)], axis=1) if parts else np.zeros((2, 0), np.int64)
    relabel = np.random.default_rng(seed).permutation(n)
    return relabel[e], n


def _connected(s: int, seed: int, p: float = 0.08) -> np.ndarray:
    g = nx.gnp_random_graph(s, p, seed=seed)
    g.add_edges_from(zip(range(s - 1), range(1, s)))  # a path through all nodes: connected
    return np.array(list(g.edges()), dtype=np.int64).reshape(-1, 2).T


def many_components(kind: str) -> tuple[np.ndarray, int]:
    """Graphs above 200 nodes with 1, 5 or 50 components (50: isomorphic copies and isolated nodes)."""
    if kind == "1":
        return _shuffle([_connected(230, 1)], [230], 0)
    if kind == "5":
        sizes = [210, 45, 30, 25, 20]  # the largest goes to ARPACK (above DENSE_MAX)
        return _shuffle([_connected(s, 10 + i, p=0.1) for i, s in enumerate(sizes)], sizes, 1)
    if kind == "50":
        rng = np.random.default_rng(5)
        small = [_connected(int(s), int(rng.integers(1 << 20)), p=0.4) for s in rng.integers(2, 9, size=12)]
        parts, sizes = [_connected(70, 3)], [70]
        for i in range(46):  # 46 small components, many of them identical copies (eigenvalue ties across components)
            e = small[i % 12]
            parts.append(e)
            sizes.append(int(e.max()) + 1)
        parts += [np.zeros((2, 0), np.int64)] * 3  # three isolated nodes: eigenvalue 1, never zero
        sizes += [1, 1, 1]
        return _shuffle(parts, sizes, 2)
    raise ValueError(kind)


def _expected_cut(nonzero: np.ndarray, m: int, tol: float = 1e-6) -> int:
    """The documented rule, independently: the m lowest non-zero eigenvalues, minus an eigenspace cut in two."""
    if len(nonzero) <= m:
        return len(nonzero)
    cut = m
    while cut > 0 and nonzero[cut] - nonzero[cut - 1] <= tol:
        cut -= 1
    return cut


def _clusters(vals: np.ndarray, tol: float = 1e-6) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for v in np.sort(vals):
        if out and v - out[-1][1] <= tol:
            out[-1][1] = v
        else:
            out.append([v, v])
    return [(lo, hi) for lo, hi in out]


def _assert_spectrum_equals_dense(lap: np.ndarray, vals: np.ndarray, vecs: np.ndarray, m: int, atol: float) -> None:
    """Stored pairs = zero space + the documented lowest non-zero ones, as projectors onto eigenspaces."""
    w, v = scipy.linalg.eigh(lap)
    zero = w <= 1e-6
    cut = _expected_cut(w[~zero], m)
    want = np.concatenate([w[zero], w[~zero][:cut]])
    np.testing.assert_allclose(vals, want, atol=1e-7)
    np.testing.assert_allclose(vecs.conj().T @ vecs, np.eye(len(vals)), atol=atol)
    for lo, hi in _clusters(vals):
        got = vecs[:, (vals >= lo - 1e-7) & (vals <= hi + 1e-7)]
        ref = v[:, (w >= lo - 1e-7) & (w <= hi + 1e-7)]
        assert got.shape[1] == ref.shape[1], f"eigenspace at {lo:.6f}: {got.shape[1]} vectors, dense eigh has {ref.shape[1]}"
        np.testing.assert_allclose(got @ got.conj().T, ref @ ref.conj().T, atol=atol)


@pytest.mark.parametrize("kind", ["1", "5", "50"])
def test_graph_spectra_equal_dense_eigh_on_disconnected_graphs(kind):
    e, n = many_components(kind)
    a = adjacency(e, n)
    comp = connected_components(a)
    assert n > 200 and len(np.unique(comp)) == int(kind)
    lap = normalized_laplacian(a)
    ((vals, vecs, method),) = graph_spectra(lap, np.array([0, n]), comp, 8, full_max_nodes=64)
    dense = _dense_norm_lap(_dense_adj(e, n))
    _assert_spectrum_equals_dense(dense, vals, vecs, 8, atol=1e-6)
    # The zero space: one vector per component of two or more nodes, D^1/2 1_c / sqrt(vol c) up to sign.
    deg = np.asarray(a.sum(1)).ravel()
    big = [c for c in np.unique(comp) if (comp == c).sum() > 1]
    zero = vals <= 1e-6
    assert zero.sum() == len(big)
    for x in vecs[:, zero].T:
        (c,) = np.unique(comp[np.abs(x) > 1e-9])
        want = np.where(comp == c, np.sqrt(deg), 0.0) / np.sqrt(deg[comp == c].sum())
        np.testing.assert_allclose(np.abs(x), want, atol=1e-6)
    assert (vals > 1e-6).sum() == 8 and method == ("arpack" if kind in ("1", "5") else "dense")


def test_graph_spectra_more_components_than_m_and_a_straddling_eigenspace():
    # 70 triangles (eigenvalues 0, 3/2, 3/2 each) and a 20-node path (1 - cos(πj/19), j = 0..19):
    # 71 components, so more zero eigenvalues than m = 16. Below 3/2 the path has 12 non-zero
    # eigenvalues; the 13th..16th lowest fall in the 140-fold 3/2 eigenspace, which is left out whole.
    tri = np.array([[0, 1, 2], [1, 2, 0]])
    path = np.stack([np.arange(19), np.arange(1, 20)])
    e, n = _shuffle([tri] * 70 + [path], [3] * 70 + [20], 4)
    a = adjacency(e, n)
    ((vals, vecs, _),) = graph_spectra(normalized_laplacian(a), np.array([0, n]), connected_components(a), 16)
    assert (vals <= 1e-6).sum() == 71
    np.testing.assert_allclose(vals[71:], 1 - np.cos(np.pi * np.arange(1, 13) / 19), atol=1e-10)
    dense = _dense_norm_lap(_dense_adj(e, n))
    _assert_spectrum_equals_dense(dense, vals, vecs, 16, atol=1e-8)


def test_graph_spectra_small_graphs_keep_every_pair_per_graph():
    # A block of graphs (disconnected ones too): at or below full_max_nodes, each graph keeps its whole spectrum.
    rng = np.random.default_rng(3)
    edges, sizes = [], []
    for i in range(6):
        k = int(rng.integers(1, 4))
        parts = [_connected(int(s), int(rng.integers(1 << 20)), p=0.3) for s in rng.integers(2, 9, size=k)]
        e, n = _shuffle(parts, [int(p.max()) + 1 for p in parts], i)
        edges.append(e)
        sizes.append(n)
    offs = np.concatenate([[0], np.cumsum(sizes)])
    a = adjacency(np.concatenate([e + o for e, o in zip(edges, offs[:-1])], axis=1), int(offs[-1]))
    out = graph_spectra(normalized_laplacian(a), offs, connected_components(a), 4, full_max_nodes=64)
    for (vals, vecs, _), e, n in zip(out, edges, sizes):
        dense = _dense_norm_lap(_dense_adj(e, n))
        assert len(vals) == n
        _assert_spectrum_equals_dense(dense, vals, vecs, n, atol=1e-8)


@pytest.mark.parametrize("kind", ["5", "50"])
def test_graph_spectra_magnetic_equal_dense_eigh(kind):
    # Directed: orient each undirected edge at random; a few reciprocal ones. Balanced components have a zero.
    e, n = many_components(kind)
    rng = np.random.default_rng(int(kind))
    flip = rng.random(e.shape[1]) < 0.5
    d = np.where(flip, e[::-1], e)
    d = np.concatenate([d, d[::-1, rng.random(e.shape[1]) < 0.1]], axis=1)
    ad = adjacency(d, n, symmetric=False)
    lap = magnetic_laplacian(ad, 0.25)
    ((vals, vecs, _),) = graph_spectra(lap, np.array([0, n]), connected_components(ad), 8, full_max_nodes=64)
    dense = np.zeros((n, n))
    dense[d[0], d[1]] = 1.0
    _assert_spectrum_equals_dense(dense_magnetic(dense, 0.25), vals, vecs, 8, atol=1e-6)
    assert np.iscomplexobj(vecs) and (vals > 1e-6).sum() == 8
