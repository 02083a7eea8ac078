"""The scaled keep mask of :func:`~xmask_cli.model.packing.row_dropout` in one compiled pass on the CPU.

The torch form, ``(draws < threshold).to(dtype).mul_(scale)``, runs three elementwise kernels over the
mask (a compare, a bool-to-float conversion, a scaling), each of them slow on small int16 and bool
tensors; a graph-level step draws six such masks. This kernel writes the same numbers (``scale`` rounded
to the mask's float type where an element is kept, 0 elsewhere) in one pass.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from xmask_cli.structure.jit import numba

__all__ = ["keep_mask"]

#: Mask types the kernel writes; others (half precision) take the torch form.
_TYPES = {torch.float32: np.float32, torch.float64: np.float64}


@numba.njit(cache=True, nogil=True)
def _mask(draws, threshold, scale, out):  # pragma: no cover - compiled
    zero = scale - scale
    for i in range(draws.size):
        out[i] = scale if draws[i] < threshold else zero


def keep_mask(draws: Tensor, threshold: int, scale: float, dtype: torch.dtype) -> Tensor:
    """``(draws < threshold).to(dtype) * scale``, bit for bit, for int16 ``draws`` of any shape."""
    if draws.device.type != "cpu" or dtype not in _TYPES or not draws.is_contiguous():
        return (draws < threshold).to(dtype).mul_(scale)
    out = torch.empty(draws.shape, dtype=dtype)
    kind = _TYPES[dtype]
    # The float scalar as torch's mul_ rounds it: to the mask's type.
    _mask(draws.reshape(-1).numpy(), np.int16(threshold), kind(scale), out.view(-1).numpy())
    return out
