"""Node-level batches cut from one cached graph: the batch type, one batcher per ``node.mode``, the CSR slicing.

Powers are never recomputed for a batch: a random subgraph or a METIS part
reads the cached *global* powers restricted to its nodes. As PyG's
``loader/`` package has one class per batching strategy, each node mode is
one :class:`NodeBatcher`, chosen once by the node task:

* :class:`FullBatcher` (``full``): the whole graph as one dense or sparse batch;
* :class:`SubgraphBatcher` (``subgraph``): random node subsets per epoch, scored
  by another batcher (the whole graph, or query / partition batches above
  ``dense_max_nodes``);
* :class:`QueryBatcher` (``query``): batches of query nodes, each over all of its
  stored keys (:mod:`xmask_cli.engine.batching.query`);
* :class:`PartitionBatcher` (``partition``): METIS parts (or random groups of them).
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor

from xmask_cli.engine.batching.extras import GraphExtras, to_tensors
from xmask_cli.engine.batching.query import QueryStats, Support, encode_queries
from xmask_cli.engine.training.distributed import deal
from xmask_cli.model.batches import DenseBatch, SparseBatch
from xmask_cli.model.network import XMaskNet

__all__ = ["NodeBatch", "NodeGraph", "NodeBatcher", "FullBatcher", "SubgraphBatcher", "QueryBatcher",
           "PartitionBatcher", "SPARSE_FEATURES", "induced_pairs", "dense_block", "group_batches"]

#: Features are held as a sparse matrix (query mode; full-graph sparse mode with ``node.sparse_features``)
#: when fewer than this share of entries is non-zero (Coauthor Physics: 0.4 %; Amazon Computers, 35 %, stays dense).
SPARSE_FEATURES = 0.05


@dataclass
class NodeBatch:
    """One node-level batch on the CPU.

    Attributes:
        nodes: ``[n]`` global ids of the batch's nodes (ascending), or None for the whole graph.
        targets: ``[t]`` batch-local positions whose loss counts (training nodes in it).
        powers: ``[1, K, n, n]`` dense powers (``full`` / ``subgraph``), or None.
        edge_index: ``[2, E]`` batch-local attended pairs (``partition``), or None.
        values: ``[E, K]`` powers at those pairs (``partition``), or None.
        extras: what the learned biases read (dense with a batch axis of 1, or
            per pair / node; see :class:`~xmask_cli.engine.batching.extras.GraphExtras`), or None.
    """

    nodes: Tensor | None
    targets: Tensor
    powers: Tensor | None = None
    edge_index: Tensor | None = None
    values: Tensor | None = None
    extras: dict[str, Tensor] | None = None


def induced_pairs(indptr: np.ndarray, col: np.ndarray, nodes: np.ndarray,
                  local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cached pairs with both ends in ``nodes``, relabelled to batch-local ids.

    Args:
        indptr: ``[N+1]`` CSR row pointers of the graph's pairs.
        col: ``[P]`` global column of each pair.
        nodes: ``[n]`` ascending global ids of the batch.
        local: ``[N]`` scratch map, ``-1`` everywhere; restored before returning
            (reused across calls so no ``[N]`` array is allocated per batch).

    Returns:
        ``(pair_ids [E], edge_index [2, E])``: positions into the CSR arrays
        (to gather values) and local ``(row, col)``, rows ascending as in the cache.
    """
    starts, ends = indptr[nodes], indptr[nodes + 1]
    counts = ends - starts
    # Positions of every pair whose row is in the batch, without a Python loop.
    offsets = np.repeat(starts - np.cumsum(counts) + counts, counts)
    pos = np.arange(int(counts.sum()), dtype=np.int64) + offsets
    local[nodes] = np.arange(len(nodes), dtype=np.int64)
    try:
        lc = local[col[pos]]
        keep = lc >= 0
        rows = np.repeat(np.arange(len(nodes), dtype=np.int64), counts)
        return pos[keep], np.stack([rows[keep], lc[keep]])
    finally:
        local[nodes] = -1


