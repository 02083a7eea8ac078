"""The SPD bias (Graphormer / GTLM): a learned scalar per head and hop distance."""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from xmask_cli.config import BiasSection
from xmask_cli.model.biases.base import BiasInputs, LearnedBias, extra, finish_dense


class SpdBias(LearnedBias):
    """A learned scalar per head and hop distance (Graphormer/GTLM SPD bias).

    Buckets: ``1..max_distance`` their distance (farther cached distances
    clip to ``max_distance + 1``, as do pairs beyond the cache's cut-off),
    unreachable pairs ``max_distance + 2``; distance 0 (a node with itself)
    is bucket 0, fixed at 0.

    Args:
        num_heads: heads served.
        max_distance: largest distance with its own bucket.
    """

    def __init__(self, num_heads: int, max_distance: int = BiasSection.max_distance):
        super().__init__()
        if max_distance < 1:
            raise ValueError(f"max_distance must be >= 1, got {max_distance}")
        self.num_heads, self.max_distance = int(num_heads), int(max_distance)
        # padding_idx 0: the self bucket is zero and receives no gradient.
        self.table = torch.nn.Embedding(max_distance + 3, num_heads, padding_idx=0)
        torch.nn.init.zeros_(self.table.weight)

    def buckets(self, spd: Tensor) -> Tensor:
        """Bucket index of each cached distance (see the class docstring)."""
        d = spd.long()
        far = self.max_distance + 1
        b = torch.where(d > self.max_distance, torch.full_like(d, far), d)
        b = torch.where(d == -1, torch.full_like(d, far), b)
        return torch.where(d <= -2, torch.full_like(d, far + 1), b)

    @classmethod
    def from_spec(cls, spec: BiasSection, num_heads: int, inputs: BiasInputs) -> SpdBias:
        """``spec.max_distance`` buckets."""
        return cls(num_heads, spec.max_distance)

    def forward(self, batch: Any, mask: Tensor | None = None, edge_index: Tensor | None = None) -> Tensor:
        """``[B, H, N, N]`` from ``spd [B, N, N]`` (dense), or ``[E, H]`` from ``spd [E]`` (sparse)."""
        spd = extra(batch, "spd")
        out = self.table(self.buckets(spd))
        if edge_index is not None:
            return out
        return finish_dense(out, mask, zero_diagonal=False)  # the self bucket is already 0
