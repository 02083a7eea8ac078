"""X-LogSMask attention and transformer block as modules for a user's own PyG model.

Thin public faces of the modules ``xmask train`` builds: the attention is
:class:`~xmask_cli.model.attention.StructuralAttention`, the block
:class:`~xmask_cli.model.layers.TransformerBlock`, the log mask
:class:`~xmask_cli.model.logsmask.XLogSMaskBias`, and the path (dense grid or
sparse pairs) is chosen by :func:`~xmask_cli.model.attention_path.full_graph_attention`,
as a full-graph node run chooses it. They take node features and the pairs
:class:`~xmask_cli.transforms.AddLogSMask` puts on a ``Data`` (one graph or a
PyG batch), so::

    data = AddLogSMask(k=4)(data)
    attn = XLogSMaskAttention(dim=64, heads=4)
    out = attn(x, data.logsmask_index, data.logsmask_values)          # [N, 64]
    out = attn(x, batch.logsmask_index, batch.logsmask_values, batch.batch)  # a DataLoader batch

Both paths give the same numbers (pairs outside a head's stored support weigh
0 on both, ``outside_support='hard'``); they differ in cost.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from torch_geometric.utils import to_dense_adj, to_dense_batch

from xmask_cli import arguments as args
from xmask_cli.config import ModelSection, NodeSection, PowersSection
from xmask_cli.errors import UsageError
from xmask_cli.model.attention import StructuralAttention
from xmask_cli.model.attention_path import ATTENTIONS, full_graph_attention
from xmask_cli.model.layers import TransformerBlock
from xmask_cli.model.logsmask import DenseStructure, SparseStructure, XLogSMaskBias
from xmask_cli.model.model_config import plain_heads, sparse_refusal

__all__ = ["XLogSMaskAttention", "XLogSMaskBlock"]


class _OnGraph(torch.nn.Module):
    """The log mask and the path choice both public modules share; ``self.layer`` is the wrapped module."""

    layer: torch.nn.Module

    def __init__(self, heads: int, head_powers: Sequence[int] | None, eps: float, outside_support: str,
                 attention: str, dense_max_nodes: int):
        super().__init__()
        heads = args.int_arg("heads", heads, minimum=1)
        head_powers = args.ints_arg("head_powers", head_powers, minimum=0)
        if head_powers is not None and len(head_powers) != heads:
            raise UsageError(f"head_powers: expected one power per head ({heads}); got {head_powers}")
        eps = args.float_arg("eps", eps, low=0, high=1, low_open=True, high_open=True)
        outside_support = args.choice_arg("outside_support", outside_support,
                                          args.literal_choices(ModelSection, "outside_support"))
        attention = args.choice_arg("attention", attention, ATTENTIONS)
        dense_max_nodes = args.int_arg("dense_max_nodes", dense_max_nodes, minimum=0)
        self.log_mask = XLogSMaskBias(heads, head_powers, eps, outside_support)
        fields = {"heads": heads, "use_bias": True, "head_powers": self.log_mask.head_powers,
                  "outside_support": outside_support}
        self.plain_heads = plain_heads(fields)
        self._dense_only = sparse_refusal(fields)
        self.attention_path = attention
        self.dense_max_nodes = int(dense_max_nodes)

    def path(self, num_nodes: int, num_pairs: int, device: torch.device | str) -> str:
        """``'dense'`` or ``'sparse'`` for a graph of ``num_nodes`` nodes and ``num_pairs`` stored pairs."""
        return full_graph_attention(self.attention_path, num_nodes, num_pairs, device, self.dense_max_nodes,
                                    self._dense_only)

    def forward(self, x: Tensor, logsmask_index: Tensor, logsmask_values: Tensor,
                batch: Tensor | None = None) -> Tensor:
        """``[N, dim]`` outputs of ``x [N, dim]`` attending under the log mask of the pairs.

        Args:
            x: node features (one graph, or every graph of a batch).
            logsmask_index: ``[2, P]`` pairs, row = query, col = key (:class:`~xmask_cli.transforms.AddLogSMask`).
            logsmask_values: ``[P, K]`` ``Â^1..Â^K`` at each pair, ``K`` at least the largest head power.
            batch: ``[N]`` graph of each node (sorted, as PyG batches it); None: one graph.

        A batch takes the path its largest graph would (``dense`` pads every
        graph to that size); one graph takes the path a full-graph node run takes.
        """
        num_graphs = 1 if batch is None or batch.numel() == 0 else int(batch.max()) + 1
        largest = x.size(0) if batch is None else int(torch.bincount(batch).max()) if batch.numel() else 0
        index, values = logsmask_index.to(x.device), logsmask_values.to(x.device)  # the structure goes to x
        if self.path(largest, -(-index.size(1) // num_graphs), x.device) == "sparse":
            bias = self.log_mask(SparseStructure(edge_index=index, values=values))
            return self.layer(x, bias, edge_index=index, groups=batch)
        xd, mask = to_dense_batch(x, batch)
        powers = to_dense_adj(index, batch, values, max_num_nodes=xd.size(1)).permute(0, 3, 1, 2)
        bias = self.log_mask(DenseStructure(powers=powers, mask=mask))
        return self.layer(xd, bias, mask)[mask]


def _layer_args(dim: int, heads: int, dropout: float, attn_dropout: float, mask_scale: str) -> tuple[
        int, float, float, str]:
    """The arguments both modules' layers take, checked (a bad one names itself, exit code 2)."""
    dim = args.int_arg("dim", dim, minimum=1)
    if dim % heads:
        raise UsageError(f"dim: expected a multiple of heads ({heads}); got {dim}")
    drops = [args.float_arg(k, v, low=0, high=1, high_open=True)
             for k, v in (("dropout", dropout), ("attn_dropout", attn_dropout))]
    scale = args.choice_arg("mask_scale", mask_scale, args.literal_choices(ModelSection, "mask_scale"))
    return dim, drops[0], drops[1], scale


