"""Model core: structural biases, structure-aware attention, transformer blocks."""
from xmask_cli.model.attention import MASK_SCALES, StructuralAttention
from xmask_cli.model.bias import BIASES, DenseStructure, SparseStructure, StructuralBias, XLogSMaskBias
from xmask_cli.model.layers import NORMS, TransformerBlock

__all__ = [
    "BIASES",
    "MASK_SCALES",
    "NORMS",
    "DenseStructure",
    "SparseStructure",
    "StructuralAttention",
    "StructuralBias",
    "TransformerBlock",
    "XLogSMaskBias",
]
