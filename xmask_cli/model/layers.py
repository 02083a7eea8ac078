"""Transformer block: structural attention + feed-forward, with residuals."""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from xmask_cli.config import ModelSection
from xmask_cli.model.attention import StructuralAttention
from xmask_cli.model.experts import RoutedAttention
from xmask_cli.model.packing import PackedGraphs

NORMS = ("post", "pre")


class TransformerBlock(torch.nn.Module):
    """Attention and a two-layer FFN, each with a residual and a LayerNorm.

    ``norm='post'`` (default, as in the paper): ``x = LN(x + f(x))``;
    ``norm='pre'``: ``x = x + f(LN(x))``, steadier for deep stacks.

    Args:
        dim: model width ``D``.
        num_heads: attention heads.
        ffn_mult: hidden width of the FFN as a multiple of ``dim``.
        dropout: dropout on the attention output and inside the FFN.
        attn_dropout: dropout on the attention weights.
        norm: ``'post'`` or ``'pre'``.
        mask_scale: see :class:`StructuralAttention`.
        experts: M3Dphormer attention experts (``local``, ``cluster``, ``global``);
            empty (default): one attention. With experts the block attends with
            a :class:`~xmask_cli.model.experts.RoutedAttention` over token masks.
        routing: the experts' router (``bilevel``, ``flat``, ``none``).
        plain_heads: 0-based heads without a structural mask; see
            :class:`StructuralAttention` (ignored with experts, whose token
            masks are their domains).
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        ffn_mult: int = ModelSection.ffn_mult,
        dropout: float = 0.0,
        attn_dropout: float = 0.0,
        norm: str = ModelSection.norm,
        mask_scale: str = ModelSection.mask_scale,
        experts: tuple[str, ...] = (),
        routing: str = ModelSection.routing,
        plain_heads: tuple[int, ...] = (),
    ):
        super().__init__()
        if norm not in NORMS:
            raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")
        self.norm = norm
        self.attn: StructuralAttention | RoutedAttention
        if experts:
            self.attn = RoutedAttention(dim, num_heads, tuple(experts), dropout, attn_dropout, mask_scale, routing)
        else:
            self.attn = StructuralAttention(dim, num_heads, dropout, attn_dropout, mask_scale, plain_heads)
        self.ffn = torch.nn.Sequential(
            torch.nn.Linear(dim, ffn_mult * dim),
            torch.nn.ReLU(),
            torch.nn.Dropout(dropout),
            torch.nn.Linear(ffn_mult * dim, dim),
            torch.nn.Dropout(dropout),
        )
        self.norm1 = torch.nn.LayerNorm(dim)
        self.norm2 = torch.nn.LayerNorm(dim)

    def forward(
        self,
        x: Tensor,
        bias: Tensor | None = None,
        mask: Tensor | None = None,
        return_terms: bool = False,
        routed: dict | None = None,
        **attention: Any,
    ) -> Tensor | tuple[Tensor, dict[str, Tensor]]:
        """One block; sparse attention when ``edge_index`` is given.

        Args:
            x: ``[B, N, D]`` (dense) or ``[N, D]`` (sparse).
            bias: ``[B, H, N, N]`` (dense) or ``[E, H]`` (sparse), or None.
            mask: ``[B, N]`` bool, True for real nodes (dense only).
            return_terms: also return the attention's per-head terms of this
                forward (see :meth:`StructuralAttention.forward_dense` /
                :meth:`~StructuralAttention.forward_sparse`).
            routed: with experts, the keywords of :meth:`RoutedAttention.forward`
                (``pairs``, ``bias``, ``mode``, ``regions``); ``x`` is then ``[T, D]`` tokens.
            **attention: the other keywords of :meth:`StructuralAttention.forward`, passed on as they are:
                ``edge_index`` (``[2, E]`` attended pairs, row = query: the sparse path),
                ``attn_mask`` (the attention's ``dense_mask(bias, mask)``, built once per forward by the
                caller and shared by every block; it is then what the attention uses, and ``bias`` only
                feeds the recorded ``structural`` term), ``groups`` (``[N]`` graph of each node of a sparse
                disjoint union), ``complete`` (the sparse pairs are every pair of the domain) and
                ``learned`` (a learned bias shaped like ``bias``, added after the ``1/sqrt(d_h)`` scaling).

        Returns:
            Tensor shaped like ``x``. Padded positions hold finite values
            that no real node reads. With ``return_terms``: ``(out, terms)``.
        """
        terms: dict[str, Tensor] = {}

        def attend(h: Tensor) -> Tensor:
            if isinstance(self.attn, RoutedAttention):
                if routed is None or return_terms:
                    raise ValueError("an expert block needs `routed` (pairs per mask) and records no terms")
                return self.attn(h, **routed)
            if not return_terms:
                return self.attn(h, bias=bias, mask=mask, **attention)
            out, recorded = self.attn(h, bias=bias, mask=mask, return_terms=True, **attention)
            terms.update(recorded)
            return out

        if self.norm == "post":
            x = self.norm1(x + attend(x))
            x = self.norm2(x + self.ffn(x))
        else:
            x = x + attend(self.norm1(x))
            x = x + self.ffn(self.norm2(x))
        return (x, terms) if return_terms else x

    def forward_packed(self, x: Tensor, packed: PackedGraphs, attn_masks: list[Tensor | None]) -> Tensor:
        """One block on the packed real rows ``[n, D]`` of a padded batch (:mod:`~xmask_cli.model.packing`).

        The rows :meth:`forward` gives the real nodes of the padded batch: norms,
        FFN and residuals act per row, the attention per group of graphs, and
        every dropout draws the padded layout's mask (:meth:`PackedGraphs.dropout`).
        ``attn_masks``: per attention group, its SDPA mask.
        """
        if isinstance(self.attn, RoutedAttention):
            raise ValueError("an expert block attends over token masks, not packed graphs")
        lin1, act, drop1, lin2, drop2 = self.ffn

        def ffn(h: Tensor) -> Tensor:
            h = packed.dropout(act(lin1(h)), drop1.p, self.training)
            return packed.dropout(lin2(h), drop2.p, self.training)

        if self.norm == "post":
            x = self.norm1(x + self.attn.forward_packed(x, packed, attn_masks))
            return self.norm2(x + ffn(x))
        x = x + self.attn.forward_packed(self.norm1(x), packed, attn_masks)
        return x + ffn(self.norm2(x))

    def forward_pairs(self, x_query: Tensor, x_key: Tensor, edge_index: Tensor, bias: Tensor | None = None,
                      plain_keys: Tensor | None = None, learned: Tensor | None = None) -> Tensor:
        """The block's output at a set of queries attending over pairs into a separate key set.

        Equal to rows of the sparse :meth:`forward` when ``x_query`` are rows of
        ``x_key`` and ``edge_index`` holds all of those queries' pairs: residuals,
        norms and the FFN act per row, so only the attention needs the keys.
        Used by the whole-graph query-batch path.

        Args:
            x_query: ``[Nq, D]`` block input at the queries.
            x_key: ``[Nk, D]`` block input at the keys.
            edge_index: ``[2, E]`` pairs, row indexes ``x_query``, col indexes ``x_key``.
            bias: ``[E, H]`` or None.
            plain_keys: ``[N, D]`` block input at every node of the graph, the
                keys of the plain heads (needed when the block has any).
            learned: ``[E, H]`` learned bias (added after the scaling), or None.
        """
        if isinstance(self.attn, RoutedAttention):
            raise ValueError("an expert block attends over token masks, not query/key pairs")
        if self.norm == "post":
            x = self.norm1(x_query + self.attn.forward_pairs(x_query, x_key, edge_index, bias, plain_keys=plain_keys,
                                                                 learned=learned))
            return self.norm2(x + self.ffn(x))
        pk = None if plain_keys is None else self.norm1(plain_keys)
        x = x_query + self.attn.forward_pairs(self.norm1(x_query), self.norm1(x_key), edge_index, bias, plain_keys=pk,
                                              learned=learned)
        return x + self.ffn(self.norm2(x))
