"""cache.reader: what a StructureCache returns equals an independent computation of the structure."""
from __future__ import annotations

import h5py
import networkx as nx
import numpy as np
import pytest

from tests.cache.graphs import prepare_toy, random_graphs
from tests.model.graphs import a_hat_of
from xmask_cli import cache as K
from xmask_cli.config_resolve import resolve
from xmask_cli.errors import CacheError


def test_round_trip_equals_independent_computation(tmp_path):
    edges, nodes = random_graphs()
    s = prepare_toy(tmp_path, edges, nodes)
    with K.StructureCache(s.path) as c:
        assert c.num_graphs == len(nodes)
        for g, (e, n) in enumerate(zip(edges, nodes)):
            ahat = a_hat_of(e, int(n))
            dense = c.dense_powers(g)
            for k in range(4):
                np.testing.assert_allclose(dense[k], np.linalg.matrix_power(ahat, k + 1), rtol=1e-5, atol=1e-7)
            G = nx.Graph()
            G.add_nodes_from(range(n))
            G.add_edges_from((int(u), int(v)) for u, v in e.T if u != v)
            spd = c.dense_spd(g)
            for i in range(n):
                lengths = nx.single_source_shortest_path_length(G, i)
                for j in range(n):
                    if j not in lengths:
                        assert spd[i, j] == -2
                    elif lengths[j] <= 8:
                        assert spd[i, j] == lengths[j]
                    else:
                        assert spd[i, j] == -1
            lam, vec = c.spectrum(g)
            a = nx.to_numpy_array(G, nodelist=range(n))
            deg = a.sum(1)
            inv = np.where(deg > 0, 1 / np.sqrt(np.maximum(deg, 1e-300)), 0)
            lap = np.eye(n) - inv[:, None] * a * inv[None, :]  # isolated node: L_ii = 1
            np.testing.assert_allclose(lam, np.linalg.eigvalsh(lap)[: lam.shape[0]], atol=1e-6)
            assert lam.shape[0] == n  # all these graphs are below full_max_nodes
            np.testing.assert_allclose(vec @ np.diag(lam) @ vec.T, lap, atol=1e-5)


def test_memory_load_matches_lazy_reads(tmp_path):
    edges, nodes = random_graphs(1, 5)
    s = prepare_toy(tmp_path, edges, nodes)
    lazy = K.StructureCache(s.path)
    mem = K.StructureCache(s.path).load_in_memory()
    for g in range(5):
        for a, b in zip(lazy.powers(g), mem.powers(g)):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(lazy.dense_spd(g), mem.dense_spd(g))


def test_public_reads_match_the_stored_pairs(tmp_path):
    edges, nodes = random_graphs(2, 6)
    s = prepare_toy(tmp_path, edges, nodes)
    with h5py.File(s.path, "r") as f:
        stored_nodes = f["graphs/num_nodes"][()]
    for c in (K.StructureCache(s.path), K.StructureCache(s.path).load_in_memory()):
        np.testing.assert_array_equal(c.read_array("graphs/num_nodes"), stored_nodes)
        np.testing.assert_array_equal(c.read_array("graphs/num_nodes", slice(1, 3)), stored_nodes[1:3])
        for g in range(6):
            # Independent count: the nonzeros of the dense powers' union support.
            assert c.num_pairs("powers", g) == int(np.count_nonzero(c.dense_powers(g).any(axis=0)))
        with pytest.raises(CacheError, match="no 'nope/x'"):
            c.read_array("nope/x")


def test_node_slice_and_spd_reads_match_the_file(tmp_path):
    """node_slice and read_array on the SPD group (what explain reads): graph g's rows, straight from h5py."""
    edges, nodes = random_graphs(2, 6)
    s = prepare_toy(tmp_path, edges, nodes)
    starts = np.concatenate([[0], np.cumsum(nodes)])
    with K.StructureCache(s.path) as c, h5py.File(s.path, "r") as f:
        mem = K.StructureCache(s.path).load_in_memory()
        for g in range(len(nodes)):
            assert c.node_slice(g) == slice(int(starts[g]), int(starts[g + 1])) == mem.node_slice(g)
        np.testing.assert_array_equal(c.read_array("spd/dist"), f["spd/dist"][()])
        np.testing.assert_array_equal(c.read_array("spd/col", slice(3, 9)), f["spd/col"][3:9])
        np.testing.assert_array_equal(mem.read_array("graphs/num_nodes"), nodes)
        with pytest.raises(CacheError, match="has no 'magnetic/eigvals'"):
            c.read_array("magnetic/eigvals")


