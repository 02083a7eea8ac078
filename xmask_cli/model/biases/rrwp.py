"""The RRWP bias (GRIT / GTLM): a pair's random-walk probabilities through an MLP."""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from xmask_cli.config import BiasSection, RrwpSection
from xmask_cli.model.biases.base import (
    BiasInputs,
    LearnedBias,
    extra,
    finish_dense,
    finish_sparse,
    in_chunks,
    linear_at,
)


class RrwpBias(LearnedBias):
    """RRWP (GRIT/GTLM): the walk probabilities ``[I, P, ..., P^S-1]`` of a pair through an MLP.

    ``Linear(S, width) -> ReLU -> Linear(width, H)``; the last layer starts at zero.

    Args:
        num_heads: heads served.
        in_dim: walk channels ``S`` (``structure.rrwp.steps + 1``).
        width: hidden width.
    """

    def __init__(self, num_heads: int, in_dim: int = RrwpSection.steps + 1, width: int = BiasSection.width):
        super().__init__()
        self.num_heads = int(num_heads)
        first, last = torch.nn.Linear(in_dim, width), torch.nn.Linear(width, num_heads)  # drawn in this order
        self.mlp = torch.nn.Sequential(first, torch.nn.ReLU(), last)
        torch.nn.init.zeros_(last.weight)
        torch.nn.init.zeros_(last.bias)

    @classmethod
    def from_spec(cls, spec: BiasSection, num_heads: int, inputs: BiasInputs) -> RrwpBias:
        """The cache's walk channels, ``spec.width`` hidden units."""
        return cls(num_heads, inputs.rrwp_dim, spec.width)

    def forward(self, batch: Any, mask: Tensor | None = None, edge_index: Tensor | None = None) -> Tensor:
        """``[B, H, N, N]`` from ``rrwp [B, S, N, N]``, or ``[E, H]`` from ``rrwp [E, S]``."""
        first = linear_at(self.mlp, 0)
        rrwp = extra(batch, "rrwp").to(first.weight.dtype)  # the parameters' dtype (a .double() model too)
        width = first.out_features + rrwp.size(-1 if edge_index is not None else 1)
        if edge_index is not None:
            out = in_chunks(lambda a, b: self.mlp(rrwp[a:b]), rrwp.size(0), width, 0)
            return finish_sparse(out, edge_index, zero_diagonal=True)
        bsz, n = rrwp.size(0), rrwp.size(-1)
        # Query rows in chunks: [B, rows, N, S] -> [B, rows, N, H].
        out = in_chunks(lambda a, b: self.mlp(rrwp[:, :, a:b].permute(0, 2, 3, 1)), n, bsz * n * width, 1)
        return finish_dense(out, mask, zero_diagonal=True)
