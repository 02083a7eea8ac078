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

``auto`` picks ``full`` while the estimated bytes of one full-graph training
step fit ``node.memory_gb`` and ``query`` beyond (``partition`` when the model
has learned pair biases, which the query path does not carry): the rule and
the estimate are :mod:`xmask_cli.engine.node_memory`.

Example::

    graphs = load_graphs(get_dataset("cora"), data_root=None, cache_dir=cache_dir)
    split = node_split(graphs.spec.split, graphs.dataset[0], seed=0)
    task = NodeTask(cache_path, graphs, split, node=NodeSection(mode="subgraph", subgraph_size=1000,
                                                                subgraphs_per_epoch=2))
    cfg = ModelConfig(in_dim=task.in_dim, out_dim=task.out_dim, task=task.model_task)
    model = XMaskNet(cfg)
    summary = fit(task, model, TrainConfig(epochs=100), "runs/cora/0", model_config=cfg.to_dict())
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import torch
from torch import Tensor

from xmask_cli.cache import StructureCache
from xmask_cli.config import ModelSection, NodeSection
from xmask_cli.config_rules import check_query_mode_biases
from xmask_cli.data.folder import check_train_classes
from xmask_cli.data.graphset import GraphSet
from xmask_cli.engine.extras import GraphExtras
from xmask_cli.engine.features import input_features
from xmask_cli.engine.loop import PARTS
from xmask_cli.engine.metrics import METRICS, ogb_node_accuracy
from xmask_cli.engine.node_batches import (
    SPARSE_FEATURES,
    FullBatcher,
    NodeBatch,
    NodeBatcher,
    NodeGraph,
    PartitionBatcher,
    QueryBatcher,
    SubgraphBatcher,
)
from xmask_cli.engine.node_memory import FullStepMemory, auto_mode, full_step_memory, pairs_per_power, step_shape
from xmask_cli.engine.query import QueryStats
from xmask_cli.engine.splits import Split, node_split
from xmask_cli.engine.tasks import LEVELS
from xmask_cli.engine.tasks.base import ExperimentView, Task, network
from xmask_cli.errors import UsageError
from xmask_cli.model.attention.path import PathRefused, full_graph_attention
from xmask_cli.prepare.needs import model_needs

__all__ = ["NodeTask", "NodeBatch", "MODES", "NODE_METRICS", "mode_note"]

#: Batching modes :class:`NodeTask` accepts (``auto`` resolves to ``full``, ``query`` or ``partition``).
MODES = ("auto", "full", "subgraph", "query", "partition")
#: Metrics a node classification task can be selected on.
NODE_METRICS = LEVELS["node"].metrics


