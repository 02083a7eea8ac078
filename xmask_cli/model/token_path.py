"""The M3Dphormer token forward of :class:`~xmask_cli.model.network.XMaskNet` (expert attention).

A part the network holds (``XMaskNet.token_path``): real and virtual tokens under the local / cluster /
global masks. It has no state of its own; the network passes what it runs (its blocks, its X-LogSMask
term, the attention mode) to each call.
"""
from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

from xmask_cli.model.experts import HierarchicalMasks, RoutedAttention
from xmask_cli.model.layers import TransformerBlock
from xmask_cli.model.logsmask import SparseStructure, XLogSMaskBias


class TokenForward:
    """The expert blocks over token embeddings: :meth:`XMaskNet.encode_tokens`'s and
    :meth:`XMaskNet.routing_weights`'s work, with every input an argument."""

    def run(self, h: Tensor, masks: HierarchicalMasks, local_values: Tensor | None, regions: dict | None, *,
            blocks: Sequence[TransformerBlock], bias: XLogSMaskBias | None, mode: str) -> Tensor:
        """``[N + P + C, hidden]``: the encoded tokens ``h`` through every expert block.

        Args:
            h: ``[N + P + C, hidden]`` encoded token features (of :meth:`HierarchicalMasks.pool`'s tokens).
            masks: the local / cluster / global token masks.
            local_values: ``[E, K]`` ``Â^1..Â^K`` at the given local pairs (the first
                ``masks.num_given_local``); the X-LogSMask term of the local expert. None without ``bias``.
            regions: dual-mode regions per mask (``masks.plan(head_dim)``); planned per call when None.
            blocks, bias, mode: the network's expert blocks, X-LogSMask term and ``expert_attention``.
        """
        routed = self.routed(masks, local_values, regions, bias=bias, mode=mode)
        for block in blocks:
            h = block(h, routed=routed)
        return h

    def routed(self, masks: HierarchicalMasks, local_values: Tensor | None, regions: dict | None, *,
               bias: XLogSMaskBias | None, mode: str) -> dict:
        """What every expert block reads: the masks' pairs, the experts' biases, the attention mode, the regions."""
        return {"pairs": masks.pairs, "bias": self.token_bias(masks, local_values, bias), "mode": mode,
                "regions": regions}

    @staticmethod
    def token_bias(masks: HierarchicalMasks, local_values: Tensor | None,
                   bias: XLogSMaskBias | None) -> dict[str, Tensor | None]:
        """The experts' biases: the X-LogSMask term ``bias`` on the local expert's pairs (none without it)."""
        out: dict[str, Tensor | None] = {}
        if bias is not None:
            if local_values is None:
                raise ValueError("use_bias=True needs `local_values` [E, K] at the local pairs")
            given = masks.local[:, :masks.num_given_local]
            # Virtual tokens' and added self pairs get 0: no structure to bias them with.
            out["local"] = masks.pad_local(bias(SparseStructure(edge_index=given, values=local_values)))
        return out

    def routing_weights(self, h: Tensor, masks: HierarchicalMasks, local_values: Tensor | None,
                        regions: dict | None, *, blocks: Sequence[TransformerBlock], bias: XLogSMaskBias | None,
                        mode: str) -> list[Tensor]:
        """Per block, the ``[T, n_experts]`` expert weights each token of ``h`` (encoded) gets from its router."""
        out = []
        # The same biases as the forward: without them every block after the first would see other inputs.
        routed = self.routed(masks, local_values, regions, bias=bias, mode=mode)
        for block in blocks:
            assert isinstance(block.attn, RoutedAttention)  # an expert model's blocks route (XMaskNet builds them so)
            src = block.norm1(h) if block.norm == "pre" else h
            out.append(block.attn.routing_weights(src))
            h = block(h, routed=routed)
        return out
