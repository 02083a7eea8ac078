"""The M3Dphormer token path of :class:`~xmask_cli.model.network.XMaskNet` (expert attention).

A mixin, so the one model keeps one class: real and virtual tokens under the
local / cluster / global masks. It reads the model's ``cfg``, ``encoder``,
``blocks``, ``bias``, ``head`` and ``_drop_input``.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from xmask_cli.model.batches import TokenBatch
from xmask_cli.model.experts import HierarchicalMasks, RoutedAttention
from xmask_cli.model.layers import TransformerBlock
from xmask_cli.model.logsmask import SparseStructure, XLogSMaskBias
from xmask_cli.model.model_config import ModelConfig


class TokenPath:
    """``encode_tokens``, ``forward_tokens``, ``forward_token_batch``, ``routing_weights`` of :class:`XMaskNet`."""

    # What it reads of the model (XMaskNet sets and defines them).
    cfg: ModelConfig
    encoder: torch.nn.Module
    blocks: Sequence[TransformerBlock]  # a ModuleList of them
    bias: XLogSMaskBias | None
    _drop_input: Callable[[Tensor], Tensor]
    _mlp_head: Callable[[], torch.nn.Module]

    def encode_tokens(self, x: Tensor, masks: HierarchicalMasks, local_values: Tensor | None = None,
                      regions: dict | None = None) -> Tensor:
        """M3Dphormer: ``[N + P + C, hidden]`` embeddings of real and virtual tokens.

        Args:
            x: ``[N + P + C, F]`` token features (:meth:`HierarchicalMasks.pool`).
            masks: the local / cluster / global token masks.
            local_values: ``[E, K]`` ``Â^1..Â^K`` at the given local pairs (the
                first ``masks.num_given_local``); the X-LogSMask term of the local
                expert. None when ``use_bias=False``.
            regions: dual-mode regions per mask (``masks.plan(head_dim)``); planned
                per call when None.
        """
        if not self.cfg.experts:
            raise ValueError("encode_tokens needs a model with attention experts (model.experts)")
        h = self.encoder(self._drop_input(x))
        routed = self._routed(masks, local_values, regions)
        for block in self.blocks:
            h = block(h, routed=routed)
        return h

    def _routed(self, masks: HierarchicalMasks, local_values: Tensor | None, regions: dict | None) -> dict:
        """What every expert block reads: the masks' pairs, the experts' biases, the attention mode, the regions."""
        return {"pairs": masks.pairs, "bias": self._token_bias(masks, local_values),
                "mode": self.cfg.expert_attention, "regions": regions}

    def _token_bias(self, masks: HierarchicalMasks, local_values: Tensor | None) -> dict[str, Tensor | None]:
        """The experts' biases: the X-LogSMask term on the local expert's pairs (none without ``use_bias``)."""
        bias: dict[str, Tensor | None] = {}
        if self.bias is not None:
            if local_values is None:
                raise ValueError("use_bias=True needs `local_values` [E, K] at the local pairs")
            given = masks.local[:, :masks.num_given_local]
            # Virtual tokens' and added self pairs get 0: no structure to bias them with.
            bias["local"] = masks.pad_local(self.bias(SparseStructure(edge_index=given, values=local_values)))
        return bias

    def forward_tokens(self, x: Tensor, masks: HierarchicalMasks, local_values: Tensor | None = None,
                       regions: dict | None = None) -> Tensor:
        """``[N + P + C, out_dim]`` logits of every token (see :meth:`encode_tokens`)."""
        return self._mlp_head()(self.encode_tokens(x, masks, local_values, regions))

    def forward_token_batch(self, batch: TokenBatch) -> Tensor:
        """:meth:`forward_tokens` of a :class:`TokenBatch`; its dual-mode regions planned once per head width."""
        head_dim = self.cfg.hidden // self.cfg.heads
        if self.cfg.expert_attention == "dual" and head_dim not in batch.regions:
            batch.regions[head_dim] = batch.masks.plan(head_dim)
        return self.forward_tokens(batch.x, batch.masks, batch.values if self.cfg.use_bias else None,
                                   regions=batch.regions.get(head_dim))

    def routing_weights(self, x: Tensor, masks: HierarchicalMasks, local_values: Tensor | None = None,
                        regions: dict | None = None) -> list[Tensor]:
        """Per block, the ``[T, n_experts]`` expert weights each token's router gives (inspection)."""
        if not self.cfg.experts:
            raise ValueError("routing_weights needs a model with attention experts (model.experts)")
        out = []
        h = self.encoder(x)
        # The same biases as the forward: without them every block after the first would see other inputs.
        routed = self._routed(masks, local_values, regions)
        for block in self.blocks:
            assert isinstance(block.attn, RoutedAttention)  # an expert model's blocks route (XMaskNet builds them so)
            src = block.norm1(h) if block.norm == "pre" else h
            out.append(block.attn.routing_weights(src))
            h = block(h, routed=routed)
        return out
