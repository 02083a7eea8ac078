"""Fused CPU kernels of the stacked CSR attention: one pass over each row's entries, compiled by numba.

The same arithmetic as the ``torch.sparse`` primitives of :mod:`~xmask_cli.model.attention.csr`
(``sampled_addmm``, a segment softmax, CSR @ dense, and in the backward the transposed pattern), but each
row's logits, softmax and weighted sum are formed in registers instead of as ``[P]`` tensors written and
read back by a dozen separate kernels; on Cora's ``Â^1..Â^4`` heads (2.9 M stacked entries) that is most
of an epoch. For stacked row ``r`` (head ``h``, query ``i``) over its entries ``e`` with key ``j``::

    s_e = t_e + scale · q_r·k_j,   a_e = softmax_e(s_e),   o_r = Σ_e w_e v_j,   w_e = a_e · keep_e / (1 - p)

and the backward, with ``g = dL/do``::

    dA_e = keep_e / (1 - p) · g_r·v_j,   dS_e = a_e (dA_e - Σ_e' a_e' dA_e')
    dq_r = scale Σ_e dS_e k_j,   dk_j += scale dS_e q_r,   dv_j += w_e g_r,   dt_e = dS_e

Attention dropout draws ``keep_e`` from a counter-based hash of ``(seed, e)`` (SplitMix64's finaliser):
the backward recomputes the same mask instead of storing it, and the seed comes from torch's generator,
so ``torch.manual_seed`` makes a run repeatable as on the other path. Forward rows run in parallel over
numba's threads; the backward runs a head per thread (the stacked heads' keys are disjoint blocks, so the
scatters into ``dk`` and ``dv`` never race). The thread count follows ``torch.get_num_threads()``, so a
process limited to one thread for torch is limited for these kernels too.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from xmask_cli.structure.jit import numba

__all__ = ["fused_backward", "fused_forward", "keep_mask"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
# Reassociation and FMA contraction let the d-wide dot products vectorise; no "finite-only" flags, since
# log-mask terms of -inf size are legal inputs of the softmax's arithmetic.
_FAST = {"reassoc", "contract", "arcp"}


@numba.njit(cache=True, nogil=True, inline="always")
def _bits(seed, e):  # pragma: no cover - compiled
    """64 random bits for entry ``e``: SplitMix64's finaliser of ``seed + e·golden``."""
    x = seed + np.uint64(e) * _GOLDEN
    x = (x ^ (x >> _S30)) * _M1
    x = (x ^ (x >> _S27)) * _M2
    return x ^ (x >> _S31)


@numba.njit(cache=True, nogil=True, parallel=True, fastmath=_FAST)
def _forward(crow, col, term, q, k, v, one, scale, keep_scale, threshold, seed, a, out):  # pragma: no cover - compiled
    n_rows, d = out.shape
    zero = one - one  # every scalar stays in the arrays' float type (numba widens float32 op int to float64)
    for r in numba.prange(n_rows):
        s0, s1 = crow[r], crow[r + 1]
        orow, qr = out[r], q[r]
        for c in range(d):
            orow[c] = zero
        if s1 == s0:
            continue
        for e in range(s0, s1):
            kj = k[col[e]]
            acc = zero
            for c in range(d):
                acc += qr[c] * kj[c]
            a[e] = term[e] + scale * acc
        top = a[s0]
        for e in range(s0 + 1, s1):
            top = max(top, a[e])
        total = zero
        for e in range(s0, s1):
            x = np.exp(a[e] - top)
            a[e] = x
            total += x
        inv = one / total
        for e in range(s0, s1):
            w = a[e] * inv
            a[e] = w
            if threshold > 0:  # a select, not a branch: a random branch would mispredict half the time
                w = w * (keep_scale if _bits(seed, e) >= threshold else zero)
            vj = v[col[e]]
            for c in range(d):
                orow[c] += w * vj[c]


