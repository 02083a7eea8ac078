"""Node-level training: full graph, query batches, random subgraphs, or METIS partitions, as a :class:`Task`.

Four ways to batch one graph, all reading the structure from the cache
(powers are never recomputed here):

* ``full``: the whole graph as one dense batch (small graphs);
* ``subgraph``: random node subsets per epoch (paper §5.1.1, a training-time
  augmentation against memorisation on small citation graphs); each subset
  sees the cached *global* powers sliced to its rows and columns;
* ``query``: whole-graph attention over the cached support in batches of
  query nodes, each query over *all* of its stored keys (sparse, exact: the
  same numbers as ``full`` with sparse attention; memory bounded by a chunk
  of pairs; :mod:`xmask_cli.engine.query`). Training draws random batches of
  ``query_batch`` training nodes per step (0: all of them, one step);
  evaluation runs every node as a query;
* ``partition``: METIS parts from the cache, attention over the cached pairs
  inside a part only (sparse path), so memory is bounded by the part size;
  cross-part pairs are lost (an option, not the default); plain heads
  attend over every node of the part.

``auto`` picks ``full`` up to ``dense_max_nodes`` nodes and ``query`` above
(``partition`` above when the model has learned pair biases, which the query
path does not carry).

Example::

    graphs = load_graphs(get_dataset("cora"), data_root=None, cache_dir=cache_dir)
    split = node_split(graphs.spec.split, graphs.dataset[0], seed=0)
    task = NodeTask(cache_path, graphs, split, mode="subgraph", subgraph_size=1000, subgraphs_per_epoch=2)
    cfg = ModelConfig(in_dim=task.in_dim, out_dim=task.out_dim, task=task.model_task)
    model = XMaskNet(cfg)
    summary = fit(task, model, TrainConfig(epochs=100), "runs/cora/0", model_config=cfg.to_dict())
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor

from xmask_cli.cache import StructureCache
from xmask_cli.config import NodeSection
from xmask_cli.data.folder import check_train_classes
from xmask_cli.data.graphset import GraphSet
from xmask_cli.engine.distributed import deal
from xmask_cli.engine.extras import GraphExtras, to_tensors
from xmask_cli.engine.features import input_features
from xmask_cli.engine.loop import PARTS
from xmask_cli.engine.metrics import METRICS, ogb_node_accuracy
from xmask_cli.engine.node_batches import NodeBatch, dense_block
from xmask_cli.engine.query import CHUNK_PAIRS, QueryStats, Support, encode_queries
from xmask_cli.engine.splits import Split, node_split
from xmask_cli.engine.tasks import LEVELS
from xmask_cli.errors import UsageError
from xmask_cli.model.attention_path import ATTENTIONS, PathRefused, full_graph_attention
from xmask_cli.prepare.needs import model_needs

__all__ = ["NodeTask", "NodeBatch", "MODES", "NODE_METRICS"]

#: Batching modes :class:`NodeTask` accepts (``auto`` resolves to ``full``, ``query`` or ``partition``).
MODES = ("auto", "full", "subgraph", "query", "partition")
#: Metrics a node classification task can be selected on.
NODE_METRICS = LEVELS["node"].metrics
#: Query mode encodes features as a sparse product when fewer than this share of entries is non-zero
#: (Coauthor Physics: 0.4 %; Amazon Computers, 35 %, stays dense).
SPARSE_FEATURES = 0.05


class NodeTask:
    """Node classification on one cached graph, as a :class:`~xmask_cli.engine.loop.Task`.

    Args:
        cache_path: structure cache of the dataset (``xmask prepare``).
        graphs: the loaded dataset (one graph); features from
            :func:`~xmask_cli.engine.features.input_features`, labels from ``dataset[0].y``.
        split: node indices per part.
        metric: selection metric (``accuracy``).
        mode: ``auto``, ``full``, ``subgraph`` or ``partition`` (see the module docstring).
        subgraph_size: nodes per random subgraph (``subgraph`` mode); capped at ``N``.
        subgraphs_per_epoch: random subgraphs (optimizer steps) per epoch.
        dense_max_nodes: ``auto`` uses ``full`` up to this many nodes; ``subgraph``
            evaluates on the full graph up to it and on partitions above.
        seed: seeds the subset draws and the partition order, with the epoch.
        device: where batches go.
        parts_per_batch: METIS parts per partition batch. With more than one,
            training groups parts at random per epoch (cross-part pairs then
            attend too); evaluation uses fixed consecutive groups.
        query_batch: training queries per step in ``query`` mode (0: every
            training node in one step, a full-batch gradient).
        query_chunk_pairs: pair budget of one attention chunk in ``query`` mode
            (bounds the pair tensors; the numbers do not depend on it).
        sparse_features: hold the features as a sparse tensor on the sparse full-graph path when under
            :data:`SPARSE_FEATURES` of their entries are non-zero (``node.sparse_features``).
        dense_only: why the model cannot run on a sparse path
            (:func:`~xmask_cli.model.model_config.sparse_refusal`), or None: then
            full-graph attention is dense, and query and partition batches are refused.
        node_struct: structural channels appended to the node features
            (``model.node_struct``): the degree of the whole graph, the RWSE of the cache.

    Attributes:
        in_dim: node feature width (structural channels included).
        struct_dim: how many of the last feature columns are structural channels.
        out_dim: number of classes.
        model_task: ``"node"``, for :class:`~xmask_cli.model.model_config.ModelConfig`.
        mode: the mode actually used (``auto`` resolved).

    Raises:
        ValueError: unknown ``mode`` or ``metric``, a bad size, or partitions
            needed but absent from the cache.
        PathRefused: ``dense_only`` and a sparse path (partitions, or sparse
            full-graph attention) is requested or the only one that fits.
    """

    model_task = "node"
    #: Whether the task feeds attention experts' tokens (:class:`~xmask_cli.engine.tasks.node_experts.ExpertNodeTask`).
    experts = False

    def __init__(self, cache_path: str | os.PathLike, graphs: GraphSet, split: Split, metric: str = "accuracy", *,
                 mode: str = "auto", subgraph_size: int = 0, subgraphs_per_epoch: int = 1,
                 dense_max_nodes: int = NodeSection.dense_max_nodes, seed: int = 0, device: torch.device | str = "cpu",
                 parts_per_batch: int = 1, attention: str = "auto", needs: Iterable[str] = (),
                 query_batch: int = 0, query_chunk_pairs: int = CHUNK_PAIRS,
                 dense_only: str | None = None, node_struct: str = "none", sparse_features: bool = False):
        if attention not in ATTENTIONS:
            raise ValueError(f"node attention must be one of {ATTENTIONS}, got {attention!r}")
        if mode not in MODES:
            raise ValueError(f"node mode must be one of {MODES}, got {mode!r}")
        if metric not in NODE_METRICS:
            raise ValueError(f"node-level training supports {NODE_METRICS}, got {metric!r}")
        if subgraphs_per_epoch < 1 or parts_per_batch < 1:
            raise ValueError("subgraphs_per_epoch and parts_per_batch must be >= 1")
        needs = tuple(needs)
        if needs and mode == "query":
            raise ValueError(f"node.mode=query does not carry learned pair biases ({sorted(needs)}): use "
                             f"node.mode=partition or full")
        if query_batch < 0 or query_chunk_pairs < 1:
            raise ValueError(f"query_batch must be >= 0 and query_chunk_pairs >= 1, got {query_batch}, "
                             f"{query_chunk_pairs}")
        self.query_batch, self.query_chunk_pairs = int(query_batch), int(query_chunk_pairs)
        #: What the last query-mode forward touched (chunks, pairs, node sets).
        self.query_stats = QueryStats()
        self.metric, self.graphs, self.split = metric, graphs, split
        # OGB node sets are scored by OGB's own Evaluator: the number its leaderboard reports.
        self._metric = (ogb_node_accuracy(graphs.spec.name) if getattr(graphs.spec, "family", None) == "ogbn"
                        else METRICS[metric])
        self.cache_path = str(cache_path)
        self.device = torch.device(device)
        self.seed, self.dense_max_nodes = int(seed), int(dense_max_nodes)
        self.subgraph_size, self.subgraphs_per_epoch = int(subgraph_size), int(subgraphs_per_epoch)
        self.parts_per_batch = int(parts_per_batch)
        self.attention_requested = attention

        # One copy of the features (Physics: 1.2 GB); batches index rows of it.
        features, self.struct_dim = input_features(graphs, node_struct, cache_path)
        self.x = features[0]
        del features
        y = graphs.dataset[0].y
        self.y = (y.view(-1) if y.dim() == 2 and y.size(1) == 1 else y).long()
        self.num_nodes = int(self.x.size(0))
        self.in_dim = int(self.x.size(1))
        num_classes = getattr(graphs.dataset, "num_classes", None)
        self.out_dim = int(num_classes) if num_classes else int(self.y.max()) + 1

        self.cache = StructureCache(cache_path)
        if self.cache.num_nodes(0) != self.num_nodes:
            raise ValueError(f"cache {cache_path} has {self.cache.num_nodes(0)} nodes, the dataset {self.num_nodes}")
        # SPD / RRWP / spectra for the learned biases, read once and sliced per batch.
        self._extras = GraphExtras(self.cache, 0, needs) if needs else None
        large = "partition" if needs else "query"
        self.mode = mode if mode != "auto" else ("full" if self.num_nodes <= self.dense_max_nodes else large)
        if self.mode == "subgraph" and self.subgraph_size < 1:
            raise ValueError(f"subgraph mode needs subgraph_size >= 1, got {self.subgraph_size}")
        self.eval_mode = self.mode if self.mode != "subgraph" else (
            "full" if self.num_nodes <= self.dense_max_nodes else large)
        sparse_only = {"partition", "query"} & {self.mode, self.eval_mode}
        if dense_only is not None and sparse_only:
            raise PathRefused(f"{' and '.join(sorted(sparse_only))} batches (node.mode={mode}, {self.num_nodes} nodes, "
                              f"node.dense_max_nodes={self.dense_max_nodes}) attend sparsely, which is refused: "
                              f"{dense_only}")

        self.train_mask = np.zeros(self.num_nodes, dtype=bool)
        self.train_mask[split.train] = True
        # The cache's CSR arrays of graph 0 (global ids), read once.
        row, col, self._values = self.cache.powers(0)
        self._indptr = np.concatenate([[0], np.cumsum(np.bincount(row, minlength=self.num_nodes))]).astype(np.int64)
        self._col = col.astype(np.int64)
        self._local = np.full(self.num_nodes, -1, dtype=np.int64)
        self._support = None
        self._x_query: Tensor | sp.csr_matrix = self.x
        if "query" in (self.mode, self.eval_mode):
            self._support = Support(self._indptr, self._col, np.ascontiguousarray(self._values, dtype=np.float32))
            nonzero = int(torch.count_nonzero(self.x))
            if nonzero < SPARSE_FEATURES * self.x.numel():  # bag-of-words: encode only the stored entries
                self._x_query = sp.csr_matrix(self.x.numpy())

        if self.mode == "query" and attention == "dense":
            raise ValueError("node.mode=query attends over the stored pairs (sparse): node.attention=dense needs "
                             "node.mode=full")
        self.attention = "sparse" if self.mode == "query" else full_graph_attention(
            attention, self.num_nodes, len(self._col), self.device, self.dense_max_nodes,
            dense_only if "full" in (self.mode, self.eval_mode) else None)
        # The full graph's features as a sparse tensor (node.sparse_features), for the sparse full-graph path.
        self._x_sparse: Tensor | None = None
        if sparse_features and self.attention == "sparse" and "full" in (self.mode, self.eval_mode):
            if int(torch.count_nonzero(self.x)) < SPARSE_FEATURES * self.x.numel():
                self._x_sparse = self.x.to_sparse().coalesce()
        self._full: NodeBatch | None = None
        if "full" in (self.mode, self.eval_mode):
            self._full = self._whole_batch(row)
        self._eval_batches: list[NodeBatch] = []
        if "partition" in (self.mode, self.eval_mode):
            self._part = self._partition()
            # Fixed consecutive groups: evaluation batches (and training ones with one part each).
            groups = np.arange(self._num_parts) // self.parts_per_batch
            self._eval_batches = self._group_batches(groups[self._part])
        del row
        # Only random part grouping and subsets need the global CSR after __init__.
        if not (self.mode == "subgraph" or (self.mode == "partition" and self.parts_per_batch > 1)):
            self._values = self._col = self._indptr = None  # type: ignore[assignment]

    # ------------------------------------------------------------- building
    def _full_batch(self) -> NodeBatch:
        # Moved once: the same K x N x N tensor serves every epoch and evaluation.
        powers = torch.from_numpy(self.cache.dense_powers(0)).unsqueeze(0).to(self.device)
        targets = torch.from_numpy(np.flatnonzero(self.train_mask))
        extras = None if self._extras is None else to_tensors(self._extras.dense(), self.device, batch_dim=True)
        return NodeBatch(nodes=None, targets=targets, powers=powers, extras=extras)

    def _whole_batch(self, row: np.ndarray) -> NodeBatch:
        """The batch of ``full`` mode (dense or sparse as ``self.attention`` says); ``row``: the CSR's rows."""
        if self.attention == "dense":
            return self._full_batch()
        return self._sparse_full_batch(self._indptr, self._col, self._values)

    def _sparse_full_batch(self, indptr: np.ndarray, col: np.ndarray, values: np.ndarray) -> NodeBatch:
        """Every cached pair of the whole graph (global ids, CSR order) as one sparse batch."""
        row = np.repeat(np.arange(self.num_nodes, dtype=np.int64), np.diff(indptr))
        extras = None if self._extras is None else to_tensors(self._extras.pairs(row, col, np.arange(self.num_nodes)))
        return NodeBatch(nodes=None, targets=torch.from_numpy(np.flatnonzero(self.train_mask)),
                         edge_index=torch.from_numpy(np.stack([row, col.astype(np.int64)])),
                         values=torch.from_numpy(np.ascontiguousarray(values)), extras=extras)

    def whole_graph_batch(self) -> NodeBatch:
        """The whole graph as one batch (dense or sparse as the run attends; built on first use in ``query`` mode).

        For inspection (``xmask explain``): a query-mode run's numbers equal this batch's forward.
        """
        if self._full is None and self._support is not None:
            s = self._support
            self._full = self._sparse_full_batch(s.indptr, s.col, s.values)
        if self._full is None:
            raise ValueError(f"node mode {self.mode!r} has no whole-graph batch")
        return self._full

    def _partition(self) -> np.ndarray:
        try:
            part = np.asarray(self.cache.partition(0), dtype=np.int64)
        except Exception as exc:  # CacheError, or a KeyError from an in-memory cache
            raise ValueError(
                f"partition mode needs METIS parts in the cache {self.cache_path}: prepare it with "
                f"structure.partition.parts > 0 (e.g. `--set structure.partition.parts=32`) at level node"
            ) from exc
        self._num_parts = int(part.max()) + 1 if part.size else 0
        return part

    def _group_batches(self, group_of_node: np.ndarray) -> list[NodeBatch]:
        """One sparse batch per group id: its nodes, in-group pairs (local ids) and their powers.

        O(P) over all pairs at once, instead of one CSR gather per group.
        """
        order = np.argsort(group_of_node, kind="stable")  # nodes by group, ascending inside one
        num_groups = int(group_of_node.max()) + 1 if group_of_node.size else 0
        bounds = np.concatenate([[0], np.cumsum(np.bincount(group_of_node, minlength=num_groups))])
        local = np.empty(self.num_nodes, dtype=np.int64)
        local[order] = np.arange(self.num_nodes) - np.repeat(bounds[:-1], np.diff(bounds))
        indptr, col, values = self._indptr, self._col, self._values
        row = np.repeat(np.arange(self.num_nodes, dtype=np.int64), np.diff(indptr))
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
            extras = None if self._extras is None else to_tensors(self._extras.pairs(row[pos], col[pos], nodes))
            batches.append(NodeBatch(
                nodes=torch.from_numpy(nodes), targets=torch.from_numpy(np.flatnonzero(self.train_mask[nodes])),
                edge_index=edge_index, values=torch.from_numpy(np.ascontiguousarray(values[pos])), extras=extras))
        return batches

    def subgraph_nodes(self, epoch: int, i: int) -> np.ndarray:
        """Ascending node ids of the ``i``-th random subgraph of ``epoch``; a function of (seed, epoch, i)."""
        rng = np.random.default_rng((self.seed, epoch, i))
        size = min(self.subgraph_size, self.num_nodes)
        return np.sort(rng.choice(self.num_nodes, size=size, replace=False))

    def subgraph_batch(self, nodes: np.ndarray) -> NodeBatch:
        """Dense batch of ``nodes``: the cached global powers sliced to them (never recomputed)."""
        powers = dense_block(self._indptr, self._col, self._values, nodes, self._local)
        extras = None if self._extras is None else to_tensors(self._extras.dense(nodes), batch_dim=True)
        return NodeBatch(nodes=torch.from_numpy(nodes), targets=torch.from_numpy(np.flatnonzero(self.train_mask[nodes])),
                         powers=torch.from_numpy(powers).unsqueeze(0), extras=extras)

    # ----------------------------------------------------------------- Task
    def describe(self) -> dict[str, Any]:
        """Dataset, cache, split and the node batching actually used (compared on resume)."""
        node = {"mode": self.mode, "attention": self.attention, "subgraph_size": self.subgraph_size,
                "subgraphs_per_epoch": self.subgraphs_per_epoch, "dense_max_nodes": self.dense_max_nodes}
        if self.parts_per_batch != 1:
            node["parts_per_batch"] = self.parts_per_batch
        if self.mode == "query":  # the chunk budget changes memory, not numbers: not part of the identity
            node["query_batch"] = self.query_batch
        return {"dataset": self.graphs.spec.name, "cache_path": self.cache_path, "split": self.split.to_dict(),
                "node": node}

    def split_sizes(self) -> dict[str, int]:
        """Nodes per part."""
        return dict(zip(PARTS, self.split.sizes()))

    @property
    def eval_batches(self) -> list[NodeBatch]:
        """Partition evaluation batches (fixed order; empty unless partitions are used)."""
        return self._eval_batches

    def train_batches(self, epoch: int) -> Iterator[NodeBatch]:
        """Batches of ``epoch``, drawn from (seed, epoch) only; batches without training nodes are skipped."""
        if self.mode == "full":
            yield self._full  # type: ignore[misc]
            return
        if self.mode == "query":
            train = np.flatnonzero(self.train_mask)
            size = self.query_batch if 0 < self.query_batch < len(train) else len(train)
            order = np.random.default_rng((self.seed, epoch)).permutation(train) if size < len(train) else train
            for i in range(0, len(order), size):
                nodes = np.sort(order[i:i + size])
                yield NodeBatch(nodes=torch.from_numpy(nodes), targets=torch.arange(len(nodes)))
            return
        if self.mode == "subgraph":
            for i in range(self.subgraphs_per_epoch):
                batch = self.subgraph_batch(self.subgraph_nodes(epoch, i))
                if batch.targets.numel():
                    yield batch
            return
        rng = np.random.default_rng((self.seed, epoch))
        if self.parts_per_batch == 1:
            batches = [self._eval_batches[i] for i in rng.permutation(len(self._eval_batches))]
        else:  # random groups of parts each epoch (Cluster-GCN style), pairs built for them now
            perm = rng.permutation(self._num_parts)
            group_of_part = np.empty(self._num_parts, dtype=np.int64)
            group_of_part[perm] = np.arange(self._num_parts) // self.parts_per_batch
            batches = self._group_batches(group_of_part[self._part])
        for batch in batches:
            if batch.targets.numel():
                yield batch

    def train_shard(self, epoch: int, rank: int, size: int) -> Iterator[tuple[NodeBatch, bool]]:
        """Rank ``rank``'s ``(batch, real)`` of ``epoch`` (see ``engine.distributed.deal``).

        Subgraph batches are the costly ones to build (a dense slice of the cached
        powers each): every rank draws the same subgraph ids (seed, epoch), keeps
        those with a training node, and slices only its own. The other modes' batches
        are prebuilt or index arrays: each rank deals the epoch's list.
        """
        if self.mode != "subgraph":
            batches = list(self.train_batches(epoch))
            for i, real in deal(len(batches), rank, size):
                yield batches[i], real
            return
        drawn = (self.subgraph_nodes(epoch, i) for i in range(self.subgraphs_per_epoch))
        kept = [nodes for nodes in drawn if self.train_mask[nodes].any()]
        for j, real in deal(len(kept), rank, size):
            yield self.subgraph_batch(kept[j]), real

    def _forward(self, model: torch.nn.Module, batch: NodeBatch) -> Tensor:
        """``[n, C]`` logits of the batch's nodes."""
        if batch.powers is None and batch.edge_index is None and self._support is not None:  # a query batch
            nodes = np.arange(self.num_nodes) if batch.nodes is None else batch.nodes.numpy()
            attention_output = model.out_block is not None  # the output layer runs as one more query layer
            h = encode_queries(model, self._x_query, self._support, nodes, chunk_pairs=self.query_chunk_pairs,
                               device=self.device, stats=self.query_stats, output=attention_output)
            return h if attention_output else model.head(h)
        x = self.x if batch.nodes is None else self.x[batch.nodes]
        if batch.nodes is None and batch.edge_index is not None and self._x_sparse is not None:
            x = self._x_sparse  # the whole graph, sparse path: only the stored entries are encoded
        x = x.to(self.device, non_blocking=True)
        extras = None if batch.extras is None else {k: v.to(self.device) for k, v in batch.extras.items()}
        if batch.powers is not None:
            return model.forward_dense(x.unsqueeze(0), batch.powers.to(self.device, non_blocking=True), extras=extras)[0]
        return model.forward_sparse(x, batch.edge_index.to(self.device), batch.values.to(self.device), extras=extras)

    def loss(self, model: torch.nn.Module, batch: NodeBatch) -> tuple[Tensor, int]:
        """Cross-entropy over the batch's training nodes."""
        out = self._forward(model, batch)
        nodes = batch.targets if batch.nodes is None else batch.nodes[batch.targets]
        target = self.y[nodes].to(self.device)
        return torch.nn.functional.cross_entropy(out[batch.targets.to(self.device)], target), int(batch.targets.numel())

    @torch.no_grad()
    def predict(self, model: torch.nn.Module) -> Tensor:
        """``[N, C]`` logits of every node on the CPU (full forward, or every partition batch)."""
        model.eval()
        if self.eval_mode == "full":
            return self._forward(model, self._full).float().cpu()  # type: ignore[arg-type]
        if self.eval_mode == "query":  # every node a query, over all of its stored keys
            return self._forward(model, NodeBatch(nodes=None, targets=torch.zeros(0, dtype=torch.long))).float().cpu()
        out = torch.zeros(self.num_nodes, self.out_dim)
        for batch in self._eval_batches:
            if batch.nodes.numel():  # METIS may leave a part empty
                out[batch.nodes] = self._forward(model, batch).float().cpu()
        return out

    def outputs(self, model: torch.nn.Module, part: str) -> tuple[Tensor, Tensor]:
        """``(logits [n, C], labels [n])`` of the nodes of ``part``, in the split's order."""
        idx = torch.from_numpy(getattr(self.split, part))
        if self.eval_mode == "query":
            # Only the part's nodes as queries: the same numbers as predicting all (a node's output reads
            # its own stored pairs only), a fifth of the work for validation on a 60/20/20 split.
            model.eval()
            nodes = np.unique(idx.numpy())
            with torch.no_grad():
                out = self._forward(model, NodeBatch(nodes=torch.from_numpy(nodes), targets=torch.zeros(0)))
            pos = np.searchsorted(nodes, idx.numpy())
            return out.float().cpu()[torch.from_numpy(pos)], self.y[idx]
        return self.predict(model)[idx], self.y[idx]

    def score(self, model: torch.nn.Module, part: str) -> float:
        """``metric`` on the nodes of ``part``."""
        return self._metric(*self.outputs(model, part))

    def evaluate(self, model: torch.nn.Module, part: str) -> tuple[float, float]:
        """``(metric, mean cross-entropy)`` on ``part`` from one forward: what selection reads."""
        out, y = self.outputs(model, part)
        loss = float(torch.nn.functional.cross_entropy(out, y.long())) if len(y) else float("nan")
        return self._metric(out, y), loss


