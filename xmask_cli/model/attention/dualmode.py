"""Dual-mode (dense/sparse) attention over a sparse attention mask.

The mask is a list of pairs ``edge_index [2, E]`` (row = query, col = key),
as :meth:`StructuralAttention.forward_sparse` takes it. The queries are split
into disjoint *regions*; a region's keys are the union of its queries' keys,
so every query's softmax lies entirely inside one region and regions never
need a shared normalisation. Each region is then computed the cheaper way:

- **dense**: one ``[1, H, |Q|, |K|]`` ``scaled_dot_product_attention`` with a
  float mask holding the structural term at allowed pairs and ``-inf``
  elsewhere;
- **sparse**: gather the region's pairs and normalise with a segment softmax.

Rule (M3Dphormer, dual-mode attention): a region with ``nnz`` pairs, ``|Q|``
queries and ``|K|`` keys has density ``nnz / (|Q|·|K|)`` and is dense iff
``density >= threshold`` (and it has at least one pair and no duplicate pair,
which a dense mask cannot express).

Default threshold, measured (``benchmarks/dualmode_memory.py``, CPU, forward +
backward, one thread): the sparse path peaks at about ``6·d_h`` floats per pair
and head (96 at ``d_h = 16``: the gathered q/k/v rows, their products and
their gradients), the dense path at about ``c = 3`` floats per (query, key)
cell and head (logits, float mask, softmax). Dense is therefore cheaper iff
``density >= c / (6·d_h)`` = ``0.5 / d_h`` (:func:`auto_threshold`: 0.031 for
``d_h = 16``, 0.0625 for ``d_h = 8``). The first-principles count (sparse
``2·d_h + 2`` floats per pair: gathered key and value, logit, weight) would
give ``3 / (2·d_h + 2)`` = 0.088; it ignores the backward's copies, and on
Amazon Computers it left 7 of 138 METIS regions dense and cut the peak to 74 %
of the sparse path's, against 124 regions and 41 % at the measured 0.03.
Pass a float ``threshold`` to override.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from xmask_cli.model.attention.ops import segment_softmax
from xmask_cli.model.attention.structural import StructuralAttention

MODES = ("sparse", "dense", "dual")
DENSE_CELL_FLOATS = 3  # c: logits + float mask + softmax per (query, key, head)
PAIR_FLOATS_PER_DIM = 6  # measured sparse peak per (pair, head), in units of d_h (forward + backward)


@dataclass
class Region:
    """One block of the mask: a set of queries and the keys they attend to.

    Attributes:
        queries: ``[q]`` global ids of the region's queries (sorted).
        keys: ``[k]`` global ids of the keys any of them attends to (sorted).
        dense: compute with a dense SDPA (True) or a segment softmax (False).
        pairs: ``[nnz]`` positions of the region's pairs in ``edge_index``
            (to gather the bias ``[E, H]`` at them).
        rows: ``[nnz]`` index of each pair's query in ``queries``.
        cols: ``[nnz]`` index of each pair's key in ``keys``.
        density: ``nnz / (q·k)`` (0 for a region without pairs).
    """

    queries: Tensor
    keys: Tensor
    dense: bool
    pairs: Tensor
    rows: Tensor
    cols: Tensor
    density: float

    @property
    def nnz(self) -> int:
        return int(self.pairs.numel())


def auto_threshold(head_dim: int, cell_floats: float = DENSE_CELL_FLOATS,
                   pair_floats: float | None = None) -> float:
    """Density above which a dense region needs less memory than a sparse one.

    ``cell_floats / pair_floats`` with the measured ``pair_floats = 6·d_h`` by
    default (see the module docstring); both are overridable to recalibrate
    on other hardware (``benchmarks/dualmode_memory.py``).
    """
    if head_dim < 1:
        raise ValueError(f"head_dim must be positive, got {head_dim}")
    return cell_floats / (PAIR_FLOATS_PER_DIM * head_dim if pair_floats is None else pair_floats)


def _resolve_threshold(threshold: float | str, head_dim: int | None) -> float:
    if threshold == "auto":
        if head_dim is None:
            raise ValueError("threshold='auto' needs head_dim")
        return auto_threshold(head_dim)
    if isinstance(threshold, str):
        raise ValueError(f"threshold must be a float or 'auto', got {threshold!r}")
    return float(threshold)


def _make_region(queries: Tensor, pairs: Tensor, rows: Tensor, col: Tensor, threshold: float,
                 force: bool | None = None) -> Region:
    """Region over ``queries`` with the given pairs (``rows`` local, ``col`` global key ids)."""
    keys, cols = torch.unique(col, sorted=True, return_inverse=True)
    nq, nk, nnz = queries.numel(), keys.numel(), pairs.numel()
    density = nnz / (nq * nk) if nnz else 0.0
    if force is not None:
        dense = force
    else:
        dense = nnz > 0 and density >= threshold
    if dense and nnz:
        # A dense mask holds one value per cell: duplicate pairs must stay sparse.
        if torch.unique(rows * nk + cols).numel() < nnz:
            if force:
                raise ValueError("a dense region cannot hold duplicate pairs")
            dense = False
    return Region(queries=queries, keys=keys, dense=bool(dense), pairs=pairs, rows=rows, cols=cols,
                  density=float(density))


def whole_region(edge_index: Tensor, num_nodes: int, dense: bool) -> Region:
    """One region over all queries; a dense one takes every node as a key (the plain dense path)."""
    device = edge_index.device
    queries = torch.arange(num_nodes, device=device)
    row, col = edge_index
    pairs = torch.arange(edge_index.size(1), device=device)
    if dense:
        keys = torch.arange(num_nodes, device=device)
        nnz = pairs.numel()
        if torch.unique(row * num_nodes + col).numel() < nnz:
            raise ValueError("a dense region cannot hold duplicate pairs")
        return Region(queries, keys, True, pairs, row.clone(), col.clone(),
                      nnz / max(num_nodes * num_nodes, 1))
    return _make_region(queries, pairs, row.clone(), col, 0.0, force=False)


def plan_regions(
    edge_index: Tensor,
    num_nodes: int,
    groups: Tensor | None = None,
    max_region_queries: int = 256,
    threshold: float | str = "auto",
    *,
    head_dim: int | None = None,
) -> list[Region]:
    """Split the queries into regions and pick dense or sparse for each.

    Query sets: with ``groups`` (e.g. the METIS part of each node) the nodes of
    each group, in node order, cut into chunks of at most ``max_region_queries``
    (so a dense block stays bounded); without, contiguous chunks of
    ``max_region_queries`` node ids. Every node is a query of exactly one region
    (also nodes without pairs). A region's keys are the union of its queries'
    keys. Dense iff ``nnz / (|Q|·|K|) >= threshold`` (and the region has pairs
    and no duplicates); ``threshold='auto'`` is :func:`auto_threshold` of
    ``head_dim`` (see the module docstring for the memory model).

    Args:
        edge_index: ``[2, E]`` pairs, row = query, col = key.
        num_nodes: ``N``.
        groups: ``[N]`` integer group per node, or None.
        max_region_queries: most queries per region (>= 1).
        threshold: density threshold, or ``'auto'``.
        head_dim: head width ``d_h``, needed for ``'auto'``.
    """
    if max_region_queries < 1:
        raise ValueError(f"max_region_queries must be >= 1, got {max_region_queries}")
    thr = _resolve_threshold(threshold, head_dim)
    device = edge_index.device
    nodes = torch.arange(num_nodes, device=device)
    if groups is None:
        order = nodes
        rid_sorted = nodes // max_region_queries
    else:
        groups = groups.to(device=device, dtype=torch.long)
        if groups.shape != (num_nodes,):
            raise ValueError(f"groups must have shape [{num_nodes}], got {tuple(groups.shape)}")
        g_sorted, order = torch.sort(groups, stable=True)  # stable: node order inside a group
        new_group = torch.ones(num_nodes, dtype=torch.bool, device=device)
        new_group[1:] = g_sorted[1:] != g_sorted[:-1]
        group_start = torch.cummax(torch.where(new_group, nodes, torch.zeros_like(nodes)), 0).values
        chunk = (nodes - group_start) // max_region_queries
        new_region = new_group.clone()
        new_region[1:] |= chunk[1:] != chunk[:-1]
        rid_sorted = torch.cumsum(new_region.long(), 0) - 1
    if num_nodes == 0:
        return []
    num_regions = int(rid_sorted[-1]) + 1
    counts = torch.bincount(rid_sorted, minlength=num_regions)
    starts = torch.cumsum(counts, 0) - counts
    rid = torch.empty_like(rid_sorted)
    rid[order] = rid_sorted
    local = torch.empty_like(rid_sorted)  # each node's index among its region's queries
    local[order] = nodes - starts[rid_sorted]

    row, col = edge_index
    pair_region = rid[row]
    pair_order = torch.sort(pair_region, stable=True).indices
    pair_counts = torch.bincount(pair_region, minlength=num_regions).tolist()
    query_sets = torch.split(order, counts.tolist())
    regions = []
    for queries, pairs in zip(query_sets, torch.split(pair_order, pair_counts)):
        regions.append(_make_region(queries, pairs, local[row[pairs]], col[pairs], thr))
    return regions


def _dense_region(q: Tensor, k: Tensor, v: Tensor, structural: Tensor | None, region: Region,
                  dropout_p: float) -> Tensor:
    """``[|Q|, H, d_h]`` aggregate of a dense region via SDPA (``q [|Q|,H,d_h]``, ``k, v [|K|,H,d_h]``)."""
    nq, H = q.shape[:2]
    nk = k.size(0)
    mask = q.new_full((H, nq * nk), float("-inf"))
    cells = region.rows * nk + region.cols
    # SDPA scales q·k itself; the structural term carries the bias's own scaling.
    mask[:, cells] = 0.0 if structural is None else structural.t()
    mask = mask.view(H, nq, nk)
    # Rows (per head) with no finite cell: no pair, or every pair outside that head's support (-inf).
    has_pair = torch.isfinite(mask).any(-1)  # [H, |Q|]
    all_rows = bool(has_pair.all())
    if not all_rows:
        # An all -inf row gives NaN (also in the backward); open it and zero its output instead.
        mask = mask.masked_fill(~has_pair[:, :, None], 0.0)
    agg = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None],
                                         attn_mask=mask[None], dropout_p=dropout_p)
    agg = agg[0].transpose(0, 1)  # [|Q|, H, d_h]
    if not all_rows:
        agg = torch.where(has_pair.t()[:, :, None], agg, torch.zeros((), dtype=agg.dtype, device=agg.device))
    return agg


def _sparse_region(attn: StructuralAttention, q: Tensor, k: Tensor, v: Tensor, structural: Tensor | None,
                   region: Region) -> Tensor:
    """``[|Q|, H, d_h]`` aggregate of a sparse region via segment softmax (as forward_sparse)."""
    nq = q.size(0)
    energy = (q[region.rows] * k[region.cols]).sum(-1) / math.sqrt(attn.head_dim)  # [nnz, H]
    logits = energy if structural is None else energy + structural
    attention = segment_softmax(logits, index=region.rows, num_nodes=nq)
    weights = F.dropout(attention, p=attn.attn_dropout, training=attn.training)
    agg = q.new_zeros(nq, attn.num_heads, attn.head_dim)
    return agg.index_add_(0, region.rows, weights.unsqueeze(-1) * v[region.cols])


def dual_attention(
    attn: StructuralAttention,
    x: Tensor,
    edge_index: Tensor,
    bias: Tensor | None = None,
    regions: list[Region] | None = None,
    mode: str = "dual",
    *,
    groups: Tensor | None = None,
    max_region_queries: int = 256,
    threshold: float | str = "auto",
) -> Tensor:
    """What ``attn.forward_sparse(x, edge_index, bias)`` computes, region by region.

    Same projections, scaling (``attn.mask_scale``), attention dropout (on the
    weights after the softmax, in training) and output dropout as
    :meth:`StructuralAttention.forward_sparse`; a query without pairs gives
    zero before the output projection.

    Args:
        attn: the attention module whose weights are used.
        x: ``[N, D]`` node features.
        edge_index: ``[2, E]`` pairs, row = query, col = key.
        bias: ``[E, H]`` structural bias at each pair, or None.
        regions: a partition of the queries from :func:`plan_regions` (mode
            ``'dual'``); planned here from ``groups``/``max_region_queries``/
            ``threshold`` when None.
        mode: ``'sparse'`` (one sparse region: ``forward_sparse`` itself),
            ``'dense'`` (one dense region over all nodes) or ``'dual'``.

    Returns:
        ``[N, D]``.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if mode == "sparse":
        return attn.forward_sparse(x, edge_index, bias)
    N = x.size(0)
    if mode == "dense":
        regions = [whole_region(edge_index, N, dense=True)]
    elif regions is None:
        regions = plan_regions(edge_index, N, groups, max_region_queries, threshold, head_dim=attn.head_dim)
    if N == 0:
        return attn.forward_sparse(x, edge_index, bias)
    if attn.out is None:
        raise ValueError("the dual-mode path has no attention output layer (combine='mean'): use mode 'sparse'")
    q, k, v = attn.split_heads(x)  # [N, H, d_h]
    dropout_p = attn.attn_dropout if attn.training else 0.0
    # Gather every region's rows once and split: per-region gathers from the full
    # tensors would cost O(N) each in the backward (a zero-filled full-size grad).
    order = torch.cat([r.queries for r in regions])
    if order.numel() != N:
        raise ValueError(f"regions cover {order.numel()} queries, expected a partition of {N}")
    key_ids = torch.cat([r.keys for r in regions])
    nq = [r.queries.numel() for r in regions]
    nk = [r.keys.numel() for r in regions]
    qs = q[order].split(nq)
    ks, vs = k[key_ids].split(nk), v[key_ids].split(nk)
    if bias is None:
        ss = [None] * len(regions)
    else:
        pairs = torch.cat([r.pairs for r in regions])
        ss = attn.structural_term(bias[pairs]).to(q.dtype).split([r.nnz for r in regions])
    parts = []
    for region, qr, kr, vr, sr in zip(regions, qs, ks, vs, ss):
        if region.dense:
            parts.append(_dense_region(qr, kr, vr, sr, region, dropout_p))
        else:
            parts.append(_sparse_region(attn, qr, kr, vr, sr, region))
    # Regions partition the queries: put the stacked region rows back in node order.
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(N, device=order.device)
    agg = torch.cat(parts)[inverse]
    return attn.dropout(attn.out(agg.reshape(N, attn.dim)))


def region_summary(regions: list[Region]) -> dict[str, float]:
    """Counts for logging: regions, dense regions, pairs and cells in dense ones."""
    dense = [r for r in regions if r.dense]
    return {
        "regions": len(regions),
        "dense_regions": len(dense),
        "pairs": sum(r.nnz for r in regions),
        "dense_pairs": sum(r.nnz for r in dense),
        "dense_cells": sum(r.queries.numel() * r.keys.numel() for r in dense),
    }
