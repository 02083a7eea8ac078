"""Graph-level classification as a :class:`~xmask_cli.engine.tasks.base.Task`: size-bucketed batches from the cache.

Example::

    graphs = load_graphs(get_dataset("mutag"), data_root=None, cache_dir=cache_dir)
    split = graph_split(graphs.spec.split, graphs.dataset, seed=0)
    model_cfg = ModelConfig(in_dim=graphs.feature_info().dim, out_dim=graphs.dataset.num_classes)
    summary = train_graph_level(cache_path, graphs, split, model_cfg, TrainConfig(seed=0), "runs/mutag/0")

Selection reads the validation metric only: the best epoch, early stopping
and the state restored at the end. The test metric is computed once, on that
restored state, and only reported.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

from xmask_cli.config import Config
from xmask_cli.data.graphset import GraphSet
from xmask_cli.engine.distributed import deal
from xmask_cli.engine.features import input_features
from xmask_cli.engine.folds import outer_folds
from xmask_cli.engine.graph_store import GraphStore
from xmask_cli.engine.loop import PARTS, train_task
from xmask_cli.engine.metrics import METRICS
from xmask_cli.engine.runs import RunDir
from xmask_cli.engine.splits import Split, graph_split
from xmask_cli.engine.stream import LOG_CACHE_BYTES, GraphBatch, GraphLevelStream
from xmask_cli.engine.tasks import LEVELS
from xmask_cli.engine.tasks.base import ExperimentView, ModelFields, Task
from xmask_cli.engine.train_config import TrainConfig
from xmask_cli.model.network import ModelConfig
from xmask_cli.prepare.needs import model_needs
from xmask_cli.results import RunSummary

__all__ = ["GraphTask", "size_readout_scale", "graph_labels", "train_graph_level", "log_mask_of", "CLASSIFICATION_METRICS"]

#: Metrics of graph classification (trained with cross-entropy): the level registry's.
CLASSIFICATION_METRICS = LEVELS["graph"].metrics


def size_readout_scale(num_nodes: Sequence[int] | np.ndarray, train: Sequence[int] | np.ndarray) -> float:
    """``1 / mean node count`` of the training graphs: ``ModelConfig.readout_scale`` for a sum readout.

    Keeps the head's input O(1) whatever the graph size (see ``ModelConfig.readout_scale``
    for why that matters); training graphs only, so the model is fixed before it sees val/test.
    """
    sizes = np.asarray(num_nodes, dtype=np.float64)[np.asarray(train, dtype=np.int64)]
    return 1.0 / max(float(sizes.mean()) if sizes.size else 1.0, 1.0)


def graph_labels(graphs: GraphSet) -> Tensor:
    """``[G]`` (or ``[G, T]``) graph labels of the dataset."""
    y = graphs.dataset.y  # PyG's stacked attribute of every graph (public; no copy for an unsliced dataset)
    return y.view(-1) if y.dim() == 2 and y.size(1) == 1 else y


@torch.no_grad()
def _predict(model: torch.nn.Module, stream: GraphLevelStream, device: torch.device,
             with_index: bool = False) -> tuple[Tensor, ...]:
    """Outputs and labels of every graph of ``stream``, in its (fixed) order; ``with_index``: and the graph ids."""
    model.eval()
    outs, ys, ids = [], [], []
    for batch in stream.epoch(0):
        batch = batch.to(device)
        outs.append(model(batch.inputs()).float().cpu())
        ys.append(batch.y.cpu())
        ids.append(batch.index.cpu())
    return (torch.cat(outs), torch.cat(ys)) + ((torch.cat(ids),) if with_index else ())


def _eval_stream(cache_path: str | os.PathLike, store: GraphStore, indices: np.ndarray, batch_size: int,
                 needs: Iterable[str] = ()) -> GraphLevelStream:
    # Unshuffled: evaluation batches, hence the numbers, are the same at every call.
    return GraphLevelStream(cache_path, (), store.labels, indices, batch_size, shuffle=False, seed=0,
                            load_in_memory=True, needs=needs, log_mask=store.log_spec, store=store)


class GraphTask(Task[GraphBatch]):
    """Graph-level classification over a cached dataset, as a :class:`~xmask_cli.engine.tasks.base.Task`.

    Training batches are size-bucketed and shuffled by ``(seed, epoch)``;
    evaluation batches are unshuffled, so the numbers are the same at every call.
    ``needs``: extra structure the model's learned biases read (``ModelConfig.needs``).
    ``node_struct``: structural channels appended to the node features (``model.node_struct``,
    :func:`~xmask_cli.engine.features.input_features`); ``in_dim`` / ``struct_dim`` say the widths.
    ``log_mask``: ``(eps, outside_support)`` of the model: batches carry each graph's
    log-powers at its stored pairs instead of dense powers (what ``model.graph_layout: packed``
    reads; :func:`log_mask_of`); None: dense powers, which either layout reads.
    ``log_cache_mb``: the most MB of log values kept (``train.log_cache_mb``).
    The four streams (train, val, test) share one :class:`~xmask_cli.engine.graph_store.GraphStore`:
    features, labels and structure are in memory once.
    """

    def __init__(self, cache_path: str | os.PathLike, graphs: GraphSet, split: Split, metric: str,
                 batch_size: int, seed: int, device: torch.device | str, loader_workers: int = 0,
                 needs: Iterable[str] = (), node_struct: str = "none",
                 log_mask: tuple[float, str] | None = None, log_cache_mb: int = LOG_CACHE_BYTES >> 20):
        if metric not in CLASSIFICATION_METRICS:
            raise ValueError(f"graph-level training supports {CLASSIFICATION_METRICS}, got {metric!r}")
        self.metric, self.graphs, self.split = metric, graphs, split
        self.cache_path = str(cache_path)
        self.device = torch.device(device)
        self.loader_workers = int(loader_workers)
        features, self.struct_dim = input_features(graphs, node_struct, cache_path)
        labels = graph_labels(graphs)
        self.in_dim = int(features[0].size(1))
        store = GraphStore(cache_path, features, labels, log_mask, log_cache_mb << 20)
        del features  # the store holds them flat
        # With loader workers each worker opens the HDF5 file lazily and reads its batches' slices.
        self.train_stream = GraphLevelStream(cache_path, (), labels, split.train, batch_size,
                                             shuffle=True, seed=seed, load_in_memory=self.loader_workers == 0,
                                             needs=needs, log_mask=log_mask, store=store)
        self.eval_streams = {part: _eval_stream(cache_path, store, getattr(split, part), batch_size, needs)
                             for part in PARTS}

    def describe(self) -> dict[str, object]:
        return {"dataset": self.graphs.spec.name, "cache_path": self.cache_path, "split": self.split.to_dict()}

    def split_sizes(self) -> dict[str, int]:
        return dict(zip(PARTS, self.split.sizes()))

    def train_batches(self, epoch: int) -> Iterator[GraphBatch]:
        # The batch order depends on (seed, epoch) only: resumable.
        cuda = self.device.type == "cuda"
        if self.loader_workers > 0 or cuda:
            return iter(self.train_stream.loader(epoch, num_workers=self.loader_workers, pin_memory=cuda))
        self.train_stream.set_epoch(epoch)
        return iter(self.train_stream)

    def train_shard(self, epoch: int, rank: int, size: int) -> Iterator[tuple[GraphBatch, bool]]:
        """Rank ``rank``'s share of the epoch's size buckets, ``(batch, real)`` (see ``engine.distributed.deal``).

        Every rank computes the same bucket order (seed, epoch) and collates only its own buckets.
        """
        ids = self.train_stream.batches(epoch)
        plan = deal(len(ids), rank, size)
        mine = [ids[i] for i, _ in plan]
        cuda = self.device.type == "cuda"
        if self.loader_workers > 0 or cuda:
            batches: Iterable[GraphBatch] = self.train_stream.loader(
                epoch, num_workers=self.loader_workers, pin_memory=cuda, batches=mine)
        else:
            batches = (self.train_stream.collate(b) for b in mine)
        return zip(batches, (real for _, real in plan))

    def loss(self, model: torch.nn.Module, batch: GraphBatch) -> tuple[Tensor, int]:
        # Pinned batches copy asynchronously; the forward waits on the same stream.
        batch = batch.to(self.device, non_blocking=True)
        return torch.nn.functional.cross_entropy(model(batch.inputs()), batch.y.long()), batch.num_graphs

    def outputs(self, model: torch.nn.Module, part: str) -> tuple[Tensor, Tensor]:
        """``(outputs [G, C], labels)`` of the graphs of ``part``, in the split's order."""
        out, y, index = _predict(model, self.eval_streams[part], self.device, with_index=True)
        # The stream batches by size; the split lists the graphs in its own order.
        wanted = torch.as_tensor(np.asarray(getattr(self.split, part), dtype=np.int64))
        sorter = torch.argsort(index)
        perm = sorter[torch.searchsorted(index[sorter], wanted)]
        return out[perm], y[perm]

    def score(self, model: torch.nn.Module, part: str) -> float:
        return self.evaluate(model, part)[0]

    def evaluate(self, model: torch.nn.Module, part: str) -> tuple[float, float]:
        """``(metric, mean cross-entropy)`` on ``part``: what selection reads."""
        # In the stream's order: the numbers every run recorded (a metric's float sums follow the order).
        out, y = _predict(model, self.eval_streams[part], self.device)
        loss = float(torch.nn.functional.cross_entropy(out, y.long())) if len(y) else float("nan")
        return METRICS[self.metric](out, y), loss


