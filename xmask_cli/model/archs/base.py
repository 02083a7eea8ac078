"""What every architecture builds the same way: the input encoder, the shared block settings, the head.

An :class:`Architecture` is a small builder (PyG's ``BasicGNN`` pattern: the subclass chooses its layer in
:meth:`~Architecture.init_block`). :class:`~xmask_cli.model.network.XMaskNet` asks the one its config
names (``model.arch``) for its encoder, its blocks and its output, and runs them on the same paths: the
structural attention, the X-LogSMask term and the learned biases, the kernels and the readouts are the
network's, whichever architecture built the layers.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, NamedTuple

import torch
from torch import Tensor

from xmask_cli.model.attention.structural import StructuralAttention
from xmask_cli.model.encoders import AtomInput, mlp
from xmask_cli.model.layers import TransformerBlock
from xmask_cli.model.logsmask import XLogSMaskBias
from xmask_cli.model.model_config import ModelConfig
from xmask_cli.model.packing import PackedGraphs
from xmask_cli.versions import require_extra

__all__ = ["Architecture", "Output"]


class Output(NamedTuple):
    """The network's output: an MLP ``head``, or an attention output layer (``out_block``, its ``out_bias``)."""

    head: torch.nn.Module | None
    out_block: TransformerBlock | None
    out_bias: XLogSMaskBias | None


class Architecture:
    """A builder of one named architecture (``model.arch``).

    Subclasses set :attr:`name` and :attr:`KEYS` (the model keys only some architectures read that this
    one reads: ``config_arch.READ_BY``, tested to agree) and choose their layer in :meth:`init_block`.
    """

    name: ClassVar[str]
    KEYS: ClassVar[frozenset[str]] = frozenset()

    def init_encoder(self, cfg: ModelConfig) -> torch.nn.Module:
        """The input encoder: a linear map, OGB's atom encoder, or none (the first block reads the features)."""
        if cfg.encoder == "atom":
            require_extra("ogb", "ogb", "model.encoder=atom (OGB's atom encoder)")
            from ogb.graphproppred.mol_encoder import AtomEncoder  # imported lazily: only molecules need it

            return AtomInput(AtomEncoder(cfg.hidden), cfg.struct_dim, cfg.hidden)
        if cfg.encoder == "none":  # the first block's q, k, v read the (dropped-out) raw features
            return torch.nn.Identity()
        return torch.nn.Linear(cfg.in_dim, cfg.hidden)

    def block_settings(self, cfg: ModelConfig, layer: int) -> dict[str, Any]:
        """The settings every architecture's block takes from the shared keys (width, heads, dropouts, norm,
        residual, plain heads; the first block's input width under ``encoder: none``)."""
        return {"dim": cfg.hidden, "num_heads": cfg.heads, "dropout": cfg.dropout, "attn_dropout": cfg.attn_dropout,
                "norm": cfg.norm, "mask_scale": cfg.mask_scale, "plain_heads": cfg.plain_heads,
                "residual": cfg.residual, "layer_dropout": cfg.layer_dropout,
                "in_dim": cfg.in_dim if layer == 0 and cfg.encoder == "none" else None}

    def init_block(self, cfg: ModelConfig, layer: int) -> TransformerBlock:
        """Block ``layer`` (0-based)."""
        raise NotImplementedError

    def block_inputs(self, extras: Mapping[str, Tensor] | None, packed: PackedGraphs | None = None) -> dict[str, Any]:
        """What each block takes beyond the attention's inputs, from the batch's ``extras`` (over the rows of
        ``packed`` on the packed path): nothing here; gps's blocks take the batch's edges."""
        return {}

    def init_output(self, cfg: ModelConfig) -> Output:
        """The MLP head, or (``output: attention``) a last X-LogSMask attention layer: ``output_heads`` heads of
        width ``out_dim`` over ``Â^{output_powers}``, averaged over heads, as GAT's last layer."""
        if cfg.output != "attention":
            # Pair tasks read [h_u * h_v, h_u + h_v]: symmetric in (u, v), as an undirected pair is.
            head_in = 2 * cfg.hidden if cfg.task in ("link", "edge") else cfg.hidden
            return Output(mlp(head_in, cfg.hidden, cfg.out_dim, cfg.dropout), None, None)
        n_out = cfg.output_heads
        plain = () if cfg.use_bias else tuple(range(n_out))
        attention = StructuralAttention(n_out * cfg.out_dim, n_out, 0.0, cfg.attn_dropout, cfg.mask_scale,
                                        plain, in_dim=cfg.hidden, combine="mean")
        block = TransformerBlock(cfg.hidden, n_out, residual=False, norm="none", ffn=False,
                                 layer_dropout=cfg.layer_dropout, attention=attention)
        bias = XLogSMaskBias(n_out, cfg.output_powers, cfg.eps, cfg.outside_support) if cfg.use_bias else None
        return Output(None, block, bias)
