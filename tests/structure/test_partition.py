"""METIS partitions: shape, range, non-empty parts, reproducibility, quality."""
from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from xmask_cli.structure import adjacency, metis_parts


def _cut(edge_index: np.ndarray, parts: np.ndarray) -> int:
    u, v = edge_index
    return int(np.sum(parts[u] != parts[v]))


@pytest.mark.parametrize("n_parts", [2, 4, 7])
def test_metis_parts_connected_200(make_connected, n_parts):
    case = make_connected(21, 200, 0.02)
    a = adjacency(case.edge_index, case.n)
    parts = metis_parts(a, n_parts, seed=0)
    assert parts.shape == (200,)
    assert parts.dtype == np.int32
    assert parts.min() >= 0 and parts.max() < n_parts
    sizes = np.bincount(parts, minlength=n_parts)
    assert np.all(sizes > 0), f"empty part: {sizes}"
    # METIS balances parts: none far above the mean size.
    assert sizes.max() <= 1.25 * 200 / n_parts
    # Same seed, same partition.
    np.testing.assert_array_equal(metis_parts(a, n_parts, seed=0), parts)
    np.testing.assert_array_equal(metis_parts(a, n_parts, seed=3), metis_parts(a, n_parts, seed=3))


def test_metis_parts_finds_planted_clusters():
    # Four dense blocks joined by a few edges: METIS must cut far fewer edges
    # than a balanced random assignment, and put each block mostly in one part.
    sizes = [50, 50, 50, 50]
    probs = [[0.3 if i == j else 0.005 for j in range(4)] for i in range(4)]
    g = nx.stochastic_block_model(sizes, probs, seed=5)
    assert nx.is_connected(g)
    ei = np.array(list(g.edges())).T
    parts = metis_parts(adjacency(ei, 200), 4, seed=0)
    assert np.all(np.bincount(parts, minlength=4) > 0)
    random_parts = np.random.default_rng(0).permutation(np.repeat(np.arange(4), 50))
    assert _cut(ei, parts) < 0.2 * _cut(ei, random_parts)
    truth = np.repeat(np.arange(4), 50)
    for block in range(4):
        assert np.bincount(parts[truth == block]).max() >= 45


@pytest.mark.parametrize("n_parts", [1, 0, -3])
def test_metis_parts_one_part_or_fewer_is_all_zero(make_connected, n_parts):
    case = make_connected(2, 30, 0.1)
    parts = metis_parts(adjacency(case.edge_index, case.n), n_parts)
    assert parts.shape == (30,) and parts.dtype == np.int32
    assert np.all(parts == 0)


def test_metis_parts_more_parts_than_nodes():
    a = adjacency(np.array([[0, 1], [1, 2]]), 3)
    parts = metis_parts(a, 5)
    assert parts.shape == (3,)
    assert parts.min() >= 0 and parts.max() < 5
    assert np.unique(parts).size == 3


def test_metis_parts_graph_with_isolated_nodes(graph):
    # Every shared graph (isolated nodes and several components included) partitions into range.
    a = adjacency(graph.edge_index, graph.n)
    parts = metis_parts(a, 2, seed=0)
    assert parts.shape == (graph.n,)
    assert parts.min() >= 0 and parts.max() < 2
