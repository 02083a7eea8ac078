"""Compiled ball propagation (power_rows, power_pairs, walk_pairs) against dense numpy."""
from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from xmask_cli.structure import adjacency, power_pairs, walk_pairs
from xmask_cli.structure.walks import power_rows


def _dense_from_pairs(row, col, values, n):
    out = np.zeros((values.shape[1], n, n))
    out[:, row, col] = values.T
    return out


def _sym_norm(a: np.ndarray) -> np.ndarray:
    d = a.sum(1)
    inv = np.where(d > 0, 1 / np.sqrt(np.maximum(d, 1e-300)), 0.0)
    return inv[:, None] * a * inv[None, :]


@pytest.mark.parametrize("k", [1, 3, 4])
def test_power_pairs_sym_equal_matrix_powers(graph, k):
    a = graph.dense()
    ahat = _sym_norm(a + np.eye(graph.n))
    row, col, vals = power_pairs(adjacency(graph.edge_index, graph.n), k)
    dense = _dense_from_pairs(row, col, vals, graph.n)
    for j in range(k):
        np.testing.assert_allclose(dense[j], np.linalg.matrix_power(ahat, j + 1), rtol=1e-10, atol=1e-14)
    # The pairs are exactly the ball of radius k (union of the supports), each once.
    lengths = dict(nx.all_pairs_shortest_path_length(graph.nx_graph(), cutoff=k))
    expected = {(i, j) for i in lengths for j in lengths[i]}
    got = set(zip(row.tolist(), col.tolist()))
    assert got == expected and len(got) == len(row)
    assert np.all(np.diff(row) >= 0)


def test_power_pairs_no_symnorm_normalizes_after_raising(graph):
    a = graph.dense() + np.eye(graph.n)
    row, col, vals = power_pairs(adjacency(graph.edge_index, graph.n), 3, normalization="no-symnorm")
    dense = _dense_from_pairs(row, col, vals, graph.n)
    for j in range(3):
        np.testing.assert_allclose(dense[j], _sym_norm(np.linalg.matrix_power(a, j + 1)), rtol=1e-10, atol=1e-14)


def test_walk_pairs_are_random_walk_probabilities(graph):
    a = graph.dense()
    d = a.sum(1)
    p = np.where(d[:, None] > 0, a / np.maximum(d[:, None], 1), 0.0)
    row, col, vals = walk_pairs(adjacency(graph.edge_index, graph.n), 6)
    dense = _dense_from_pairs(row, col, vals, graph.n)
    assert dense.shape[0] == 7
    for j in range(7):
        np.testing.assert_allclose(dense[j], np.linalg.matrix_power(p, j), rtol=1e-10, atol=1e-14)


def test_power_rows_of_a_directed_matrix():
    """Rows of M^k for a non-symmetric M: e_i^T M^k, not M^k e_i."""
    rng = np.random.default_rng(0)
    m = (rng.random((12, 12)) < 0.2) * rng.random((12, 12))
    import scipy.sparse as sp

    row, col, vals = power_rows(sp.csr_matrix(m), 3, include_identity=True)
    dense = _dense_from_pairs(row, col, vals, 12)
    for j in range(4):
        np.testing.assert_allclose(dense[j], np.linalg.matrix_power(m, j), rtol=1e-10, atol=1e-14)


def test_unknown_normalization():
    with pytest.raises(ValueError, match="unknown normalization"):
        power_pairs(adjacency(np.array([[0], [1]]), 2), 2, normalization="rw")


def test_ball_structure_on_a_block_diagonal_pair_of_graphs():
    """Fused powers + distances with graph-local columns, against numpy and networkx per graph."""
    import scipy.sparse as sp

    from xmask_cli.structure import ball_structure

    g1 = nx.path_graph(7)
    g2 = nx.gnp_random_graph(12, 0.25, seed=5)
    a1, a2 = nx.to_numpy_array(g1), nx.to_numpy_array(g2)
    block = sp.block_diag([a1, a2], format="csr")
    base = np.array([0] * 7 + [7] * 12)
    out = ball_structure(block, 3, spd_radius=5, base=base, col_dtype=np.dtype(np.uint16))
    assert out["col"].dtype == np.uint16 and out["spd_dist"].dtype == np.uint8
    ip = np.concatenate([[0], np.cumsum(out["counts"])])
    sp_ip = np.concatenate([[0], np.cumsum(out["spd_counts"])])
    for g, a, first in ((g1, a1, 0), (g2, a2, 7)):
        n = a.shape[0]
        ahat = _sym_norm(a + np.eye(n))
        lengths = dict(nx.all_pairs_shortest_path_length(g, cutoff=5))
        for i in range(n):
            node = first + i
            cols = out["col"][ip[node]:ip[node + 1]].astype(int)
            vals = out["values"][ip[node]:ip[node + 1]]
            for j in range(3):
                row = np.zeros(n)
                row[cols] = vals[:, j]
                np.testing.assert_allclose(row, np.linalg.matrix_power(ahat, j + 1)[i], atol=1e-12)
            got = dict(zip(out["spd_col"][sp_ip[node]:sp_ip[node + 1]].tolist(),
                           out["spd_dist"][sp_ip[node]:sp_ip[node + 1]].tolist()))
            assert got == lengths[i]
    with pytest.raises(ValueError, match="spd_radius"):
        ball_structure(block, 3, spd_radius=2)


