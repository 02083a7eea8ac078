"""``model.arch: experts``: M3Dphormer's blocks, attention experts over real and virtual tokens, routed."""
from __future__ import annotations

from typing import ClassVar

from xmask_cli.model.archs.base import Architecture
from xmask_cli.model.layers import TransformerBlock
from xmask_cli.model.model_config import ModelConfig


class Experts(Architecture):
    """Each block: a :class:`~xmask_cli.model.experts.RoutedAttention` of the ``experts`` (local, cluster,
    global; the X-LogSMask term on the local one) mixed by ``routing``, then the feed-forward layer. The
    network runs it on tokens (:meth:`XMaskNet.forward_tokens`); the head is the MLP."""

    name = "experts"
    KEYS: ClassVar[frozenset[str]] = frozenset({"ffn_mult", "experts", "routing", "expert_attention"})

    def init_block(self, cfg: ModelConfig, layer: int) -> TransformerBlock:
        """A block of routed attention experts (their attention mode, ``expert_attention``, is the forward's)."""
        return TransformerBlock(**self.block_settings(cfg, layer), ffn_mult=cfg.ffn_mult,
                                experts=tuple(cfg.experts), routing=cfg.routing)