@numba.njit(cache=True, nogil=True, parallel=True, fastmath=_FAST)
def _backward(crow, col, a, q, k, v, g, one, scale, keep_scale, threshold, seed, n_heads,
              dq, dk, dv, ds):  # pragma: no cover - compiled
    n_rows, d = g.shape
    per_head = n_rows // n_heads
    zero = one - one  # every scalar stays in the arrays' float type (numba widens float32 op int to float64)
    for h in numba.prange(n_heads):
        for r in range(h * per_head, (h + 1) * per_head):
            s0, s1 = crow[r], crow[r + 1]
            gr, qr, dqr = g[r], q[r], dq[r]
            row_dot = zero
            for e in range(s0, s1):
                vj = v[col[e]]
                acc = zero
                for c in range(d):
                    acc += gr[c] * vj[c]
                if threshold > 0:
                    acc = acc * (keep_scale if _bits(seed, e) >= threshold else zero)
                ds[e] = acc
                row_dot += a[e] * acc
            for e in range(s0, s1):
                j = col[e]
                w = a[e]
                if threshold > 0:
                    w = w * (keep_scale if _bits(seed, e) >= threshold else zero)
                s = a[e] * (ds[e] - row_dot)
                ds[e] = s
                ss = scale * s
                kj, dkj, dvj = k[j], dk[j], dv[j]
                for c in range(d):
                    dqr[c] += ss * kj[c]
                    dkj[c] += ss * qr[c]
                    dvj[c] += w * gr[c]


@numba.njit(cache=True, nogil=True)
def _keep(n, threshold, seed, out):  # pragma: no cover - compiled
    for e in range(n):
        out[e] = _bits(seed, e) >= threshold


def _mask_args(dropout_p: float, seed: int, dtype: np.dtype) -> tuple[np.floating, np.uint64, np.uint64]:
    """``(1/(1-p), threshold, seed)``: an entry is kept when its 64 bits are ``>= threshold = p·2^64``
    (``threshold`` 0: no dropout)."""
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p}")
    threshold = min(int(dropout_p * 2.0**64), 2**64 - 1)
    return dtype.type(1.0 / (1.0 - dropout_p)), np.uint64(threshold), np.uint64(seed % 2**64)


def _threads() -> int:
    return max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS))  # type: ignore[attr-defined]


def fused_forward(crow: Tensor, col: Tensor, term: Tensor, q: Tensor, k: Tensor, v: Tensor, scale: float,
                  dropout_p: float, seed: int) -> tuple[Tensor, Tensor]:
    """``(out [M, d], a [P])``: the stacked rows' aggregate and their attention weights before dropout.

    ``q`` is ``[M, d]``, ``k, v`` ``[Nk_stacked, d]``, ``term`` ``[P]`` (the logit term at each entry), all
    of one float dtype on the CPU; ``crow`` / ``col`` the int64 CSR pattern.
    """
    q, k, v, term = (t.detach().contiguous() for t in (q, k, v, term))
    out = torch.empty_like(q)
    a = torch.empty(col.numel(), dtype=q.dtype)
    dtype = q.numpy().dtype
    keep_scale, threshold, seed64 = _mask_args(dropout_p, seed, dtype)
    numba.set_num_threads(_threads())
    _forward(crow.numpy(), col.numpy(), term.numpy(), q.numpy(), k.numpy(), v.numpy(), dtype.type(1),
             dtype.type(scale), keep_scale, threshold, seed64, a.numpy(), out.numpy())
    return out, a


def fused_backward(crow: Tensor, col: Tensor, a: Tensor, q: Tensor, k: Tensor, v: Tensor, grad_out: Tensor,
                   scale: float, dropout_p: float, seed: int, n_heads: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(dq, dk, dv, dterm)`` of :func:`fused_forward` for the output gradient ``grad_out [M, d]``."""
    q, k, v, g = (t.detach().contiguous() for t in (q, k, v, grad_out))
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    ds = torch.empty_like(a)
    dtype = q.numpy().dtype
    keep_scale, threshold, seed64 = _mask_args(dropout_p, seed, dtype)
    numba.set_num_threads(_threads())
    _backward(crow.numpy(), col.numpy(), a.numpy(), q.numpy(), k.numpy(), v.numpy(), g.numpy(), dtype.type(1),
              dtype.type(scale), keep_scale, threshold, seed64, int(n_heads), dq.numpy(), dk.numpy(), dv.numpy(), ds.numpy())
    return dq, dk, dv, ds


def keep_mask(n: int, dropout_p: float, seed: int) -> Tensor:
    """``[n]`` bool: which of the first ``n`` entries the fused kernels keep at ``dropout_p`` and ``seed``."""
    out = np.empty(n, dtype=np.bool_)
    _, threshold, seed64 = _mask_args(dropout_p, seed, np.dtype(np.float32))
    _keep(n, threshold, seed64, out)
    return torch.from_numpy(out)