def dense_block(indptr: np.ndarray, col: np.ndarray, values: np.ndarray, nodes: np.ndarray,
                local: np.ndarray) -> np.ndarray:
    """``[K, n, n]`` cached global powers restricted to rows and columns ``nodes``.

    Equal to ``dense_powers[:, nodes][:, :, nodes]`` without ever building the
    ``N x N`` matrix: only the batch rows of the CSR are read.
    """
    pos, (r, c) = induced_pairs(indptr, col, nodes, local)
    out = np.zeros((values.shape[1], len(nodes), len(nodes)), dtype=np.float32)
    out[:, r, c] = values[pos].T
    return out


def _sparse_features(x: Tensor) -> bool:
    return int(torch.count_nonzero(x)) < SPARSE_FEATURES * x.numel()


@dataclass
class NodeGraph:
    """What the batchers read of one cached graph (global ids throughout).

    Attributes:
        x: ``[N, F]`` node features on the CPU (batches index rows of this one copy).
        train_mask: ``[N]`` bool, True for training nodes.
        indptr: ``[N + 1]`` CSR row pointers of the cached pairs.
        col: ``[P]`` key of each pair, rows ascending.
        values: ``[P, K]`` ``Â^1..Â^K`` at each pair.
        extras: what the learned biases read, or None without any.
        device: where batches are forwarded.
    """

    x: Tensor
    train_mask: np.ndarray
    indptr: np.ndarray
    col: np.ndarray
    values: np.ndarray
    extras: GraphExtras | None
    device: torch.device

    @property
    def num_nodes(self) -> int:
        return len(self.train_mask)

    def rows(self) -> np.ndarray:
        """``[P]`` query node of each pair."""
        return np.repeat(np.arange(self.num_nodes, dtype=np.int64), np.diff(self.indptr))

    def targets(self, nodes: np.ndarray | None = None) -> Tensor:
        """Positions of the training nodes among ``nodes`` (None: the whole graph)."""
        return torch.from_numpy(np.flatnonzero(self.train_mask if nodes is None else self.train_mask[nodes]))

    def sparse_batch(self) -> NodeBatch:
        """Every cached pair of the whole graph (CSR order) as one sparse batch."""
        row = self.rows()
        extras = None if self.extras is None else to_tensors(self.extras.pairs(row, self.col, np.arange(self.num_nodes)))
        return NodeBatch(nodes=None, targets=self.targets(), edge_index=torch.from_numpy(np.stack([row, self.col])),
                         values=torch.from_numpy(np.ascontiguousarray(self.values)), extras=extras)


def group_batches(graph: NodeGraph, group_of_node: np.ndarray) -> list[NodeBatch]:
    """One sparse batch per group id: its nodes, in-group pairs (local ids) and their powers.

    O(P) over all pairs at once, instead of one CSR gather per group.
    """
    n = graph.num_nodes
    order = np.argsort(group_of_node, kind="stable")  # nodes by group, ascending inside one
    num_groups = int(group_of_node.max()) + 1 if group_of_node.size else 0
    bounds = np.concatenate([[0], np.cumsum(np.bincount(group_of_node, minlength=num_groups))])
    local = np.empty(n, dtype=np.int64)
    local[order] = np.arange(n) - np.repeat(bounds[:-1], np.diff(bounds))
    col, values = graph.col, graph.values
    row = graph.rows()
    g_row = group_of_node[row]
    keep = np.flatnonzero(g_row == group_of_node[col])
    # Stable sort by group keeps each group's pairs in CSR (row-ascending) order.
    by_group = np.argsort(g_row[keep], kind="stable")
    keep, kept_groups = keep[by_group], g_row[keep][by_group]
    del g_row, by_group
    pair_bounds = np.searchsorted(kept_groups, np.arange(num_groups + 1))
    batches = []
    for g in range(num_groups):
        nodes = order[bounds[g]:bounds[g + 1]]
        pos = keep[pair_bounds[g]:pair_bounds[g + 1]]
        edge_index = torch.from_numpy(np.stack([local[row[pos]], local[col[pos]]]))
        extras = None if graph.extras is None else to_tensors(graph.extras.pairs(row[pos], col[pos], nodes))
        batches.append(NodeBatch(nodes=torch.from_numpy(nodes), targets=graph.targets(nodes), edge_index=edge_index,
                                 values=torch.from_numpy(np.ascontiguousarray(values[pos])), extras=extras))
    return batches


