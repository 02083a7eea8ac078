"""``model.arch: gat``: attention-only layers, as GAT's, under the X-LogSMask term."""
from __future__ import annotations

from typing import ClassVar

from xmask_cli.model.archs.base import Architecture
from xmask_cli.model.layers import TransformerBlock
from xmask_cli.model.model_config import ModelConfig


class Gat(Architecture):
    """Each layer: structural attention, its heads concatenated (``combine: concat``) or projected, then an
    activation (``activation``: GAT's ELU); no feed-forward layer. With ``output: attention`` the last layer
    is an attention layer whose heads emit the outputs (the base class's output layer)."""

    name = "gat"
    KEYS: ClassVar[frozenset[str]] = frozenset({"activation", "combine", "output"})

    def init_block(self, cfg: ModelConfig, layer: int) -> TransformerBlock:
        """An attention-only layer."""
        return TransformerBlock(**self.block_settings(cfg, layer), ffn=False, activation=cfg.activation,
                                combine=cfg.combine)
