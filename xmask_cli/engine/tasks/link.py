"""Link prediction on one graph whose structure is its training edges, as a :class:`~xmask_cli.engine.tasks.base.Task`.

Pairs are scored with :meth:`XMaskNet.score_pairs` on node embeddings of the
training-edge graph (:class:`~xmask_cli.engine.batching.pair_structure.PairStructure`:
no validation or test edge reaches the structure).

Training: every epoch, the training positives (``split.train_pos``, one
column per undirected edge) against as many negatives drawn uniformly among
pairs ``u != v`` that are not training edges (with replacement), from
``numpy.random.default_rng((seed, epoch))``, so a resumed run draws exactly
the pairs it would have drawn. Loss: binary cross-entropy with logits.
``batch_size = 0`` puts every pair in one step; otherwise the positives are
shuffled by the same generator and each step takes ``batch_size`` positives
plus as many negatives, re-encoding the graph.

Evaluation: MRR under ``shared`` or ``per-positive`` (:mod:`~xmask_cli.engine.scoring.mrr`)
against EdgeSplit's fixed ``val_neg`` / ``test_neg`` (``num_neg_per_pos`` per
positive). The ``train`` part (reported only) uses fixed negatives drawn once
from ``default_rng((split.seed, 2))``, ``M`` per training positive, excluding
every known edge (train, val and test positives), under the same protocol.

Example::

    split = edge_split(data.edge_index, data.num_nodes, seed=0)
    path = prepare_pair_structure("cora", split.train_edge_index, data.num_nodes, cfg.structure, cache_dir)
    task = LinkTask(path, data.x, split, dataset="Cora", seed=0)
    model_cfg = ModelConfig(in_dim=task.in_dim, out_dim=task.out_dim, task=task.model_task, hidden=64)
    summary = train_task(task, model_cfg, TrainConfig(seed=0), "runs/cora-link/0")  # engine.training.loop
"""
from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import torch
from torch import Tensor

from xmask_cli.config import LinkSection, NodeSection
from xmask_cli.data.graphset import GraphSet
from xmask_cli.engine.batching.features import node_features, one_hot_degree
from xmask_cli.engine.batching.pair_structure import PairStructure, prepare_pair_structure
from xmask_cli.engine.scoring.mrr import PROTOCOLS, link_mrr
from xmask_cli.engine.scoring.splits import (
    EdgeSplit,
    edge_split,
    index_batches,
    pair_keys,
    sample_negatives,
    split_name,
)
from xmask_cli.engine.tasks.base import ExperimentView, Task, network
from xmask_cli.engine.training.loop import PARTS
from xmask_cli.prepare.needs import model_needs, structure_needed

__all__ = ["LinkTask"]


def _expected_sizes(total: int, fractions: Sequence[float]) -> tuple[int, int, int]:
    # The same rounding as random_split: val/test floored, train the rest.
    n_val, n_test = math.floor(total * fractions[1] + 1e-9), math.floor(total * fractions[2] + 1e-9)
    return total - n_val - n_test, n_val, n_test