class NodeBatcher:
    """One node mode's batches: what training draws each epoch, and how every node is scored.

    Subclasses keep of the :class:`NodeGraph` only what their batches need (the
    CSR arrays of a large graph are the bulk of its memory).
    """

    def __init__(self, graph: NodeGraph):
        self.x, self.device = graph.x, graph.device

    @property
    def eval_batches(self) -> list[NodeBatch]:
        """The fixed evaluation batches (partitions; empty for the other modes)."""
        return []

    def train_batches(self, epoch: int) -> Iterator[NodeBatch]:
        """Batches of ``epoch``, drawn from (seed, epoch) only, each with a training node."""
        raise NotImplementedError

    def train_shard(self, epoch: int, rank: int, size: int) -> Iterator[tuple[NodeBatch, bool]]:
        """Rank ``rank``'s ``(batch, real)`` of ``epoch``: the epoch's list dealt (``engine.training.distributed.deal``)."""
        batches = list(self.train_batches(epoch))
        for i, real in deal(len(batches), rank, size):
            yield batches[i], real

    def features(self, batch: NodeBatch) -> Tensor:
        """The batch's rows of the features (CPU)."""
        return self.x if batch.nodes is None else self.x[batch.nodes]

    def forward(self, model: XMaskNet, batch: NodeBatch) -> Tensor:
        """``[n, C]`` logits of the batch's nodes: dense powers or sparse pairs, as the batch carries."""
        x = self.features(batch).to(self.device, non_blocking=True)
        extras = None if batch.extras is None else {k: v.to(self.device) for k, v in batch.extras.items()}
        if batch.powers is not None:
            return model(DenseBatch(x.unsqueeze(0), batch.powers.to(self.device, non_blocking=True), extras=extras))[0]
        if batch.edge_index is None or batch.values is None:
            raise ValueError("a node batch carries dense powers or sparse pairs")
        return model(SparseBatch(x, batch.edge_index.to(self.device), batch.values.to(self.device), extras=extras))

    def predict(self, model: XMaskNet) -> Tensor:
        """``[N, C]`` logits of every node on the CPU (the caller sets eval mode and no_grad)."""
        raise NotImplementedError

    def outputs(self, model: XMaskNet, idx: np.ndarray) -> Tensor:
        """``[len(idx), C]`` logits of nodes ``idx`` on the CPU."""
        return self.predict(model)[torch.from_numpy(idx)]

    def whole_graph_batch(self) -> NodeBatch:
        """The whole graph as one batch (``xmask explain``)."""
        raise ValueError(f"{type(self).__name__} has no whole-graph batch")


class FullBatcher(NodeBatcher):
    """``full``: the whole graph, one batch per epoch, dense or sparse.

    Args:
        graph: the cached graph.
        powers: ``[K, N, N]`` dense powers for dense attention, or None: sparse over the cached pairs.
        sparse_features: on the sparse path, hold bag-of-words features (under
            :data:`SPARSE_FEATURES` non-zero) as a sparse tensor: only stored entries are encoded.
    """

    def __init__(self, graph: NodeGraph, powers: np.ndarray | None, sparse_features: bool = False):
        super().__init__(graph)
        if powers is not None:  # moved once: the same K x N x N tensor serves every epoch and evaluation
            extras = None if graph.extras is None else to_tensors(graph.extras.dense(), self.device, batch_dim=True)
            self.batch = NodeBatch(nodes=None, targets=graph.targets(),
                                   powers=torch.from_numpy(powers).unsqueeze(0).to(self.device), extras=extras)
        else:
            self.batch = graph.sparse_batch()
        self.x_sparse: Tensor | None = None
        if sparse_features and powers is None and _sparse_features(self.x):
            self.x_sparse = self.x.to_sparse().coalesce()

    def features(self, batch: NodeBatch) -> Tensor:
        if batch.nodes is None and batch.edge_index is not None and self.x_sparse is not None:
            return self.x_sparse
        return super().features(batch)

    def train_batches(self, epoch: int) -> Iterator[NodeBatch]:
        yield self.batch

    def predict(self, model: XMaskNet) -> Tensor:
        return self.forward(model, self.batch).float().cpu()

    def whole_graph_batch(self) -> NodeBatch:
        return self.batch