def train_graph_level(
    cache_path: str | os.PathLike,
    graphs: GraphSet,
    split: Split,
    model_cfg: ModelConfig,
    train_cfg: TrainConfig,
    run_dir: RunDir | str | os.PathLike,
    metric: str = "accuracy",
    resume: bool = False,
    log: Callable[[Mapping[str, object]], None] = lambda m: None,
) -> RunSummary:
    """Train :class:`XMaskNet` on one graph-level split (cross-entropy over size-bucketed batches).

    See :func:`~xmask_cli.engine.loop.fit` for selection, checkpoints and resume.

    Raises:
        ValueError: ``metric`` is not a classification metric, ``epochs < 1``, or
            ``resume`` finds a run with another dataset, split, model or seed.
    """
    task = GraphTask(cache_path, graphs, split, metric, train_cfg.batch_size, train_cfg.seed, train_cfg.device,
                     node_struct=model_cfg.node_struct)
    return train_task(task, model_cfg, train_cfg, run_dir, resume=resume, log=log)


def from_experiment(exp: ExperimentView[GraphSet], seed: int, device: str, dense_only: str | None = None) -> GraphTask:
    """The graph-level task of ``exp`` for ``seed`` (the level registry's builder)."""
    cfg = exp.cfg
    if exp.cache_path is None:
        raise ValueError("the graph level reads the dataset's structure cache; this experiment has none")
    if cfg.data.folds:  # Errica et al.'s protocol: outer fold data.fold of data.folds, fixed by the seed
        split = outer_folds(graph_labels(exp.graphs), cfg.data.folds, seed)[cfg.data.fold]
    else:
        split = graph_split(exp.graphs.spec.split, exp.graphs.dataset, seed=seed)
    return GraphTask(exp.cache_path, exp.graphs, split, exp.metric, cfg.train.batch_size, seed, device,
                     loader_workers=cfg.train.loader_workers, needs=model_needs(cfg),
                     node_struct=cfg.model.node_struct, log_mask=log_mask_of(cfg), log_cache_mb=cfg.train.log_cache_mb)


def log_mask_of(cfg: Config) -> tuple[float, str] | None:
    """``(eps, outside_support)`` whose per-graph log-powers the stream caches for a packed model, else None.

    ``cfg``: the resolved config. Only the packed layout reads them (the padded
    one needs the dense powers), and only a model with the X-LogSMask term.
    """
    m = cfg.model
    if m.graph_layout != "packed" or not m.use_bias:
        return None
    return float(cfg.structure.powers.eps), str(m.outside_support)


def model_fields(exp: ExperimentView[GraphSet], task: GraphTask) -> ModelFields:
    """Model dimensions of a graph-level run: feature width (structural channels included), classes, the sum
    readout's size scale."""
    m = exp.cfg.model
    scale = size_readout_scale(exp.graphs.num_nodes, task.split.train) if (
        m.readout == "sum" and m.readout_norm == "size") else 1.0
    return {"in_dim": task.in_dim, "struct_dim": task.struct_dim, "out_dim": int(exp.graphs.dataset.num_classes),
            "readout_scale": scale}
