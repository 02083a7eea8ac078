"""The magnetic-Laplacian bias (GTLM Appendix A.2): the only learned bias that sees edge direction."""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from xmask_cli.config import BiasSection
from xmask_cli.model.biases.base import (
    BiasInputs,
    LearnedBias,
    extra,
    finish_dense,
    finish_sparse,
    in_chunks,
    linear_at,
)


class _SetEncoder(torch.nn.Module):
    """DeepSet over a graph's eigenvalues: ``phi(λ_k) = ρ([ψ(λ_k), mean_j ψ(λ_j)])``, width ``W``.

    Pooled by the mean over the graph's valid eigenvalues, as GTLM's
    ``φ(λ_i) = σ(W_2[Linear(λ_i) ⊕ mean(Linear(λ))])`` (paper 002, A.2), so the
    pooled term does not grow with the number of cached eigenpairs; ``ψ`` and
    ``ρ`` are two-layer MLPs (GTLM: one linear layer, then ``W_2`` and ``σ``).
    Equivariant in the order of the eigenvalues; padded ones (``valid`` False)
    neither contribute to the mean nor get a value.
    """

    def __init__(self, width: int):
        super().__init__()
        self.psi = torch.nn.Sequential(torch.nn.Linear(1, width), torch.nn.ReLU(), torch.nn.Linear(width, width))
        self.rho = torch.nn.Sequential(torch.nn.Linear(2 * width, width), torch.nn.ReLU(), torch.nn.Linear(width, width))

    def forward(self, vals: Tensor, valid: Tensor) -> Tensor:
        keep = valid.unsqueeze(-1).to(vals.dtype)
        psi = self.psi(vals.unsqueeze(-1)) * keep  # [..., m, W]
        count = keep.sum(-2, keepdim=True).clamp(min=1)
        pooled = (psi.sum(-2, keepdim=True) / count).expand_as(psi)
        return self.rho(torch.cat([psi, pooled], -1)) * keep


class MagneticBias(LearnedBias):
    """Magnetic-Laplacian bias (GTLM Appendix A.2): ``V diag(φ(λ)) V†`` through an MLP.

    ``φ`` is a DeepSet on the eigenvalues (width ``W`` channels), so the kernel
    ``K_w = Σ_k φ_w(λ_k) v_k v_k†`` is invariant to the eigenvectors' phases
    and to any unitary basis of a repeated eigenvalue. Its real and imaginary
    parts ``[2W]`` per pair go through ``Linear -> ReLU -> Linear(H)`` (last
    layer zero at start). The imaginary part is antisymmetric in ``(i, j)``: it
    is the only structure that sees edge direction.

    Args:
        num_heads: heads served.
        width: ``W`` (32 by default, as GTLM).
    """

    def __init__(self, num_heads: int, width: int = BiasSection.width):
        super().__init__()
        self.num_heads = int(num_heads)
        self.phi = _SetEncoder(width)
        first, last = torch.nn.Linear(2 * width, width), torch.nn.Linear(width, num_heads)  # drawn in this order
        self.mlp = torch.nn.Sequential(first, torch.nn.ReLU(), last)
        torch.nn.init.zeros_(last.weight)
        torch.nn.init.zeros_(last.bias)

    @classmethod
    def from_spec(cls, spec: BiasSection, num_heads: int, inputs: BiasInputs) -> MagneticBias:
        """``spec.width`` channels."""
        return cls(num_heads, spec.width)

    def forward(self, batch: Any, mask: Tensor | None = None, edge_index: Tensor | None = None) -> Tensor:
        """``[B, H, N, N]`` (dense extras) or ``[E, H]`` (sparse extras, per-node eigenvalues)."""
        vals, vecs, valid = extra(batch, "mag_vals"), extra(batch, "mag_vecs"), extra(batch, "mag_mask")
        dtype = linear_at(self.mlp, 0).weight.dtype  # the parameters' dtype (a .double() model too)
        phi = self.phi(vals.to(dtype), valid)  # [B, m, W] or [N, m, W]
        vr, vi = vecs.real.to(dtype), vecs.imag.to(dtype)
        if edge_index is not None:
            row, col = edge_index
            width = phi.size(-1) * (phi.size(-2) + 5)

            def pairs(a: int, b: int) -> Tensor:
                r, c = row[a:b], col[a:b]
                rr, ri, cr, ci = vr[r], vi[r], vr[c], vi[c]
                p = phi[r]  # [e, m, W]: the query's graph's φ (both ends share a graph)
                # v_i conj(v_j) = (a + ib)(c - id) = (ac + bd) + i(bc - ad)
                real = torch.einsum("ek,ekw->ew", rr * cr + ri * ci, p)
                imag = torch.einsum("ek,ekw->ew", ri * cr - rr * ci, p)
                return self.mlp(torch.cat([real, imag], -1))

            return finish_sparse(in_chunks(pairs, row.numel(), width, 0), edge_index, zero_diagonal=True)

        def rows(a: int, b: int) -> Tensor:
            ra, ia = vr[:, a:b], vi[:, a:b]
            real = torch.einsum("bik,bkw,bjk->bijw", ra, phi, vr) + torch.einsum("bik,bkw,bjk->bijw", ia, phi, vi)
            imag = torch.einsum("bik,bkw,bjk->bijw", ia, phi, vr) - torch.einsum("bik,bkw,bjk->bijw", ra, phi, vi)
            return self.mlp(torch.cat([real, imag], -1))

        bsz, n = vr.size(0), vr.size(1)
        width = 7 * phi.size(-1)  # real, imag, their concatenation, the hidden layer
        return finish_dense(in_chunks(rows, n, bsz * n * width, 1), mask, zero_diagonal=True)