class NodeTask(Task[NodeBatch]):
    """Node classification on one cached graph, as a :class:`~xmask_cli.engine.tasks.base.Task`.

    Args:
        cache_path: structure cache of the dataset (``xmask prepare``).
        graphs: the loaded dataset (one graph); features from
            :func:`~xmask_cli.engine.features.input_features`, labels from ``dataset[0].y``.
        split: node indices per part.
        metric: selection metric (``accuracy``).
        node: the config's node section (None: its defaults), checked by its own rules (:class:`~xmask_cli.config.NodeSection`):
            ``mode`` (see the module docstring), ``subgraph_size`` / ``subgraphs_per_epoch`` (``subgraph``
            mode), ``attention`` and ``dense_max_nodes`` (full-graph attention:
            :func:`~xmask_cli.model.attention.path.full_graph_attention`), ``memory_gb`` (``auto`` trains on
            the full graph while one step's estimated bytes fit it; ``subgraph`` evaluates under the same
            rule), ``query_batch`` / ``query_chunk_pairs`` (``query`` mode) and ``sparse_features``.
        model: the config's model section, whose shape the estimate reads and whose ``node_struct`` adds
            structural channels to the features (None: its defaults).
        seed: seeds the subset draws and the partition order, with the epoch.
        device: where batches go.
        needs: the cache sections the model's learned biases read (:func:`~xmask_cli.prepare.needs.model_needs`).
        dense_only: why the model cannot run on a sparse path
            (:func:`~xmask_cli.model.model_config.sparse_refusal`), or None: then
            full-graph attention is dense, and query and partition batches are refused.
        parts_per_batch: METIS parts per partition batch. With more than one,
            training groups parts at random per epoch (cross-part pairs then
            attend too); evaluation uses fixed consecutive groups.

    Attributes:
        in_dim: node feature width (structural channels included).
        struct_dim: how many of the last feature columns are structural channels.
        out_dim: number of classes.
        model_task: ``"node"``, for :class:`~xmask_cli.model.model_config.ModelConfig`.
        mode: the mode actually used (``auto`` resolved).
        full_step: the estimated memory of one full-graph training step (what ``auto`` compared), or
            None where no full-graph step is possible.

    Raises:
        ConfigError: ``node`` out of its section's domain (a ``ValueError``, naming ``node.<key>``).
        ValueError: an unknown ``metric``, ``subgraph`` mode without a size, or partitions
            needed but absent from the cache.
        PathRefused: ``dense_only`` and a sparse path (partitions, or sparse
            full-graph attention) is requested or the only one that fits.
    """

    model_task = "node"
    #: Whether the task feeds attention experts' tokens (:class:`~xmask_cli.engine.tasks.node_experts.ExpertNodeTask`).
    experts = False

    def __init__(self, cache_path: str | os.PathLike[str], graphs: GraphSet, split: Split, metric: str = "accuracy",
                 node: NodeSection | None = None, *, model: ModelSection | None = None, seed: int = 0,
                 device: torch.device | str = "cpu", needs: Iterable[str] = (), dense_only: str | None = None,
                 parts_per_batch: int = 1):
        needs, model, node = tuple(needs), model or ModelSection(), node or NodeSection()
        node.check("node")  # the section's own rules: a section built in Python meets the preset's messages
        _check_arguments(node.mode, metric, parts_per_batch, needs)
        self.node = node
        mode, attention = node.mode, node.attention
        self.query_batch, self.query_chunk_pairs = node.query_batch, node.query_chunk_pairs
        #: What the last query-mode forward touched (chunks, pairs, node sets).
        self.query_stats = QueryStats()
        self.metric, self.graphs, self.split = metric, graphs, split
        # OGB node sets are scored by OGB's own Evaluator: the number its leaderboard reports.
        self._metric = (ogb_node_accuracy(graphs.spec.name) if getattr(graphs.spec, "family", None) == "ogbn"
                        else METRICS[metric])
        self.cache_path = str(cache_path)
        self.device = torch.device(device)
        self.seed, self.dense_max_nodes = int(seed), int(node.dense_max_nodes)
        self.subgraph_size, self.subgraphs_per_epoch = int(node.subgraph_size), int(node.subgraphs_per_epoch)
        self.parts_per_batch = int(parts_per_batch)
        self.attention_requested, self.mode_requested, self.memory_gb = attention, mode, float(node.memory_gb)
        self._load(graphs, model.node_struct)
        self.train_mask = np.zeros(self.num_nodes, dtype=bool)
        self.train_mask[split.train] = True
        graph = self._graph(needs)
        self.full_step = self._full_step(graph, model, dense_only, node.sparse_features)
        self.mode, self.eval_mode = _modes(mode, self.full_step, self.memory_gb, bool(needs), self.subgraph_size,
                                           dense_only, self.dense_max_nodes)
        if self.mode == "query" and attention == "dense":
            raise ValueError("node.mode=query attends over the stored pairs (sparse): node.attention=dense needs "
                             "node.mode=full")
        self.attention = "sparse" if self.mode == "query" else full_graph_attention(
            attention, self.num_nodes, len(graph.col), self.device, self.dense_max_nodes,
            dense_only if "full" in (self.mode, self.eval_mode) else None)
        #: The batching of ``mode``, chosen once (:mod:`~xmask_cli.engine.node_batches`).
        self.batcher = self._batcher(graph, self.mode, node.sparse_features)

    # ------------------------------------------------------------- building
    def _load(self, graphs: GraphSet, node_struct: str) -> None:
        """Features (structural channels appended), labels, sizes, and the cache (checked against the dataset)."""
        # One copy of the features (Physics: 1.2 GB); batches index rows of it.
        features, self.struct_dim = input_features(graphs, node_struct, self.cache_path)
        self.x = features[0]
        del features
        y = graphs.dataset[0].y
        self.y = (y.view(-1) if y.dim() == 2 and y.size(1) == 1 else y).long()
        self.num_nodes = int(self.x.size(0))
        self.in_dim = int(self.x.size(1))
        num_classes = getattr(graphs.dataset, "num_classes", None)
        self.out_dim = int(num_classes) if num_classes else int(self.y.max()) + 1
        self.cache = StructureCache(self.cache_path)
        if self.cache.num_nodes(0) != self.num_nodes:
            raise ValueError(f"cache {self.cache_path} has {self.cache.num_nodes(0)} nodes, the dataset {self.num_nodes}")

    def _graph(self, needs: tuple[str, ...]) -> NodeGraph:
        """The cache's CSR pairs of graph 0 (global ids) and extras, read once for the batchers."""
        row, col, values = self.cache.powers(0)
        indptr = np.concatenate([[0], np.cumsum(np.bincount(row, minlength=self.num_nodes))]).astype(np.int64)
        # SPD / RRWP / spectra for the learned biases, read once and sliced per batch.
        extras = GraphExtras(self.cache, 0, needs) if needs else None
        return NodeGraph(self.x, self.train_mask, indptr, col.astype(np.int64), values, extras, self.device)

    def _full_step(self, graph: NodeGraph, model: ModelSection, dense_only: str | None,
                   sparse_features: bool) -> FullStepMemory | None:
        """The estimated bytes of one full-graph training step on the path it would take (None: refused)."""
        try:
            attention = full_graph_attention(self.attention_requested, self.num_nodes, len(graph.col), self.device,
                                              self.dense_max_nodes, dense_only)
        except PathRefused:
            return None
        shape = step_shape(model, self.out_dim)
        powers = sorted({k for heads in shape.heads for k in heads})
        nnz = int(torch.count_nonzero(self.x)) if sparse_features and attention == "sparse" else None
        held_sparse = nnz is not None and nnz < SPARSE_FEATURES * self.x.numel()
        return full_step_memory(self.num_nodes, len(graph.col), pairs_per_power(graph.values, powers),
                                graph.values.shape[1], shape, self.in_dim, attention,
                                feature_entries=nnz if held_sparse else None)

    def _batcher(self, graph: NodeGraph, mode: str, sparse_features: bool) -> NodeBatcher:
        """The batcher of ``mode``; ``subgraph`` scores through the batcher of ``eval_mode``."""
        if mode == "full":
            return FullBatcher(graph, self.cache.dense_powers(0) if self.attention == "dense" else None,
                               sparse_features)
        if mode == "query":
            return QueryBatcher(graph, self.query_batch, self.query_chunk_pairs, self.seed, self.query_stats)
        if mode == "partition":
            return PartitionBatcher(graph, self._partition(), self.parts_per_batch, self.seed, self.out_dim)
        return SubgraphBatcher(graph, self.subgraph_size, self.subgraphs_per_epoch, self.seed,
                               self._batcher(graph, self.eval_mode, sparse_features))

    def _partition(self) -> np.ndarray:
        """``[N]`` METIS part of each node, from the cache."""
        try:
            return np.asarray(self.cache.partition(0), dtype=np.int64)
        except Exception as exc:  # CacheError, or a KeyError from an in-memory cache
            raise ValueError(
                f"partition mode needs METIS parts in the cache {self.cache_path}: prepare it with "
                f"structure.partition.parts > 0 (e.g. `--set structure.partition.parts=32`) at level node"
            ) from exc

    def whole_graph_batch(self) -> NodeBatch:
        """The whole graph as one batch (dense or sparse as the run attends; built on first use in ``query`` mode).

        For inspection (``xmask explain``): a query-mode run's numbers equal this batch's forward.
        """
        return self.batcher.whole_graph_batch()

    # ----------------------------------------------------------------- Task
    def describe(self) -> dict[str, Any]:
        """Dataset, cache, split and the node batching actually used (compared on resume)."""
        node = {"mode": self.mode, "attention": self.attention, "subgraph_size": self.subgraph_size,
                "subgraphs_per_epoch": self.subgraphs_per_epoch, "dense_max_nodes": self.dense_max_nodes}
        if self.parts_per_batch != 1:
            node["parts_per_batch"] = self.parts_per_batch
        if self.mode == "query":  # the chunk budget changes memory, not numbers: not part of the identity
            node["query_batch"] = self.query_batch
        if self.mode_requested == "auto" and self.full_step is not None:  # what auto compared (not compared on resume)
            node["full_step_mb"] = round(self.full_step.total / 2**20)
        return {"dataset": self.graphs.spec.name, "cache_path": self.cache_path, "split": self.split.to_dict(),
                "node": node}

    def split_sizes(self) -> dict[str, int]:
        """Nodes per part."""
        return dict(zip(PARTS, self.split.sizes()))

    @property
    def eval_batches(self) -> list[NodeBatch]:
        """Partition evaluation batches (fixed order; empty unless partitions are used)."""
        return self.batcher.eval_batches

    def train_batches(self, epoch: int) -> Iterator[NodeBatch]:
        """Batches of ``epoch``, drawn from (seed, epoch) only; batches without training nodes are skipped."""
        return self.batcher.train_batches(epoch)

    def train_shard(self, epoch: int, rank: int, size: int) -> Iterator[tuple[NodeBatch, bool]]:
        """Rank ``rank``'s ``(batch, real)`` of ``epoch`` (see ``engine.distributed.deal``).

        Subgraph batches are the costly ones to build: each rank slices only its
        own; the other modes' batches are prebuilt or index arrays, dealt as a list.
        """
        return self.batcher.train_shard(epoch, rank, size)

    def loss(self, model: torch.nn.Module, batch: NodeBatch) -> tuple[Tensor, int]:
        """Cross-entropy over the batch's training nodes."""
        out = self.batcher.forward(network(model), batch)
        nodes = batch.targets if batch.nodes is None else batch.nodes[batch.targets]
        target = self.y[nodes].to(self.device)
        return torch.nn.functional.cross_entropy(out[batch.targets.to(self.device)], target), int(batch.targets.numel())

    @torch.no_grad()
    def predict(self, model: torch.nn.Module) -> Tensor:
        """``[N, C]`` logits of every node on the CPU (full forward, every query, or every partition batch)."""
        model.eval()
        return self.batcher.predict(network(model))

    def outputs(self, model: torch.nn.Module, part: str) -> tuple[Tensor, Tensor]:
        """``(logits [n, C], labels [n])`` of the nodes of ``part``, in the split's order."""
        idx = torch.from_numpy(getattr(self.split, part))
        model.eval()
        with torch.no_grad():
            return self.batcher.outputs(network(model), idx.numpy()), self.y[idx]

    def score(self, model: torch.nn.Module, part: str) -> float:
        """``metric`` on the nodes of ``part``."""
        return self._metric(*self.outputs(model, part))

    def evaluate(self, model: torch.nn.Module, part: str) -> tuple[float, float]:
        """``(metric, mean cross-entropy)`` on ``part`` from one forward: what selection reads."""
        out, y = self.outputs(model, part)
        loss = float(torch.nn.functional.cross_entropy(out, y.long())) if len(y) else float("nan")
        return self._metric(out, y), loss


