"""``model.arch: vit``: a patch encoder (with a class token and position embeddings) before the paper's blocks."""
from __future__ import annotations

from typing import ClassVar

import torch

from xmask_cli.model.archs.base import Architecture
from xmask_cli.model.layers import TransformerBlock
from xmask_cli.model.model_config import ModelConfig
from xmask_cli.model.patch import PatchEncoder


class Vit(Architecture):
    """Images as tokens: a strided convolution per patch (a class token first with ``readout: cls``,
    ``positional`` embeddings), then transformer blocks under the patch grid's X-LogSMask term."""

    name = "vit"
    KEYS: ClassVar[frozenset[str]] = frozenset({"ffn_mult", "positional"})

    def init_encoder(self, cfg: ModelConfig) -> torch.nn.Module:
        """The patch encoder."""
        return PatchEncoder(cfg.in_dim, cfg.hidden, cfg.image_size, cfg.patch_size, cls_token=cfg.readout == "cls",
                            positional=cfg.positional)

    def init_block(self, cfg: ModelConfig, layer: int) -> TransformerBlock:
        """The paper's block, over patch tokens."""
        return TransformerBlock(**self.block_settings(cfg, layer), ffn_mult=cfg.ffn_mult)
