"""Which attention path a full-graph batch takes: dense SDPA or sparse pairs.

Given the same structure both paths compute the same numbers to float
rounding: a pair outside a head's stored support gets ``-inf`` on both
(``model.outside_support: hard``), and plain heads (``k_h = 0``,
``use_bias: false``) attend over every node on both. They differ in cost.
Two settings need the whole domain as one dense grid and make ``auto``
choose dense (and refuse where the grid does not fit): ``outside_support:
eps`` and a learned bias on a plain head (see
:func:`~xmask_cli.model.model_config.sparse_refusal`).
"""
from __future__ import annotations

import torch

from xmask_cli.config import NodeSection

__all__ = ["ATTENTIONS", "SPARSE_DENSITY", "PathRefused", "full_graph_attention"]

#: Values of ``node.attention``.
ATTENTIONS = ("auto", "dense", "sparse")
#: ``auto`` on CPU goes sparse when the attended pairs fill less than this share of the N x N grid.
#: At 0.15 the CSR kernel breaks even with dense SDPA in its worst case (every head's support the whole
#: union); with head h reading Â^h it is ~2x faster there (benchmarks/sparse_kernel.py, 2026-12-01).
SPARSE_DENSITY = 0.15


class PathRefused(ValueError):
    """The model needs a dense path (``dense_only``) where only a sparse one is possible or requested."""


def full_graph_attention(requested: str, num_nodes: int, num_pairs: int, device: torch.device | str,
                         dense_max_nodes: int = NodeSection.dense_max_nodes, dense_only: str | None = None) -> str:
    """``'dense'`` or ``'sparse'`` for attention over one whole graph.

    ``auto``: sparse above ``dense_max_nodes`` nodes (an N x N grid would not
    fit); otherwise dense on CUDA (fused SDPA makes the grid cheap), and on CPU
    dense unless the pairs cover less than :data:`SPARSE_DENSITY` of the grid.
    The sparse path's CSR kernel runs each head over its own support, so its
    cost grows with the pairs summed over heads, the dense one with
    ``H·N^2``. On the 2-core CPU box a Cora train step (4 heads, 1 thread)
    with the union support of ``Â^1..Â^4`` (1.0 M pairs, 14 % of the grid)
    was 1.9x faster sparse with head h reading ``Â^h``, and on a par with dense
    when every head read ``Â^4``; with ``Â^1..Â^2`` sparse was 4.5x faster
    (benchmarks/sparse_kernel.py).

    Args:
        dense_only: why the model cannot run sparse (from
            :func:`~xmask_cli.model.model_config.sparse_refusal`), or None. With a
            reason, ``auto`` is dense up to ``dense_max_nodes`` nodes.

    Raises:
        PathRefused: ``dense_only`` and either ``sparse`` was requested or the
            graph has more than ``dense_max_nodes`` nodes.
    """
    if requested not in ATTENTIONS:
        raise ValueError(f"attention must be one of {ATTENTIONS}, got {requested!r}")
    if dense_only is not None:
        if requested == "sparse":
            raise PathRefused(f"node.attention=sparse refused: {dense_only}")
        if requested == "auto" and num_nodes > dense_max_nodes:
            raise PathRefused(f"a graph of {num_nodes} nodes is above node.dense_max_nodes={dense_max_nodes}, "
                              f"so only sparse attention fits, which is refused: {dense_only}")
        return "dense"
    if requested != "auto":
        return requested
    if num_nodes > dense_max_nodes:
        return "sparse"
    if torch.device(device).type == "cuda":
        return "dense"
    density = num_pairs / max(num_nodes * num_nodes, 1)
    return "dense" if density >= SPARSE_DENSITY else "sparse"
