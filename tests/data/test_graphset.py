"""A dataset's graphs as arrays: one-hot degrees (against PyG's OneHotDegree and a capped hand case), the
content hash, and the per-graph arrays of a collated PyG dataset (against its public per-graph access)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.data import Data, InMemoryDataset
from torch_geometric.transforms import OneHotDegree

from xmask_cli.data.graphset import (
    MAX_DEGREE,
    degree_width,
    graph_arrays,
    graph_edge_attrs,
    graphs_fingerprint,
    one_hot_degrees,
)


def _graphs(seed: int) -> tuple[list[np.ndarray], np.ndarray]:
    rng = np.random.default_rng(seed)
    nn = rng.integers(1, 12, size=5)
    edges = [rng.integers(0, n, size=(2, int(rng.integers(0, 3 * n)))).astype(np.int64) for n in nn]
    return edges, nn


@pytest.mark.parametrize("seed", range(3))
def test_one_hot_degrees_equal_pyg_one_hot_degree_with_the_datasets_width(seed):
    edges, nn = _graphs(seed)
    width = degree_width(edges, nn)
    max_out = max(int(np.bincount(e[0], minlength=n).max()) if e.size else 0 for e, n in zip(edges, nn))
    assert width == min(max_out, MAX_DEGREE) + 1
    got = one_hot_degrees(edges, nn)
    for e, n, x in zip(edges, nn, got):
        ref = OneHotDegree(width - 1)(Data(edge_index=torch.from_numpy(e), num_nodes=int(n))).x
        assert x.shape == (n, width)
        torch.testing.assert_close(x, ref.to(x.dtype))


def test_degrees_above_the_cap_share_the_last_slot():
    leaves = MAX_DEGREE + 6
    star = np.stack([np.zeros(leaves, dtype=np.int64), np.arange(1, leaves + 1)])
    star = np.concatenate([star, star[::-1]], 1)  # both directions: the hub's out-degree is 70, each leaf's 1
    (x,) = one_hot_degrees([star], np.array([leaves + 1]))
    assert x.shape == (leaves + 1, MAX_DEGREE + 1)
    assert x[0].argmax() == MAX_DEGREE and x[0].sum() == 1
    assert (x[1:].argmax(1) == 1).all() and x.sum() == leaves + 1
    # A graph without edges: every node has degree 0, width 1.
    (empty,) = one_hot_degrees([np.zeros((2, 0), dtype=np.int64)], np.array([3]))
    assert degree_width([np.zeros((2, 0), dtype=np.int64)], np.array([3])) == 1
    torch.testing.assert_close(empty, torch.ones(3, 1))


def test_the_fingerprint_changes_with_any_edge_node_count_or_graph_boundary():
    e = [np.array([[0, 1], [1, 2]]), np.array([[0], [1]])]
    nn = np.array([3, 2])
    fp = graphs_fingerprint(e, nn)
    assert graphs_fingerprint([x.astype(np.int32) for x in e], nn.astype(np.int32)) == fp  # dtype is no content
    assert graphs_fingerprint([e[0], np.array([[1], [0]])], nn) != fp  # an edge's direction
    assert graphs_fingerprint(e, np.array([3, 3])) != fp  # a node count
    assert graphs_fingerprint(e[::-1], nn[::-1]) != fp  # graph order
    # The same concatenated edges and node counts, cut between graphs elsewhere.
    assert graphs_fingerprint([e[0][:, :1], np.concatenate([e[0][:, 1:], e[1]], 1)], nn) != fp


class _Toy(InMemoryDataset):
    def __init__(self, items: list[Data]):
        super().__init__(None)
        self.data, self.slices = self.collate(items)


@pytest.mark.parametrize("with_x", [True, False])
def test_graph_arrays_of_a_collated_dataset_are_each_graphs_own(with_x):
    rng = np.random.default_rng(1)
    items = []
    for n in (4, 1, 7, 3):
        e = torch.from_numpy(rng.integers(0, n, size=(2, 2 * n)))
        items.append(Data(edge_index=e, x=torch.ones(n, 2)) if with_x else Data(edge_index=e, num_nodes=n))
    ds = _Toy(items)
    edges, nn = graph_arrays(ds)
    assert nn.tolist() == [4, 1, 7, 3] and nn.dtype == np.int64
    for i, e in enumerate(edges):
        np.testing.assert_array_equal(e, ds[i].edge_index.numpy())  # graph-local ids, not offset
        assert e.dtype == np.int64
    one_edges, one_nn = graph_arrays(_Toy(items[2:3]))
    np.testing.assert_array_equal(one_edges[0], items[2].edge_index.numpy())
    assert one_nn.tolist() == [7]


def _in_memory(graphs):
    """A PyG in-memory dataset of ``graphs`` (Data objects), collated as the registry's loaders store them."""

    class Listed(InMemoryDataset):
        def __init__(self) -> None:
            super().__init__(None)
            self.data, self.slices = self.collate(graphs)

    return Listed()


def test_graph_edge_attrs_per_graph_as_the_dataset_stores_them():
    gs = [Data(x=torch.ones(n, 1), edge_index=torch.randint(0, n, (2, e)), edge_attr=torch.arange(e * 2).view(e, 2) + k)
          for k, (n, e) in enumerate([(3, 4), (5, 0), (2, 3)])]
    got = graph_edge_attrs(_in_memory(gs))
    assert got is not None and [a.tolist() for a in got] == [g.edge_attr.tolist() for g in gs]  # per-graph access
    one_dim = graph_edge_attrs(_in_memory([Data(x=torch.ones(2, 1), edge_index=torch.tensor([[0], [1]]),
                                                edge_attr=torch.tensor([0.5]))] * 2))
    assert one_dim is not None and one_dim[0].shape == (1, 1)  # a 1-d attribute is one column
    assert graph_edge_attrs(_in_memory([Data(x=torch.ones(2, 1), edge_index=torch.tensor([[0], [1]]))] * 2)) is None
    single = _in_memory([gs[0]])
    assert [a.tolist() for a in graph_edge_attrs(single) or []] == [gs[0].edge_attr.tolist()]
