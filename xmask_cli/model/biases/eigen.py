"""The eigen bias (Eigenformer-style): a learned weight on the Laplacian's pseudo-inverse."""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from xmask_cli.model.biases.base import LearnedBias, extra, finish_dense
from xmask_cli.structure.spectrum import ZERO_TOL


class EigenBias(LearnedBias):
    """Eigenformer-style bias: ``β_h Σ_k u_k(i) u_k(j) / λ_k`` over the non-zero eigenpairs.

    The sum is the pseudo-inverse of the normalized Laplacian (restricted to
    the cached eigenpairs), a resistance-like proximity; ``β`` starts at 0.

    Args:
        num_heads: heads served.
        tol: eigenvalues at or below it count as zero (one per connected component).
    """

    def __init__(self, num_heads: int, tol: float = ZERO_TOL):
        super().__init__()
        self.num_heads, self.tol = int(num_heads), float(tol)
        self.beta = torch.nn.Parameter(torch.zeros(num_heads))

    def _weights(self, vals: Tensor, valid: Tensor) -> Tensor:
        use = valid & (vals > self.tol)
        return torch.where(use, 1.0 / vals.clamp(min=self.tol), torch.zeros_like(vals))

    def forward(self, batch: Any, mask: Tensor | None = None, edge_index: Tensor | None = None) -> Tensor:
        """``[B, H, N, N]`` (dense extras) or ``[E, H]`` (sparse extras)."""
        dtype = self.beta.dtype
        vals, vecs, valid = extra(batch, "eig_vals").to(dtype), extra(batch, "eig_vecs").to(dtype), extra(batch, "eig_mask")
        w = self._weights(vals, valid)
        if edge_index is not None:
            row, col = edge_index
            kernel = (vecs[row] * vecs[col] * w[row]).sum(-1)  # [E]
            return kernel.unsqueeze(-1) * self.beta
        kernel = torch.einsum("bik,bk,bjk->bij", vecs, w, vecs)
        return finish_dense(kernel.unsqueeze(-1) * self.beta, mask, zero_diagonal=False)
