"""Normalized and magnetic Laplacians and their lowest eigenpairs, against
networkx, dense numpy formulas written here, and hand-worked values."""
from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from xmask_cli.structure import adjacency, lowest_eigenpairs, magnetic_laplacian, normalized_laplacian


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