class QueryBatcher(NodeBatcher):
    """``query``: training draws ``query_batch`` training nodes per step (0: all, one step); scoring runs
    every node as a query, each over all of its stored keys (exact: the sparse full-graph numbers).

    Args:
        graph: the cached graph (its pairs are kept as a float32 :class:`Support`).
        query_batch: training queries per step.
        chunk_pairs: pair budget of one attention chunk (memory only).
        seed: seeds the query order, with the epoch.
        stats: filled by every forward (:class:`QueryStats`).
    """

    def __init__(self, graph: NodeGraph, query_batch: int, chunk_pairs: int, seed: int, stats: QueryStats):
        super().__init__(graph)
        self.support = Support(graph.indptr, graph.col, np.ascontiguousarray(graph.values, dtype=np.float32))
        self.train = np.flatnonzero(graph.train_mask)
        self.query_batch, self.chunk_pairs, self.seed, self.stats = query_batch, chunk_pairs, seed, stats
        self._train_mask, self._extras = graph.train_mask, graph.extras
        self._whole: NodeBatch | None = None
        # Bag-of-words features are encoded from their stored entries only.
        self.x_query: Tensor | sp.csr_matrix = sp.csr_matrix(self.x.numpy()) if _sparse_features(self.x) else self.x

    def train_batches(self, epoch: int) -> Iterator[NodeBatch]:
        train = self.train
        size = self.query_batch if 0 < self.query_batch < len(train) else len(train)
        order = np.random.default_rng((self.seed, epoch)).permutation(train) if size < len(train) else train
        for i in range(0, len(order), size):
            nodes = np.sort(order[i:i + size])
            yield NodeBatch(nodes=torch.from_numpy(nodes), targets=torch.arange(len(nodes)))

    def forward(self, model: XMaskNet, batch: NodeBatch) -> Tensor:
        """Logits of the batch's nodes as queries (None: every node)."""
        nodes = np.arange(self.support.num_nodes) if batch.nodes is None else batch.nodes.numpy()
        # An attention output layer (no MLP head) runs as one more query layer.
        h = encode_queries(model, self.x_query, self.support, nodes, chunk_pairs=self.chunk_pairs,
                           device=self.device, stats=self.stats, output=model.head is None)
        return h if model.head is None else model.head(h)

    def predict(self, model: XMaskNet) -> Tensor:
        return self.forward(model, NodeBatch(nodes=None, targets=torch.zeros(0, dtype=torch.long))).float().cpu()

    def outputs(self, model: XMaskNet, idx: np.ndarray) -> Tensor:
        # Only these nodes as queries: the same numbers as predicting all (a node's output reads its own
        # stored pairs only), a fifth of the work for validation on a 60/20/20 split.
        nodes = np.unique(idx)
        out = self.forward(model, NodeBatch(nodes=torch.from_numpy(nodes), targets=torch.zeros(0)))
        return out.float().cpu()[torch.from_numpy(np.searchsorted(nodes, idx))]

    def whole_graph_batch(self) -> NodeBatch:
        """Every stored pair as one sparse batch (built on first use): a query run's numbers are its forward's."""
        if self._whole is None:
            s = self.support
            graph = NodeGraph(self.x, self._train_mask, s.indptr, s.col, s.values, self._extras, self.device)
            self._whole = graph.sparse_batch()
        return self._whole


