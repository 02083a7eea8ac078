"""The packed graph-level path of :class:`~xmask_cli.model.network.XMaskNet`.

A part the network holds (``XMaskNet.packed_path``): token-wise layers on the real rows
of a padded batch only, attention per group of similar-sized graphs. The network passes
what it runs (``cfg``, ``encoder``, ``blocks``, ``bias``, its learned biases) to
:meth:`PackedForward.encode`; the part keeps only its pair / grid settings.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import cast

import torch
from torch import Tensor

from xmask_cli.model.archs import get_arch
from xmask_cli.model.attention.structural import StructuralAttention
from xmask_cli.model.batches import LogPairs
from xmask_cli.model.layers import TransformerBlock
from xmask_cli.model.logsmask import DenseStructure, XLogSMaskBias
from xmask_cli.model.logsmask import log_powers as take_log
from xmask_cli.model.model_config import ModelConfig
from xmask_cli.model.packing import PAIR_DENSITY, PAIR_MIN_NODES, PackedGraphs, PairSet, pack_graphs, pair_attended


class PackedForward:
    """The packed graph-level forward a network holds (``XMaskNet.packed_path``).

    Its own state is where large sparse graphs leave the dense grid; what it runs (the config, the
    encoder, the blocks, the X-LogSMask term, the learned biases) comes in as arguments. Set
    ``net.packed_path.pair_min_nodes = None`` to run every graph on its dense grid (tests and benchmarks
    compare the two), or pass other values when building one.
    """

    def __init__(self, pair_min_nodes: int | None = PAIR_MIN_NODES, pair_density: float = PAIR_DENSITY) -> None:
        #: Graphs above this many nodes whose stored pairs are sparse attend over them (:func:`pair_attended`);
        #: None: every graph on its dense grid.
        self.pair_min_nodes = pair_min_nodes
        #: ... and whose stored pairs cover less than this share of their grid.
        self.pair_density = pair_density

    @staticmethod
    def runs(cfg: ModelConfig) -> bool:
        """Whether a network of ``cfg`` runs graph batches packed (``graph_layout='packed'``, graph task, one attention)."""
        return cfg.task == "graph" and cfg.graph_layout == "packed" and not cfg.experts and cfg.encoder != "patch"

    def encode(self, x: Tensor, mask: Tensor, powers: Tensor | None, log_powers: LogPairs | Sequence[Tensor] | None,
               log_spec: tuple | None, extras: Mapping[str, Tensor] | None, *, cfg: ModelConfig, training: bool,
               encoder: torch.nn.Module, blocks: Sequence[TransformerBlock], bias: XLogSMaskBias | None,
               learned: Callable[..., Tensor | None]) -> tuple[Tensor, PackedGraphs]:
        """Embeddings ``[n, hidden]`` of the real nodes of a padded batch, and its packing.

        The same numbers as the real rows of :meth:`XMaskNet.encode_dense` (dropout masks included, see
        :mod:`~xmask_cli.model.packing`), computed on the real rows only, with attention per group of
        similar-sized graphs.

        Args:
            x: ``[B, N, F]`` node features; mask: ``[B, N]``, real nodes first in each row.
            powers: ``[B, K, N, N]`` ``Â^1..Â^K``, or None when ``log_powers`` are given.
            log_powers: the batch's :class:`~xmask_cli.model.batches.LogPairs` (what the graph-level stream
                gives), or per graph its ``[K, n_b, n_b]`` :func:`~xmask_cli.model.logsmask.log_powers`;
                used instead of ``powers``.
            log_spec: ``(eps, outside_support)`` they were taken with; must be the model's.
            extras: dense structure the learned biases read (as :meth:`XMaskNet.encode_dense`).
            cfg, training, encoder, blocks, bias: the network's config, mode and modules.
            learned: ``learned(layer, extras, mask=mask)``, the layer's learned bias or None.
        """
        single = training and cfg.attn_dropout > 0
        on_pairs = None
        if isinstance(log_powers, LogPairs) and not single and self._attends_pairs(cfg, bias):
            counts = torch.bincount(log_powers.graph, minlength=mask.size(0))
            on_pairs = pair_attended(mask.sum(1), counts, self.pair_density, cast(int, self.pair_min_nodes))
        packed = pack_graphs(mask, single_group=single, sparse=on_pairs)
        B, N = mask.shape
        rows = x.reshape(B * N, *x.shape[2:]).index_select(0, packed.rows)
        if cfg.input_dropout > 0 and cfg.encoder in ("linear", "none"):
            rows = packed.dropout(rows, cfg.input_dropout, training)
        h = encoder(rows)
        # The packed path runs one structural attention per block (no experts: see runs()).
        attn = cast(StructuralAttention, blocks[0].attn) if len(blocks) else None
        scaled = isinstance(log_powers, LogPairs) and attn is not None and bias is not None
        if scaled and attn is not None and bias is not None:  # the term as it enters the logits, scaled at the pairs
            _check_log_spec(bias, log_spec)
            # The SDPA masks themselves (padded keys -inf already).
            group_bias = _bias_from_pairs(bias, packed, cast(LogPairs, log_powers), attn.structural_term)
            if packed.pairs is not None:
                _pair_bias(bias, packed.pairs, cast(LogPairs, log_powers))
        else:
            group_bias = _packed_bias(bias, cfg.heads, packed, mask, powers, log_powers, log_spec)
        shared = [None if attn is None else attn.dense_mask(b, None if scaled else g.mask, h.dtype, scaled=scaled)
                  for g, b in zip(packed.groups, group_bias)]
        del group_bias  # the masks hold what attention reads (a large graph's bias is hundreds of MB)
        local = get_arch(cfg.arch).block_inputs(extras, packed)  # gps: the batch's edges, over the packed rows
        for i, block in enumerate(blocks):
            term = learned(i, extras, mask=mask)
            masks = shared
            if term is not None:
                masks = []
                for g, m in zip(packed.groups, shared):
                    # The padded batch's learned bias, cut to the group (padded keys are -inf in `m` already).
                    cut = term.index_select(0, g.graphs)[:, :, :g.width, :g.width].to(h.dtype)
                    masks.append(cut if m is None else m + cut)
            h = block.forward_packed(h, packed, masks, **local)
        return h, packed

    def _attends_pairs(self, cfg: ModelConfig, bias: XLogSMaskBias | None) -> bool:
        """Whether large sparse graphs may attend over their stored pairs (:func:`pair_attended`): the same
        numbers as their dense grid only where every pair outside a head's support is ``-inf`` (``hard``) and
        nothing else (a learned bias) lives on the grid."""
        return (self.pair_min_nodes is not None and bias is not None and not cfg.biases
                and bias.outside_support == "hard")


def _pair_bias(bias: XLogSMaskBias, pairs_set: PairSet, pairs: LogPairs) -> None:
    """Set ``pairs_set``'s attended pairs and their unscaled ``[E, H]`` bias: its graphs' stored pairs, plus
    each node's own pair where none is stored (the grid's diagonal fill; off the diagonal it is ``-inf``)."""
    mine = torch.zeros(len(pairs_set.offset), dtype=torch.bool, device=pairs.graph.device)
    mine[pairs_set.graphs] = True
    sel = mine[pairs.graph].nonzero().squeeze(1)
    base = pairs_set.offset[pairs.graph.index_select(0, sel)]
    row, col = base + pairs.row.index_select(0, sel), base + pairs.col.index_select(0, sel)
    values = bias.from_log_powers(pairs.values.index_select(0, sel), axis=1)  # [E, H]
    m = pairs_set.packed.numel()
    has_diag = torch.zeros(m, dtype=torch.bool, device=row.device)
    has_diag[row[row == col]] = True
    missing = (~has_diag).nonzero().squeeze(1)
    if missing.numel():
        k = pairs.values.size(1)
        zero = torch.zeros(1, k, dtype=pairs.values.dtype, device=row.device)
        fill = bias.from_log_powers(take_log(zero, bias.eps, bias.outside_support,
                                             off_diagonal=torch.zeros(1, 1, dtype=torch.bool)), axis=1)
        row, col, values = _with_diagonal(row, col, values, missing, fill, m)
    pairs_set.edge_index = torch.stack([row, col])
    pairs_set.bias = values


def _with_diagonal(row: Tensor, col: Tensor, values: Tensor, missing: Tensor, fill: Tensor,
                   m: int) -> tuple[Tensor, Tensor, Tensor]:
    """The pairs ``(row, col)`` over ``m`` rows with values ``[E, H]``, plus each ``missing`` node's own pair
    valued ``fill [1, H]``, in row-major order when the pairs come so (the stream's do): the order the CSR plan
    would sort them into (keys are unique), without the sort. Unsorted pairs get the new ones appended."""
    key = row * m + col
    if key.numel() > 1 and not bool((key[1:] > key[:-1]).all()):
        return torch.cat([row, missing]), torch.cat([col, missing]), torch.cat([values, fill.expand(missing.numel(), -1)])
    diag = missing * (m + 1)
    # Each pair moves up by the diagonal pairs before it, each diagonal pair by the stored pairs before it.
    to_stored = torch.arange(key.numel(), device=key.device) + torch.searchsorted(diag, key)
    to_diag = torch.arange(diag.numel(), device=key.device) + torch.searchsorted(key, diag)
    total = key.numel() + diag.numel()
    out_row, out_col = row.new_empty(total), col.new_empty(total)
    out_values = values.new_empty(total, values.size(1))
    out_row[to_stored], out_col[to_stored], out_values[to_stored] = row, col, values
    out_row[to_diag], out_col[to_diag], out_values[to_diag] = missing, missing, fill.expand(missing.numel(), -1)
    return out_row, out_col, out_values


def _packed_bias(bias: XLogSMaskBias | None, heads: int, packed: PackedGraphs, mask: Tensor, powers: Tensor | None,
                 log_powers: LogPairs | Sequence[Tensor] | None, log_spec: tuple | None) -> list[Tensor | None]:
    """Per attention group, the X-LogSMask bias ``[G, H, W, W]`` (0 on padding), or Nones without a bias."""
    if bias is None:
        return [None] * len(packed.groups)
    if log_powers is not None:
        _check_log_spec(bias, log_spec)
        if isinstance(log_powers, LogPairs):
            return _bias_from_pairs(bias, packed, log_powers)
        out: list[Tensor | None] = []
        for g in packed.groups:
            if len(g.sizes) == 1:  # a graph alone in its group (the largest ones): its own terms, no copy
                out.append(bias.from_log_powers(log_powers[int(g.graphs[0])]).unsqueeze(0))
                continue
            b = torch.zeros(len(g.sizes), heads, g.width, g.width, device=mask.device)
            for j, (gid, n) in enumerate(zip(g.graphs.tolist(), g.sizes)):
                b[j, :, :n, :n] = bias.from_log_powers(log_powers[gid])
            out.append(b)
        return out
    if powers is None:
        raise ValueError("use_bias=True needs `powers` [B, K, N, N] or per-graph `log_powers`")
    full = bias(DenseStructure(powers=powers, mask=mask))  # [B, H, N, N], 0 on padding
    return [full.index_select(0, g.graphs)[:, :, :g.width, :g.width] for g in packed.groups]


def _check_log_spec(bias: XLogSMaskBias, log_spec: tuple | None) -> None:
    """Refuse log-powers taken with another ``(eps, outside_support)`` than the model's term."""
    spec = (bias.eps, bias.outside_support)
    if log_spec is None or (float(log_spec[0]), str(log_spec[1])) != spec:
        raise ValueError(f"the batch's log-powers were taken with (eps, outside_support) = {log_spec}, "
                         f"the model needs {spec}")


def _bias_from_pairs(bias: XLogSMaskBias, packed: PackedGraphs, pairs: LogPairs,
                     term: Callable[[Tensor], Tensor] = lambda t: t) -> list[Tensor | None]:
    """Per attention group, its SDPA mask ``[G, H, W, W]``: the stored pairs' log values, the log value
    outside the stored support elsewhere, ``-inf`` at padded keys (0 at a padded query's real keys).

    The numbers :meth:`StructuralAttention.dense_mask` makes of the per-graph dense log-powers (the log of
    a zero is the fill, the diagonal's included), laid out in one buffer by one scatter of every pair.
    ``term``: an elementwise map (the attention's scaling) applied to the pairs and the fills before they
    are laid out, so the grid is never mapped as a whole. Pairs of the batch's pair set are left out.
    """
    vals = pairs.values
    device = vals.device
    k = vals.size(1)
    zero = torch.zeros(2, 2, k, dtype=vals.dtype, device=device)
    off = ~torch.eye(2, dtype=torch.bool, device=device)[:, :, None]
    # [H] per head: the log of a zero off the diagonal (-inf under 'hard') and on it; 0 on heads without a mask.
    logs = bias.from_log_powers(take_log(zero, bias.eps, bias.outside_support, off_diagonal=off), axis=2)
    fill_off, fill_diag = term(logs[0, 1]), term(logs[0, 0])
    groups = packed.groups
    if not groups:
        return []
    p_graph, p_row, p_col = pairs.graph, pairs.row, pairs.col
    if packed.pairs is not None:  # the dense groups' pairs only, taken before the (elementwise) maps
        dense = torch.ones(packed.num_graphs, dtype=torch.bool, device=device)
        dense[packed.pairs.graphs] = False
        sel = dense.index_select(0, p_graph).nonzero().squeeze(1)
        p_graph, p_row, p_col, vals = (t.index_select(0, sel) for t in (p_graph, p_row, p_col, vals))
    heads = term(bias.from_log_powers(vals, axis=1))  # [P, H]
    n_heads = heads.size(1)
    numels = [len(g.sizes) * n_heads * g.width * g.width for g in groups]
    # Per batch graph: the flat offset of its [H, W, W] block in the buffer of contiguous [G, H, W, W] groups,
    # and its group's width W (graphs outside the groups keep 0: none of their pairs is left).
    base = torch.zeros(packed.num_graphs, dtype=torch.long, device=device)
    width = torch.zeros(packed.num_graphs, dtype=torch.long, device=device)
    flat = torch.empty(sum(numels), dtype=heads.dtype, device=device)
    out: list[Tensor | None] = []
    pad = heads.new_full((), float("-inf"))
    at = 0
    for g, numel in zip(groups, numels):
        block = n_heads * g.width * g.width
        base[g.graphs] = at + torch.arange(len(g.sizes), device=device) * block
        width[g.graphs] = g.width
        b = flat[at:at + numel].view(len(g.sizes), n_heads, g.width, g.width)
        at += numel
        b.copy_(fill_off.view(1, -1, 1, 1).expand_as(b))
        if g.slots is not None:  # padding: 0 on a padded query's row, -inf at padded keys (as dense_mask adds)
            b.masked_fill_(~g.mask[:, None, :, None], 0.0)
            b.masked_fill_(~g.mask[:, None, None, :], float("-inf"))
        b.diagonal(0, 2, 3).copy_(torch.where(g.mask[:, None], fill_diag.view(1, -1, 1), pad))
        out.append(b)
    w = width.index_select(0, p_graph)
    # Flat position of (group, graph slot, head, row, col): the graph's block, then head, row and column.
    pos = base.index_select(0, p_graph) + p_row * w + p_col
    pos = pos[:, None] + torch.arange(n_heads, device=device) * (w * w)[:, None]
    flat.index_put_((pos.reshape(-1),), heads.reshape(-1))
    return out