def _check_arguments(mode: str, metric: str, parts_per_batch: int, needs: tuple[str, ...]) -> None:
    """Refuse what the node section's own check does not see: the metric, the partition grouping, and
    learned biases on query batches (a rule between sections)."""
    if metric not in NODE_METRICS:
        raise ValueError(f"node-level training supports {NODE_METRICS}, got {metric!r}")
    if parts_per_batch < 1:
        raise ValueError(f"parts_per_batch must be >= 1, got {parts_per_batch}")
    check_query_mode_biases(mode, sorted(needs))  # check_config refuses it first; the same rule guards direct use


def _modes(mode: str, full_step: FullStepMemory | None, memory_gb: float, needs: bool, subgraph_size: int,
           dense_only: str | None, dense_max_nodes: int) -> tuple[str, str]:
    """``(training mode, evaluation mode)`` of ``mode`` (``auto`` resolved by
    :func:`~xmask_cli.engine.node_memory.auto_mode`: the full graph while ``full_step`` fits ``memory_gb``).
    """
    chosen = auto_mode(full_step, memory_gb, needs)
    train = chosen if mode == "auto" else mode
    if train == "subgraph" and subgraph_size < 1:
        raise ValueError(f"subgraph mode needs subgraph_size >= 1, got {subgraph_size}")
    evaluation = train if train != "subgraph" else chosen
    sparse_only = {"partition", "query"} & {train, evaluation}
    if dense_only is not None and sparse_only:
        where = ("no dense full-graph step fits" if full_step is None else
                 f"a full-graph step needs about {full_step.total / 2**30:.1f} GiB, over node.memory_gb={memory_gb}")
        raise PathRefused(f"{' and '.join(sorted(sparse_only))} batches (node.mode={mode}; {where}; "
                          f"node.dense_max_nodes={dense_max_nodes}) attend sparsely, which is refused: {dense_only}")
    return train, evaluation


