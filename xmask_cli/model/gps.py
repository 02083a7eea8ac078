"""GraphGPS's layer over the X-LogSMask attention: a local message-passing sub-layer beside the attention.

``model.arch: gps`` (:mod:`~xmask_cli.model.archs.gps`) builds :class:`GpsBlock` s. Each runs PyG's own
``GINEConv`` (bond features encoded per layer: OGB's ``BondEncoder`` beside ``model.encoder: atom``, summed
tables for other integer codes, a linear map for float attributes) or ``GINConv`` (a dataset whose edges
carry no attributes) on the batch's real edges, beside the block's structural attention, as PyG's
``GPSConv`` combines them::

    h = norm_l(x + dropout(GINE(x, e))) + norm_1(x + attention(x))
    out = norm_2(h + FFN(h))

The edges come from the batch's ``edge`` extras (``edge_attr [B, N, N, C]``, ``edge_mask [B, N, N]``: the
cache's edge section, read as the edge bias reads it), as :class:`LocalEdges` over the rows of the padded
layout (:func:`padded_edges`) or of the packed one (:meth:`LocalEdges.packed`): the same edges in the same
order, so the two layouts sum the same messages.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from xmask_cli.model.layers import TransformerBlock
from xmask_cli.model.packing import PackedGraphs
from xmask_cli.versions import require_extra

__all__ = ["EdgeEncoder", "GpsBlock", "LocalEdges", "LocalMessage", "carries_attributes", "padded_edges"]


@dataclass
class LocalEdges:
    """A batch's real edges as PyG takes them.

    Attributes:
        index: ``[2, E]`` long, ``(source, target)`` rows of the layout the blocks run on (a message flows
            from the pair's key to its query).
        attr: ``[E, C]`` the edges' attributes as the cache stores them (integer codes or floats).
    """

    index: Tensor
    attr: Tensor

    def packed(self, packed: PackedGraphs) -> LocalEdges:
        """The same edges over the packed rows of ``packed`` (rows of the flat ``[B·N]`` padded layout moved
        to their packed position; every edge joins real nodes, so each has one)."""
        where = torch.full((packed.num_graphs * packed.width,), -1, dtype=torch.long, device=self.index.device)
        where[packed.rows] = torch.arange(packed.rows.numel(), device=self.index.device)
        return LocalEdges(where[self.index], self.attr)


def padded_edges(extras: Mapping[str, Tensor] | None) -> LocalEdges:
    """The edges of a padded batch's ``edge`` extras, over its flat ``[B·N]`` rows, row-major by (graph, query,
    key).

    Raises:
        ValueError: the batch carries no ``edge_attr`` / ``edge_mask`` (a model of ``arch: gps`` needs them).
    """
    if extras is None or "edge_mask" not in extras or "edge_attr" not in extras:
        raise ValueError("model.arch=gps runs message passing on the batch's edges: the batch needs the "
                         "`edge_attr` and `edge_mask` extras (the cache's edge section)")
    joined = extras["edge_mask"]
    width = joined.size(1)
    b, row, col = joined.nonzero(as_tuple=True)
    base = b * width
    return LocalEdges(torch.stack([base + col, base + row]), extras["edge_attr"][b, row, col])


def carries_attributes(encoding: str, dims: Sequence[int]) -> bool:
    """Whether edges coded ``(encoding, dims)`` carry information: not when absent, nor when every column
    has a single value (what the cache stores for a dataset without edge attributes)."""
    return bool(dims) and (encoding == "linear" or any(int(d) > 1 for d in dims))


class EdgeEncoder(torch.nn.Module):
    """Edge attributes ``[E, C]`` -> ``[E, width]``: OGB's ``BondEncoder`` (``bond``), one table per column
    summed (``index``), or a linear map of float attributes (``linear``).

    Args:
        encoding: ``index`` or ``linear`` (the cache's edge coding).
        dims: per column the vocabulary (``index``), or the column count alone (``linear``).
        width: the output width.
        bond: use OGB's ``BondEncoder`` for index codes (OGB molecules, beside their atom encoder).
    """

    def __init__(self, encoding: str, dims: Sequence[int], width: int, bond: bool = False):
        super().__init__()
        self.kind = "linear" if encoding == "linear" else "bond" if bond else "index"
        self.inner: torch.nn.Module
        if self.kind == "linear":
            self.inner = torch.nn.Linear(int(dims[0]), width)
        elif self.kind == "bond":
            require_extra("ogb", "ogb", "model.arch=gps on OGB molecules (OGB's bond encoder)")
            from ogb.graphproppred.mol_encoder import BondEncoder  # imported lazily: only molecules need it
            from ogb.utils.features import get_bond_feature_dims

            known = get_bond_feature_dims()
            if len(dims) != len(known) or any(int(d) > k for d, k in zip(dims, known)):
                raise ValueError(f"OGB's bond encoder reads {len(known)} columns of at most {known} codes; the "
                                 f"cache's edge attributes have vocabularies {list(dims)}")
            self.inner = BondEncoder(width)
        else:
            self.inner = torch.nn.Embedding(sum(int(d) for d in dims), width)
            starts = torch.tensor((0, *dims[:-1]), dtype=torch.long).cumsum(0)
            self.register_buffer("offsets", starts, persistent=False)

    def forward(self, attr: Tensor) -> Tensor:
        """``[E, width]`` of ``[E, C]`` attributes."""
        if self.kind == "linear":
            assert isinstance(self.inner, torch.nn.Linear)
            return self.inner(attr.to(self.inner.weight.dtype))  # the model's dtype (float64 in the tests too)
        if self.kind == "bond":
            return self.inner(attr.long())
        return self.inner(attr.long() + self.get_buffer("offsets")).sum(-2)


class LocalMessage(torch.nn.Module):
    """GIN message passing on the batch's edges: ``MLP((1 + eps) x_i + Σ_j ReLU(x_j + enc(e_ij)))`` with
    PyG's ``GINEConv`` when an ``edges`` encoder is given, ``MLP((1 + eps) x_i + Σ_j x_j)`` with ``GINConv``
    without; the MLP is GraphGPS's ``Linear, ReLU, Linear``.

    Args:
        in_dim: input width; dim: output width.
        edges: the per-layer edge encoder (to ``in_dim``), or None (``GINConv``).
    """

    def __init__(self, in_dim: int, dim: int, edges: EdgeEncoder | None):
        super().__init__()
        require_extra("torch_geometric", "torch_geometric", "model.arch=gps (PyG's GINEConv)")
        from torch_geometric.nn import GINConv, GINEConv

        mlp = torch.nn.Sequential(torch.nn.Linear(in_dim, dim), torch.nn.ReLU(), torch.nn.Linear(dim, dim))
        self.edges = edges
        self.conv = GINEConv(mlp) if edges is not None else GINConv(mlp)

    def forward(self, x: Tensor, edges: LocalEdges) -> Tensor:
        """Messages over ``edges`` into ``x`` (``[..., in_dim]`` rows, flattened in order) -> ``[..., dim]``."""
        flat = x.reshape(-1, x.size(-1))
        if self.edges is None:
            out = self.conv(flat, edges.index)
        else:
            out = self.conv(flat, edges.index, self.edges(edges.attr))
        return out.view(*x.shape[:-1], out.size(-1))


class GpsBlock(TransformerBlock):
    """GraphGPS's layer (PyG's ``GPSConv``): :class:`LocalMessage` beside the structural attention, each with
    its dropout, residual and norm (``norm``, ``residual`` as every block), summed, then the feed-forward
    sub-layer.

    Args:
        local: the message-passing sub-layer.
        **settings: the :class:`TransformerBlock` settings (``dim``, ``dropout``, ``norm``, ...).
    """

    def __init__(self, local: LocalMessage, **settings: Any):
        super().__init__(**settings)
        self.local = local
        self.local_dropout = float(settings.get("dropout", 0.0))
        self.norm_local: torch.nn.Module = (torch.nn.LayerNorm(settings["dim"]) if self.norm != "none"
                                            else torch.nn.Identity())

    def _beside(self, edges: LocalEdges | None,
                drop: Callable[[Tensor, float, bool], Tensor] | None) -> Callable[[Tensor], Tensor]:
        """The local sub-layer over ``edges`` (its dropout drawn by ``drop``, else ``F.dropout``)."""
        if edges is None:
            raise ValueError("a gps block runs message passing on the batch's edges: pass `edges` (graph batches "
                             "only, padded or packed)")

        def message(h: Tensor) -> Tensor:
            out = self.local(h, edges)
            if drop is not None:
                return drop(out, self.local_dropout, self.training)
            return F.dropout(out, self.local_dropout, self.training)

        return lambda x: self._sublayer(x, message, self.norm_local)

    def forward(self, x: Tensor, bias: Tensor | None = None, mask: Tensor | None = None,  # type: ignore[override]
                return_terms: bool = False, routed: dict | None = None,
                drop: Callable[[Tensor, float, bool], Tensor] | None = None, edges: LocalEdges | None = None,
                **attention: Any) -> Tensor | tuple[Tensor, dict[str, Tensor]]:
        """:meth:`TransformerBlock.forward` with the local sub-layer over ``edges`` (rows of ``x`` flattened)."""
        return super().forward(x, bias, mask, return_terms, routed, drop, beside=self._beside(edges, drop),
                               **attention)

    def forward_packed(self, x: Tensor, packed: PackedGraphs, attn_masks: list[Tensor | None],
                       beside: Callable[[Tensor], Tensor] | None = None, edges: LocalEdges | None = None) -> Tensor:
        """:meth:`TransformerBlock.forward_packed` with the local sub-layer over ``edges`` (packed rows)."""
        return super().forward_packed(x, packed, attn_masks, beside=beside or self._beside(edges, packed.dropout))
