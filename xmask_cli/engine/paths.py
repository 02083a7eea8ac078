"""Which attention path a full-graph batch takes: dense SDPA or sparse pairs.

Both paths compute the same numbers up to float rounding (dense gives absent
pairs ``log(eps)``, a weight below float32 resolution); they differ in cost.
"""
from __future__ import annotations

import torch

__all__ = ["ATTENTIONS", "SPARSE_DENSITY", "full_graph_attention"]

#: Values of ``node.attention``.
ATTENTIONS = ("auto", "dense", "sparse")
#: ``auto`` on CPU goes sparse when the attended pairs fill less than this share of the N x N grid.
SPARSE_DENSITY = 0.05


def full_graph_attention(requested: str, num_nodes: int, num_pairs: int, device: torch.device | str,
                         dense_max_nodes: int = 5000) -> str:
    """``'dense'`` or ``'sparse'`` for attention over one whole graph.

    ``auto``: sparse above ``dense_max_nodes`` nodes (an N x N grid would not
    fit); otherwise dense on CUDA (fused SDPA makes the grid cheap), and on CPU
    dense unless the pairs cover less than :data:`SPARSE_DENSITY` of the grid.
    On the 2-core CPU box a Cora train step with the union support of
    ``Â^1..Â^4`` (1.0 M pairs, 14 % of the grid) was faster dense, while with
    ``Â^1..Â^2`` (about 1 %) sparse was ten times faster; the cut-off sits
    between (benchmarks/train_speed.py measures both paths).
    """
    if requested not in ATTENTIONS:
        raise ValueError(f"attention must be one of {ATTENTIONS}, got {requested!r}")
    if requested != "auto":
        return requested
    if num_nodes > dense_max_nodes:
        return "sparse"
    if torch.device(device).type == "cuda":
        return "dense"
    density = num_pairs / max(num_nodes * num_nodes, 1)
    return "dense" if density >= SPARSE_DENSITY else "sparse"
