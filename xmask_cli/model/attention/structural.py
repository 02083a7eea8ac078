"""Multi-head attention with an additive structural bias, dense and sparse.

Logits of head ``h`` for query ``i`` and key ``j`` (``d_h`` = head width):

- ``mask_scale='paper'`` (default, the paper's Eq. 9): ``(q_i·k_j + M_ij) / sqrt(d_h)``
- ``mask_scale='none'`` (ViT/GTLM convention):       ``q_i·k_j / sqrt(d_h) + M_ij``

A learned bias ``b_ij`` (``learned``: SPD, RRWP, magnetic, eigen) is added
after the scaling under either setting, as GTLM (paper 002, Eq. 1) adds it:
``... + b_ij``. ``mask_scale`` concerns the X-LogSMask term only.

Padded keys get ``-inf``. The dense path attends over all (real) pairs with
``scaled_dot_product_attention``; the sparse path attends over a given list
of pairs only, except for *plain heads* (``plain_heads``: heads with no
structural mask, ``k_h = 0`` or ``use_bias=False``), which attend over every
node of the domain through :func:`plain_attention`. A structural bias of
``-inf`` (outside a head's stored support, ``outside_support='hard'``, see
:mod:`~xmask_cli.model.logsmask`) gives the pair weight exactly 0 on either path,
so given the same structure both compute the same numbers to float rounding.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor

from xmask_cli.config import ModelSection

# The sparse path (attention over given pairs) lives in pairs.py, the parameter-free kernels in
# ops.py.
from xmask_cli.model.attention.csr import csr_attention, csr_plan
from xmask_cli.model.attention.pairs import PairAttention
from xmask_cli.model.packing import PackedGraphs, PairSet
from xmask_cli.model.tracing import exporting

MASK_SCALES = ("paper", "none")
#: How the heads' aggregates become the output: ``project`` (concatenate, output projection), ``concat``
#: (concatenate only, GAT's hidden layers) or ``mean`` over heads (an attention output layer).
COMBINES = ("project", "concat", "mean")


class StructuralAttention(PairAttention, torch.nn.Module):
    """Multi-head attention whose logits take a per-head additive bias.

    Args:
        dim: model width ``D`` (divisible by ``num_heads``).
        num_heads: number of heads ``H``.
        dropout: dropout on the output projection.
        attn_dropout: dropout on the attention weights.
        mask_scale: ``'paper'`` scales the bias with ``q·k`` by ``1/sqrt(d_h)``;
            ``'none'`` adds it after scaling.
        plain_heads: 0-based heads without a structural mask (``k_h = 0`` or
            ``use_bias=False``): on the sparse path they attend over every node
            of ``x`` (of its group), not over the given pairs. The dense path
            needs no such list (their bias is 0 over the whole grid).
        in_dim: width of the input ``x``; default ``dim``.
        combine: how the heads' aggregates ``[..., H, d_h]`` become the output:
            ``'project'`` (concatenated, then the output projection and dropout),
            ``'concat'`` (concatenated, then dropout: GAT's hidden layers) or
            ``'mean'`` (averaged over heads, ``[..., d_h]``, no projection: the
            attention output layer, whose heads each emit the outputs, as GAT's last layer).
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        dropout: float = 0.0,
        attn_dropout: float = 0.0,
        mask_scale: str = ModelSection.mask_scale,
        plain_heads: tuple[int, ...] = (),
        in_dim: int | None = None,
        combine: str = "project",
    ):
        super().__init__()
        if combine not in COMBINES:
            raise ValueError(f"combine must be one of {COMBINES}, got {combine!r}")
        if num_heads < 1 or dim % num_heads:
            raise ValueError(f"dim {dim} must be a positive multiple of num_heads {num_heads}")
        if mask_scale not in MASK_SCALES:
            raise ValueError(f"mask_scale must be one of {MASK_SCALES}, got {mask_scale!r}")
        self.dim = dim
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.mask_scale = mask_scale
        self.attn_dropout = attn_dropout
        self.plain_heads = tuple(sorted({int(h) for h in plain_heads}))
        if self.plain_heads and not (0 <= self.plain_heads[0] and self.plain_heads[-1] < num_heads):
            raise ValueError(f"plain_heads must be 0-based heads below {num_heads}, got {list(plain_heads)}")
        # Index and mask of the plain heads, built once and moved with the module; not saved in checkpoints.
        is_plain = torch.zeros(num_heads, dtype=torch.bool)
        is_plain[list(self.plain_heads)] = True
        self.register_buffer("_plain_idx", torch.tensor(self.plain_heads, dtype=torch.long), persistent=False)
        self.register_buffer("_is_plain", is_plain, persistent=False)
        self.combine = combine
        in_dim = dim if in_dim is None else int(in_dim)
        self.q = torch.nn.Linear(in_dim, dim)
        self.k = torch.nn.Linear(in_dim, dim)
        self.v = torch.nn.Linear(in_dim, dim)
        self.out = torch.nn.Linear(dim, dim) if combine == "project" else None
        self.dropout = torch.nn.Dropout(dropout)
        #: Kernel of the sparse path (:data:`~xmask_cli.model.attention.pairs.SPARSE_KERNELS`); tests and benchmarks compare the two.
        self.sparse_kernel = "csr"
        #: Implementation of the ``csr`` kernel (:data:`~xmask_cli.model.attention.csr.CSR_IMPLS`): ``auto`` runs
        #: the fused compiled kernels on the CPU and ``torch.sparse`` elsewhere; tests compare the two.
        self.csr_impl = "auto"
        # The last CSR pattern (pairs, finiteness, plan): full-graph training feeds the same pairs every step.
        self._csr_memo: dict | None = None
        # (bias, its version/dtype/heads, pairs, their version, plan, picked terms) of the last parameter-free bias.
        self._term_memo: tuple | None = None

    def _combine(self, agg: Tensor, drop: Callable[[Tensor, float, bool], Tensor] | None = None) -> Tensor:
        """The output of per-head aggregates ``[..., H, d_h]`` (see ``combine``); ``drop(h, p, training)``
        draws the output's dropout instead of the ``Dropout`` module."""
        if self.combine == "mean":
            return agg.mean(-2)
        joined = agg.reshape(*agg.shape[:-2], self.dim)
        out = joined if self.out is None else self.out(joined)
        return self.dropout(out) if drop is None else drop(out, self.dropout.p, self.training)

    def structural_term(self, bias: Tensor) -> Tensor:
        """The X-LogSMask bias as it enters the logits (scaled by ``1/sqrt(d_h)`` under 'paper')."""
        if self.mask_scale == "paper":
            return bias / math.sqrt(self.head_dim)
        return bias

    def _logit_term(self, bias: Tensor | None, learned: Tensor | None, dtype: torch.dtype,
                    scaled: bool = False) -> Tensor | None:
        """What the logits get beside ``q·k/sqrt(d_h)``: the scaled X-LogSMask term plus the learned bias as is.

        ``scaled``: ``bias`` is :meth:`structural_term` already (the packed path scales its pairs, not the grid).
        """
        term = None if bias is None else (bias if scaled else self.structural_term(bias)).to(dtype)
        if learned is not None:
            term = learned.to(dtype) if term is None else term + learned.to(dtype)
        return term

    def dense_mask(self, bias: Tensor | None, mask: Tensor | None, dtype: torch.dtype,
                   num_nodes: int | None = None, learned: Tensor | None = None, scaled: bool = False) -> Tensor | None:
        """The additive SDPA mask: structural term plus ``-inf`` at padded keys; None if neither.

        Depends on the bias and padding only, so a stack of blocks with the same
        head width and ``mask_scale`` can build it once per forward and share it.
        ``learned``: a learned bias, added unscaled. ``scaled``: ``bias`` is :meth:`structural_term`
        already (then, unpadded and of ``dtype``, it is the mask itself: no copy).
        """
        # SDPA scales q·k by 1/sqrt(d_h) itself; fold the bias's scaling in here.
        float_mask = self._logit_term(bias, learned, dtype, scaled)
        # All real: no padding term. An exported program cannot branch on the mask's values and always adds
        # it (0 where every node is real: the same numbers).
        if mask is not None and (exporting() or not bool(mask.all())):
            B, N = mask.shape
            # A graph without real nodes keeps its (padded, never read) keys open: an all -inf row is NaN.
            hide = ~mask & mask.any(1, keepdim=True)
            pad = torch.zeros(B, 1, 1, N, dtype=dtype, device=mask.device)
            pad = pad.masked_fill(hide[:, None, None, :], float("-inf"))
            float_mask = pad if float_mask is None else float_mask + pad
        return float_mask

    def split_heads(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Q, K, V of ``x`` split into heads, ``[..., N, H, d_h]`` (the dual-mode path attends with them too)."""
        shape = (*x.shape[:-1], self.num_heads, self.head_dim)
        return self.q(x).view(shape), self.k(x).view(shape), self.v(x).view(shape)

    def forward_dense(
        self,
        x: Tensor,
        bias: Tensor | None = None,
        mask: Tensor | None = None,
        return_terms: bool = False,
        attn_mask: Tensor | None = None,
        learned: Tensor | None = None,
        drop: Callable[[Tensor, float, bool], Tensor] | None = None,
    ) -> Tensor | tuple[Tensor, dict[str, Tensor]]:
        """Full attention over a padded batch.

        Args:
            x: ``[B, N, D]`` node features.
            bias: ``[B, H, N, N]`` structural bias ``M`` or None (plain attention).
            mask: ``[B, N]`` bool, True for real nodes; None means all real.
            return_terms: also return the per-head terms (see below).
            attn_mask: :meth:`dense_mask` of ``(bias, mask, learned)`` when the
                caller built it already (it is then used as is).
            learned: ``[B, H, N, N]`` learned bias (added unscaled), or None.
            drop: the output's dropout, ``drop(h, p, training)``; None: the ``Dropout`` module.

        Returns:
            ``[B, N, D]``, and with ``return_terms`` a dict of ``[B, H, N, N]``
            tensors ``energy`` (``q·k/sqrt(d_h)``), ``structural`` (the bias as
            it enters the logits), ``logits`` (their sum, ``-inf`` at padded
            keys), ``attention`` (softmax of ``logits``, before dropout), plus
            ``value`` and ``aggregate`` ``[B, H, N, d_h]`` (the per-head output
            before the output projection).
        """
        B, N, _ = x.shape
        q, k, v = (t.transpose(1, 2) for t in self.split_heads(x))  # [B, H, N, d_h]
        float_mask = attn_mask if attn_mask is not None else self.dense_mask(bias, mask, q.dtype, learned=learned)
        agg = F.scaled_dot_product_attention(
            q, k, v, attn_mask=float_mask, dropout_p=self.attn_dropout if self.training else 0.0
        )
        out = self._combine(agg.transpose(1, 2), drop)
        if not return_terms:
            return out
        energy = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        term = self._logit_term(bias, learned, q.dtype)
        structural = torch.zeros_like(energy) if term is None else term.expand_as(energy)
        logits = energy + structural
        if mask is not None:
            logits = logits.masked_fill(~mask[:, None, None, :], float("-inf"))
        terms = {
            "energy": energy,
            "structural": structural,
            "logits": logits,
            "attention": logits.softmax(dim=-1),
            "value": v,
            "aggregate": agg,
        }
        return out, terms

    def forward_packed(self, x: Tensor, packed: PackedGraphs, attn_masks: list[Tensor | None]) -> Tensor:
        """Attention of packed graph rows, block-diagonal over the graphs (:mod:`~xmask_cli.model.packing`).

        Args:
            x: ``[n, D]`` real rows of a padded batch (``packed.rows``).
            packed: the batch's packing and attention groups (and its pair set, attended over its pairs).
            attn_masks: per group, its :meth:`dense_mask` (``[G, H, W, W]``
                logit term, ``-inf`` at padded keys), or None.

        Returns:
            ``[n, D]``: the rows :meth:`forward_dense` gives the real nodes, dropout
            drawn over the real rows (:meth:`PackedGraphs.dropout`).
        """
        if self.combine == "mean":
            raise ValueError("the packed graph path has no attention output layer (combine='mean')")
        # Q, K and V in one product and one layout copy per group (the same numbers as three products).
        weight = torch.cat([self.q.weight, self.k.weight, self.v.weight])
        bias = torch.cat([self.q.bias, self.k.bias, self.v.bias])
        qkv = F.linear(x, weight, bias).view(x.size(0), 3, self.num_heads, self.head_dim)
        p = self.attn_dropout if self.training else 0.0
        # Each part's rows as a view of its span when the parts tile the rows (the backward then joins the
        # parts' gradients once instead of adding a zero-filled [n, 3, H, d_h] one per part).
        parts = packed.split(qkv)
        outs = []
        for i, (group, attn_mask) in enumerate(zip(packed.groups, attn_masks)):
            laid = group.lay_out(qkv, None if parts is None else parts[i])
            qg, kg, vg = laid.permute(2, 0, 3, 1, 4).unbind(0)  # each [G, H, W, d_h]
            agg = F.scaled_dot_product_attention(qg, kg, vg, attn_mask=attn_mask, dropout_p=p)
            outs.append(group.gather(agg.transpose(1, 2).reshape(agg.size(0), agg.size(2), self.dim)))
        if packed.pairs is not None:
            outs.append(self._pair_set_aggregate(qkv, packed.pairs, None if parts is None else parts[-1]))
        if parts is not None:
            agg = packed.join(outs)
        else:
            agg = (outs[0] if len(outs) == 1 else torch.cat(outs)) if outs else x.new_zeros(0, self.dim)
            if packed.inverse is not None:
                agg = agg.index_select(0, packed.inverse)
        # combine='concat' (a gat layer's) keeps the heads concatenated, as _combine does on the other paths
        return packed.dropout(agg if self.out is None else self.out(agg), self.dropout.p, self.training)

    def _pair_set_aggregate(self, qkv: Tensor, pairs: PairSet, rows: Tensor | None = None) -> Tensor:
        """``[m, D]`` heads' aggregates of a packed batch's :class:`~xmask_cli.model.packing.PairSet` rows: the
        masked heads over the set's pairs (the CSR kernel), plain heads over every node of their graph.
        ``rows``: the set's ``[m, 3, H, d_h]`` rows of ``qkv``, when the caller has them already."""
        if pairs.edge_index is None:
            raise ValueError("the pair set's pairs and bias are not set")
        q, k, v = (qkv.index_select(0, pairs.packed) if rows is None else rows).unbind(1)  # each [m, H, d_h]
        plain = bool(self.plain_heads)
        dtype = torch.promote_types(q.dtype, torch.float32)  # the CSR kernels' (see _csr_aggregate)
        heads = tuple(h for h in range(self.num_heads) if h not in self.plain_heads)
        agg = torch.zeros(*q.shape, dtype=dtype, device=q.device)
        if heads:
            # Every block of the forward attends the same pairs with the same term: one plan for them all.
            key = (heads, dtype, self.mask_scale, self.head_dim)
            if pairs.plan is None or pairs.plan[0] != key:
                term = cast(Tensor, self._logit_term(pairs.bias, None, dtype))
                plan = csr_plan(pairs.edge_index, q.size(0), q.size(0), heads, self.num_heads,
                                torch.isfinite(term if len(heads) == term.size(1) else term[:, list(heads)]))
                pairs.plan = (key, plan, term.reshape(-1).index_select(0, plan.pick))
            _, plan, picked = pairs.plan
            part = csr_attention(q, k, v, None, plan, heads, 1.0 / math.sqrt(self.head_dim),
                                 dropout_p=self.attn_dropout if self.training else 0.0, picked=picked,
                                 impl=self.csr_impl)
            agg = part if len(heads) == self.num_heads else agg.index_copy(
                1, torch.tensor(heads, dtype=torch.long, device=q.device), part)
        if plain:
            idx = self._plain_idx.to(q.device)
            plain_agg, _ = self._plain_agg(q, k, v, idx, pairs.node_graph, pairs.node_graph, False)
            agg = agg.index_copy(1, idx, plain_agg.to(agg.dtype))
        return agg.to(qkv.dtype).reshape(q.size(0), self.dim)

    def forward(
        self,
        x: Tensor,
        bias: Tensor | None = None,
        mask: Tensor | None = None,
        edge_index: Tensor | None = None,
        return_terms: bool = False,
        attn_mask: Tensor | None = None,
        groups: Tensor | None = None,
        complete: bool = False,
        learned: Tensor | None = None,
        drop: Callable[[Tensor, float, bool], Tensor] | None = None,
    ) -> Tensor | tuple[Tensor, dict[str, Tensor]]:
        """Sparse path when ``edge_index`` is given (``groups``, ``complete``: see :meth:`forward_sparse`), dense otherwise.

        ``learned``: a learned bias (``[E, H]`` or ``[B, H, N, N]``), added after the scaling.
        ``drop``: the dense path's output dropout (see :meth:`forward_dense`).
        """
        if edge_index is not None:
            if mask is not None or drop is not None:
                raise ValueError("the sparse path takes no padding mask and draws its own dropout")
            return self.forward_sparse(x, edge_index, bias, return_terms, groups=groups, complete=complete,
                                       learned=learned)
        return self.forward_dense(x, bias, mask, return_terms, attn_mask=attn_mask, learned=learned, drop=drop)
