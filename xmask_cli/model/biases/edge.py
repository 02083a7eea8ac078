"""The edge bias: a learned per-head term of the attributes of the edge joining a pair (bond features on molecules)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor
from torch.nn.utils import skip_init

from xmask_cli.config import BiasSection
from xmask_cli.model.biases.base import BiasInputs, LearnedBias, extra
from xmask_cli.structure.edge_attrs import EdgeCoding


class EdgeBias(LearnedBias):
    """``b_h(e_ij)`` on the logits of a pair ``(i, j)`` joined by an edge with attributes ``e_ij``; 0 elsewhere.

    ``index`` coding (integer attributes, e.g. OGB's bond type, stereo and conjugation): ``b(e) = Σ_c T_c[e_c]``,
    one table of ``dims[c]`` rows and ``num_heads`` columns per column (OGB's ``BondEncoder``, with heads for its
    width). ``linear`` coding (float attributes, e.g. MUTAG's one-hot bond labels): ``b(e) = W e + w0``. Tables,
    ``W`` and ``w0`` start at zero, built without a draw from the generator. Pairs without an edge, padded
    pairs and the diagonal get 0. The term is computed at the batch's edges only and scattered into the pair
    grid: its cost grows with the edges, not with ``N^2``.

    Args:
        num_heads: heads served.
        encoding: ``index`` or ``linear`` (the cache's ``edge`` section records which).
        dims: per column the vocabulary (``index``), or the column count alone (``linear``).
    """

    def __init__(self, num_heads: int, encoding: str, dims: Sequence[int]):
        super().__init__()
        coding = EdgeCoding(encoding, tuple(dims))  # raises on an unknown encoding or bad dims
        self.num_heads, self.encoding, self.dims = int(num_heads), coding.encoding, coding.dims
        self.table: torch.nn.Embedding | None = None
        self.linear: torch.nn.Linear | None = None
        if coding.encoding == "index":
            # One table for all columns, column c's rows starting at offsets[c]: one lookup per edge.
            # skip_init: built without drawing from the generator, so with and without this bias the
            # network's other parameters start the same at a seed (``no-edge`` is a clean pair).
            self.table = skip_init(torch.nn.Embedding, sum(coding.dims), self.num_heads)
            torch.nn.init.zeros_(self.table.weight)
            starts = torch.tensor((0, *coding.dims[:-1]), dtype=torch.long).cumsum(0)
            self.register_buffer("offsets", starts, persistent=False)
        else:
            self.linear = skip_init(torch.nn.Linear, coding.dims[0], self.num_heads)
            torch.nn.init.zeros_(self.linear.weight)
            torch.nn.init.zeros_(self.linear.bias)

    @classmethod
    def from_spec(cls, spec: BiasSection, num_heads: int, inputs: BiasInputs) -> EdgeBias:
        """The cache's coding of its edge attributes."""
        if not inputs.edge_dims:
            raise ValueError("the edge bias needs the cache's edge coding (ModelConfig.edge_encoding, edge_dims)")
        return cls(num_heads, inputs.edge_encoding, inputs.edge_dims)

    def encode(self, attr: Tensor) -> Tensor:
        """``[E, H]``: the term of each edge's ``[E, C]`` attributes."""
        if self.table is not None:
            offsets = self.get_buffer("offsets")
            return self.table(attr.long() + offsets).sum(-2)
        assert self.linear is not None
        return self.linear(attr.to(self.linear.weight.dtype))

    def forward(self, batch: Any, mask: Tensor | None = None, edge_index: Tensor | None = None) -> Tensor:
        """``[B, H, N, N]`` from ``edge_attr [B, N, N, C]`` and ``edge_mask [B, N, N]`` (dense), or ``[E, H]``
        from ``edge_attr [E, C]`` and ``edge_mask [E]`` (sparse: the attended pairs)."""
        attr, joined = extra(batch, "edge_attr"), extra(batch, "edge_mask")
        cols = attr.size(-1)
        at = joined.reshape(-1).nonzero().squeeze(1)
        values = self.encode(attr.reshape(-1, cols).index_select(0, at))  # [edges, H]
        if edge_index is not None:
            return values.new_zeros(joined.numel(), self.num_heads).index_put((at,), values)
        # Straight into the [B, H, N, N] layout: a zeroed tensor (no gradient) and a scatter of the edges'
        # values, whose backward is a gather at the edges; no pass over the pair grid beyond the zeroing.
        # edge_mask is False on padded pairs and the diagonal (no self pair is stored): those stay 0.
        bsz, n = joined.size(0), joined.size(1)
        b, ij = at // (n * n), at % (n * n)
        heads = torch.arange(self.num_heads, device=at.device)
        flat = ((b * self.num_heads).unsqueeze(1) + heads) * (n * n) + ij.unsqueeze(1)  # [edges, H]
        out = values.new_zeros(bsz * self.num_heads * n * n)
        return out.index_put((flat.reshape(-1),), values.reshape(-1)).view(bsz, self.num_heads, n, n)
