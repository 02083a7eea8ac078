"""Packed graph-level batches: real nodes only for the token-wise layers, attention per size group.

A padded batch ``[B, N, ...]`` of graphs wastes every layer on its padded
rows and its attention on ``B·N^2`` pairs where the graphs hold ``Σ n_b^2``.
The packed layout (``model.graph_layout: packed``) keeps the ``n = Σ n_b``
real rows only (``[n, D]``, graph by graph, largest graph first, so that each
group's rows are one contiguous span):
the linear layers, the FFN, the norms and dropout act on them. Attention is
block-diagonal over the graphs; it runs as dense SDPA over *groups* of
graphs of similar size, each padded only to its own largest graph
(:func:`plan_groups` picks the groups that minimise the padded pairs plus a
per-call cost). Padded keys get ``-inf`` as on the padded path, so every real
row sees exactly the keys and logit terms it sees there.

Large sparse graphs: a graph whose stored pairs cover a small share of its
``n^2`` grid (:func:`pair_attended`) can instead attend over those pairs only,
with the sparse path's kernels (:class:`PairSet`): under ``outside_support:
hard`` every pair outside a head's stored support has logit ``-inf`` on the
dense grid, weight exactly 0, so the pairs give the same outputs to float
rounding at ``Σ pairs`` instead of ``n^2`` cost (DD's largest graphs).

Dropout: a graph batch draws each dropout mask over its real rows only
(:func:`row_dropout`, ``[n, D]`` in the packed order), on either layout: the
padded path draws the same ``[n, D]`` mask and lays it on its real rows
(:func:`padded_dropout`), so a packed and a padded run with the same seed use
the very same masks and train to the same numbers, and no draw is spent on
padding. With ``attn_dropout > 0`` in training, the attention runs as one
group in the batch's own order and width, so SDPA's dropout draws match too.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

__all__ = ["AttentionGroup", "PackedGraphs", "PairSet", "GROUP_CALL_PAIRS", "DROP_LEVELS", "PAIR_DENSITY",
           "PAIR_MIN_NODES", "pack_graphs", "padded_dropout", "pair_attended", "plan_groups", "real_rows",
           "row_dropout"]

#: Cost of one more SDPA call, in padded (query, key) pairs: about what one call's fixed overhead
#: (mask assembly, layout copies, kernel launch, forward and backward) costs in pairs on this CPU.
GROUP_CALL_PAIRS = 4096
#: A graph attends over its stored pairs (not its dense grid) when they cover less than this share of ``n^2``
#: and it has more than :data:`PAIR_MIN_NODES` nodes: the CSR kernel's break-even with dense SDPA
#: (``model.attention.path.SPARSE_DENSITY``); below the node floor one dense call is cheaper than a CSR plan.
PAIR_DENSITY = 0.15
PAIR_MIN_NODES = 256
#: Dropout keeps an element when a 16-bit uniform draw falls below ``round((1-p)·2^16)``: four draws per 64-bit
#: word of the generator, a quarter of the generator calls of a float draw per element. The rate is so taken to
#: the nearest multiple of ``2^-16`` (0.1 -> 0.1000061) and the kept values are scaled by the exact inverse of
#: the kept share, so the expectation is unchanged.
DROP_LEVELS = 1 << 16


def row_dropout(h: Tensor, p: float, training: bool) -> Tensor:
    """Dropout of ``h`` (any shape) with 16-bit draws from the default generator (see :data:`DROP_LEVELS`).

    Raises:
        ValueError: ``p`` is outside ``[0, 1]``.
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability must be in [0, 1], got {p}")
    keep = round((1.0 - p) * DROP_LEVELS)
    if not training or keep >= DROP_LEVELS:
        return h
    if keep == 0:
        return h * 0.0
    n = h.numel()
    # random_ over the whole int64 range fills every bit of each word; its four 16-bit lanes are independent.
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=h.device).random_(-(1 << 63), None)
    draws = words.view(torch.int16)[:n].view(h.shape)
    # The keep test's bools read as bytes: a byte-to-float conversion is one vectorised pass, bool-to-float is not.
    mask = (draws < keep - DROP_LEVELS // 2).view(torch.uint8).to(h.dtype).mul_(DROP_LEVELS / keep)
    return h * mask


def _graph_order(sizes: np.ndarray) -> np.ndarray:
    """The packed order of a batch's non-empty graphs: largest first, ties by position (what
    :func:`plan_groups` cuts into runs, so each group's rows are one contiguous span)."""
    real = np.flatnonzero(sizes > 0)
    return real[np.argsort(-sizes[real], kind="stable")].astype(np.int64)  # stable: ties keep their position


def _real_rows(sizes: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(rows, graph, starts)``: the packed rows' positions in the flattened ``[B·N]`` padded layout (graphs in
    :func:`_graph_order`, each graph's nodes in order), their graphs, and each graph's first packed row."""
    order = _graph_order(sizes)
    counts = sizes[order]
    before = np.cumsum(counts) - counts
    local = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(before, counts)
    starts = np.zeros(len(sizes), dtype=np.int64)
    starts[order] = before
    return np.repeat(order * width, counts) + local, np.repeat(order, counts), starts


def real_rows(mask: Tensor) -> Tensor:
    """``[n]`` the packed rows of a padded batch ``mask [B, N]`` (real nodes first in each row): their positions
    in the flattened ``[B·N]`` layout, largest graph first (ties by position), each graph's nodes in order."""
    rows, _, _ = _real_rows(mask.sum(1).cpu().numpy().astype(np.int64), mask.size(1))
    return torch.from_numpy(rows).to(mask.device)


def padded_dropout(mask: Tensor) -> Callable[[Tensor, float, bool], Tensor]:
    """Dropout ``drop(h, p, training)`` of a padded batch ``h [B, N, ...]`` whose ``mask [B, N]`` marks real rows:
    the mask :func:`row_dropout` draws for the real rows in the packed order (:func:`real_rows`), padding kept
    as is.

    What makes a padded and a packed run with the same seed draw the same masks.
    """
    rows: list[Tensor] = []  # computed at the first draw, shared by the forward's draws

    def drop(h: Tensor, p: float, training: bool) -> Tensor:
        if not training or p == 0.0:
            return h
        if not rows:
            rows.append(real_rows(mask))
        scale = torch.ones_like(h)
        flat = scale.view(-1, *h.shape[2:])
        flat[rows[0]] = row_dropout(flat[rows[0]], p, True)
        return h * scale

    return drop


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
        start: the first of :attr:`packed` when they are one contiguous span (read as a view), else None.
        mask: ``[G, W]`` bool, True for real nodes.
    """

    graphs: Tensor
    sizes: list[int]
    width: int
    packed: Tensor
    slots: Tensor | None
    mask: Tensor
    start: int | None = None

    def lay_out(self, t: Tensor, rows: Tensor | None = None) -> Tensor:
        """Packed ``[n, ...]`` rows -> ``[G, W, ...]`` group layout, zero on padding (``rows``: the group's own
        ``[m, ...]`` rows of ``t``, when the caller has them already)."""
        if rows is None:
            rows = t.narrow(0, self.start, self.packed.numel()) if self.start is not None else t.index_select(0, self.packed)
        if self.slots is not None:
            rows = rows.new_zeros(len(self.sizes) * self.width, *t.shape[1:]).index_copy(0, self.slots, rows)
        return rows.view(len(self.sizes), self.width, *t.shape[1:])

    def gather(self, t: Tensor) -> Tensor:
        """``[G, W, ...]`` group layout -> its real rows ``[m, ...]``, in the order of :attr:`packed`."""
        flat = t.reshape(len(self.sizes) * self.width, *t.shape[2:])
        return flat if self.slots is None else flat.index_select(0, self.slots)


@dataclass
class PairSet:
    """Graphs attended over their stored pairs (the sparse path's kernels), as one disjoint union.

    Attributes:
        graphs: ``[S]`` positions in the batch of its graphs.
        packed: ``[m]`` packed rows of its graphs, graph by graph.
        node_graph: ``[m]`` index in ``graphs`` of each row's graph (plain heads attend inside it).
        offset: ``[B]`` first row of each batch graph in the set's ``m`` rows (0 for graphs outside it).
        edge_index: ``[2, E]`` attended pairs over the ``m`` rows (row = query), set by the model.
        bias: ``[E, H]`` the X-LogSMask bias at them (``-inf`` outside a head's support), set by the model.
        plan: the CSR plan of those pairs and the bias's terms at it, shared by the model's blocks.
    """

    graphs: Tensor
    packed: Tensor
    node_graph: Tensor
    offset: Tensor
    edge_index: Tensor | None = None
    bias: Tensor | None = None
    plan: tuple | None = None  # (key, CSR plan, picked terms), built by the first block, read by the others


def pair_attended(sizes: Tensor, pair_counts: Tensor, density: float = PAIR_DENSITY,
                  min_nodes: int = PAIR_MIN_NODES) -> Tensor:
    """``[B]`` bool: graphs with more than ``min_nodes`` nodes whose ``pair_counts`` stored pairs cover less than
    ``density`` of their ``n^2`` grid (see :data:`PAIR_DENSITY`)."""
    n = sizes.to(torch.float64)
    return (sizes > min_nodes) & (pair_counts.to(torch.float64) < density * n * n)


@dataclass
class PackedGraphs:
    """The packing of one padded batch (see the module docstring).

    Attributes:
        num_graphs, width: ``B`` and ``N`` of the padded layout.
        sizes: ``n_b`` of each graph.
        rows: ``[n]`` position of each packed row in the flattened ``[B·N]`` padded layout (:func:`real_rows`).
        graph: ``[n]`` batch position of the graph of each packed row.
        groups: the attention groups (every non-empty graph in exactly one).
        inverse: ``[n]`` where each packed row sits in the groups' concatenated rows (then the pair set's);
            None when that is where it is already.
        pairs: the graphs attended over their stored pairs, or None.
    """

    num_graphs: int
    width: int
    sizes: list[int]
    rows: Tensor
    graph: Tensor
    groups: list[AttentionGroup]
    inverse: Tensor | None
    pairs: PairSet | None = None
    tiles: list[tuple[int, int]] | None = None

    def split(self, t: Tensor) -> list[Tensor] | None:
        """Packed ``[n, ...]`` rows cut into each attention part's rows (groups in order, then the pair set), as
        views of consecutive spans (one concatenation in the backward, no zero-filled ``[n, ...]`` gradient per
        part); None when the parts' rows are not consecutive spans (:attr:`tiles`)."""
        if self.tiles is None:
            return None
        chunks = t.split([length for _, length in self.tiles])
        parts: list[Tensor] = [t] * len(self.tiles)
        for (part, _), chunk in zip(self.tiles, chunks):
            parts[part] = chunk
        return parts

    def join(self, parts: list[Tensor]) -> Tensor:
        """The parts' ``[m, ...]`` outputs (as :meth:`split` orders them) back in the packed row order."""
        if self.tiles is None:
            raise ValueError("the packing's parts are not consecutive spans")
        ordered = [parts[part] for part, _ in self.tiles]
        return ordered[0] if len(ordered) == 1 else torch.cat(ordered)

    @property
    def num_rows(self) -> int:
        return int(self.rows.numel())

    def dropout(self, h: Tensor, p: float, training: bool) -> Tensor:
        """Dropout of packed rows ``[n, D]``: :func:`row_dropout`, the mask :func:`padded_dropout` draws for the
        padded batch's real rows."""
        return row_dropout(h, p, training)

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
    order = _graph_order(np.asarray(sizes, dtype=np.int64)).tolist()
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


def pack_graphs(mask: Tensor, single_group: bool = False, call_pairs: int = GROUP_CALL_PAIRS,
                sparse: Tensor | None = None) -> PackedGraphs:
    """The packing of a padded batch whose ``mask [B, N]`` marks real nodes (a prefix of each row).

    ``single_group``: attend as one group of every graph in the batch's order
    and width (what SDPA's own dropout needs to draw the padded path's masks).
    ``sparse``: ``[B]`` bool, graphs left out of the dense groups for :attr:`PackedGraphs.pairs`
    (:func:`pair_attended`; not with ``single_group``).

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
    rows_np, graph_np, starts = _real_rows(sizes_np, N)
    rows, graph = torch.from_numpy(rows_np).to(device), torch.from_numpy(graph_np).to(device)
    on_pairs = np.zeros(B, dtype=bool) if sparse is None else sparse.cpu().numpy().astype(bool) & (sizes_np > 0)
    if single_group and on_pairs.any():
        raise ValueError("one dense group of the whole batch leaves no graph to attend over its pairs")
    if rows.numel() == 0:
        plans = []  # nothing to attend
    else:
        plans = [list(range(B))] if single_group else plan_groups(np.where(on_pairs, 0, sizes_np).tolist(), call_pairs)
    groups = []
    for members in plans:
        m = np.asarray(members, dtype=np.int64)
        g_sizes = sizes_np[m]
        width = N if single_group else int(g_sizes.max())
        # Row r of the j-th member graph: packed row starts[b] + r, group slot j * width + r.
        before = np.concatenate([[0], np.cumsum(g_sizes)[:-1]])
        local = np.arange(int(g_sizes.sum())) - np.repeat(before, g_sizes)
        packed_np = np.repeat(starts[m], g_sizes) + local
        span = len(packed_np) > 0 and bool((np.diff(packed_np) == 1).all())
        packed = torch.from_numpy(packed_np).to(device)
        full = bool((g_sizes == width).all())
        slots = None if full else torch.from_numpy(np.repeat(np.arange(len(m)) * width, g_sizes) + local).to(device)
        g_mask = torch.arange(width, device=device)[None, :] < torch.from_numpy(g_sizes).to(device)[:, None]
        groups.append(AttentionGroup(torch.from_numpy(m).to(device), g_sizes.tolist(), width, packed, slots, g_mask,
                                     int(packed_np[0]) if span else None))
    pairs = _pair_set(on_pairs, sizes_np, starts, device) if on_pairs.any() else None
    parts = [g.packed for g in groups] + ([pairs.packed] if pairs is not None else [])
    order = torch.cat(parts) if parts else rows.new_zeros(0)
    inverse: Tensor | None = None
    if not torch.equal(order, torch.arange(order.numel(), device=device)):
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(order.numel(), device=device)
    return PackedGraphs(B, N, sizes, rows, graph, groups, inverse, pairs, _tiles(parts, rows.numel()))


def _tiles(parts: list[Tensor], n: int) -> list[tuple[int, int]] | None:
    """``(part, rows)`` of each attention part (groups, then the pair set) in packed row order, when each part's
    rows are one consecutive span and the spans tile ``0..n-1``; else None."""
    if not parts:
        return None
    spans = []
    for i, rows in enumerate(parts):
        m = rows.numel()
        if m == 0:
            return None
        first = int(rows[0])
        if m > 1 and not bool((rows[1:] - rows[:-1] == 1).all()):
            return None
        spans.append((first, i, m))
    spans.sort()
    at = 0
    for first, _, m in spans:
        if first != at:
            return None
        at += m
    return [(i, m) for _, i, m in spans] if at == n else None


def _pair_set(on_pairs: np.ndarray, sizes: np.ndarray, starts: np.ndarray, device: torch.device) -> PairSet:
    """The :class:`PairSet` of the graphs ``on_pairs`` marks (its pairs and bias are the model's to set)."""
    members = np.flatnonzero(on_pairs)
    counts = sizes[members]
    before = np.concatenate([[0], np.cumsum(counts)[:-1]])
    local = np.arange(int(counts.sum())) - np.repeat(before, counts)
    offset = np.zeros(len(sizes), dtype=np.int64)
    offset[members] = before
    return PairSet(graphs=torch.from_numpy(members).to(device),
                   packed=torch.from_numpy(np.repeat(starts[members], counts) + local).to(device),
                   node_graph=torch.from_numpy(np.repeat(np.arange(len(members)), counts)).to(device),
                   offset=torch.from_numpy(offset).to(device))
