"""Structural input channels (``model.node_struct``) against independent computations.

On the real MUTAG (188 graphs): the ``degree`` channel against networkx's degree of the
undirected simple graph, one-hot with the fallback's cap; the ``rwse`` channel (read from the
diagonal of the cached RRWP) against dense numpy powers of ``P = D^-1 A``.
"""
from __future__ import annotations

import dataclasses

import networkx as nx
import numpy as np
import pytest
import torch

from xmask_cli.config_resolve import resolve
from xmask_cli.data.graphset import MAX_DEGREE
from xmask_cli.data.load import load_graphs
from xmask_cli.data.registry import get_dataset
from xmask_cli.engine.batching.features import (
    input_features,
    node_features,
    rwse_from_cache,
    struct_channels,
    structural_features,
    undirected_degrees,
)
from xmask_cli.prepare import prepare_graphs

STEPS = 6  # walk lengths of the RWSE checked here (the preset's 16 would only make the cache bigger)


@pytest.fixture(scope="module")
def mutag(tmp_path_factory: pytest.TempPathFactory):
    """The bundled MUTAG and a structure cache of it with RRWP."""
    root = tmp_path_factory.mktemp("node_struct")
    graphs = load_graphs(get_dataset("mutag"), data_root=None, cache_dir=root / "cache", offline=True)
    st = resolve("graph-level").structure
    cfg = dataclasses.replace(st, spd=dataclasses.replace(st.spd, enabled=False),
                              spectrum=dataclasses.replace(st.spectrum, enabled=False),
                              rrwp=dataclasses.replace(st.rrwp, enabled=True, steps=STEPS))
    path = prepare_graphs(dataset_key="mutag", level="graph", edges=graphs.edge_index, num_nodes=graphs.num_nodes,
                          fingerprint=graphs.fingerprint(), cfg=cfg, cache_dir=root / "cache").path
    return graphs, path


def _nx_graph(edge_index: np.ndarray, n: int) -> nx.Graph:
    g = nx.Graph()
    g.add_nodes_from(range(n))
    g.add_edges_from((int(u), int(v)) for u, v in edge_index.T if u != v)
    return g


def test_degree_channel_is_networkx_degree_one_hot_on_mutag(mutag):
    graphs, _ = mutag
    feats = structural_features(graphs, "degree")
    degrees = [np.array([d for _, d in sorted(_nx_graph(e, int(n)).degree())])
               for e, n in zip(graphs.edge_index, graphs.num_nodes)]
    width = min(max(d.max() for d in degrees), MAX_DEGREE) + 1
    assert width == 5  # MUTAG's atoms have 1..4 neighbours
    assert len(feats) == graphs.num_graphs == 188
    for f, d in zip(feats, degrees):
        assert f.shape == (len(d), width) and f.dtype == torch.float32
        expect = np.zeros((len(d), width), dtype=np.float32)
        expect[np.arange(len(d)), np.minimum(d, width - 1)] = 1.0
        np.testing.assert_array_equal(f.numpy(), expect)


def test_degrees_are_of_the_symmetrised_simple_graph_and_capped():
    # One direction only, a duplicate, a self loop; and a star whose centre passes the cap.
    e1 = np.array([[0, 0, 1, 2, 2], [1, 1, 2, 2, 0]])  # triangle 0-1-2 given one way, 0-1 twice, loop at 2
    leaves = MAX_DEGREE + 6
    e2 = np.stack([np.zeros(leaves, dtype=np.int64), np.arange(1, leaves + 1)])
    deg = undirected_degrees([e1, e2], np.array([4, leaves + 1]))
    np.testing.assert_array_equal(deg[0], [2, 2, 2, 0])  # node 3 isolated
    assert deg[1][0] == leaves and (deg[1][1:] == 1).all()
    from xmask_cli.data.graphset import one_hot

    oh = one_hot(deg)
    assert oh[1].shape == (leaves + 1, MAX_DEGREE + 1)
    assert oh[1][0].argmax().item() == MAX_DEGREE and oh[1][0].sum().item() == 1.0  # the cap's last slot


def test_rwse_channel_is_the_diagonal_of_dense_random_walk_powers_on_mutag(mutag):
    graphs, path = mutag
    rw = rwse_from_cache(path)
    assert len(rw) == graphs.num_graphs
    for e, n, got in zip(graphs.edge_index, graphs.num_nodes, rw):
        a = nx.to_numpy_array(_nx_graph(e, int(n)), nodelist=range(int(n)))
        deg = a.sum(1)
        p = np.divide(a, deg[:, None], out=np.zeros_like(a), where=deg[:, None] > 0)
        expect, pk = np.zeros((int(n), STEPS)), np.eye(int(n))
        for k in range(STEPS):
            pk = pk @ p
            expect[:, k] = np.diag(pk)
        assert got.shape == (int(n), STEPS)
        np.testing.assert_allclose(got, expect, rtol=1e-5, atol=1e-6)
    # Not a vacuous match: return probabilities after 2 steps are 1/d_i-weighted and non-zero on every node.
    assert all((r[:, 1] > 0).all() for r in rw)


def test_input_features_append_the_channels_after_the_dataset_columns(mutag):
    graphs, path = mutag
    x = node_features(graphs)
    both, s = input_features(graphs, "degree+rwse", path)
    assert s == 5 + STEPS
    deg, rw = structural_features(graphs, "degree"), rwse_from_cache(path)
    for xi, bi, di, ri in zip(x, both, deg, rw):
        assert bi.shape == (xi.size(0), 7 + 5 + STEPS)
        torch.testing.assert_close(bi[:, :7], xi)
        torch.testing.assert_close(bi[:, 7:12], di)
        torch.testing.assert_close(bi[:, 12:], torch.from_numpy(ri))
    plain, s0 = input_features(graphs, "none", path)
    assert s0 == 0 and all(torch.equal(a, b) for a, b in zip(plain, x))


def test_rwse_without_cached_walks_is_refused(tmp_path):
    graphs = load_graphs(get_dataset("mutag"), data_root=None, cache_dir=tmp_path / "c", offline=True)
    st = resolve("graph-level").structure
    cfg = dataclasses.replace(st, spd=dataclasses.replace(st.spd, enabled=False),
                              spectrum=dataclasses.replace(st.spectrum, enabled=False))
    path = prepare_graphs(dataset_key="mutag", level="graph", edges=graphs.edge_index, num_nodes=graphs.num_nodes,
                          fingerprint=graphs.fingerprint(), cfg=cfg, cache_dir=tmp_path / "c").path
    with pytest.raises(ValueError, match="structure.rrwp.enabled=true"):
        structural_features(graphs, "rwse", path)


@pytest.mark.parametrize("value, channels", [("none", ()), ("degree", ("degree",)), ("rwse", ("rwse",)),
                                             ("degree+rwse", ("degree", "rwse")), ("rwse+degree", ("degree", "rwse"))])
def test_struct_channels(value, channels):
    assert struct_channels(value) == channels


@pytest.mark.parametrize("value", ["", "deg", "degree+degree", "degree+spd"])
def test_struct_channels_refuses_unknown(value):
    with pytest.raises(ValueError, match="node_struct"):
        struct_channels(value)
