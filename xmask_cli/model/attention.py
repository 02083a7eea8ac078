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

import torch
import torch.nn.functional as F
from torch import Tensor

from xmask_cli.config import ModelSection

# The parameter-free kernels (segment softmax, unmasked chunked attention) live in attention_ops.py.
from xmask_cli.model.attention_ops import plain_attention, segment_softmax
from xmask_cli.model.csr_attention import CsrPlan, csr_attention, csr_plan
from xmask_cli.model.packing import PackedGraphs

MASK_SCALES = ("paper", "none")
#: Kernels of the sparse path: ``csr`` (per-head CSR supports, :mod:`~xmask_cli.model.csr_attention`)
#: and ``gather`` (per-pair ``[E, H, d_h]`` gathers over the union, as PyG's ``TransformerConv``;
#: what ``return_terms`` always runs, since its terms live on the union pairs).
SPARSE_KERNELS = ("csr", "gather")
#: How the heads' aggregates become the output: ``project`` (concatenate, output projection), ``concat``
#: (concatenate only, GAT's hidden layers) or ``mean`` over heads (an attention output layer).
COMBINES = ("project", "concat", "mean")


class StructuralAttention(torch.nn.Module):
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
        #: Kernel of the sparse path (:data:`SPARSE_KERNELS`); tests and benchmarks compare the two.
        self.sparse_kernel = "csr"
        # The last CSR pattern (pairs, finiteness, plan): full-graph training feeds the same pairs every step.
        self._csr_memo: dict | None = None
        # (bias, its version/dtype/heads, pairs, their version, plan, picked terms) of the last parameter-free bias.
        self._term_memo: tuple | None = None

    def _combine(self, agg: Tensor) -> Tensor:
        """The output of per-head aggregates ``[..., H, d_h]`` (see ``combine``)."""
        if self.combine == "mean":
            return agg.mean(-2)
        joined = agg.reshape(*agg.shape[:-2], self.dim)
        return self.dropout(joined if self.out is None else self.out(joined))

    def structural_term(self, bias: Tensor) -> Tensor:
        """The X-LogSMask bias as it enters the logits (scaled by ``1/sqrt(d_h)`` under 'paper')."""
        if self.mask_scale == "paper":
            return bias / math.sqrt(self.head_dim)
        return bias

    def _logit_term(self, bias: Tensor | None, learned: Tensor | None, dtype: torch.dtype) -> Tensor | None:
        """What the logits get beside ``q·k/sqrt(d_h)``: the scaled X-LogSMask term plus the learned bias as is."""
        term = None if bias is None else self.structural_term(bias).to(dtype)
        if learned is not None:
            term = learned.to(dtype) if term is None else term + learned.to(dtype)
        return term

    def dense_mask(self, bias: Tensor | None, mask: Tensor | None, dtype: torch.dtype,
                   num_nodes: int | None = None, learned: Tensor | None = None) -> Tensor | None:
        """The additive SDPA mask: structural term plus ``-inf`` at padded keys; None if neither.

        Depends on the bias and padding only, so a stack of blocks with the same
        head width and ``mask_scale`` can build it once per forward and share it.
        ``learned``: a learned bias, added unscaled.
        """
        # SDPA scales q·k by 1/sqrt(d_h) itself; fold the bias's scaling in here.
        float_mask = self._logit_term(bias, learned, dtype)
        if mask is not None and not bool(mask.all()):
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
        out = self._combine(agg.transpose(1, 2))
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
            packed: the batch's packing and attention groups.
            attn_masks: per group, its :meth:`dense_mask` (``[G, H, W, W]``
                logit term, ``-inf`` at padded keys), or None.

        Returns:
            ``[n, D]``: the rows :meth:`forward_dense` gives the real nodes, dropout
            drawn as over the padded ``[B, N, D]`` output.
        """
        if self.out is None:
            raise ValueError("the packed graph path has no attention output layer (combine='mean')")
        # Q, K and V in one product and one layout copy per group (the same numbers as three products).
        weight = torch.cat([self.q.weight, self.k.weight, self.v.weight])
        bias = torch.cat([self.q.bias, self.k.bias, self.v.bias])
        qkv = F.linear(x, weight, bias).view(x.size(0), 3, self.num_heads, self.head_dim)
        p = self.attn_dropout if self.training else 0.0
        outs = []
        for group, attn_mask in zip(packed.groups, attn_masks):
            qg, kg, vg = group.lay_out(qkv).permute(2, 0, 3, 1, 4).unbind(0)  # each [G, H, W, d_h]
            agg = F.scaled_dot_product_attention(qg, kg, vg, attn_mask=attn_mask, dropout_p=p)
            outs.append(group.gather(agg.transpose(1, 2).reshape(agg.size(0), agg.size(2), self.dim)))
        agg = torch.cat(outs).index_select(0, packed.inverse) if outs else x.new_zeros(0, self.dim)
        return packed.dropout(self.out(agg), self.dropout.p, self.training)

    def forward_sparse(
        self,
        x: Tensor,
        edge_index: Tensor,
        bias: Tensor | None = None,
        return_terms: bool = False,
        groups: Tensor | None = None,
        complete: bool = False,
        learned: Tensor | None = None,
    ) -> Tensor | tuple[Tensor, dict[str, Tensor]]:
        """Attention over the given pairs (each query's support); plain heads over every node.

        Args:
            x: ``[N, D]`` node features.
            edge_index: ``[2, E]`` pairs, row = query ``i``, col = key ``j``.
            bias: ``[E, H]`` structural bias ``M`` at each pair (``-inf``: the
                pair is outside that head's support), or None.
            return_terms: also return the per-head terms.
            groups: ``[N]`` graph of each node when ``x`` is a disjoint union
                (plain heads attend inside their graph); None: one graph.
            complete: ``edge_index`` already holds every pair of the domain
                (each graph's ``n^2`` pairs once), so plain heads use it as it is.
            learned: ``[E, H]`` learned bias at each pair (added unscaled), or None.

        Returns:
            ``[N, D]`` (zero before the output projection for a query with no
            pairs), and with ``return_terms`` a dict of ``[E, H]`` tensors
            ``energy``, ``structural``, ``logits``, ``attention`` (for plain
            heads: their weight at the given pairs within the softmax over all
            nodes) plus ``value`` and ``aggregate`` ``[N, H, d_h]``.
        """
        return self.forward_pairs(x, x, edge_index, bias, return_terms, plain_keys=x, query_groups=groups,
                                  key_groups=groups, complete=complete, learned=learned)

    def forward_pairs(
        self,
        x_query: Tensor,
        x_key: Tensor,
        edge_index: Tensor,
        bias: Tensor | None = None,
        return_terms: bool = False,
        *,
        plain_keys: Tensor | None = None,
        query_groups: Tensor | None = None,
        key_groups: Tensor | None = None,
        complete: bool = False,
        learned: Tensor | None = None,
    ) -> Tensor | tuple[Tensor, dict[str, Tensor]]:
        """Sparse attention of ``Nq`` queries over pairs into a separate set of ``Nk`` keys.

        :meth:`forward_sparse` is the case ``x_query is x_key``; the whole-graph
        query-batch path (:mod:`xmask_cli.engine.query`) attends a chunk of
        queries over all of their stored keys this way, so both run this code.
        Plain heads (:attr:`plain_heads`) attend over ``plain_keys`` instead:
        every node of the domain.

        Args:
            x_query: ``[Nq, D]`` features of the queries.
            x_key: ``[Nk, D]`` features of the keys (and values).
            edge_index: ``[2, E]`` pairs, row indexes ``x_query``, col indexes ``x_key``.
            bias: ``[E, H]`` structural bias at each pair, or None.
            return_terms: also return the per-head terms (as :meth:`forward_sparse`).
            plain_keys: ``[Nd, D]`` features of every node of the domain, the
                keys of the plain heads; needed when the module has plain heads
                (unless ``complete``).
            query_groups, key_groups: ``[Nq]`` / ``[Nd]`` graph of each query /
                domain node, for a disjoint union (see :func:`plain_attention`).
            complete: the pairs are every pair of the domain: plain heads use them.
            learned: ``[E, H]`` learned bias at each pair (added unscaled), or None.

        Returns:
            ``[Nq, D]``, and with ``return_terms`` the terms (``value`` ``[Nk, H, d_h]``,
            ``aggregate`` ``[Nq, H, d_h]``).
        """
        n_query = x_query.size(0)
        shape = (self.num_heads, self.head_dim)
        q = self.q(x_query).view(-1, *shape)  # [Nq, H, d_h]
        k = self.k(x_key).view(-1, *shape)  # [Nk, H, d_h]
        v = self.v(x_key).view(-1, *shape)
        plain = self.plain_heads and not complete
        if plain and plain_keys is None:
            raise ValueError("this attention has plain heads (k_h = 0 or use_bias=False), which attend over "
                             "every node of the domain: pass plain_keys")
        if self.sparse_kernel not in SPARSE_KERNELS:
            raise ValueError(f"sparse_kernel must be one of {SPARSE_KERNELS}, got {self.sparse_kernel!r}")
        if not return_terms and self.sparse_kernel == "csr":
            agg = self._csr_aggregate(q, k, v, edge_index, bias, learned, masked_only=bool(plain))
            if plain:
                kp, vp = (k, v) if plain_keys is x_key else self._plain_kv(plain_keys)
                idx = self._plain_idx.to(q.device)
                plain_agg, _ = self._plain_agg(q, kp, vp, idx, query_groups, key_groups, False)
                agg = agg.index_copy(1, idx, plain_agg.to(agg.dtype))
            return self._combine(agg)
        row, col = edge_index
        energy = (q[row] * k[col]).sum(-1) / math.sqrt(self.head_dim)  # [E, H]
        term = self._logit_term(bias, learned, energy.dtype)
        structural = torch.zeros_like(energy) if term is None else term
        logits = energy + structural
        # Normalize over each query's pairs only (-inf pairs weigh 0, an all -inf row gives 0, not NaN).
        attention = segment_softmax(logits, index=row, num_nodes=n_query)
        weights = F.dropout(attention, p=self.attn_dropout, training=self.training)
        agg = v.new_zeros(n_query, *shape).index_add_(0, row, weights.unsqueeze(-1) * v[col])  # [Nq, H, d_h]
        if plain:
            kp, vp = (k, v) if plain_keys is x_key else self._plain_kv(plain_keys)
            agg, attention = self._plain(q, kp, vp, agg, attention, energy, row, query_groups, key_groups,
                                         return_terms)
        out = self._combine(agg)
        if not return_terms:
            return out
        terms = {
            "energy": energy,
            "structural": structural,
            "logits": logits,
            "attention": attention,
            "value": v,
            "aggregate": agg,
        }
        return out, terms

    def _plain_kv(self, plain_keys: Tensor) -> tuple[Tensor, Tensor]:
        shape = (self.num_heads, self.head_dim)
        return self.k(plain_keys).view(-1, *shape), self.v(plain_keys).view(-1, *shape)

    def _csr_aggregate(self, q: Tensor, k: Tensor, v: Tensor, edge_index: Tensor, bias: Tensor | None,
                       learned: Tensor | None, masked_only: bool) -> Tensor:
        """``[Nq, H, d_h]`` aggregate of the heads over their own supports (plain heads left 0 if ``masked_only``).

        Float32 (or wider) whatever the autocast dtype: the CSR kernels have no
        bfloat16, and ``log(eps)`` and small powers must not be flushed.
        """
        dtype = torch.promote_types(q.dtype, torch.float32)
        nq, H, d = q.shape
        heads = tuple(h for h in range(H) if not (masked_only and h in self.plain_heads))
        agg = torch.zeros(nq, H, d, dtype=dtype, device=q.device)
        if not heads or edge_index.size(1) == 0:
            return agg
        fixed = bias is not None and learned is None and not bias.requires_grad
        memo = self._term_memo
        if (fixed and memo is not None and memo[0] is bias and memo[1] == (bias._version, dtype, heads)
                and memo[2] is edge_index and memo[3] == edge_index._version):
            # The same parameter-free bias at the same pairs (full-graph training): its plan and picked terms.
            plan, picked = memo[4], memo[5]
        else:
            term = self._logit_term(bias, learned, dtype)
            plan = self._plan(edge_index, nq, k.size(0), heads, term)
            picked = None if term is None else term.to(dtype).reshape(-1).index_select(0, plan.pick)
            # Holding `bias` and `edge_index` keeps their ids from being reused while memoised.
            self._term_memo = ((bias, (bias._version, dtype, heads), edge_index, edge_index._version, plan, picked)
                               if fixed and bias is not None else None)
        part = csr_attention(q, k, v, None, plan, heads, 1.0 / math.sqrt(self.head_dim),
                             dropout_p=self.attn_dropout if self.training else 0.0, picked=picked)
        if len(heads) == H:
            return part
        return agg.index_copy(1, torch.tensor(heads, dtype=torch.long, device=q.device), part)

    def _plan(self, edge_index: Tensor, n_query: int, n_key: int, heads: tuple[int, ...],
              term: Tensor | None) -> CsrPlan:
        """The CSR plan of these pairs, reused while the pairs and the finite terms are the same."""
        if term is None:
            finite = None
        else:
            t = term.detach()
            if len(heads) < t.size(1):
                t = t.index_select(1, torch.tensor(heads, dtype=torch.long, device=t.device))
            finite = torch.isfinite(t)
        memo = self._csr_memo
        key = (n_query, n_key, heads)
        if memo is not None and memo["key"] == key and (memo["finite"] is None) == (finite is None):
            same_pairs = (memo["ref"] is edge_index and memo["version"] == edge_index._version) or (
                memo["pairs"].shape == edge_index.shape and memo["pairs"].device == edge_index.device
                and torch.equal(memo["pairs"], edge_index))
            if same_pairs and (finite is None or torch.equal(memo["finite"], finite)):
                return memo["plan"]
        plan = csr_plan(edge_index, n_query, n_key, heads, self.num_heads, finite)
        self._csr_memo = {"key": key, "ref": edge_index, "version": edge_index._version,
                          "pairs": edge_index.detach().clone(), "finite": finite, "plan": plan}
        return plan

    def _plain_agg(self, q: Tensor, k: Tensor, v: Tensor, idx: Tensor, query_groups: Tensor | None,
                   key_groups: Tensor | None, with_lse: bool) -> tuple[Tensor, Tensor | None]:
        """Plain heads ``idx``' aggregate ``[Nq, len(idx), d_h]`` over every domain node ``k, v`` (and the lse)."""
        res = plain_attention(q.index_select(1, idx), k.index_select(1, idx), v.index_select(1, idx),
                              query_groups=query_groups, key_groups=key_groups,
                              dropout_p=self.attn_dropout if self.training else 0.0, return_lse=with_lse)
        return res if with_lse else (res, None)

    def _plain(self, q: Tensor, k: Tensor, v: Tensor, agg: Tensor, attention: Tensor, energy: Tensor,
               row: Tensor, query_groups: Tensor | None, key_groups: Tensor | None,
               with_weights: bool) -> tuple[Tensor, Tensor]:
        """Plain heads' aggregate over every domain node ``k, v`` (replacing their pair-only one), and their pair weights."""
        idx, is_plain = self._plain_idx.to(q.device), self._is_plain.to(q.device)  # no-ops once on q's device
        plain_agg, lse = self._plain_agg(q, k, v, idx, query_groups, key_groups, with_weights)
        full = torch.zeros_like(agg).index_copy(1, idx, plain_agg)
        agg = torch.where(is_plain[None, :, None], full, agg)
        if lse is not None:
            pair_w = torch.zeros_like(attention).index_copy(1, idx, (energy.index_select(1, idx) - lse[row]).exp())
            attention = torch.where(is_plain[None, :], pair_w, attention)
        return agg, attention

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
    ) -> Tensor | tuple[Tensor, dict[str, Tensor]]:
        """Sparse path when ``edge_index`` is given (``groups``, ``complete``: see :meth:`forward_sparse`), dense otherwise.

        ``learned``: a learned bias (``[E, H]`` or ``[B, H, N, N]``), added after the scaling.
        """
        if edge_index is not None:
            if mask is not None:
                raise ValueError("the sparse path takes no padding mask")
            return self.forward_sparse(x, edge_index, bias, return_terms, groups=groups, complete=complete,
                                       learned=learned)
        return self.forward_dense(x, bias, mask, return_terms, attn_mask=attn_mask, learned=learned)
