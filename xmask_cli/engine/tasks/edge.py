"""Edge regression: one target vector per row of an edge file, as a :class:`~xmask_cli.engine.tasks.base.Task`.

One row of an edge file (:mod:`xmask_cli.data.edgefile`) is one target
vector. Rows are split with :func:`edge_regression_split`; only the training
rows' edges (both directions) form the structure
(:class:`~xmask_cli.engine.batching.pair_structure.PairStructure`), and without node
features a one-hot degree of that training graph (capped at
:data:`~xmask_cli.engine.batching.features.MAX_DEGREE`) stands in, so no held-out edge
leaks through features either. Targets are standardised by the training rows'
mean and std for the MSE loss; MAE / RMSE are reported in the file's units.

Example::

    data = load_edge_file("bonds.csv")
    rows = edge_regression_split(data.num_edges, seed=0)
    path = prepare_pair_structure("bonds", train_edge_index(data, rows), data.num_nodes, cfg.structure,
                                  cache_dir, level="edge")
    task = EdgeTask(path, None, data, rows, dataset="bonds", metric="mae")
"""
from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import torch
from torch import Tensor

from xmask_cli.config import NodeSection
from xmask_cli.data.edgefile import EdgeData
from xmask_cli.engine.batching.features import MAX_DEGREE, one_hot_degree
from xmask_cli.engine.batching.pair_structure import PairStructure, prepare_pair_structure
from xmask_cli.engine.scoring.metrics import METRICS
from xmask_cli.engine.scoring.splits import Split, index_batches, random_split, split_name
from xmask_cli.engine.tasks.base import ExperimentView, Task, network
from xmask_cli.engine.training.loop import PARTS
from xmask_cli.prepare.needs import model_needs, structure_needed

__all__ = ["EdgeTask", "train_edge_index", "edge_regression_split"]


def train_edge_index(data: EdgeData, split: Split) -> np.ndarray:
    """``[2, 2T]`` edges of the training rows in both directions: the only structure EdgeTask may see."""
    ei = data.edge_index[:, split.train]
    return np.concatenate([ei, ei[::-1]], axis=1)


def edge_regression_split(num_edges: int, seed: int, fractions: Sequence[float] = (0.8, 0.1, 0.1)) -> Split:
    """Seeded split of the rows of an edge file (:func:`random_split`), named ``edge-rows-80-10-10``."""
    return random_split(int(num_edges), fractions, seed=seed, name=split_name("edge-rows-", fractions))


def _fractions_of(split: Split) -> list[float]:
    """The fractions in an ``edge-rows-a-b-c`` name; else the realised ones."""
    m = re.fullmatch(r"edge-rows-([0-9.e+-]+)-([0-9.e+-]+)-([0-9.e+-]+)", split.name)
    if m:
        try:
            return [float(g) / 100 for g in m.groups()]
        except ValueError:
            pass
    total = max(sum(split.sizes()), 1)
    return [s / total for s in split.sizes()]