class XLogSMaskAttention(_OnGraph):
    r"""Multi-head attention whose head ``h`` adds ``log(Â^{k_h} + eps)`` to its logits.

    Logits ``(q_i·k_j + M_ij) / sqrt(d_h)`` (``mask_scale='paper'``) or
    ``q_i·k_j / sqrt(d_h) + M_ij`` (``'none'``), ``M = log(Â^{k_h} + eps)``;
    a pair outside a head's stored support gets ``-inf`` under
    ``outside_support='hard'`` and ``log(eps)`` under ``'eps'`` (dense path only).

    Args:
        dim: feature width (divisible by ``heads``).
        heads: number of heads ``H``.
        head_powers: ``k_h`` per head; default ``1..H``. ``0``: a plain head (no mask, every node).
        dropout: on the output projection. attn_dropout: on the attention weights.
        mask_scale: ``'paper'`` or ``'none'`` (``model.mask_scale``).
        eps: floor inside the log (``structure.powers.eps``).
        outside_support: ``'hard'`` or ``'eps'`` (``model.outside_support``).
        attention: ``'auto'``, ``'dense'`` or ``'sparse'`` (``node.attention``).
        dense_max_nodes: above this many nodes ``auto`` goes sparse (``node.dense_max_nodes``).

    Attributes:
        layer: the :class:`~xmask_cli.model.attention.StructuralAttention` itself
            (its ``state_dict`` is a trained model's ``blocks.<i>.attn``).
    """

    def __init__(self, dim: int, heads: int, head_powers: Sequence[int] | None = None, *, dropout: float = 0.0,
                 attn_dropout: float = 0.0, mask_scale: str = ModelSection.mask_scale, eps: float = PowersSection.eps,
                 outside_support: str = ModelSection.outside_support, attention: str = "auto",
                 dense_max_nodes: int = NodeSection.dense_max_nodes):
        super().__init__(heads, head_powers, eps, outside_support, attention, dense_max_nodes)
        dim, dropout, attn_dropout, mask_scale = _layer_args(dim, heads, dropout, attn_dropout, mask_scale)
        self.layer = StructuralAttention(dim, heads, dropout, attn_dropout, mask_scale, self.plain_heads)


class XLogSMaskBlock(_OnGraph):
    """A transformer block: :class:`XLogSMaskAttention` and a feed-forward layer, each with a residual and LayerNorm.

    ``norm='post'`` (the paper): ``x = LN(x + f(x))``; ``'pre'``: ``x = x + f(LN(x))``.
    The other arguments are :class:`XLogSMaskAttention`'s, plus ``ffn_mult``
    (hidden width of the feed-forward layer as a multiple of ``dim``).

    Attributes:
        layer: the :class:`~xmask_cli.model.layers.TransformerBlock` itself
            (its ``state_dict`` is a trained model's ``blocks.<i>``).
    """

    def __init__(self, dim: int, heads: int, head_powers: Sequence[int] | None = None, *,
                 ffn_mult: int = ModelSection.ffn_mult, dropout: float = 0.0, attn_dropout: float = 0.0,
                 norm: str = ModelSection.norm, mask_scale: str = ModelSection.mask_scale,
                 eps: float = PowersSection.eps, outside_support: str = ModelSection.outside_support,
                 attention: str = "auto", dense_max_nodes: int = NodeSection.dense_max_nodes):
        super().__init__(heads, head_powers, eps, outside_support, attention, dense_max_nodes)
        dim, dropout, attn_dropout, mask_scale = _layer_args(dim, heads, dropout, attn_dropout, mask_scale)
        ffn_mult = args.int_arg("ffn_mult", ffn_mult, minimum=1)
        norm = args.choice_arg("norm", norm, args.literal_choices(ModelSection, "norm"))
        self.layer = TransformerBlock(dim, heads, ffn_mult, dropout, attn_dropout, norm, mask_scale,
                                      plain_heads=self.plain_heads)