def from_experiment(exp: Any, seed: int, device: str, dense_only: str | None = None,
                    task_class: type[NodeTask] | None = None) -> NodeTask:
    """The node task of ``exp`` for ``seed``, of class ``task_class`` (default :class:`NodeTask`; with
    ``model.experts`` the level registry builds it through :mod:`~xmask_cli.engine.tasks.node_experts`)."""
    cls = task_class or NodeTask
    cfg, n = exp.cfg, exp.cfg.node
    spec = exp.graphs.spec
    split = node_split(spec.split, exp.graphs.dataset[0], seed=seed, dataset=exp.graphs.dataset)
    if spec.family == "folder":
        files = exp.graphs.dataset.files
        if files.get("labels") is None:
            raise UsageError(f"{spec.folder} has no labels file (labels.npy, one int per node, -1 = unlabelled), "
                             f"which node classification needs; for link prediction use --preset link-level")
        what = f"{split.name}, seed {seed}" if split.seed is not None else split.name
        check_train_classes(exp.graphs.dataset[0].y.numpy(), split.train, files.paths["labels"], what)
    return cls(exp.cache_path, exp.graphs, split, exp.metric, mode=n.mode, subgraph_size=n.subgraph_size,
               subgraphs_per_epoch=n.subgraphs_per_epoch, dense_max_nodes=n.dense_max_nodes, seed=seed, device=device,
               attention=n.attention, needs=model_needs(cfg), query_batch=n.query_batch,
               query_chunk_pairs=n.query_chunk_pairs, dense_only=dense_only, node_struct=cfg.model.node_struct,
               sparse_features=n.sparse_features)
