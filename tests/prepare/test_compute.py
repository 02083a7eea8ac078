"""One block's structure (``compute_block``) against numpy / networkx on a block of three small graphs, and the
column dtype."""
from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from tests.model.graphs import adjacency, norm_powers
from xmask_cli.config_resolve import resolve
from xmask_cli.prepare import col_dtype, compute_block

K, SPD_MAX, STEPS, EIGS, FULL = 3, 4, 3, 2, 3  # FULL: graphs this small keep every pair


def test_col_dtype_halves_columns_only_when_safe():
    assert col_dtype(np.array([10, 65536])) == np.uint16
    assert col_dtype(np.array([10, 65537])) == np.int32


def _block():
    """A 5-path (its edges listed twice, once reversed, and a self loop), a triangle with a pendant, and a
    3-node graph whose third node is isolated: 4, 4 and 1 distinct undirected edges."""
    path = np.array([[0, 1, 2, 3, 1, 2, 2], [1, 2, 3, 4, 0, 1, 2]])
    tri = np.array([[0, 1, 2, 2], [1, 2, 0, 3]])
    iso = np.array([[0], [1]])
    und = [[(0, 1), (1, 2), (2, 3), (3, 4)], [(0, 1), (1, 2), (2, 0), (2, 3)], [(0, 1)]]
    return [path, tri, iso], np.array([5, 4, 3]), und


def _dense(group: dict, nn: np.ndarray, field: str, fill: float = 0.0) -> list[np.ndarray]:
    """Per-graph dense ``[n, n, C]`` arrays from the block's node counts and graph-local columns."""
    out, ptr, start = [], np.concatenate([[0], np.cumsum(group["node_counts"])]), 0
    vals = group[field].reshape(len(group["col"]), -1)
    for n in nn:
        m = np.full((n, n, vals.shape[1]), fill, dtype=np.float64)
        for i in range(n):
            lo, hi = ptr[start + i], ptr[start + i + 1]
            m[i, group["col"][lo:hi].astype(np.int64)] = vals[lo:hi]
        out.append(m)
        start += n
    return out


@pytest.fixture(scope="module")
def block():
    edges, nn, und = _block()
    cfg = resolve("graph-level", [f"structure.powers.k={K}", "structure.spd.enabled=true",
                                  f"structure.spd.max_distance={SPD_MAX}", "structure.rrwp.enabled=true",
                                  f"structure.rrwp.steps={STEPS}", "structure.spectrum.enabled=true",
                                  f"structure.spectrum.num_eigs={EIGS}", f"structure.spectrum.full_max_nodes={FULL}",
                                  "structure.magnetic.enabled=false"]).structure
    return compute_block(edges, nn, cfg, False, "graph", np.dtype(np.uint16)), nn, und


def test_counts_and_components_of_the_block(block):
    res, nn, und = block
    np.testing.assert_array_equal(res.num_nodes, nn)
    np.testing.assert_array_equal(res.num_edges, [4, 4, 1])  # duplicates, reversed rows and self loops not counted
    assert not res.large.any() and res.capped == 0
    labels = np.split(res.component, np.cumsum(nn)[:-1])
    seen: set[int] = set()
    for n, e, lab in zip(nn, und, labels):
        g = nx.Graph(e)
        g.add_nodes_from(range(n))
        for comp in nx.connected_components(g):
            assert len({int(lab[i]) for i in comp}) == 1  # one label per component
        assert len(set(lab.tolist())) == nx.number_connected_components(g)
        assert not seen & set(lab.tolist())  # no label shared across graphs of the block
        seen |= set(lab.tolist())


def test_powers_are_each_graphs_normalized_powers_at_graph_local_columns(block):
    res, nn, und = block
    group = res.pairs["powers"]
    assert group["col"].dtype == np.uint16 and group["values"].shape[1] == K
    for n, e, got in zip(nn, und, _dense(group, nn, "values")):
        want = norm_powers(adjacency(n, e), K).transpose(1, 2, 0)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    # Stored pairs are exactly the union support of the powers (no explicit zeros, none missing).
    supports = [int((norm_powers(adjacency(n, e), K) != 0).any(0).sum()) for n, e in zip(nn, und)]
    assert len(group["col"]) == sum(supports)


def test_spd_pairs_are_the_hop_distances_up_to_the_cut_off(block):
    res, nn, und = block
    for n, e, got in zip(nn, und, _dense(res.pairs["spd"], nn, "dist", fill=-1)):
        g = nx.Graph(e)
        g.add_nodes_from(range(n))
        want = np.full((n, n), -1.0)
        for i, lengths in nx.all_pairs_shortest_path_length(g, cutoff=SPD_MAX):
            for j, d in lengths.items():
                want[i, j] = d
        np.testing.assert_array_equal(got[:, :, 0], want)


def test_rrwp_pairs_are_the_random_walk_matrices(block):
    res, nn, und = block
    for n, e, got in zip(nn, und, _dense(res.pairs["rrwp"], nn, "values")):
        a = adjacency(n, e)
        deg = a.sum(1)
        p = np.divide(a, deg[:, None], out=np.zeros_like(a), where=deg[:, None] > 0)
        want = np.stack([np.linalg.matrix_power(p, s) for s in range(STEPS + 1)], -1)  # I, P, ..., P^steps
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_spectrum_is_every_zero_then_the_lowest_non_zero_pairs(block):
    """Above ``full_max_nodes`` (the 5-path, the 4-node graph): every zero pair, then the EIGS lowest non-zero
    ones; at or below it (the 3-node graph): every pair."""
    res, nn, und = block
    eig = res.eig["spectrum"]
    assert len(eig["vals"]) == len(nn)
    for n, e, vals, vecs in zip(nn, und, eig["vals"], eig["vecs"]):
        a = adjacency(n, e)
        deg = a.sum(1)
        d = np.divide(1.0, np.sqrt(deg), out=np.zeros_like(deg), where=deg > 0)
        lap = np.eye(n) - d[:, None] * a * d[None, :]
        w = np.linalg.eigvalsh(lap)
        zeros, nonzero = w[w <= 1e-9], w[w > 1e-9]
        # Components with an edge each give one zero; an isolated node's Laplacian entry is 1, not 0.
        g = nx.Graph(e)
        assert len(zeros) == nx.number_connected_components(g)
        want = w if n <= FULL else np.concatenate([zeros, nonzero[:EIGS]])
        np.testing.assert_allclose(np.sort(vals), want, atol=1e-5)
        x = np.asarray(vecs, dtype=np.float64).reshape(n, len(vals))
        np.testing.assert_allclose(lap @ x, x * np.asarray(vals)[None, :], atol=1e-5)  # eigenpairs
        np.testing.assert_allclose(np.linalg.norm(x, axis=0), 1.0, atol=1e-5)
