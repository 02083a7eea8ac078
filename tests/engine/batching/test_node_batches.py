"""A batch's pairs and dense block read from a graph's CSR pairs, against numpy indexing of the dense matrix;
the node batchers' batches against the same dense matrix."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from xmask_cli.engine.batching.node_batches import (
    FullBatcher,
    NodeGraph,
    PartitionBatcher,
    QueryBatcher,
    SubgraphBatcher,
    dense_block,
    group_batches,
    induced_pairs,
)
from xmask_cli.engine.batching.query import QueryStats


def _csr(n: int, k: int, density: float, seed: int):
    """Cached-pair layout of a random sparse graph: ``indptr``, ``col`` (rows ascending) and ``values [P, K]``,
    and the same values densely ``[K, n, n]``."""
    rng = np.random.default_rng(seed)
    support = sp.random(n, n, density=density, random_state=seed, format="csr")
    support.sum_duplicates()
    support.sort_indices()
    values = rng.uniform(0.1, 1.0, size=(support.nnz, k)).astype(np.float32)
    dense = np.zeros((k, n, n), dtype=np.float32)
    rows = np.repeat(np.arange(n), np.diff(support.indptr))
    dense[:, rows, support.indices] = values.T
    return support.indptr.astype(np.int64), support.indices.astype(np.int64), values, dense


@pytest.mark.parametrize("seed", range(4))
def test_dense_block_equals_indexing_the_dense_powers(seed):
    n, k = 60, 3
    indptr, col, values, dense = _csr(n, k, 0.1, seed)
    nodes = np.sort(np.random.default_rng(seed).choice(n, size=17, replace=False))
    local = np.full(n, -1, dtype=np.int64)
    got = dense_block(indptr, col, values, nodes, local)
    np.testing.assert_array_equal(got, dense[:, nodes][:, :, nodes])
    assert (local == -1).all()  # the scratch map is restored


def test_induced_pairs_are_the_pairs_with_both_ends_in_the_batch():
    n = 40
    indptr, col, values, dense = _csr(n, 1, 0.15, 7)
    nodes = np.array([1, 4, 5, 9, 20, 33, 39])
    local = np.full(n, -1, dtype=np.int64)
    pos, (r, c) = induced_pairs(indptr, col, nodes, local)
    # Brute force: every cached pair (i, j) with i and j in the batch, in CSR order.
    inside = set(nodes.tolist())
    want = [(p, i, int(col[p])) for i in range(n) for p in range(indptr[i], indptr[i + 1])
            if i in inside and int(col[p]) in inside]
    assert pos.tolist() == [p for p, _, _ in want]
    where = {int(g): i for i, g in enumerate(nodes)}
    assert r.tolist() == [where[i] for _, i, _ in want] and c.tolist() == [where[j] for _, _, j in want]
    assert (np.diff(r) >= 0).all()  # rows ascending, as in the cache
    assert (local == -1).all()


def test_a_batch_without_inner_pairs_is_empty():
    # A path 0-1-2-3 (both directions): nodes 0 and 2 are not adjacent, and no self pair is cached.
    indptr = np.array([0, 1, 3, 5, 6])
    col = np.array([1, 0, 2, 1, 3, 2])
    local = np.full(4, -1, dtype=np.int64)
    pos, ei = induced_pairs(indptr, col, np.array([0, 2]), local)
    assert pos.size == 0 and ei.shape == (2, 0)
    block = dense_block(indptr, col, np.ones((6, 2), np.float32), np.array([1, 2]), local)
    np.testing.assert_array_equal(block, np.array([[[0, 1], [1, 0]]] * 2, dtype=np.float32))


def _graph(n: int = 50, k: int = 2, seed: int = 3) -> tuple[NodeGraph, np.ndarray]:
    """A :class:`NodeGraph` of a random sparse graph (every third node a training node) and its dense powers."""
    indptr, col, values, dense = _csr(n, k, 0.1, seed)
    train = np.zeros(n, dtype=bool)
    train[::3] = True
    return NodeGraph(torch.randn(n, 5), train, indptr, col, values, None, torch.device("cpu")), dense


def _rebuilt(batch, k: int) -> np.ndarray:
    """A sparse batch's pairs scattered back into a dense ``[K, n, n]`` block."""
    n = batch.nodes.numel()
    out = np.zeros((k, n, n), dtype=np.float32)
    out[:, batch.edge_index[0].numpy(), batch.edge_index[1].numpy()] = batch.values.numpy().T
    return out


