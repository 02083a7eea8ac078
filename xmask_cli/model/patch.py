"""Patch embedding: the image level's input encoder (ViT, Dosovitskiy et al.; paper 000 appendix).

An image ``[B, C, H, W]`` becomes ``[B, T, D]`` tokens: a strided convolution
cuts it into ``p x p`` patches (row-major, node ``r * cols + c`` of the patch
grid, :mod:`xmask_cli.structure.grid`), optionally preceded by a learned class
token, optionally plus learned position embeddings.

The class token is not a grid node. It attends to every patch and every patch
attends to it, with no structural term: :meth:`PatchEncoder.token_powers`
gives its row and column the value 1 in every power, so ``log(1 + eps) = 0``
is what the X-LogSMask term adds there (and the pair is inside every head's
support). Patch-to-patch pairs keep ``log(Â^k + eps)`` of the grid.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from xmask_cli.structure.grid import patch_grid

#: ``none``: no position information but the mask (the X-LogSMask arm); ``learned``: ViT's learned embeddings.
POSITIONALS = ("none", "learned")


class PatchEncoder(torch.nn.Module):
    """Image -> patch tokens (+ class token) (+ learned positions).

    Args:
        in_channels: image channels ``C``.
        dim: token width ``D``.
        image_size: ``(H, W)``.
        patch: patch side ``p`` (must divide ``H`` and ``W``).
        cls_token: prepend a learned class token (token 0).
        positional: ``'none'`` or ``'learned'`` (one embedding per token, class token included).
    """

    def __init__(self, in_channels: int, dim: int, image_size: Sequence[int], patch: int, cls_token: bool = True,
                 positional: str = "none"):
        super().__init__()
        if positional not in POSITIONALS:
            raise ValueError(f"positional must be one of {POSITIONALS}, got {positional!r}")
        height, width = (int(s) for s in image_size)
        self.rows, self.cols = patch_grid(height, width, int(patch))
        self.image_size = (height, width)
        self.proj = torch.nn.Conv2d(in_channels, dim, kernel_size=patch, stride=patch)
        self.offset = 1 if cls_token else 0
        self.cls = torch.nn.Parameter(torch.zeros(1, 1, dim)) if cls_token else None
        self.pos = torch.nn.Parameter(torch.zeros(1, self.num_tokens, dim)) if positional == "learned" else None
        # Small random starts, as ViT: a zero class token / position table would start every image alike.
        for p in (self.cls, self.pos):
            if p is not None:
                torch.nn.init.trunc_normal_(p, std=0.02)

    @property
    def num_patches(self) -> int:
        return self.rows * self.cols

    @property
    def num_tokens(self) -> int:
        return self.num_patches + self.offset

    def forward(self, x: Tensor) -> Tensor:
        """``[B, C, H, W]`` images -> ``[B, T, D]`` tokens (class token first when there is one)."""
        if x.dim() != 4 or tuple(x.shape[-2:]) != self.image_size:
            raise ValueError(f"expected images [B, C, {self.image_size[0]}, {self.image_size[1]}], got {list(x.shape)}")
        h = self.proj(x).flatten(2).transpose(1, 2)  # [B, rows * cols, D], row-major patches
        if self.cls is not None:
            h = torch.cat([self.cls.expand(h.size(0), -1, -1), h], dim=1)
        if self.pos is not None:
            h = h + self.pos
        return h

    def token_powers(self, powers: Tensor | None) -> Tensor | None:
        """Grid powers ``[B|1, K, N, N]`` -> token powers ``[B|1, K, T, T]`` (class token: value 1 everywhere)."""
        if powers is None or self.offset == 0:
            return powers
        if powers.size(-1) != self.num_patches:
            raise ValueError(f"powers cover {powers.size(-1)} nodes, the image has {self.num_patches} patches")
        return torch.nn.functional.pad(powers, (self.offset, 0, self.offset, 0), value=1.0)
