"""The X-LogSMask term and the dense attention mask of :class:`~xmask_cli.model.network.XMaskNet`, memoised.

A part the network holds (``XMaskNet.memo``), with the memo as its own state. The bias has no parameters:
for the same structure tensors, unmodified, the last result is reused (full-graph node training feeds the
same ones every step).
"""
from __future__ import annotations

import torch
from torch import Tensor

from xmask_cli.model.attention.structural import StructuralAttention
from xmask_cli.model.logsmask import DenseStructure, SparseStructure, XLogSMaskBias
from xmask_cli.model.tracing import exporting


class MaskMemo:
    """The last dense attention mask and sparse bias per slot (``'blocks'``, ``'output'``) and what they
    were built from."""

    def __init__(self) -> None:
        # Per mask: (powers, mask, version of powers, dtype, attn_mask) of the last dense forward.
        self.dense: dict[str, tuple] = {}
        # Per bias: (edge_index, values, their versions, bias) of the last sparse forward.
        self.sparse: dict[str, tuple] = {}

    def dense_attn_mask(self, bias_module: XLogSMaskBias | None, attn: torch.nn.Module | None,
                        powers: Tensor | None, mask: Tensor, dtype: torch.dtype, which: str = "blocks") -> Tensor | None:
        """The blocks' shared SDPA mask (bias as it enters the logits, ``-inf`` at padded keys).

        Built once per forward, not once per layer. The bias has no parameters,
        so for the same ``powers`` and ``mask`` tensors, unmodified (full-graph
        node training feeds the same ones every step), the last mask is reused.
        ``which``: the memo's slot (``'blocks'``, or ``'output'``: the attention output layer's mask, its
        own bias and heads); ``attn``: the attention that reads the mask (None: no blocks).
        """
        if bias_module is not None and powers is None:
            raise ValueError("use_bias=True needs `powers` [B, K, N, N]")
        traced = exporting()  # a traced program computes its mask; nothing is memoised
        memo = None if traced else self.dense.get(which)
        # Tensor._version counts in-place writes: the only way to see `powers` changed under the same identity
        # (PyTorch has no public equivalent); a stale mask after powers.mul_() would be silently wrong.
        version = None if powers is None else powers._version
        # Powers by identity (an N x N compare would cost what it saves), the small mask by value.
        if (memo is not None and memo[0] is powers and memo[2] == version and memo[3] == dtype
                and memo[1].shape == mask.shape and memo[1].device == mask.device and torch.equal(memo[1], mask)):
            return memo[4]
        bias = None if bias_module is None or powers is None else bias_module(DenseStructure(powers=powers, mask=mask))
        if attn is not None and not isinstance(attn, StructuralAttention):
            raise ValueError("attention experts attend over their token masks, not a dense padded batch")
        attn_mask = attn.dense_mask(bias, mask, dtype) if attn is not None else None
        if not traced:  # holding `powers` keeps its id from being reused by another tensor while memoised
            self.dense[which] = (powers, mask.clone(), version, dtype, attn_mask)
        return attn_mask

    def sparse_bias(self, bias_module: XLogSMaskBias, edge_index: Tensor, values: Tensor, which: str) -> Tensor:
        """``[E, H]`` X-LogSMask bias at the pairs, reused while ``edge_index`` and ``values`` are the same tensors.

        The bias has no parameters; full-graph sparse training feeds the same pairs every step, and a
        Cora-sized union (1 M pairs x 8 heads) costs a log and masks per step otherwise. Identity plus
        ``Tensor._version`` (in-place writes) decide, as for the dense mask (:meth:`dense_attn_mask`).
        """
        memo = self.sparse.get(which)
        if (memo is not None and memo[0] is edge_index and memo[1] is values
                and memo[2] == (edge_index._version, values._version)):
            return memo[3]
        bias = bias_module(SparseStructure(edge_index=edge_index, values=values))
        # Holding both inputs keeps their ids from being reused by other tensors while memoised.
        self.sparse[which] = (edge_index, values, (edge_index._version, values._version), bias)
        return bias
