"""Transformer block: structural attention + feed-forward, with switches for residuals, norms and activation.

The defaults are the paper's transformer block (post-LayerNorm, residuals, a
two-layer FFN). ``residual=False, norm='none', ffn=False`` with an activation
is a GAT-like attention-only layer; every path (dense, sparse, packed,
query pairs) composes the block from the same switches in :meth:`TransformerBlock._compose`.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from xmask_cli.config import ModelSection
from xmask_cli.model.attention.ops import feature_dropout
from xmask_cli.model.attention.structural import StructuralAttention
from xmask_cli.model.experts import RoutedAttention
from xmask_cli.model.packing import PackedGraphs

NORMS = ("post", "pre", "none")
#: Activations ``model.activation`` names, applied to every block's output (``none``: identity).
ACTIVATIONS: dict[str, Callable[[Tensor], Tensor] | None] = {"none": None, "elu": F.elu, "relu": F.relu,
                                                            "gelu": F.gelu}


class TransformerBlock(torch.nn.Module):
    """Attention and a two-layer FFN, each with a residual and a LayerNorm (each switchable).

    ``norm='post'`` (default, as in the paper): ``x = LN(x + f(x))``;
    ``norm='pre'``: ``x = x + f(LN(x))``, steadier for deep stacks;
    ``norm='none'``: ``x = x + f(x)``. Without ``residual`` the ``x +`` goes
    (``x = f(x)``, norms where they were). ``ffn=False`` drops the second sub-layer.
    ``layer_dropout`` drops the block's input first and ``activation`` is applied
    to its output last: ``act(sublayers(dropout(x)))``.

    Args:
        dim: model width ``D``.
        num_heads: attention heads.
        ffn_mult: hidden width of the FFN as a multiple of ``dim``.
        dropout: dropout on the attention output and inside the FFN.
        attn_dropout: dropout on the attention weights.
        norm: ``'post'``, ``'pre'`` or ``'none'``.
        mask_scale: see :class:`StructuralAttention`.
        experts: M3Dphormer attention experts (``local``, ``cluster``, ``global``);
            empty (default): one attention. With experts the block attends with
            a :class:`~xmask_cli.model.experts.RoutedAttention` over token masks.
        routing: the experts' router (``bilevel``, ``flat``, ``none``).
        plain_heads: 0-based heads without a structural mask; see
            :class:`StructuralAttention` (ignored with experts, whose token
            masks are their domains).
        residual: residual connections around the sub-layers.
        ffn: whether the block has its feed-forward sub-layer.
        activation: a name in :data:`ACTIVATIONS`, applied to the block's output.
        layer_dropout: dropout on the block's input.
        attention: a built :class:`StructuralAttention` to use instead of one
            of ``dim`` and ``num_heads`` (the attention output layer's, whose
            width differs from its input's; it then takes no residual, norm or FFN).
        in_dim: width of the block's input, default ``dim`` (``model.encoder: none``: the first block
            reads the raw features; it then takes no residual or pre-norm).
        combine: how the heads become the attention's output (``'project'`` or ``'concat'``; see
            :class:`StructuralAttention`).
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
        residual: bool = ModelSection.residual,
        ffn: bool = ModelSection.ffn,
        activation: str = ModelSection.activation,
        layer_dropout: float = ModelSection.layer_dropout,
        attention: StructuralAttention | None = None,
        in_dim: int | None = None,
        combine: str = ModelSection.combine,
    ):
        super().__init__()
        if norm not in NORMS:
            raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {tuple(ACTIVATIONS)}, got {activation!r}")
        if attention is not None and (residual or norm != "none" or ffn or experts):
            raise ValueError("a block given its attention (the attention output layer) takes no residual, norm, "
                             "FFN or experts")
        if in_dim not in (None, dim) and (residual or norm == "pre" or experts):
            raise ValueError(f"a block whose input width ({in_dim}) differs from its width ({dim}) takes no "
                             f"residual, pre-norm or experts")
        self.norm = norm
        self.residual = bool(residual)
        self.activation = activation
        self.layer_dropout = float(layer_dropout)
        self.attn: StructuralAttention | RoutedAttention
        if attention is not None:
            self.attn = attention
        elif experts:
            self.attn = RoutedAttention(dim, num_heads, tuple(experts), dropout, attn_dropout, mask_scale, routing)
        else:
            self.attn = StructuralAttention(dim, num_heads, dropout, attn_dropout, mask_scale, plain_heads,
                                            in_dim=in_dim, combine=combine)
        self.ffn: torch.nn.Sequential | None = None
        if ffn:
            self.ffn = torch.nn.Sequential(
                torch.nn.Linear(dim, ffn_mult * dim),
                torch.nn.ReLU(),
                torch.nn.Dropout(dropout),
                torch.nn.Linear(ffn_mult * dim, dim),
                torch.nn.Dropout(dropout),
            )
        # Created in this order (attention, FFN, norms) so the default block draws its initial weights as before.
        self.norm1: torch.nn.Module = torch.nn.LayerNorm(dim) if norm != "none" else torch.nn.Identity()
        self.norm2: torch.nn.Module = torch.nn.LayerNorm(dim) if norm != "none" and ffn else torch.nn.Identity()

    def drop_input(self, x: Tensor, drop: Callable[[Tensor, float, bool], Tensor] = feature_dropout) -> Tensor:
        """The block's input after ``layer_dropout`` (``x`` itself when it is 0); a sparse ``x`` (the raw
        features of ``model.encoder: none``) drops its stored values."""
        return drop(x, self.layer_dropout, self.training) if self.layer_dropout > 0 else x

    def _sublayer(self, x: Tensor, f: Callable[[Tensor], Tensor], norm: torch.nn.Module) -> Tensor:
        """One sub-layer ``f`` with this block's norm placement and residual."""
        y = f(norm(x)) if self.norm == "pre" else f(x)
        if self.residual:
            y = x + y
        return norm(y) if self.norm == "post" else y

    def _compose(self, x: Tensor, attend: Callable[[Tensor], Tensor], ffn: Callable[[Tensor], Tensor] | None,
                 beside: Callable[[Tensor], Tensor] | None = None) -> Tensor:
        """Attention sub-layer, FFN sub-layer (if any), activation: the block on every path (input already dropped).
        ``beside``: a sub-layer on the same input whose output (its own residual and norm included) is added to
        the attention sub-layer's (GraphGPS's local message passing, :mod:`~xmask_cli.model.gps`)."""
        y = self._sublayer(x, attend, self.norm1)
        x = y if beside is None else beside(x) + y
        if ffn is not None:
            x = self._sublayer(x, ffn, self.norm2)
        act = ACTIVATIONS[self.activation]
        return x if act is None else act(x)

    def forward(
        self,
        x: Tensor,
        bias: Tensor | None = None,
        mask: Tensor | None = None,
        return_terms: bool = False,
        routed: dict | None = None,
        drop: Callable[[Tensor, float, bool], Tensor] | None = None,
        beside: Callable[[Tensor], Tensor] | None = None,
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
            drop: the dropout every sub-layer draws, ``drop(h, p, training)``, instead of its
                ``Dropout`` modules (a padded graph batch: :func:`~xmask_cli.model.packing.padded_dropout`).
            **attention: the other keywords of :meth:`StructuralAttention.forward`, passed on as they are:
                ``edge_index`` (``[2, E]`` attended pairs, row = query: the sparse path),
                ``attn_mask`` (the attention's ``dense_mask(bias, mask)``, built once per forward by the
                caller and shared by every block; it is then what the attention uses, and ``bias`` only
                feeds the recorded ``structural`` term), ``groups`` (``[N]`` graph of each node of a sparse
                disjoint union), ``complete`` (the sparse pairs are every pair of the domain) and
                ``learned`` (a learned bias shaped like ``bias``, added after the ``1/sqrt(d_h)`` scaling).
            beside: a sub-layer added beside the attention (see :meth:`_compose`).

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
            if drop is not None:
                attention["drop"] = drop
            if not return_terms:
                return self.attn(h, bias=bias, mask=mask, **attention)
            out, recorded = self.attn(h, bias=bias, mask=mask, return_terms=True, **attention)
            terms.update(recorded)
            return out

        if drop is None:
            x = self._compose(self.drop_input(x), attend, self.ffn, beside)
        else:
            x = self._compose(self.drop_input(x, drop), attend, self._ffn_drawing(drop), beside)
        return (x, terms) if return_terms else x

    def _ffn_drawing(self, drop: Callable[[Tensor, float, bool], Tensor]) -> Callable[[Tensor], Tensor] | None:
        """The FFN sub-layer with its two dropouts drawn by ``drop(h, p, training)`` (None without an FFN)."""
        if self.ffn is None:
            return None
        lin1, act, drop1, lin2, drop2 = self.ffn
        assert isinstance(drop1, torch.nn.Dropout) and isinstance(drop2, torch.nn.Dropout)  # the FFN's layout

        def ffn(h: Tensor) -> Tensor:
            h = drop(act(lin1(h)), drop1.p, self.training)
            return drop(lin2(h), drop2.p, self.training)

        return ffn

    def forward_packed(self, x: Tensor, packed: PackedGraphs, attn_masks: list[Tensor | None],
                       beside: Callable[[Tensor], Tensor] | None = None) -> Tensor:
        """One block on the packed real rows ``[n, D]`` of a padded batch (:mod:`~xmask_cli.model.packing`).

        The rows :meth:`forward` gives the real nodes of the padded batch: norms,
        FFN and residuals act per row, the attention per group of graphs, and
        every dropout draws the real rows' mask the padded layout draws too (:meth:`PackedGraphs.dropout`).
        ``attn_masks``: per attention group, its SDPA mask; ``beside``: see :meth:`_compose`.
        """
        if isinstance(self.attn, RoutedAttention):
            raise ValueError("an expert block attends over token masks, not packed graphs")
        attn = self.attn
        x = self.drop_input(x, packed.dropout)
        return self._compose(x, lambda h: attn.forward_packed(h, packed, attn_masks), self._ffn_drawing(packed.dropout),
                             beside)

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

        ``layer_dropout`` is not drawn here: the caller drops the layer's input
        once (:meth:`drop_input`) before taking the query and key rows of it, so a
        node has one dropout mask as a query and as a key, as on the sparse path.
        """
        if isinstance(self.attn, RoutedAttention):
            raise ValueError("an expert block attends over token masks, not query/key pairs")
        attn = self.attn
        pre = self.norm == "pre"
        keys = self.norm1(x_key) if pre else x_key
        pk = self.norm1(plain_keys) if pre and plain_keys is not None else plain_keys

        def attend(q: Tensor) -> Tensor:
            # `q` is the queries' input, normed under 'pre' by _sublayer; the keys are normed here alike.
            return attn.forward_pairs(q, keys, edge_index, bias, plain_keys=pk, learned=learned)  # type: ignore[return-value]

        return self._compose(x_query, attend, self.ffn)


def transformer_blocks(modules: Iterable[torch.nn.Module]) -> list[TransformerBlock]:
    """``modules`` (a network's ``blocks``) as the :class:`TransformerBlock` s they are: a ModuleList's items
    are typed as any Module.

    Raises:
        TypeError: one of them is another module.
    """
    blocks: list[TransformerBlock] = []
    for block in modules:
        if not isinstance(block, TransformerBlock):
            raise TypeError(f"expected TransformerBlocks, got a {type(block).__name__}")
        blocks.append(block)
    return blocks
