"""PyG transforms: the X-LogSMask structure of a graph on its ``Data`` object.

:class:`AddLogSMask` computes the normalized adjacency powers
``Â^1..Â^K`` (``Â = D^-1/2 (A + I) D^-1/2``) of one graph with the code
``xmask prepare`` runs (:func:`~xmask_cli.prepare.compute_block`), so a
graph gets the same pairs and values as the structure cache stores for it:
exact powers on their union support for graphs up to ``large_min_nodes``
nodes, and above that the cache's truncation rule (``Â^1`` and the support
of ``A + I`` kept whole; ``tau`` and ``topk`` applied to ``k >= 2``).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch_geometric.transforms import BaseTransform

from xmask_cli import arguments as args
from xmask_cli.config import LargeGraphSection, PowersSection, StructureSection
from xmask_cli.config_resolve import build
from xmask_cli.errors import UsageError
from xmask_cli.prepare.compute import compute_block

__all__ = ["AddLogSMask"]


def _edges(edge_index: Any, n: int, name: str) -> np.ndarray:
    """``edge_index`` (a tensor or an array) as ``[2, E]`` int64, checked: integer node ids in ``[0, n)``."""
    edges = edge_index.detach().cpu().numpy() if isinstance(edge_index, torch.Tensor) else edge_index
    if not isinstance(edges, np.ndarray) or edges.dtype.kind not in "iu" or edges.ndim != 2 or edges.shape[0] != 2:
        shown = f"{edges.dtype} {list(edges.shape)}" if isinstance(edges, np.ndarray) else type(edges).__name__
        raise UsageError(f"{name}: expected integer node ids [2, E]; got {shown}")
    if edges.size and (edges.min() < 0 or edges.max() >= n):
        bad = int(edges.min()) if edges.min() < 0 else int(edges.max())
        raise UsageError(f"{name}: expected node ids in [0, {n}) ({n} nodes); got {bad}")
    return edges.astype(np.int64, copy=False)


class AddLogSMask(BaseTransform):
    r"""Adds the normalized adjacency powers of X-LogSMask to a graph, as attended pairs.

    Head ``h`` of an X-LogSMask attention adds ``log(Â^{k_h}_ij + eps)`` to
    its logits, ``Â = D^{-1/2} (A + I) D^{-1/2}`` with ``D`` the degrees of
    ``A + I`` (the graph symmetrized, self loops added once). This transform
    stores ``Â^1..Â^K`` on the union of their supports (every pair within
    ``K`` hops): ``data[f"{attr}_index"]`` ``[2, P]`` long (row = query,
    col = key; the name ends in ``_index``, so PyG batching offsets it like
    ``edge_index``) and ``data[f"{attr}_values"]`` ``[P, K]`` float32.
    :class:`~xmask_cli.nn.XLogSMaskAttention` and
    :class:`~xmask_cli.nn.XLogSMaskBlock` read them.

    Args:
        k: highest power ``K`` (``structure.powers.k``).
        normalization: ``"sym"`` (``Â^k``, the method) or ``"no-symnorm"``
            (normalize ``(A + I)^k``, the ablation).
        large_min_nodes: graphs with more nodes get the truncation rule
            (``structure.large.min_nodes``).
        tau: large graphs: drop entries of ``k >= 2`` below ``tau``.
        topk: large graphs: keep at most ``topk`` entries per row of ``k >= 2`` (0: all).
        fanout: large graphs: a node of degree ``>= fanout`` passes mass on to its ``fanout - 1`` lowest-degree
            neighbours only in each product (0: no cap; ``structure.large.fanout``).
        attr: prefix of the two attributes written.

    Example::

        from xmask_cli.transforms import AddLogSMask
        data = AddLogSMask(k=3)(data)
        data.logsmask_index.shape, data.logsmask_values.shape  # [2, P], [P, 3]
    """

    def __init__(self, k: int = PowersSection.k, *, normalization: str = PowersSection.normalization,
                 large_min_nodes: int = LargeGraphSection.min_nodes, tau: float = LargeGraphSection.tau,
                 topk: int = LargeGraphSection.topk, fanout: int = LargeGraphSection.fanout, attr: str = "logsmask"):
        # Types and ranges under the parameters' own names first; the preset rules below then hold.
        k = args.int_arg("k", k, minimum=1)
        low, high = PowersSection.WITHIN["k"]  # a preset's bound, named as this parameter
        if k > high:
            raise UsageError(f"k: expected an int in [{low}, {high}]; got {k}")
        normalization = args.choice_arg("normalization", normalization,
                                        args.literal_choices(PowersSection, "normalization"))
        large_min_nodes = args.int_arg("large_min_nodes", large_min_nodes, minimum=0)
        tau = args.float_arg("tau", tau, low=0)
        topk, fanout = args.int_arg("topk", topk, minimum=0), args.int_arg("fanout", fanout, minimum=0)
        attr = str(args.str_arg("attr", attr, pattern=r"[A-Za-z_][A-Za-z0-9_]*"))
        # Checked like a preset's structure section (the same ranges and messages); only the powers are computed.
        self.structure: StructureSection = build(StructureSection, {
            "powers": {"k": k, "normalization": normalization},
            "spd": {"enabled": False}, "spectrum": {"enabled": False},
            "large": {"min_nodes": large_min_nodes, "tau": tau, "topk": topk, "fanout": fanout},
        }, "structure")
        self.attr = attr

    @property
    def k(self) -> int:
        return self.structure.powers.k

    def pairs(self, edge_index: np.ndarray, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
        """``(index [2, P] int64, values [P, K] float32)`` of one graph, in the cache's order."""
        num_nodes = args.int_arg("num_nodes", num_nodes, minimum=0)
        return self._pairs(_edges(edge_index, num_nodes, "edge_index"), num_nodes)

    def _pairs(self, edges: np.ndarray, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
        large = num_nodes > self.structure.large.min_nodes
        try:
            res = compute_block([edges], np.array([num_nodes]), self.structure, large, "graph", parts=("pairs",))
        except MemoryError:
            raise UsageError(f"num_nodes: the powers of a graph of {num_nodes} nodes do not fit in memory") from None
        p = res.pairs["powers"]
        row = np.repeat(np.arange(num_nodes, dtype=np.int64), p["node_counts"])
        return np.stack([row, p["col"].astype(np.int64)]), np.ascontiguousarray(p["values"], dtype=np.float32)

    def forward(self, data: Any) -> Any:
        if getattr(data, "edge_index", None) is None or getattr(data, "num_nodes", None) is None:
            raise UsageError("data: AddLogSMask needs a graph with edge_index and a node count")
        n = args.int_arg("data.num_nodes", data.num_nodes, minimum=0)
        index, values = self._pairs(_edges(data.edge_index, n, "data.edge_index"), n)
        data[f"{self.attr}_index"] = torch.from_numpy(index)
        data[f"{self.attr}_values"] = torch.from_numpy(values)
        return data

    def __repr__(self) -> str:
        p, lg = self.structure.powers, self.structure.large
        return (f"{type(self).__name__}(k={p.k}, normalization={p.normalization!r}, large_min_nodes={lg.min_nodes}, "
                f"tau={lg.tau}, topk={lg.topk}, fanout={lg.fanout})")
