"""adjacency() and connected_components() against hand-built references and networkx."""
from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from xmask_cli.structure import adjacency, connected_components


def _partition(labels: np.ndarray) -> set[frozenset[int]]:
    groups: dict[int, set[int]] = {}
    for node, lab in enumerate(labels.tolist()):
        groups.setdefault(lab, set()).add(node)
    return {frozenset(g) for g in groups.values()}


def test_adjacency_matches_reference(graph):
    a = adjacency(graph.edge_index, graph.n)
    assert sp.issparse(a) and a.format == "csr"
    assert a.shape == (graph.n, graph.n)
    assert a.dtype == np.float64
    assert a.has_sorted_indices
    # No duplicate (i, j) is stored twice and every stored value is exactly 1.
    assert np.all(a.data == 1.0)
    keys = np.repeat(np.arange(graph.n), np.diff(a.indptr)) * graph.n + a.indices
    assert np.unique(keys).size == a.nnz
    dense = a.toarray()
    np.testing.assert_array_equal(dense, graph.dense(symmetric=True))
    np.testing.assert_array_equal(dense, dense.T)
    assert np.all(np.diag(dense) == 0)
    assert set(np.unique(dense).tolist()) <= {0.0, 1.0}


def test_adjacency_directed_keeps_direction(graph):
    a = adjacency(graph.edge_index, graph.n, symmetric=False)
    assert a.has_sorted_indices
    assert np.all(a.data == 1.0)
    np.testing.assert_array_equal(a.toarray(), graph.dense(symmetric=False))


def test_adjacency_hand_worked_loops_duplicates_direction():
    # 0->1 three times (one reversed), a loop on 0 and on 2, and 2->3 once.
    ei = np.array([[0, 0, 1, 0, 2, 2], [0, 1, 0, 1, 2, 3]])
    expected_sym = np.array(
        [
            [0, 1, 0, 0],
            [1, 0, 0, 0],
            [0, 0, 0, 1],
            [0, 0, 1, 0],
        ],
        dtype=float,
    )
    expected_dir = np.array(
        [
            [0, 1, 0, 0],
            [1, 0, 0, 0],
            [0, 0, 0, 1],
            [0, 0, 0, 0],
        ],
        dtype=float,
    )
    np.testing.assert_array_equal(adjacency(ei, 4).toarray(), expected_sym)
    np.testing.assert_array_equal(adjacency(ei, 4, symmetric=False).toarray(), expected_dir)
    # A node with only a self loop, and one past every edge, stay isolated.
    a = adjacency(np.array([[0, 2], [1, 2]]), 4).toarray()
    assert a[2].sum() == 0 and a[3].sum() == 0


def test_adjacency_directed_path_is_not_symmetric():
    a = adjacency(np.array([[0, 1], [1, 2]]), 3, symmetric=False).toarray()
    assert a[0, 1] == 1 and a[1, 0] == 0
    assert a[1, 2] == 1 and a[2, 1] == 0


def test_adjacency_empty_edge_list():
    a = adjacency(np.zeros((2, 0), dtype=np.int64), 4)
    assert a.shape == (4, 4) and a.nnz == 0


@pytest.mark.parametrize(
    "ei",
    [
        np.array([[0, 1], [1, 3]]),  # id == n
        np.array([[0, -1], [1, 2]]),  # negative id
        np.array([[5], [0]]),
    ],
    ids=["too_large", "negative", "source_too_large"],
)
def test_adjacency_rejects_out_of_range_ids(ei):
    with pytest.raises(ValueError):
        adjacency(ei, 3)
    with pytest.raises(ValueError):
        adjacency(ei, 3, symmetric=False)


def test_connected_components_match_networkx(graph):
    labels = connected_components(adjacency(graph.edge_index, graph.n))
    assert labels.shape == (graph.n,)
    expected = {frozenset(c) for c in nx.connected_components(graph.nx_graph())}
    assert _partition(labels) == expected


def test_connected_components_directed_is_weak(digraph):
    labels = connected_components(adjacency(digraph.edge_index, digraph.n, symmetric=False))
    expected = {frozenset(c) for c in nx.weakly_connected_components(digraph.nx_graph(directed=True))}
    assert _partition(labels) == expected


def test_connected_components_hand_worked():
    # 0->1 only: weakly one component; 2 isolated; 3-4 another component.
    a = adjacency(np.array([[0, 3], [1, 4]]), 5, symmetric=False)
    labels = connected_components(a)
    assert labels[0] == labels[1]
    assert labels[3] == labels[4]
    assert len({labels[0], labels[2], labels[3]}) == 3
