"""The sparse path of :class:`~xmask_cli.model.attention.StructuralAttention`: attention over given pairs.

A mixin, so the one module keeps one class: each query attends over its own pairs (its support), with
the ``csr`` kernel (per-head CSR supports, :mod:`~xmask_cli.model.attention.csr`) or ``gather``
(per-pair gathers over the union of the heads' pairs, what ``return_terms`` runs); plain heads attend
over every node of the domain through :func:`~xmask_cli.model.attention.ops.plain_attention`. It reads
the module's projections ``q``, ``k``, ``v``, its head layout and dropout, and its ``_logit_term`` and
``_combine``.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal, cast, overload

import torch
import torch.nn.functional as F
from torch import Tensor

from xmask_cli.model.attention.csr import CsrPlan, csr_attention, csr_plan
from xmask_cli.model.attention.ops import plain_attention, segment_softmax
from xmask_cli.model.attention.sparse_linear import sparse_linears

__all__ = ["SPARSE_KERNELS", "PairAttention"]

#: Kernels of the sparse path: ``csr`` (per-head CSR supports, :mod:`~xmask_cli.model.attention.csr`)
#: and ``gather`` (per-pair ``[E, H, d_h]`` gathers over the union, as PyG's ``TransformerConv``;
#: what ``return_terms`` always runs, since its terms live on the union pairs).
SPARSE_KERNELS = ("csr", "gather")


class PairAttention:
    """``forward_sparse`` and ``forward_pairs`` of :class:`~xmask_cli.model.attention.StructuralAttention`."""

    # Set by StructuralAttention.__init__ (declared here for the type checker).
    num_heads: int
    head_dim: int
    attn_dropout: float
    plain_heads: tuple[int, ...]
    sparse_kernel: str
    csr_impl: str
    training: bool
    q: torch.nn.Linear
    k: torch.nn.Linear
    v: torch.nn.Linear
    _plain_idx: Tensor
    _is_plain: Tensor
    _csr_memo: dict[str, Any] | None
    _term_memo: tuple[Any, ...] | None

    if TYPE_CHECKING:
        def _combine(self, agg: Tensor) -> Tensor: ...

        def _logit_term(self, bias: Tensor | None, learned: Tensor | None, dtype: torch.dtype) -> Tensor | None: ...

    @overload
    def forward_sparse(self, x: Tensor, edge_index: Tensor, bias: Tensor | None = ...,
                       return_terms: Literal[False] = ..., groups: Tensor | None = ..., complete: bool = ...,
                       learned: Tensor | None = ...) -> Tensor: ...

    @overload
    def forward_sparse(self, x: Tensor, edge_index: Tensor, bias: Tensor | None = ..., return_terms: bool = ...,
                       groups: Tensor | None = ..., complete: bool = ...,
                       learned: Tensor | None = ...) -> Tensor | tuple[Tensor, dict[str, Tensor]]: ...

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
        shape = (self.num_heads, self.head_dim)
        if x_query.is_sparse and x_key is x_query:  # bag-of-words features: one CSR product for q, k and v
            maps = (self.q, self.k, self.v)
            q, k, v = (t.view(-1, *shape) for t in sparse_linears(x_query, [m.weight for m in maps],
                                                                  [m.bias for m in maps]))
        else:
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
                kp, vp = self._plain_kv(k, v, x_key, plain_keys)
                idx = self._plain_idx.to(q.device)
                plain_agg, _ = self._plain_agg(q, kp, vp, idx, query_groups, key_groups, False)
                agg = agg.index_copy(1, idx, plain_agg.to(agg.dtype))
            return self._combine(agg)
        agg, terms = self._gather_aggregate(q, k, v, edge_index, bias, learned)
        if plain:
            kp, vp = self._plain_kv(k, v, x_key, plain_keys)
            row = edge_index[0]
            agg, terms["attention"] = self._plain(q, kp, vp, agg, terms["attention"], terms["energy"], row,
                                                  query_groups, key_groups, return_terms)
        out = self._combine(agg)
        if not return_terms:
            return out
        return out, {**terms, "aggregate": agg}

    def _gather_aggregate(self, q: Tensor, k: Tensor, v: Tensor, edge_index: Tensor, bias: Tensor | None,
                          learned: Tensor | None) -> tuple[Tensor, dict[str, Tensor]]:
        """``[Nq, H, d_h]`` aggregate over the pairs by per-pair gathers, and the ``[E, H]`` terms and values.

        The terms (``energy``, ``structural``, ``logits``, ``attention``, ``value``) are what
        ``return_terms`` returns; plain heads are later replaced over every node (:meth:`_plain`).
        """
        n_query = q.size(0)
        row, col = edge_index
        energy = (q[row] * k[col]).sum(-1) / math.sqrt(self.head_dim)  # [E, H]
        term = self._logit_term(bias, learned, energy.dtype)
        structural = torch.zeros_like(energy) if term is None else term
        logits = energy + structural
        # Normalize over each query's pairs only (-inf pairs weigh 0, an all -inf row gives 0, not NaN).
        attention = segment_softmax(logits, index=row, num_nodes=n_query)
        weights = F.dropout(attention, p=self.attn_dropout, training=self.training)
        agg = v.new_zeros(n_query, *q.shape[1:]).index_add_(0, row, weights.unsqueeze(-1) * v[col])  # [Nq, H, d_h]
        return agg, {"energy": energy, "structural": structural, "logits": logits, "attention": attention, "value": v}

    def _plain_kv(self, k: Tensor, v: Tensor, x_key: Tensor, plain_keys: Tensor | None) -> tuple[Tensor, Tensor]:
        """K, V of the plain heads' keys: ``k, v`` themselves when the domain is the keys (or not given)."""
        if plain_keys is None or plain_keys is x_key:
            return k, v
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
                             dropout_p=self.attn_dropout if self.training else 0.0, picked=picked,
                             impl=self.csr_impl)
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
        if with_lse:
            return cast(tuple[Tensor, Tensor], res)
        return cast(Tensor, res), None

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