def test_group_batches_hold_every_node_once_with_its_in_group_pairs():
    graph, dense = _graph()
    group = np.random.default_rng(0).integers(0, 4, size=graph.num_nodes)
    batches = group_batches(graph, group)
    assert len(batches) == 4
    assert sorted(np.concatenate([b.nodes.numpy() for b in batches]).tolist()) == list(range(graph.num_nodes))
    for g, batch in enumerate(batches):
        nodes = batch.nodes.numpy()
        assert (group[nodes] == g).all() and (np.diff(nodes) > 0).all()
        np.testing.assert_array_equal(_rebuilt(batch, 2), dense[:, nodes][:, :, nodes])
        assert np.array_equal(batch.targets.numpy(), np.flatnonzero(graph.train_mask[nodes]))


def test_partition_batcher_trains_on_every_part_with_a_training_node_in_a_seeded_order():
    graph, _ = _graph()
    part = np.arange(graph.num_nodes) % 5
    batcher = PartitionBatcher(graph, part, parts_per_batch=1, seed=0, out_dim=3)
    assert len(batcher.eval_batches) == 5
    epoch = [b.nodes[0].item() for b in batcher.train_batches(1)]
    assert sorted(epoch) == list(range(5))  # node i is the first of part i
    assert epoch == [b.nodes[0].item() for b in batcher.train_batches(1)]
    grouped = PartitionBatcher(graph, part, parts_per_batch=2, seed=0, out_dim=3)
    assert len(grouped.eval_batches) == 3
    sizes = sorted(b.nodes.numel() for b in grouped.train_batches(0))
    assert sizes == [10, 20, 20]


def test_subgraph_batcher_slices_the_dense_powers_and_scores_through_its_evaluation():
    graph, dense = _graph()
    full = FullBatcher(graph, dense)
    batcher = SubgraphBatcher(graph, size=12, per_epoch=3, seed=0, evaluation=full)
    nodes = batcher.draw(2, 1)
    assert len(nodes) == 12 and np.array_equal(nodes, batcher.draw(2, 1))
    np.testing.assert_array_equal(batcher.batch(nodes).powers[0].numpy(), dense[:, nodes][:, :, nodes])
    assert batcher.whole_graph_batch() is full.batch
    assert [b.nodes.tolist() for b in batcher.train_batches(2)][1] == nodes.tolist()


def test_query_batches_cover_the_training_nodes_and_the_whole_graph_batch_is_the_full_sparse_one():
    graph, _ = _graph()
    batcher = QueryBatcher(graph, query_batch=4, chunk_pairs=64, seed=0, stats=QueryStats())
    batches = list(batcher.train_batches(0))
    assert all(b.nodes.numel() <= 4 and (np.diff(b.nodes.numpy()) > 0).all() for b in batches)
    got = np.sort(np.concatenate([b.nodes.numpy() for b in batches]))
    assert np.array_equal(got, np.flatnonzero(graph.train_mask))
    assert all(torch.equal(b.targets, torch.arange(b.nodes.numel())) for b in batches)
    whole, sparse = batcher.whole_graph_batch(), FullBatcher(graph, None).batch
    assert torch.equal(whole.edge_index, sparse.edge_index) and torch.equal(whole.targets, sparse.targets)
    assert torch.equal(whole.values, sparse.values)
