"""Packed graph-level batches: real nodes only for the token-wise layers, attention per size group.

A padded batch ``[B, N, ...]`` of graphs wastes every layer on its padded
rows and its attention on ``B·N^2`` pairs where the graphs hold ``Σ n_b^2``.
The packed layout (``model.graph_layout: packed``) keeps the ``n = Σ n_b``
real rows only (``[n, D]``, graph by graph, in the padded layout's order):
the linear layers, the FFN, the norms and dropout act on them. Attention is
block-diagonal over the graphs; it runs as dense SDPA over *groups* of
graphs of similar size, each padded only to its own largest graph
(:func:`plan_groups` picks the groups that minimise the padded pairs plus a
per-call cost). Padded keys get ``-inf`` as on the padded path, so every real
row sees exactly the keys and logit terms it sees there.

Dropout: the padded path draws each dropout mask over the padded ``[B, N, D]``
tensor. :meth:`PackedGraphs.dropout` draws the same ``[B·N, D]`` mask from the
same generator and keeps its real rows, so a packed run uses the very masks
of a padded run with the same seed, and both train to the same numbers.
With ``attn_dropout > 0`` in training, the attention runs as one group in the
batch's own order and width, so SDPA's dropout draws match too.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

__all__ = ["AttentionGroup", "PackedGraphs", "GROUP_CALL_PAIRS", "pack_graphs", "plan_groups"]

#: Cost of one more SDPA call, in padded (query, key) pairs: about what one call's fixed overhead
#: (mask assembly, layout copies, kernel launch, forward and backward) costs in pairs on this CPU.
GROUP_CALL_PAIRS = 4096


@dataclass
class AttentionGroup:
    """Graphs attended together as one dense ``[G, H, W, W]`` SDPA call.

    Attributes:
        graphs: ``[G]`` positions in the batch of its graphs.
        sizes: node count of each of them.
        width: ``W``, the largest of them.
        packed: ``[m]`` packed rows of its graphs, graph by graph (``m = Σ sizes``).
        slots: ``[m]`` the same rows' positions in the group's ``[G·W]`` layout;
            None when they are ``0..m-1`` (no padding in the group).
        mask: ``[G, W]`` bool, True for real nodes.
    """

    graphs: Tensor
    sizes: list[int]
    width: int
    packed: Tensor
    slots: Tensor | None
    mask: Tensor

    def lay_out(self, t: Tensor) -> Tensor:
        """Packed ``[n, ...]`` rows -> ``[G, W, ...]`` group layout, zero on padding."""
        rows = t.index_select(0, self.packed)
        if self.slots is not None:
            rows = rows.new_zeros(len(self.sizes) * self.width, *t.shape[1:]).index_copy(0, self.slots, rows)
        return rows.view(len(self.sizes), self.width, *t.shape[1:])

    def gather(self, t: Tensor) -> Tensor:
        """``[G, W, ...]`` group layout -> its real rows ``[m, ...]``, in the order of :attr:`packed`."""
        flat = t.reshape(len(self.sizes) * self.width, *t.shape[2:])
        return flat if self.slots is None else flat.index_select(0, self.slots)


@dataclass
class PackedGraphs:
    """The packing of one padded batch (see the module docstring).

    Attributes:
        num_graphs, width: ``B`` and ``N`` of the padded layout.
        sizes: ``n_b`` of each graph.
        rows: ``[n]`` position of each packed row in the flattened ``[B·N]`` padded layout.
        graph: ``[n]`` batch position of the graph of each packed row.
        groups: the attention groups (every non-empty graph in exactly one).
        inverse: ``[n]`` where each packed row sits in the groups' concatenated rows.
    """

    num_graphs: int
    width: int
    sizes: list[int]
    rows: Tensor
    graph: Tensor
    groups: list[AttentionGroup]
    inverse: Tensor
    _uniform: Tensor | None = field(default=None, repr=False)  # scratch of the CPU dropout draws

    @property
    def num_rows(self) -> int:
        return int(self.rows.numel())

    def dropout(self, h: Tensor, p: float, training: bool) -> Tensor:
        """Dropout of packed rows ``[n, D]`` with the mask :func:`torch.nn.functional.dropout` draws for ``[B, N, D]``.

        CPU dropout fills a Bernoulli mask over the whole (contiguous) input from
        the default generator, then scales it by ``1/(1-p)``; the same fill over
        the padded shape, cut to the real rows, is the padded path's mask on them.
        Other devices run a fused dropout kernel whose draws depend on the
        element count: there the mask is that kernel's, applied to ones.
        """
        if not training or p == 0.0:
            return h
        if p == 1.0:
            return h * 0.0
        shape = (self.num_graphs * self.width, h.size(-1))
        if h.device.type != "cpu":
            noise = torch.nn.functional.dropout(torch.ones(shape, dtype=h.dtype, device=h.device), p, True)
            return h * noise.index_select(0, self.rows)
        # CPU bernoulli_(q) draws one float64 uniform per element, in memory order, and keeps u < q: the same
        # uniforms drawn into a reused buffer give the same mask a third faster (bit-identity: tests/model/test_packing.py).
        need = shape[0] * shape[1]
        if self._uniform is None or self._uniform.numel() < need:
            self._uniform = torch.empty(need, dtype=torch.float64)
        keep = (self._uniform[:need].view(shape).uniform_() < 1.0 - p).index_select(0, self.rows)
        scale = torch.ones((), dtype=h.dtype).div_(1.0 - p)  # dropout's 1/(1-p), rounded to h's dtype as it does
        return h * keep.to(h.dtype).mul_(scale)

    def unpack(self, h: Tensor) -> Tensor:
        """Packed ``[n, ...]`` -> padded ``[B, N, ...]``, zero on padding (for inspection and tests)."""
        out = h.new_zeros(self.num_graphs * self.width, *h.shape[1:]).index_copy(0, self.rows, h)
        return out.view(self.num_graphs, self.width, *h.shape[1:])


def plan_groups(sizes: list[int], call_pairs: int = GROUP_CALL_PAIRS) -> list[list[int]]:
    """Split graphs into attention groups minimising ``Σ_groups (call_pairs + G·W^2)``.

    Graphs are taken by decreasing size (ties by position) and cut into runs,
    the optimal contiguous partition by dynamic programming (``O(B^2)``).
    Empty graphs are left out (they have no rows to attend). Returns each
    group's batch positions, largest graph first.
    """
    order = sorted((b for b, n in enumerate(sizes) if n > 0), key=lambda b: (-sizes[b], b))
    s = np.array([sizes[b] for b in order], dtype=np.float64)
    m = len(s)
    best = np.zeros(m + 1)  # best[j]: cost of the first j graphs
    cut = [0] * (m + 1)
    square = s * s
    for j in range(1, m + 1):
        # group = graphs i..j-1, padded to s[i] (the largest); the first cheapest i wins ties
        c = best[:j] + call_pairs + (j - np.arange(j)) * square[:j]
        i = int(np.argmin(c))
        best[j], cut[j] = c[i], i
    groups: list[list[int]] = []
    j = m
    while j > 0:
        groups.append(order[cut[j]:j])
        j = cut[j]
    return groups[::-1]


def pack_graphs(mask: Tensor, single_group: bool = False, call_pairs: int = GROUP_CALL_PAIRS) -> PackedGraphs:
    """The packing of a padded batch whose ``mask [B, N]`` marks real nodes (a prefix of each row).

    ``single_group``: attend as one group of every graph in the batch's order
    and width (what SDPA's own dropout needs to draw the padded path's masks).

    Raises:
        ValueError: a row's real nodes are not its first ``n_b`` positions.
    """
    B, N = mask.shape
    device = mask.device
    counts = mask.sum(1)
    if not torch.equal(mask, torch.arange(N, device=device)[None, :] < counts[:, None]):
        raise ValueError("the packed layout needs each graph's real nodes first in its row of the padded batch")
    sizes_np = counts.cpu().numpy().astype(np.int64)
    sizes = sizes_np.tolist()
    rows = mask.reshape(-1).nonzero().squeeze(1)
    graph = torch.div(rows, N, rounding_mode="floor") if N else rows
    starts = np.concatenate([[0], np.cumsum(sizes_np)])
    if rows.numel() == 0:
        plans = []  # nothing to attend
    else:
        plans = [list(range(B))] if single_group else plan_groups(sizes, call_pairs)
    groups = []
    for members in plans:
        m = np.asarray(members, dtype=np.int64)
        g_sizes = sizes_np[m]
        width = N if single_group else int(g_sizes.max())
        # Row r of the j-th member graph: packed row starts[b] + r, group slot j * width + r.
        before = np.concatenate([[0], np.cumsum(g_sizes)[:-1]])
        local = np.arange(int(g_sizes.sum())) - np.repeat(before, g_sizes)
        packed = torch.from_numpy(np.repeat(starts[m], g_sizes) + local).to(device)
        full = bool((g_sizes == width).all())
        slots = None if full else torch.from_numpy(np.repeat(np.arange(len(m)) * width, g_sizes) + local).to(device)
        g_mask = torch.arange(width, device=device)[None, :] < torch.from_numpy(g_sizes).to(device)[:, None]
        groups.append(AttentionGroup(torch.from_numpy(m).to(device), g_sizes.tolist(), width, packed, slots, g_mask))
    order = torch.cat([g.packed for g in groups]) if groups else rows.new_zeros(0)
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(order.numel(), device=device)
    return PackedGraphs(B, N, sizes, rows, graph, groups, inverse)
