"""Graph readouts: sum / mean / max of node embeddings per graph, on each of the network's layouts.

Padded (``[B, N, hidden]`` with a real-node mask), sparse (``[N, hidden]`` with a PyG-style ``batch``
vector) and packed (real rows with their :class:`~xmask_cli.model.packing.PackedGraphs`) give the same
numbers for the same graphs; an empty graph reads out as 0 on each.
"""
from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.utils import scatter

from xmask_cli.model.packing import PackedGraphs


def readout_dense(h: Tensor, mask: Tensor, reduce: str) -> Tensor:
    """``[B, hidden]`` ``reduce`` (sum/mean/max) of ``h [B, N, hidden]`` over real nodes (``mask [B, N]``) only."""
    keep = mask.unsqueeze(-1)
    if reduce == "sum":
        return h.masked_fill(~keep, 0.0).sum(1)
    if reduce == "mean":
        count = mask.sum(1, keepdim=True).clamp(min=1).to(h.dtype)
        return h.masked_fill(~keep, 0.0).sum(1) / count
    out = h.masked_fill(~keep, float("-inf")).amax(1)
    # An empty graph has no max; give it 0 (as PyG's scatter does) instead of -inf.
    return out.masked_fill(~mask.any(1, keepdim=True), 0.0)


def readout_sparse(h: Tensor, batch: Tensor | None, num_graphs: int | None, reduce: str) -> Tensor:
    """``[G, hidden]`` ``reduce`` of ``h [N, hidden]`` per graph of ``batch`` (None: one graph);
    ``G`` is ``num_graphs``, by default ``batch.max() + 1``."""
    if batch is None:
        batch = torch.zeros(h.size(0), dtype=torch.long, device=h.device)
    if num_graphs is None:
        num_graphs = int(batch.max()) + 1 if batch.numel() else 0
    return scatter(h, batch, dim=0, dim_size=num_graphs, reduce=reduce)


def readout_packed(h: Tensor, packed: PackedGraphs, reduce: str) -> Tensor:
    """``[B, hidden]`` ``reduce`` of packed rows ``h [n, hidden]`` per graph of the padded batch."""
    return scatter(h, packed.graph, dim=0, dim_size=packed.num_graphs, reduce=reduce)