def from_experiment(exp: ExperimentView[GraphSet], seed: int, device: str, dense_only: str | None = None,
                    task_class: type[NodeTask] | None = None) -> NodeTask:
    """The node task of ``exp`` for ``seed``, of class ``task_class`` (default :class:`NodeTask`; with
    ``model.experts`` the level registry builds it through :mod:`~xmask_cli.engine.tasks.node_experts`)."""
    cls = task_class or NodeTask
    cfg, n = exp.cfg, exp.cfg.node
    if exp.cache_path is None:
        raise ValueError("the node level reads the dataset's structure cache; this experiment has none")
    spec = exp.graphs.spec
    split = node_split(spec.split, exp.graphs.dataset[0], seed=seed, dataset=exp.graphs.dataset)
    if spec.family == "folder":
        files = exp.graphs.dataset.files
        if files.get("labels") is None:
            raise UsageError(f"{spec.folder} has no labels file (labels.npy, one int per node, -1 = unlabelled), "
                             f"which node classification needs; for link prediction use --preset link-level")
        what = f"{split.name}, seed {seed}" if split.seed is not None else split.name
        check_train_classes(exp.graphs.dataset[0].y.numpy(), split.train, files.paths["labels"], what)
    task = cls(exp.cache_path, exp.graphs, split, exp.metric, n, model=cfg.model, seed=seed, device=device,
               needs=model_needs(cfg), dense_only=dense_only)
    if n.mode == "auto":
        exp.log(f"seed {seed}: {mode_note(task)}")
    return task


def mode_note(task: NodeTask) -> str:
    """One line saying which batching ``node.mode: auto`` chose for ``task``, and why."""
    chosen = f"node.mode auto: {task.mode}" + (f", {task.attention} attention" if task.mode == "full" else "")
    if task.full_step is None:
        return f"{chosen} (no full-graph step is possible on this graph for this model)"
    need = f"a full-graph step needs about {task.full_step.total / 2**30:.2f} GiB"
    side = "within" if task.mode == "full" else "over"
    return f"{chosen} ({need}, {side} node.memory_gb={task.memory_gb:g})"
