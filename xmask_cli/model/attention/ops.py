"""Attention kernels with no parameters: a per-query softmax over pairs, unmasked chunked attention.

:func:`segment_softmax` normalises the logits of a sparse pair list per query
(the sparse and dual-mode paths); :func:`plain_attention` is what a plain head
(``k_h = 0`` or ``use_bias=False``) computes over every key on paths that do
not hold the whole ``N x N`` grid. :class:`~xmask_cli.model.attention.StructuralAttention`
calls both; :mod:`xmask_cli.model.attention.structural` re-exports them.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint
from torch_geometric.utils import scatter

from xmask_cli.model.tracing import exporting

#: Floats of ``[heads, queries, keys]`` logits :func:`plain_attention` holds at once (~64 MB in float32).
PLAIN_CHUNK_FLOATS = 1 << 24


def feature_dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """Dropout of node features ``x``, dense or a sparse COO tensor.

    A sparse tensor keeps its pattern and drops its stored values only: a
    zero stays zero under dense dropout too, so the two draw from the same
    distribution (not the same random stream) at a fraction of the cost on
    bag-of-words features.
    """
    if p <= 0 or not training:
        return x
    if not x.is_sparse:
        return F.dropout(x, p, True)
    x = x.coalesce()
    values = F.dropout(x.values(), p, True)
    # Same (coalesced) indices: marked so, or every reader would sort them again.
    return torch.sparse_coo_tensor(x.indices(), values, x.shape, check_invariants=False, is_coalesced=True)


def segment_softmax(logits: Tensor, index: Tensor, num_nodes: int) -> Tensor:
    """Softmax of ``logits [E, H]`` over the pairs of each query (``index [E]``).

    Pairs at ``-inf`` get weight exactly 0; a query whose pairs are all
    ``-inf`` (or that has none) gets all-zero weights instead of NaN, in the
    forward and the backward.
    """
    if logits.numel() == 0:
        return logits
    top = scatter(logits.detach(), index, dim=0, dim_size=num_nodes, reduce="max")
    top = torch.where(torch.isfinite(top), top, torch.zeros((), dtype=top.dtype, device=top.device))
    e = (logits - top[index]).exp()
    total = scatter(e, index, dim=0, dim_size=num_nodes, reduce="sum")
    # A row of zeros divides by the smallest normal number, not by 0.
    return e / total[index].clamp_min(torch.finfo(e.dtype).tiny)


def plain_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    query_groups: Tensor | None = None,
    key_groups: Tensor | None = None,
    dropout_p: float = 0.0,
    chunk_floats: int = PLAIN_CHUNK_FLOATS,
    return_lse: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Unmasked attention of the given queries over every key: ``softmax_j(q_i·k_j / sqrt(d_h)) v_j``.

    What a plain head (``k_h = 0``, or ``use_bias=False``) computes on paths
    that do not hold the whole ``N x N`` grid (sparse full graph, partitions,
    query batches). Queries are taken in chunks of about ``chunk_floats``
    logits; with gradients each chunk is checkpointed (recomputed in the
    backward), so memory stays ``O(chunk_floats + N·H·d_h)`` whatever ``N``.

    Args:
        q: ``[Nq, H, d_h]`` queries.
        k, v: ``[Nk, H, d_h]`` keys and values (every key of the domain).
        query_groups, key_groups: ``[Nq]`` / ``[Nk]`` graph id of each query /
            key, for a disjoint union of graphs (a query attends to the keys of
            its own group only); None: one domain.
        dropout_p: dropout on the attention weights (pass 0 in evaluation).
        chunk_floats: logits per chunk (``H·rows·Nk``).
        return_lse: also return ``[Nq, H]`` ``log Σ_j exp(q_i·k_j / sqrt(d_h))``
            (to recover the weight of any pair: ``exp(logit - lse)``).

    Returns:
        ``[Nq, H, d_h]``, a query without keys gives 0; with ``return_lse``
        also the log-sum-exp (``-inf`` for such a query).
    """
    nq, H, d = q.shape
    nk = k.size(0)
    if (query_groups is None) != (key_groups is None):
        raise ValueError("give both query_groups and key_groups, or neither")
    scale = 1.0 / math.sqrt(d)

    def rows(a: int, b: int) -> tuple[Tensor, Tensor]:
        s = torch.einsum("qhd,khd->hqk", q[a:b], k) * scale  # [H, rows, Nk]
        if query_groups is not None and key_groups is not None:  # both or neither (checked above)
            s = s.masked_fill((query_groups[a:b, None] != key_groups[None, :])[None], float("-inf"))
        lse = torch.logsumexp(s, dim=-1)  # [H, rows]
        safe = torch.where(torch.isfinite(lse), lse, torch.zeros((), dtype=lse.dtype, device=lse.device))
        w = (s - safe.unsqueeze(-1)).exp()
        if dropout_p > 0:
            w = F.dropout(w, p=dropout_p, training=True)
        return torch.einsum("hqk,khd->qhd", w, v), lse.t()

    if nq == 0 or nk == 0:
        out = q.new_zeros(nq, H, v.size(-1))
        lse = q.new_full((nq, H), float("-inf"))
        return (out, lse) if return_lse else out
    step = max(1, chunk_floats // max(H * nk, 1))
    # A program being exported has symbolic sizes, on which no chunk count can be chosen: one chunk.
    if exporting() or step >= nq:
        out, lse = rows(0, nq)
    else:
        outs, lses = [], []
        for a in range(0, nq, step):
            b = min(nq, a + step)
            if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
                o, l = checkpoint(rows, a, b, use_reentrant=False)
            else:
                o, l = rows(a, b)
            outs.append(o)
            lses.append(l)
        out, lse = torch.cat(outs), torch.cat(lses)
    return (out, lse) if return_lse else out


def complete_pairs(edge_index: Tensor, num_nodes: int, batch: Tensor | None) -> bool:
    """Whether ``edge_index`` (unique pairs, none across graphs) holds every pair of each graph: ``Σ n_g^2`` of them.

    A program being exported answers False whatever the sizes (it cannot branch on them): the general form then
    runs, which gives the complete form's numbers wherever
    :func:`~xmask_cli.model.model_config.sparse_refusal` lets a model run sparse.
    """
    if exporting():
        return False
    if batch is None:
        total = num_nodes * num_nodes
    else:
        total = int((torch.bincount(batch) ** 2).sum()) if batch.numel() else 0
    return edge_index.size(1) == total
