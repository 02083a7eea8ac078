"""Learned structural biases (GTLM, paper 002 §3.2 and Appendix A): SPD, RRWP, magnetic, eigen.

Each module serves ``num_heads`` heads (a subset of the attention's heads;
:class:`~xmask_cli.model.bias_stack.BiasStack` places them) and reads one kind
of cached structure from the batch's ``extras``:

=============  ==========================================  =================================
bias           dense extras (``[B, ...]``)                   sparse extras (per pair / node)
=============  ==========================================  =================================
``spd``        ``spd [B, N, N]`` hop distance                ``spd [E]``
``rrwp``       ``rrwp [B, S, N, N]`` walk probabilities       ``rrwp [E, S]``
``magnetic``   ``mag_vals [B, m]``, ``mag_vecs [B, N, m]``    ``mag_vals [N, m]``, ``mag_vecs [N, m]``
               (complex), ``mag_mask [B, m]``                (each node carries its graph's values)
``eigen``      ``eig_vals [B, m]``, ``eig_vecs [B, N, m]``,   ``eig_vals [N, m]``, ``eig_vecs [N, m]``,
               ``eig_mask [B, m]``                           ``eig_mask [N, m]``
=============  ==========================================  =================================

Every term is added to the logits after the ``1/sqrt(d_h)`` scaling, as GTLM
(paper 002, Eq. 1) adds it, whatever ``mask_scale`` says about the X-LogSMask
term (:mod:`~xmask_cli.model.attention`).

Hop distances follow the cache: ``d >= 0`` a distance, ``-1`` reachable but
beyond the cached cut-off, ``-2`` unreachable. Every module's output layer
starts at zero, so at initialisation a layer equals plain attention (GTLM
Appendix B), and every module gives 0 on padded pairs. SPD, RRWP and the
magnetic bias are 0 on the diagonal (a node with itself), as GTLM sets them.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from xmask_cli.model.bias import StructuralBias
from xmask_cli.structure.spectrum import ZERO_TOL

__all__ = ["SpdBias", "RrwpBias", "MagneticBias", "EigenBias", "LEARNED_BIASES", "NEEDS"]

#: Cache content each bias reads (``structure.<section>`` must be enabled at prepare).
NEEDS: dict[str, str] = {"spd": "spd", "rrwp": "rrwp", "magnetic": "magnetic", "eigen": "spectrum"}


def _get(extras: Any, name: str) -> Tensor:
    value = extras.get(name) if isinstance(extras, Mapping) else getattr(extras, name, None)
    if value is None:
        raise ValueError(f"this bias needs `{name}` in the batch; prepare the cache with its structure section enabled")
    return value


#: Floats of per-pair MLP activations computed at once (~64 MB in float32); see :func:`_in_chunks`.
CHUNK_FLOATS = 1 << 24


def _in_chunks(fn: Any, size: int, per_item: int, dim: int) -> Tensor:
    """``fn(start, stop)`` over slices of ``size`` items, concatenated along ``dim``.

    The per-pair MLPs (RRWP, magnetic) would otherwise hold ``[B, N, N, width]``
    activations for autograd: 14 GB for a PROTEINS batch. Each slice holds about
    :data:`CHUNK_FLOATS` floats and, when gradients are needed, is checkpointed
    (recomputed in the backward), so only the ``[.., H]`` outputs are kept.
    """
    step = max(1, CHUNK_FLOATS // max(per_item, 1))
    if step >= size:
        return fn(0, size)
    parts = []
    for start in range(0, size, step):
        stop = min(size, start + step)
        if torch.is_grad_enabled():
            parts.append(checkpoint(fn, start, stop, use_reentrant=False))
        else:
            parts.append(fn(start, stop))
    return torch.cat(parts, dim)


def _finish_dense(out: Tensor, mask: Tensor | None, zero_diagonal: bool) -> Tensor:
    """``[B, N, N, H] -> [B, H, N, N]``, 0 on padded pairs (and the diagonal)."""
    out = out.permute(0, 3, 1, 2)
    keep = None
    if mask is not None and not bool(mask.all()):
        keep = mask[:, None, :, None] & mask[:, None, None, :]
    if zero_diagonal:
        n = out.size(-1)
        off = ~torch.eye(n, dtype=torch.bool, device=out.device)[None, None]
        keep = off if keep is None else keep & off
    return out if keep is None else out * keep.to(out.dtype)


def _finish_sparse(out: Tensor, edge_index: Tensor, zero_diagonal: bool) -> Tensor:
    if not zero_diagonal:
        return out
    return out * (edge_index[0] != edge_index[1]).to(out.dtype).unsqueeze(-1)


class SpdBias(StructuralBias):
    """A learned scalar per head and hop distance (Graphormer/GTLM SPD bias).

    Buckets: ``1..max_distance`` their distance (farther cached distances
    clip to ``max_distance + 1``, as do pairs beyond the cache's cut-off),
    unreachable pairs ``max_distance + 2``; distance 0 (a node with itself)
    is bucket 0, fixed at 0.

    Args:
        num_heads: heads served.
        max_distance: largest distance with its own bucket.
    """

    def __init__(self, num_heads: int, max_distance: int = 8):
        super().__init__()
        if max_distance < 1:
            raise ValueError(f"max_distance must be >= 1, got {max_distance}")
        self.num_heads, self.max_distance = int(num_heads), int(max_distance)
        # padding_idx 0: the self bucket is zero and receives no gradient.
        self.table = torch.nn.Embedding(max_distance + 3, num_heads, padding_idx=0)
        torch.nn.init.zeros_(self.table.weight)

    def buckets(self, spd: Tensor) -> Tensor:
        """Bucket index of each cached distance (see the class docstring)."""
        d = spd.long()
        far = self.max_distance + 1
        b = torch.where(d > self.max_distance, torch.full_like(d, far), d)
        b = torch.where(d == -1, torch.full_like(d, far), b)
        return torch.where(d <= -2, torch.full_like(d, far + 1), b)

    def forward(self, batch: Any, mask: Tensor | None = None, edge_index: Tensor | None = None) -> Tensor:
        """``[B, H, N, N]`` from ``spd [B, N, N]`` (dense), or ``[E, H]`` from ``spd [E]`` (sparse)."""
        spd = _get(batch, "spd")
        out = self.table(self.buckets(spd))
        if edge_index is not None:
            return out
        return _finish_dense(out, mask, zero_diagonal=False)  # the self bucket is already 0


class RrwpBias(StructuralBias):
    """RRWP (GRIT/GTLM): the walk probabilities ``[I, P, ..., P^S-1]`` of a pair through an MLP.

    ``Linear(S, width) -> ReLU -> Linear(width, H)``; the last layer starts at zero.

    Args:
        num_heads: heads served.
        in_dim: walk channels ``S`` (``structure.rrwp.steps + 1``).
        width: hidden width.
    """

    def __init__(self, num_heads: int, in_dim: int = 17, width: int = 32):
        super().__init__()
        self.num_heads = int(num_heads)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(in_dim, width), torch.nn.ReLU(), torch.nn.Linear(width, num_heads))
        torch.nn.init.zeros_(self.mlp[2].weight)
        torch.nn.init.zeros_(self.mlp[2].bias)

    def forward(self, batch: Any, mask: Tensor | None = None, edge_index: Tensor | None = None) -> Tensor:
        """``[B, H, N, N]`` from ``rrwp [B, S, N, N]``, or ``[E, H]`` from ``rrwp [E, S]``."""
        rrwp = _get(batch, "rrwp").to(self.mlp[0].weight.dtype)  # the parameters' dtype (a .double() model too)
        width = self.mlp[0].out_features + rrwp.size(-1 if edge_index is not None else 1)
        if edge_index is not None:
            out = _in_chunks(lambda a, b: self.mlp(rrwp[a:b]), rrwp.size(0), width, 0)
            return _finish_sparse(out, edge_index, zero_diagonal=True)
        bsz, n = rrwp.size(0), rrwp.size(-1)
        # Query rows in chunks: [B, rows, N, S] -> [B, rows, N, H].
        out = _in_chunks(lambda a, b: self.mlp(rrwp[:, :, a:b].permute(0, 2, 3, 1)), n, bsz * n * width, 1)
        return _finish_dense(out, mask, zero_diagonal=True)


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


class MagneticBias(StructuralBias):
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

    def __init__(self, num_heads: int, width: int = 32):
        super().__init__()
        self.num_heads = int(num_heads)
        self.phi = _SetEncoder(width)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(2 * width, width), torch.nn.ReLU(), torch.nn.Linear(width, num_heads))
        torch.nn.init.zeros_(self.mlp[2].weight)
        torch.nn.init.zeros_(self.mlp[2].bias)

    def forward(self, batch: Any, mask: Tensor | None = None, edge_index: Tensor | None = None) -> Tensor:
        """``[B, H, N, N]`` (dense extras) or ``[E, H]`` (sparse extras, per-node eigenvalues)."""
        vals, vecs, valid = _get(batch, "mag_vals"), _get(batch, "mag_vecs"), _get(batch, "mag_mask")
        dtype = self.mlp[0].weight.dtype  # the parameters' dtype (a .double() model too)
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

            return _finish_sparse(_in_chunks(pairs, row.numel(), width, 0), edge_index, zero_diagonal=True)

        def rows(a: int, b: int) -> Tensor:
            ra, ia = vr[:, a:b], vi[:, a:b]
            real = torch.einsum("bik,bkw,bjk->bijw", ra, phi, vr) + torch.einsum("bik,bkw,bjk->bijw", ia, phi, vi)
            imag = torch.einsum("bik,bkw,bjk->bijw", ia, phi, vr) - torch.einsum("bik,bkw,bjk->bijw", ra, phi, vi)
            return self.mlp(torch.cat([real, imag], -1))

        bsz, n = vr.size(0), vr.size(1)
        width = 7 * phi.size(-1)  # real, imag, their concatenation, the hidden layer
        return _finish_dense(_in_chunks(rows, n, bsz * n * width, 1), mask, zero_diagonal=True)


class EigenBias(StructuralBias):
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
        vals, vecs, valid = _get(batch, "eig_vals").to(dtype), _get(batch, "eig_vecs").to(dtype), _get(batch, "eig_mask")
        w = self._weights(vals, valid)
        if edge_index is not None:
            row, col = edge_index
            kernel = (vecs[row] * vecs[col] * w[row]).sum(-1)  # [E]
            return kernel.unsqueeze(-1) * self.beta
        kernel = torch.einsum("bik,bk,bjk->bij", vecs, w, vecs)
        return _finish_dense(kernel.unsqueeze(-1) * self.beta, mask, zero_diagonal=False)


#: Bias type (``model.biases[].type``) -> module.
LEARNED_BIASES: dict[str, type[StructuralBias]] = {
    "spd": SpdBias,
    "rrwp": RrwpBias,
    "magnetic": MagneticBias,
    "eigen": EigenBias,
}
