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
        large = num_nodes > self.structure.large.min_nodes
        res = compute_block([np.asarray(edge_index, dtype=np.int64).reshape(2, -1)], np.array([num_nodes]),
                            self.structure, large, "graph", parts=("pairs",))
        p = res.pairs["powers"]
        row = np.repeat(np.arange(num_nodes, dtype=np.int64), p["node_counts"])
        return np.stack([row, p["col"].astype(np.int64)]), np.ascontiguousarray(p["values"], dtype=np.float32)

    def forward(self, data: Any) -> Any:
        if getattr(data, "edge_index", None) is None or getattr(data, "num_nodes", None) is None:
            raise UsageError("data: AddLogSMask needs a graph with edge_index and a node count")
        index, values = self.pairs(data.edge_index.cpu().numpy(), int(data.num_nodes))
        data[f"{self.attr}_index"] = torch.from_numpy(index)
        data[f"{self.attr}_values"] = torch.from_numpy(values)
        return data

    def __repr__(self) -> str:
        p, lg = self.structure.powers, self.structure.large
        return (f"{type(self).__name__}(k={p.k}, normalization={p.normalization!r}, large_min_nodes={lg.min_nodes}, "
                f"tau={lg.tau}, topk={lg.topk}, fanout={lg.fanout})")