def test_large_graph_is_truncated_and_records_the_rule(tmp_path):
    g = nx.barabasi_albert_graph(300, 4, seed=0)
    e = np.array(list(g.edges())).T
    cfg = resolve("node-level", ["structure.large.min_nodes=100", "structure.large.topk=10",
                                 "structure.large.spd_radius=2", "structure.partition.parts=4"]).structure
    s = prepare_toy(tmp_path, [e], np.array([300]), cfg=cfg, level="node")
    with K.StructureCache(s.path) as c:
        assert bool(c.file["graphs/large"][0])
        rule = c.file["powers"].attrs["truncation"]
        assert '"topk": 10' in rule
        row, col, vals = c.powers(0)
        deg = np.array([g.degree(i) for i in range(300)])
        for k in range(vals.shape[1]):
            per_row = np.bincount(row[vals[:, k] != 0], minlength=300)
            # At most topk per row, except that every real edge and the self loop are always kept.
            assert np.all(per_row <= np.maximum(10, deg + 1))
            assert np.any(per_row > 10) and np.any(per_row < np.bincount(row, minlength=300))
        _, _, dist = c.spd(0)
        assert dist.max() == 2
        part = c.partition(0)
        assert part.shape == (300,) and set(np.unique(part)) == {0, 1, 2, 3}


def test_optional_structure_round_trip(tmp_path):
    """RRWP, the magnetic Laplacian and no-symnorm powers, through prepare and the reader."""
    edges, nodes = random_graphs(7, 6)
    cfg = resolve("graph-level", ["structure.rrwp.enabled=true", "structure.rrwp.steps=5",
                                  "structure.magnetic.enabled=true", "structure.powers.normalization=no-symnorm",
                                  "structure.powers.k=3"]).structure
    s = prepare_toy(tmp_path, edges, nodes, cfg=cfg)
    with K.StructureCache(s.path) as c:
        for g, (e, n) in enumerate(zip(edges, nodes)):
            n = int(n)
            a = np.zeros((n, n))
            for u, v in e.T:
                if u != v:
                    a[u, v] = a[v, u] = 1
            b = a + np.eye(n)
            row, col, vals = c.powers(g)
            dense = np.zeros((3, n, n))
            dense[:, row, col] = vals.T
            for k in range(3):
                m = np.linalg.matrix_power(b, k + 1)
                d = m.sum(1)
                np.testing.assert_allclose(dense[k], m / np.sqrt(np.outer(d, d)), rtol=1e-5, atol=1e-7)
            deg = a.sum(1)
            p = np.where(deg[:, None] > 0, a / np.maximum(deg[:, None], 1), 0)
            row, col, vals = c.rrwp(g)
            dense = np.zeros((6, n, n))
            dense[:, row, col] = vals.T
            for k in range(6):
                np.testing.assert_allclose(dense[k], np.linalg.matrix_power(p, k), rtol=1e-5, atol=1e-7)
            lam, vec = c.magnetic(g)
            assert np.iscomplexobj(vec)
            # The edge lists name each edge once (u -> v): the magnetic Laplacian sees that direction.
            ad = np.zeros((n, n))
            for u, v in e.T:
                if u != v:
                    ad[u, v] = 1
            a_s = (ad + ad.T) / 2
            ds = a_s.sum(1)
            inv = np.where(ds > 0, 1 / np.sqrt(np.maximum(ds, 1e-300)), 0)
            lap = np.eye(n) - inv[:, None] * a_s * inv[None, :] * np.exp(1j * 2 * np.pi * 0.25 * (ad - ad.T))
            np.testing.assert_allclose(lam, np.linalg.eigvalsh(lap), atol=1e-6)
            np.testing.assert_allclose((vec * lam) @ vec.conj().T, lap, atol=1e-5)
