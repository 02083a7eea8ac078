"""``model.arch: transformer``: the paper's block, structural attention then a feed-forward layer."""
from __future__ import annotations

from typing import ClassVar

from xmask_cli.model.archs.base import Architecture
from xmask_cli.model.layers import TransformerBlock
from xmask_cli.model.model_config import ModelConfig


class Transformer(Architecture):
    """Each block: attention (heads projected), a ``ffn_mult``-wide feed-forward layer, residuals and norms,
    then ``activation`` (none by default, as the paper)."""

    name = "transformer"
    KEYS: ClassVar[frozenset[str]] = frozenset({"ffn_mult", "activation", "output"})

    def init_block(self, cfg: ModelConfig, layer: int) -> TransformerBlock:
        """The paper's block."""
        return TransformerBlock(**self.block_settings(cfg, layer), ffn_mult=cfg.ffn_mult, activation=cfg.activation)
