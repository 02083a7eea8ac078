"""Attention kernels of the model: the structural attention layer and the paths it runs on.

structural (:class:`~xmask_cli.model.attention.structural.StructuralAttention`: the X-LogSMask attention
layer, dense and sparse), pairs (its sparse path over given pairs), ops (parameter-free kernels), csr (each
head over its own support, on csr_fused's compiled CPU kernels or torch.sparse), sparse_linear (q, k, v of
sparse features as one CSR product), dualmode (dense or sparse per region, by density), path (which path
a full-graph batch takes).
"""