def _block_of_graphs(seed: int) -> tuple[list[nx.Graph], sp.csr_matrix, np.ndarray]:
    """Six random graphs (some disconnected, one with an isolated node) as one block-diagonal matrix."""
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    graphs = [nx.gnp_random_graph(int(rng.integers(4, 30)), float(rng.uniform(0.05, 0.3)), seed=seed + i) for i in range(6)]
    graphs[2].add_node(graphs[2].number_of_nodes())  # an isolated node: a ball of one
    block = sp.block_diag([nx.to_numpy_array(g, nodelist=range(g.number_of_nodes())) for g in graphs], format="csr")
    sizes = [g.number_of_nodes() for g in graphs]
    base = np.repeat(np.concatenate([[0], np.cumsum(sizes)[:-1]]), sizes)
    return graphs, block, base


def _check_ball_structure(out: dict, graphs: list[nx.Graph], k: int, radius: int) -> None:
    """Every node's pairs against networkx distances and dense matrix powers, in breadth-first order."""
    ip = np.concatenate([[0], np.cumsum(out["counts"])])
    sp_ip = np.concatenate([[0], np.cumsum(out["spd_counts"])])
    node = 0
    for g in graphs:
        n = g.number_of_nodes()
        ahat = _sym_norm(nx.to_numpy_array(g, nodelist=range(n)) + np.eye(n))
        powers = [np.linalg.matrix_power(ahat, j + 1) for j in range(k)]
        lengths = dict(nx.all_pairs_shortest_path_length(g, cutoff=radius))
        for i in range(n):
            cols = out["col"][ip[node]:ip[node + 1]].astype(int)
            assert set(cols.tolist()) == {v for v, d in lengths[i].items() if d <= k} and len(cols) == len(set(cols))
            for j in range(k):
                row = np.zeros(n)
                row[cols] = out["values"][ip[node]:ip[node + 1], j]
                np.testing.assert_allclose(row, powers[j][i], rtol=1e-6, atol=1e-7)
            scol = out["spd_col"][sp_ip[node]:sp_ip[node + 1]].tolist()
            sdist = out["spd_dist"][sp_ip[node]:sp_ip[node + 1]].tolist()
            assert dict(zip(scol, sdist)) == lengths[i] and len(scol) == len(lengths[i])
            assert sdist == sorted(sdist)  # breadth-first: by distance
            assert scol[:len(cols)] == cols.tolist()  # the powers' ball is the distances' prefix
            node += 1


def test_ball_structure_pieces_threads_and_growth_equal_one_pass(monkeypatch):
    """The kernel fills growing buffers; with several threads the block is cut into pieces joined in order.
    Tiny pieces and tiny starting buffers (many regrowths) give the same arrays, bit for bit, as one pass
    with roomy buffers, and both equal networkx and dense matrix powers."""
    from xmask_cli.structure import ball_structure, normalized_adjacency, walks

    graphs, block, base = _block_of_graphs(7)
    kw = dict(spd_radius=5, base=base, col_dtype=np.dtype(np.uint16), values_dtype=np.dtype(np.float32))
    monkeypatch.setattr(walks.numba, "get_num_threads", lambda: 1)
    one = ball_structure(block, 3, **kw)
    _check_ball_structure(one, graphs, 3, 5)
    monkeypatch.setattr(walks, "_PIECE", 5)  # 5 sources a piece, ...
    monkeypatch.setattr(walks, "_ROWS_PER_SOURCE", 0)  # ... starting from 16 rows: regrown many times
    monkeypatch.setattr(walks.numba, "get_num_threads", lambda: 3)
    pieces = ball_structure(block, 3, **kw)
    assert block.shape[0] > 3 * walks._PIECE
    assert sorted(pieces) == sorted(one)
    for key in one:
        assert pieces[key].dtype == one[key].dtype, key
        np.testing.assert_array_equal(pieces[key], one[key], err_msg=key)
    # float32 values are the float64 ones rounded once.
    wide = ball_structure(block, 3, spd_radius=5, base=base, col_dtype=np.dtype(np.uint16))
    assert wide["values"].dtype == np.float64
    np.testing.assert_array_equal(one["values"], wide["values"].astype(np.float32))
    # Identity column first (walk pairs): M^0 = I at the source only.
    m = normalized_adjacency(block)
    with_id = walks.ball_pairs(m, 2, include_identity=True)
    ip = np.concatenate([[0], np.cumsum(with_id["counts"])])
    np.testing.assert_array_equal(with_id["values"][ip[:-1], 0], 1.0)
    assert np.count_nonzero(with_id["values"][:, 0]) == block.shape[0]