class PartitionBatcher(NodeBatcher):
    """``partition``: METIS parts, attention over the cached pairs inside a part (cross-part pairs are lost).

    Args:
        graph: the cached graph.
        part: ``[N]`` METIS part of each node.
        parts_per_batch: parts per batch. With more than one, training groups parts
            at random per epoch (cross-part pairs then attend too); evaluation uses
            fixed consecutive groups.
        seed: seeds the part order and grouping, with the epoch.
        out_dim: logits per node.
    """

    def __init__(self, graph: NodeGraph, part: np.ndarray, parts_per_batch: int, seed: int, out_dim: int):
        super().__init__(graph)
        self.out_dim = out_dim
        self.part, self.num_parts = part, int(part.max()) + 1 if part.size else 0
        self.parts_per_batch, self.seed = parts_per_batch, seed
        self._eval = group_batches(graph, (np.arange(self.num_parts) // parts_per_batch)[part])
        # Only random grouping needs the CSR after this.
        self._graph = graph if parts_per_batch > 1 else None

    @property
    def eval_batches(self) -> list[NodeBatch]:
        return self._eval

    def train_batches(self, epoch: int) -> Iterator[NodeBatch]:
        rng = np.random.default_rng((self.seed, epoch))
        if self._graph is None:
            batches = [self._eval[i] for i in rng.permutation(len(self._eval))]
        else:  # random groups of parts each epoch (Cluster-GCN style), pairs built for them now
            perm = rng.permutation(self.num_parts)
            group_of_part = np.empty(self.num_parts, dtype=np.int64)
            group_of_part[perm] = np.arange(self.num_parts) // self.parts_per_batch
            batches = group_batches(self._graph, group_of_part[self.part])
        yield from (b for b in batches if b.targets.numel())

    def predict(self, model: XMaskNet) -> Tensor:
        out = torch.zeros(len(self.part), self.out_dim)
        for batch in self._eval:
            if batch.nodes is not None and batch.nodes.numel():  # METIS may leave a part empty
                out[batch.nodes] = self.forward(model, batch).float().cpu()
        return out


class SubgraphBatcher(NodeBatcher):
    """``subgraph``: random node subsets per epoch (a training-time augmentation on small graphs), each a
    dense batch of the cached *global* powers sliced to its rows and columns; ``evaluation`` scores.

    Args:
        graph: the cached graph (its CSR is kept: every subset is sliced from it).
        size: nodes per subset (capped at ``N``).
        per_epoch: subsets (optimizer steps) per epoch.
        seed: seeds the draws, with the epoch and the draw's index.
        evaluation: the batcher that scores every node.
    """

    def __init__(self, graph: NodeGraph, size: int, per_epoch: int, seed: int, evaluation: NodeBatcher):
        super().__init__(graph)
        self.graph, self.size, self.per_epoch, self.seed, self.evaluation = graph, size, per_epoch, seed, evaluation
        self._local = np.full(graph.num_nodes, -1, dtype=np.int64)

    def draw(self, epoch: int, i: int) -> np.ndarray:
        """Ascending node ids of the ``i``-th random subgraph of ``epoch``; a function of (seed, epoch, i)."""
        rng = np.random.default_rng((self.seed, epoch, i))
        n = self.graph.num_nodes
        return np.sort(rng.choice(n, size=min(self.size, n), replace=False))

    def batch(self, nodes: np.ndarray) -> NodeBatch:
        """Dense batch of ``nodes``: the cached global powers sliced to them (never recomputed)."""
        g = self.graph
        powers = dense_block(g.indptr, g.col, g.values, nodes, self._local)
        extras = None if g.extras is None else to_tensors(g.extras.dense(nodes), batch_dim=True)
        return NodeBatch(nodes=torch.from_numpy(nodes), targets=g.targets(nodes),
                         powers=torch.from_numpy(powers).unsqueeze(0), extras=extras)

    def train_batches(self, epoch: int) -> Iterator[NodeBatch]:
        for i in range(self.per_epoch):
            batch = self.batch(self.draw(epoch, i))
            if batch.targets.numel():
                yield batch

    def train_shard(self, epoch: int, rank: int, size: int) -> Iterator[tuple[NodeBatch, bool]]:
        """Every rank draws the same subset ids (seed, epoch), keeps those with a training node, and
        slices only its own: the dense slices are the costly part."""
        drawn = (self.draw(epoch, i) for i in range(self.per_epoch))
        kept = [nodes for nodes in drawn if self.graph.train_mask[nodes].any()]
        for j, real in deal(len(kept), rank, size):
            yield self.batch(kept[j]), real

    @property
    def eval_batches(self) -> list[NodeBatch]:
        return self.evaluation.eval_batches

    def predict(self, model: XMaskNet) -> Tensor:
        return self.evaluation.predict(model)

    def outputs(self, model: XMaskNet, idx: np.ndarray) -> Tensor:
        return self.evaluation.outputs(model, idx)

    def whole_graph_batch(self) -> NodeBatch:
        return self.evaluation.whole_graph_batch()
