"""Model core: structural biases, structure-aware attention, transformer blocks, the full network."""
from xmask_cli.model.attention.structural import MASK_SCALES, StructuralAttention
from xmask_cli.model.layers import NORMS, TransformerBlock
from xmask_cli.model.logsmask import DenseStructure, SparseStructure, StructuralBias, XLogSMaskBias
from xmask_cli.model.network import READOUTS, TASKS, ModelConfig, XMaskNet

__all__ = [
    "MASK_SCALES",
    "NORMS",
    "READOUTS",
    "TASKS",
    "DenseStructure",
    "ModelConfig",
    "SparseStructure",
    "StructuralAttention",
    "StructuralBias",
    "TransformerBlock",
    "XLogSMaskBias",
    "XMaskNet",
]