class EdgeTask(Task[Tensor]):
    """Edge regression: one target vector per row of an edge file (see the module docstring).

    Attributes:
        metric: ``"mae"`` or ``"rmse"`` (in the file's units).
        in_dim: node feature width (the file's, or the one-hot degree's).
        out_dim: ``T`` targets.
        model_task: ``"edge"``.
    """

    model_task = "edge"

    def __init__(self, cache_path: str | os.PathLike, features: Tensor | None, data: EdgeData, split: Split, *,
                 dataset: str, metric: str = "mae", seed: int = 0, device: torch.device | str = "cpu",
                 dense_max_nodes: int = NodeSection.dense_max_nodes, batch_size: int = 0, needs: Iterable[str] = (),
                 dense_only: str | None = None):
        if metric not in ("mae", "rmse"):
            raise ValueError(f"edge regression reports 'mae' or 'rmse', got {metric!r}")
        e, n = data.num_edges, int(data.num_nodes)
        for part in PARTS:
            idx = getattr(split, part)
            if idx.size and (idx.min() < 0 or idx.max() >= e):
                raise ValueError(f"split part {part!r} holds row ids outside [0, {e})")
        if len(split.train) == 0 or len(split.val) == 0:
            # Selection reads validation only: without a validation row no epoch could be chosen.
            raise ValueError(f"edge regression needs training and validation rows, got sizes {split.sizes()}")
        self.metric, self.seed, self.batch_size = metric, int(seed), int(batch_size)
        self.dataset, self.cache_path, self.data, self.split = dataset, str(cache_path), data, split
        self.device = torch.device(device)
        self.num_nodes = n
        train_ei = train_edge_index(data, split)
        self.structure = PairStructure(cache_path, train_ei, n, dense_max_nodes, self.device, needs=needs,
                                    dense_only=dense_only)
        self.features_source = ("file" if features is not None
                                else f"one-hot degree of the training edges (cap {MAX_DEGREE})")
        if features is None:
            features = one_hot_degree(train_ei, n)
        if features.dim() != 2 or features.size(0) != n:
            raise ValueError(f"features must be [{n}, F], got {list(features.shape)}")
        self.x = features.float().to(self.device)
        self.in_dim = int(features.size(1))
        self.out_dim = int(data.targets.shape[1])
        y = torch.from_numpy(np.asarray(data.targets, dtype=np.float32))
        # Standardise by the training rows only (no held-out statistic enters optimisation).
        train_y = y[torch.from_numpy(split.train)].double()
        self.mean = train_y.mean(0).float()
        std = train_y.std(0, unbiased=False).float() if len(split.train) > 1 else torch.ones(self.out_dim)
        self.std = torch.where(std > 1e-12, std, torch.ones_like(std))  # a constant target: scale 1
        self.y = y.to(self.device)
        self.y_std = ((y - self.mean) / self.std).to(self.device)
        self.mean, self.std = self.mean.to(self.device), self.std.to(self.device)
        self.pairs = torch.from_numpy(np.ascontiguousarray(data.edge_index)).to(self.device)
        self._parts = {part: torch.from_numpy(getattr(split, part)).to(self.device) for part in PARTS}

    def describe(self) -> dict[str, object]:
        s, d = self.split, self.data
        rows = hashlib.sha256(b"".join(getattr(s, p).tobytes() for p in PARTS)).hexdigest()
        return {
            "dataset": self.dataset,
            "cache_path": self.cache_path,
            "split": {"name": s.name, "seed": s.seed, "fractions": _fractions_of(s), "rows_sha256": rows},
            "edge": {"file": d.path, "sha256": d.sha256, "features_file": d.features_path,
                     "features_sha256": d.features_sha256, "features": self.features_source,
                     "targets": list(d.target_names), "num_nodes": int(d.num_nodes), "num_edges": d.num_edges,
                     "seed": self.seed, "batch_size": self.batch_size,
                     "path": "dense" if self.structure.dense else "sparse"},
        }

    def split_sizes(self) -> dict[str, int]:
        return dict(zip(PARTS, self.split.sizes()))

    def train_batches(self, epoch: int) -> Iterator[Tensor]:
        rng = np.random.default_rng((self.seed, int(epoch)))  # a function of (seed, epoch): resumable
        for idx in index_batches(len(self.split.train), self.batch_size, rng):
            yield self._parts["train"][torch.from_numpy(idx).to(self.device)]

    def _predict(self, model: torch.nn.Module, rows: Tensor) -> Tensor:
        """Standardised predictions ``[R, T]`` of ``rows``."""
        net = network(model)
        h = self.structure.encode(net, self.x)
        return net.score_pairs(h, self.pairs[:, rows])

    def loss(self, model: torch.nn.Module, batch: Tensor) -> tuple[Tensor, int]:
        pred = self._predict(model, batch)
        return torch.nn.functional.mse_loss(pred, self.y_std[batch]), int(batch.numel())

    def outputs(self, model: torch.nn.Module, part: str) -> tuple[Tensor, Tensor]:
        """``(predictions [R, T], targets [R, T])`` of the rows of ``part``, in the file's units."""
        rows = self._parts[part]
        pred = self._predict(model, rows) * self.std + self.mean  # back to the file's units
        return pred.float().cpu(), self.y[rows].cpu()

    def score(self, model: torch.nn.Module, part: str) -> float:
        if self._parts[part].numel() == 0:
            return float("nan")
        return METRICS[self.metric](*self.outputs(model, part))

    def evaluate(self, model: torch.nn.Module, part: str) -> tuple[float, float]:
        """``(metric in the file's units, mean squared error in standardised units as trained)``."""
        if self._parts[part].numel() == 0:
            return float("nan"), float("nan")
        pred, y = self.outputs(model, part)
        mean, std = self.mean.cpu(), self.std.cpu()  # the training loss's standardised units
        loss = float(torch.nn.functional.mse_loss((pred - mean) / std, (y - mean) / std))
        return METRICS[self.metric](pred, y), loss


def from_experiment(exp: ExperimentView[None], seed: int, device: str, dense_only: str | None = None) -> EdgeTask:
    """The edge-regression task of ``exp`` for ``seed``: splits the rows, prepares their training edges' structure."""
    cfg, data = exp.cfg, exp.edge_data
    if data is None:
        raise ValueError("the edge level reads an edge file (edge.file); this experiment loaded none")
    split = edge_regression_split(data.edge_index.shape[1], seed, fractions=tuple(cfg.edge.fractions))
    path = prepare_pair_structure(exp.dataset, train_edge_index(data, split), data.num_nodes,
                                  structure_needed(cfg, "edge"), exp.cache_dir, level="edge", log=exp.log)
    x = None if data.x is None else torch.as_tensor(data.x)
    return EdgeTask(path, x, data, split, dataset=exp.dataset, metric=exp.metric, seed=seed, device=device,
                    dense_max_nodes=cfg.node.dense_max_nodes, needs=model_needs(cfg), dense_only=dense_only)
