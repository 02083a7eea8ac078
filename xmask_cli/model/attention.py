"""Multi-head attention with an additive structural bias, dense and sparse.

Logits of head ``h`` for query ``i`` and key ``j`` (``d_h`` = head width):

- ``mask_scale='paper'`` (default, the paper's Eq. 9): ``(q_i·k_j + M_ij) / sqrt(d_h)``
- ``mask_scale='none'`` (ViT/GTLM convention):       ``q_i·k_j / sqrt(d_h) + M_ij``

Padded keys get ``-inf``. The dense path attends over all (real) pairs with
``scaled_dot_product_attention``; the sparse path attends over a given list
of pairs only. On the same pairs they compute the same numbers.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.utils import softmax as segment_softmax

MASK_SCALES = ("paper", "none")


class StructuralAttention(torch.nn.Module):
    """Multi-head attention whose logits take a per-head additive bias.

    Args:
        dim: model width ``D`` (divisible by ``num_heads``).
        num_heads: number of heads ``H``.
        dropout: dropout on the output projection.
        attn_dropout: dropout on the attention weights.
        mask_scale: ``'paper'`` scales the bias with ``q·k`` by ``1/sqrt(d_h)``;
            ``'none'`` adds it after scaling.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        dropout: float = 0.0,
        attn_dropout: float = 0.0,
        mask_scale: str = "paper",
    ):
        super().__init__()
        if num_heads < 1 or dim % num_heads:
            raise ValueError(f"dim {dim} must be a positive multiple of num_heads {num_heads}")
        if mask_scale not in MASK_SCALES:
            raise ValueError(f"mask_scale must be one of {MASK_SCALES}, got {mask_scale!r}")
        self.dim = dim
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.mask_scale = mask_scale
        self.attn_dropout = attn_dropout
        self.q = torch.nn.Linear(dim, dim)
        self.k = torch.nn.Linear(dim, dim)
        self.v = torch.nn.Linear(dim, dim)
        self.out = torch.nn.Linear(dim, dim)
        self.dropout = torch.nn.Dropout(dropout)

    def structural_term(self, bias: Tensor) -> Tensor:
        """The bias as it enters the logits (scaled by ``1/sqrt(d_h)`` under 'paper')."""
        if self.mask_scale == "paper":
            return bias / math.sqrt(self.head_dim)
        return bias

    def dense_mask(self, bias: Tensor | None, mask: Tensor | None, dtype: torch.dtype,
                   num_nodes: int | None = None) -> Tensor | None:
        """The additive SDPA mask: structural term plus ``-inf`` at padded keys; None if neither.

        Depends on the bias and padding only, so a stack of blocks with the same
        head width and ``mask_scale`` can build it once per forward and share it.
        """
        float_mask = None
        if bias is not None:
            # SDPA scales q·k by 1/sqrt(d_h) itself; fold the bias's scaling in here.
            float_mask = self.structural_term(bias).to(dtype)
        if mask is not None and not bool(mask.all()):
            B, N = mask.shape
            pad = torch.zeros(B, 1, 1, N, dtype=dtype, device=mask.device)
            pad = pad.masked_fill(~mask[:, None, None, :], float("-inf"))
            float_mask = pad if float_mask is None else float_mask + pad
        return float_mask

    def _heads(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Q, K, V split into heads: ``[..., N, H, d_h]``."""
        shape = (*x.shape[:-1], self.num_heads, self.head_dim)
        return self.q(x).view(shape), self.k(x).view(shape), self.v(x).view(shape)

    def forward_dense(
        self,
        x: Tensor,
        bias: Tensor | None = None,
        mask: Tensor | None = None,
        return_terms: bool = False,
        attn_mask: Tensor | None = None,
    ) -> Tensor | tuple[Tensor, dict[str, Tensor]]:
        """Full attention over a padded batch.

        Args:
            x: ``[B, N, D]`` node features.
            bias: ``[B, H, N, N]`` structural bias ``M`` or None (plain attention).
            mask: ``[B, N]`` bool, True for real nodes; None means all real.
            return_terms: also return the per-head terms (see below).
            attn_mask: :meth:`dense_mask` of ``(bias, mask)`` when the caller
                built it already (it is then used as is).

        Returns:
            ``[B, N, D]``, and with ``return_terms`` a dict of ``[B, H, N, N]``
            tensors ``energy`` (``q·k/sqrt(d_h)``), ``structural`` (the bias as
            it enters the logits), ``logits`` (their sum, ``-inf`` at padded
            keys), ``attention`` (softmax of ``logits``, before dropout), plus
            ``value`` and ``aggregate`` ``[B, H, N, d_h]`` (the per-head output
            before the output projection).
        """
        B, N, _ = x.shape
        q, k, v = (t.transpose(1, 2) for t in self._heads(x))  # [B, H, N, d_h]
        float_mask = attn_mask if attn_mask is not None else self.dense_mask(bias, mask, q.dtype)
        agg = F.scaled_dot_product_attention(
            q, k, v, attn_mask=float_mask, dropout_p=self.attn_dropout if self.training else 0.0
        )
        out = self.dropout(self.out(agg.transpose(1, 2).reshape(B, N, self.dim)))
        if not return_terms:
            return out
        energy = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        structural = torch.zeros_like(energy) if bias is None else self.structural_term(bias).to(q.dtype).expand_as(energy)
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

    def forward_sparse(
        self,
        x: Tensor,
        edge_index: Tensor,
        bias: Tensor | None = None,
        return_terms: bool = False,
    ) -> Tensor | tuple[Tensor, dict[str, Tensor]]:
        """Attention over the given pairs only (each query's support).

        Args:
            x: ``[N, D]`` node features.
            edge_index: ``[2, E]`` pairs, row = query ``i``, col = key ``j``.
            bias: ``[E, H]`` structural bias ``M`` at each pair, or None.
            return_terms: also return the per-head terms.

        Returns:
            ``[N, D]`` (zero before the output projection for a query with no
            pairs), and with ``return_terms`` a dict of ``[E, H]`` tensors
            ``energy``, ``structural``, ``logits``, ``attention`` plus
            ``value`` and ``aggregate`` ``[N, H, d_h]``.
        """
        return self.forward_pairs(x, x, edge_index, bias, return_terms)

    def forward_pairs(
        self,
        x_query: Tensor,
        x_key: Tensor,
        edge_index: Tensor,
        bias: Tensor | None = None,
        return_terms: bool = False,
    ) -> Tensor | tuple[Tensor, dict[str, Tensor]]:
        """Sparse attention of ``Nq`` queries over pairs into a separate set of ``Nk`` keys.

        :meth:`forward_sparse` is the case ``x_query is x_key``; the whole-graph
        query-batch path (:mod:`xmask_cli.engine.query`) attends a chunk of
        queries over all of their stored keys this way, so both run this code.

        Args:
            x_query: ``[Nq, D]`` features of the queries.
            x_key: ``[Nk, D]`` features of the keys (and values).
            edge_index: ``[2, E]`` pairs, row indexes ``x_query``, col indexes ``x_key``.
            bias: ``[E, H]`` structural bias at each pair, or None.
            return_terms: also return the per-head terms (as :meth:`forward_sparse`).

        Returns:
            ``[Nq, D]``, and with ``return_terms`` the terms (``value`` ``[Nk, H, d_h]``,
            ``aggregate`` ``[Nq, H, d_h]``).
        """
        n_query = x_query.size(0)
        row, col = edge_index
        shape = (self.num_heads, self.head_dim)
        q = self.q(x_query).view(-1, *shape)  # [Nq, H, d_h]
        k = self.k(x_key).view(-1, *shape)  # [Nk, H, d_h]
        v = self.v(x_key).view(-1, *shape)
        energy = (q[row] * k[col]).sum(-1) / math.sqrt(self.head_dim)  # [E, H]
        structural = torch.zeros_like(energy) if bias is None else self.structural_term(bias).to(energy.dtype)
        logits = energy + structural
        # Normalize over each query's pairs only.
        attention = segment_softmax(logits, index=row, num_nodes=n_query, dim=0)
        weights = F.dropout(attention, p=self.attn_dropout, training=self.training)
        agg = v.new_zeros(n_query, *shape).index_add_(0, row, weights.unsqueeze(-1) * v[col])  # [Nq, H, d_h]
        out = self.dropout(self.out(agg.reshape(n_query, self.dim)))
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

    def forward(
        self,
        x: Tensor,
        bias: Tensor | None = None,
        mask: Tensor | None = None,
        edge_index: Tensor | None = None,
        return_terms: bool = False,
        attn_mask: Tensor | None = None,
    ) -> Tensor | tuple[Tensor, dict[str, Tensor]]:
        """Sparse path when ``edge_index`` is given, dense path otherwise."""
        if edge_index is not None:
            if mask is not None:
                raise ValueError("the sparse path takes no padding mask")
            return self.forward_sparse(x, edge_index, bias, return_terms)
        return self.forward_dense(x, bias, mask, return_terms, attn_mask=attn_mask)
