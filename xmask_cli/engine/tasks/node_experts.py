"""Node classification with M3Dphormer attention experts: every node, cluster and class token at once.

The expert task attends over the whole graph's tokens (sparse token masks,
dual-mode attention), so it always runs ``full``; its loss adds the class
tokens' virtual labels as M3Dphormer does. Everything else (features,
labels, split, cache, describe) is :class:`~xmask_cli.engine.tasks.node.NodeTask`'s.

Example::

    task = ExpertNodeTask(cache_path, graphs, split)
    cfg = ModelConfig(in_dim=task.in_dim, out_dim=task.out_dim, task="node", experts=("local", "cluster", "global"))
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Iterator

import numpy as np
import torch
from torch import Tensor

from xmask_cli.config import ModelSection, NodeSection
from xmask_cli.config_rules import check_expert_node_mode
from xmask_cli.data.graphset import GraphSet
from xmask_cli.engine.node_batches import NodeBatch, NodeBatcher, NodeGraph
from xmask_cli.engine.splits import Split
from xmask_cli.engine.tasks import node
from xmask_cli.engine.tasks.base import ExperimentView, network
from xmask_cli.engine.tasks.node import NodeTask
from xmask_cli.model.batches import TokenBatch
from xmask_cli.model.experts import hierarchical_tokens
from xmask_cli.model.network import XMaskNet

__all__ = ["ExpertNodeTask", "TokenBatcher", "from_experiment"]


class ExpertNodeTask(NodeTask):
    """:class:`NodeTask` for models with attention experts (``model.experts``): token forward, token loss.

    Takes :class:`NodeTask`'s arguments; ``node.mode`` must be ``auto`` or ``full``
    (the token masks are sparse: no ``N x N`` tensor at any size).

    Attributes:
        tokens: the token masks, pooled token features, powers at the local
            pairs and planned dual-mode regions (built once, on ``device``).
    """

    experts = True

    def __init__(self, cache_path: str | os.PathLike[str], graphs: GraphSet, split: Split, metric: str = "accuracy",
                 node: NodeSection | None = None, *, model: ModelSection | None = None, seed: int = 0,
                 device: torch.device | str = "cpu", needs: Iterable[str] = (), dense_only: str | None = None,
                 parts_per_batch: int = 1):
        node = node or NodeSection()
        check_expert_node_mode(node.mode)  # resolve refuses it first; the same rule guards direct use
        super().__init__(cache_path, graphs, split, metric, dataclasses.replace(node, mode="full"), model=model,
                         seed=seed, device=device, needs=needs, dense_only=dense_only, parts_per_batch=parts_per_batch)

    def _batcher(self, graph: NodeGraph, mode: str, sparse_features: bool) -> NodeBatcher:
        self.attention = "experts"
        try:
            part = self._partition()
        except ValueError:  # no METIS parts cached: one cluster (the config refuses a cluster expert without parts)
            part = np.zeros(self.num_nodes, dtype=np.int64)
        return TokenBatcher(graph, part, self.y, self.out_dim)

    @property
    def tokens(self) -> TokenBatch:
        """The token masks, pooled token features, powers at the local pairs and planned dual-mode regions."""
        if not isinstance(self.batcher, TokenBatcher):
            raise TypeError("an expert node task batches tokens")
        return self.batcher.tokens

    def loss(self, model: torch.nn.Module, batch: NodeBatch) -> tuple[Tensor, int]:
        """Cross-entropy over the training nodes plus the class tokens (their virtual labels), as M3Dphormer."""
        masks = self.tokens.masks
        out = self.batcher.forward(network(model), batch)
        idx = torch.cat([batch.targets.to(self.device), masks.class_tokens])
        target = torch.cat([self.y[batch.targets].to(self.device), masks.virtual_labels])
        return torch.nn.functional.cross_entropy(out[idx], target), int(batch.targets.numel())


class TokenBatcher(NodeBatcher):
    """The whole graph's M3Dphormer tokens, one batch per epoch: masks, pooled token features and
    Â^1..Â^K at the local pairs, built once on the graph's device.

    Local pairs are the support of Â (one hop and self); clusters are the
    cache's METIS parts (``part``); class tokens read *training* labels only.
    """

    def __init__(self, graph: NodeGraph, part: np.ndarray, y: Tensor, out_dim: int):
        super().__init__(graph)
        self.num_nodes = graph.num_nodes
        local = graph.values[:, 0] > 0
        edge_index = torch.from_numpy(np.stack([graph.rows()[local], graph.col[local]]))
        train = graph.targets()
        num_parts = int(part.max()) + 1 if part.size else 0
        masks = hierarchical_tokens(self.num_nodes, edge_index.to(self.device), torch.from_numpy(part),
                                    train, y[train], out_dim, num_parts=num_parts)
        # Pooled where the masks live (their index tensors are on the device).
        self.tokens = TokenBatch(x=masks.pool(self.x.to(self.device)), masks=masks,
                                 values=torch.from_numpy(np.ascontiguousarray(graph.values[local])).to(self.device))
        self._batch = NodeBatch(nodes=None, targets=train)

    def train_batches(self, epoch: int) -> Iterator[NodeBatch]:
        yield self._batch

    def forward(self, model: XMaskNet, batch: NodeBatch) -> Tensor:
        """``[N + P + C, C]`` logits of every token (regions planned once per head width)."""
        logits: Tensor = model(self.tokens)
        return logits

    def predict(self, model: XMaskNet) -> Tensor:
        """``[N, C]`` logits of the node tokens on the CPU."""
        return self.forward(model, self._batch)[: self.num_nodes].float().cpu()


def from_experiment(exp: ExperimentView[GraphSet], seed: int, device: str, dense_only: str | None = None) -> NodeTask:
    """The node task of ``exp`` for ``seed`` when ``model.experts`` is set (the level registry's builder)."""
    return node.from_experiment(exp, seed, device, dense_only, task_class=ExpertNodeTask)