class LinkTask(Task[tuple[Tensor, Tensor]]):
    """Link prediction on one graph whose structure is its training edges (see the module docstring).

    Attributes:
        metric: ``"mrr"``.
        in_dim: node feature width ``F``.
        out_dim: 1 (one logit per pair).
        model_task: ``"link"`` (for :class:`ModelConfig`).
    """

    out_dim = 1
    model_task = "link"

    def __init__(self, cache_path: str | os.PathLike, features: Tensor, split: EdgeSplit, *, dataset: str,
                 metric: str = "mrr", protocol: str = LinkSection.protocol, seed: int = 0, device: torch.device | str = "cpu",
                 dense_max_nodes: int = NodeSection.dense_max_nodes, batch_size: int = 0,
                 fractions: Sequence[float] = tuple(LinkSection().fractions), needs: Iterable[str] = (),
                 dense_only: str | None = None):
        if metric != "mrr":
            raise ValueError(f"link prediction reports 'mrr', got {metric!r}")
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
        n = int(split.num_nodes)
        if features.dim() != 2 or features.size(0) != n:
            raise ValueError(f"features must be [{n}, F], got {list(features.shape)}")
        sizes = (split.train_pos.shape[1], split.val_pos.shape[1], split.test_pos.shape[1])
        if _expected_sizes(sum(sizes), fractions) != sizes:
            raise ValueError(f"split sizes {sizes} were not drawn with fractions {tuple(fractions)}")
        self.metric, self.protocol, self.seed, self.batch_size = metric, protocol, int(seed), int(batch_size)
        self.dataset, self.cache_path, self.split = dataset, str(cache_path), split
        self.fractions = tuple(float(f) for f in fractions)
        self.device = torch.device(device)
        self.num_nodes = n
        self.in_dim = int(features.size(1))
        self.x = features.float().to(self.device)
        self.structure = PairStructure(cache_path, split.train_edge_index, n, dense_max_nodes, self.device, needs=needs,
                                    dense_only=dense_only)
        self.train_pos = split.train_pos
        self._train_keys = np.unique(pair_keys(self.train_pos[0], self.train_pos[1], n))
        m = split.num_neg_per_pos
        known = np.unique(np.concatenate([self._train_keys, pair_keys(split.val_pos[0], split.val_pos[1], n),
                                          pair_keys(split.test_pos[0], split.test_pos[1], n)]))
        # Fixed negatives for the reported train MRR: never a known edge, the same at every call.
        train_neg = sample_negatives(self.train_pos.shape[1] * m, n, known, np.random.default_rng((split.seed, 2)))
        parts = {"train": (self.train_pos, np.stack([train_neg // n, train_neg % n])),
                 "val": (split.val_pos, split.val_neg), "test": (split.test_pos, split.test_neg)}
        self._eval = {k: (torch.from_numpy(np.ascontiguousarray(p)).to(self.device),
                          torch.from_numpy(np.ascontiguousarray(q)).to(self.device)) for k, (p, q) in parts.items()}

    def describe(self) -> dict[str, object]:
        s = self.split
        return {
            "dataset": self.dataset,
            "cache_path": self.cache_path,
            # The split is reproducible from (edges, seed, fractions, M): no edge arrays in the config.
            "split": {"name": split_name("edge-", self.fractions), "seed": int(s.seed),
                      "num_neg_per_pos": int(s.num_neg_per_pos), "fractions": list(self.fractions)},
            "link": {"protocol": self.protocol, "train_negatives": "uniform non-training pairs, 1 per positive, "
                     "rng (seed, epoch)", "seed": self.seed, "batch_size": self.batch_size,
                     "path": "dense" if self.structure.dense else "sparse"},
        }

    def split_sizes(self) -> dict[str, int]:
        return {part: int(self._eval[part][0].size(1)) for part in PARTS}

    def _negatives(self, count: int, rng: np.random.Generator) -> np.ndarray:
        """``count`` uniform pairs ``u != v`` that are not training edges (with replacement)."""
        n = self.num_nodes
        out: list[np.ndarray] = []
        got = 0
        while got < count:
            k = 2 * (count - got) + 16
            u, v = rng.integers(0, n, size=k), rng.integers(0, n, size=k)
            keep = (u != v) & ~np.isin(pair_keys(u, v, n), self._train_keys)
            pair = np.stack([u[keep], v[keep]])[:, :count - got]
            out.append(pair)
            got += pair.shape[1]
        return np.concatenate(out, axis=1).astype(np.int64)

    def train_batches(self, epoch: int) -> Iterator[tuple[Tensor, Tensor]]:
        # Everything random here comes from (seed, epoch): a resumed run sees the same pairs.
        rng = np.random.default_rng((self.seed, int(epoch)))
        p = self.train_pos.shape[1]
        neg = self._negatives(p, rng)
        for idx in index_batches(p, self.batch_size, rng):
            yield (torch.from_numpy(self.train_pos[:, idx]).to(self.device),
                   torch.from_numpy(np.ascontiguousarray(neg[:, idx])).to(self.device))

    def loss(self, model: torch.nn.Module, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, int]:
        pos, neg = batch
        net = network(model)
        h = self.structure.encode(net, self.x)
        logits = net.score_pairs(h, torch.cat([pos, neg], dim=1)).view(-1)
        labels = torch.cat([torch.ones(pos.size(1)), torch.zeros(neg.size(1))]).to(logits)
        return torch.nn.functional.binary_cross_entropy_with_logits(logits, labels), int(labels.numel())

    def score(self, model: torch.nn.Module, part: str) -> float:
        return self.evaluate(model, part)[0]

    def evaluate(self, model: torch.nn.Module, part: str) -> tuple[float, float]:
        """``(MRR, binary cross-entropy over the part's positives and negatives)``: what selection reads."""
        pos, neg = self._eval[part]
        net = network(model)
        h = self.structure.encode(net, self.x)
        s_pos = net.score_pairs(h, pos).view(-1).float().cpu()
        s_neg = net.score_pairs(h, neg).view(-1).float().cpu()
        logits = torch.cat([s_pos, s_neg])
        labels = torch.cat([torch.ones(len(s_pos)), torch.zeros(len(s_neg))])
        loss = float(torch.nn.functional.binary_cross_entropy_with_logits(logits, labels)) if len(logits) else float("nan")
        return link_mrr(s_pos, s_neg, self.protocol, self.split.num_neg_per_pos), loss


def from_experiment(exp: ExperimentView[GraphSet], seed: int, device: str, dense_only: str | None = None) -> LinkTask:
    """The link task of ``exp`` for ``seed``: draws the edge split, prepares its training edges' structure."""
    cfg, spec = exp.cfg, exp.graphs.spec
    data = exp.graphs.dataset[0]
    split = edge_split(data.edge_index, int(data.num_nodes), seed=seed, fractions=tuple(cfg.link.fractions),
                       num_neg_per_pos=cfg.link.num_neg_per_pos)
    path = prepare_pair_structure(spec.key, split.train_edge_index, int(data.num_nodes),
                                  structure_needed(cfg, "link"), exp.cache_dir, log=exp.log)
    # Without node features, the degree one-hot of the training edges: held-out edges must not leak in.
    x = node_features(exp.graphs)[0] if exp.graphs.has_features() else \
        one_hot_degree(split.train_edge_index, int(data.num_nodes))
    return LinkTask(path, x, split, dataset=spec.name, metric=exp.metric,
                    protocol=cfg.link.protocol, seed=seed, device=device, dense_max_nodes=cfg.node.dense_max_nodes,
                    fractions=tuple(cfg.link.fractions), needs=model_needs(cfg), dense_only=dense_only)
