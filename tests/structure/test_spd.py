"""Bounded shortest-path pairs and pair_distance against networkx."""
from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from xmask_cli.structure import (
    BEYOND,
    UNREACHABLE,
    PairDistances,
    adjacency,
    connected_components,
    pair_distance,
    shortest_path_pairs,
)


def nx_pairs(g: nx.Graph, cutoff: int) -> set[tuple[int, int, int]]:
    return {(s, t, d) for s in g.nodes for t, d in nx.single_source_shortest_path_length(g, s, cutoff=cutoff).items()}


def check_pairs(row: np.ndarray, col: np.ndarray, dist: np.ndarray, g: nx.Graph, cutoff: int) -> None:
    assert row.dtype == np.int32 and col.dtype == np.int32 and dist.dtype == np.uint8
    assert row.shape == col.shape == dist.shape
    got = list(zip(row.tolist(), col.tolist(), dist.tolist()))
    assert len(got) == len(set(got)), "a pair is listed twice"
    assert set(got) == nx_pairs(g, cutoff)
    # Grouped by ascending row; within a row in breadth-first (non-decreasing distance) order.
    assert np.all(np.diff(row.astype(np.int64)) >= 0)
    same_row = np.diff(row.astype(np.int64)) == 0
    assert np.all(np.diff(dist.astype(np.int64))[same_row] >= 0)
    # The diagonal, with distance 0, is there for every node.
    diag = row == col
    assert diag.sum() == g.number_of_nodes()
    assert np.all(dist[diag] == 0)


@pytest.mark.parametrize("cutoff", [0, 1, 3, 254])
def test_shortest_path_pairs_match_networkx(graph, cutoff):
    row, col, dist = shortest_path_pairs(adjacency(graph.edge_index, graph.n), cutoff)
    check_pairs(row, col, dist, graph.nx_graph(), cutoff)


@pytest.mark.parametrize("cutoff", [1, 3, 254])
def test_shortest_path_pairs_directed_follow_out_edges(digraph, cutoff):
    a = adjacency(digraph.edge_index, digraph.n, symmetric=False)
    row, col, dist = shortest_path_pairs(a, cutoff)
    check_pairs(row, col, dist, digraph.nx_graph(directed=True), cutoff)


def test_shortest_path_pairs_path5_hand_worked():
    a = adjacency(np.array([[0, 1, 2, 3], [1, 2, 3, 4]]), 5)
    row, col, dist = shortest_path_pairs(a, 2)
    by_row = {i: {(c, d) for r, c, d in zip(row.tolist(), col.tolist(), dist.tolist()) if r == i} for i in range(5)}
    assert by_row[0] == {(0, 0), (1, 1), (2, 2)}
    assert by_row[2] == {(2, 0), (1, 1), (3, 1), (0, 2), (4, 2)}
    assert by_row[4] == {(4, 0), (3, 1), (2, 2)}


def test_shortest_path_pairs_long_path_up_to_254():
    # Distances up to the largest storable cut-off, on a path longer than it.
    n = 260
    a = adjacency(np.stack([np.arange(n - 1), np.arange(1, n)]), n)
    row, col, dist = shortest_path_pairs(a, 254)
    first = row == 0
    np.testing.assert_array_equal(np.sort(col[first]), np.arange(255))
    np.testing.assert_array_equal(dist[first].astype(np.int64), col[first])  # BFS order on a path
    comp = connected_components(a)
    d = pair_distance(row, col, dist, comp, np.array([0, 0, 5, 259]), np.array([254, 255, 259, 4]))
    np.testing.assert_array_equal(d, [254, BEYOND, 254, BEYOND])


@pytest.mark.parametrize("bad", [-1, 255, 1000])
def test_shortest_path_pairs_rejects_bad_cutoff(bad):
    a = adjacency(np.array([[0], [1]]), 2)
    with pytest.raises(ValueError):
        shortest_path_pairs(a, bad)


@pytest.mark.parametrize("cutoff", [0, 2, 4])
def test_pair_distance_all_pairs(graph, cutoff):
    a = adjacency(graph.edge_index, graph.n)
    row, col, dist = shortest_path_pairs(a, cutoff)
    comp = connected_components(a)
    g = graph.nx_graph()
    ii, jj = np.meshgrid(np.arange(graph.n), np.arange(graph.n), indexing="ij")
    ii, jj = ii.ravel(), jj.ravel()
    # Query in a shuffled order: the answer must not depend on it.
    perm = np.random.default_rng(cutoff).permutation(ii.size)
    got = pair_distance(row, col, dist, comp, ii[perm], jj[perm])
    lengths = dict(nx.all_pairs_shortest_path_length(g))
    expected = []
    for i, j in zip(ii[perm].tolist(), jj[perm].tolist()):
        d = lengths[i].get(j)
        expected.append(UNREACHABLE if d is None else (d if d <= cutoff else BEYOND))
    np.testing.assert_array_equal(got, expected)
    assert BEYOND != UNREACHABLE and BEYOND < 0 and UNREACHABLE < 0


@pytest.mark.parametrize("cutoff", [1, 3])
def test_pair_distances_block_matches_networkx(graph, cutoff):
    """The dense block (cache.dense_spd, the learned biases' dense extras) and the pair lookup agree with networkx."""
    a = adjacency(graph.edge_index, graph.n)
    row, col, dist = shortest_path_pairs(a, cutoff)
    table = PairDistances(row, col, dist, connected_components(a))
    lengths = dict(nx.all_pairs_shortest_path_length(graph.nx_graph()))
    rng = np.random.default_rng(cutoff)
    rows = np.sort(rng.choice(graph.n, size=max(graph.n // 2, 1), replace=False))
    cols = rng.permutation(graph.n)[: max(graph.n // 3, 1)]
    for r, c in ((None, None), (rows, rows), (rows, cols)):
        got = table.block(r, c)
        ri = np.arange(graph.n) if r is None else r
        ci = np.arange(graph.n) if c is None else c
        assert got.dtype == np.int16 and got.shape == (len(ri), len(ci))
        for x, i in enumerate(ri.tolist()):
            for y, j in enumerate(ci.tolist()):
                d = lengths[i].get(j)
                assert got[x, y] == (UNREACHABLE if d is None else (d if d <= cutoff else BEYOND))
        ii, jj = np.meshgrid(ri, ci, indexing="ij")
        np.testing.assert_array_equal(table.pairs(ii.ravel(), jj.ravel()).reshape(got.shape), got)


def test_pair_distance_hand_worked():
    # Path 0-1-2-3 and an isolated node 4, cut-off 1.
    a = adjacency(np.array([[0, 1, 2], [1, 2, 3]]), 5)
    row, col, dist = shortest_path_pairs(a, 1)
    comp = connected_components(a)
    d = pair_distance(row, col, dist, comp, np.array([0, 0, 0, 3, 4, 4, 2]), np.array([0, 1, 3, 0, 4, 0, 1]))
    np.testing.assert_array_equal(d, [0, 1, BEYOND, BEYOND, 0, UNREACHABLE, 1])
