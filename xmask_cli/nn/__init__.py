"""X-LogSMask attention and transformer block as modules for a user's own PyG model.

They are the modules ``xmask train`` builds, with every switch the model has: the attention is
:class:`~xmask_cli.model.attention.StructuralAttention`, the block
:class:`~xmask_cli.model.layers.TransformerBlock`, the log mask
:class:`~xmask_cli.model.logsmask.XLogSMaskBias`, and the path (dense grid or sparse pairs) is
chosen as a full-graph node run chooses it. They take node features and the pairs
:class:`~xmask_cli.transforms.AddLogSMask` puts on a ``Data`` (one graph or a PyG batch), so::

    data = AddLogSMask(k=4)(data)
    attn = XLogSMaskAttention(in_channels=16, out_channels=64, heads=4)
    out = attn(x, data.logsmask_index, data.logsmask_values)                 # [N, 64]
    out = attn(x, batch.logsmask_index, batch.logsmask_values, batch.batch)  # a DataLoader batch
    out, (pairs, alpha) = attn(x, data.logsmask_index, data.logsmask_values, return_attention_weights=True)

    block = XLogSMaskBlock.from_run("runs/mutag/0", layer=0)                 # a trained run's block

Both paths give the same numbers (pairs outside a head's stored support weigh 0 on both,
``outside_support='hard'``); they differ in cost.
"""
from __future__ import annotations

from xmask_cli.nn.layers import XLogSMaskAttention, XLogSMaskBlock

__all__ = ["XLogSMaskAttention", "XLogSMaskBlock"]
