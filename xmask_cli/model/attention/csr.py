"""Sparse attention over each head's own support with CSR primitives.

What :meth:`~xmask_cli.model.attention.StructuralAttention.forward_pairs`
computes for its masked heads, without gathering ``[E, H, d_h]`` queries,
keys and values per pair (the ``TransformerConv`` way, which moves ~100x more
memory than the arithmetic needs). For head ``h`` and query ``i``::

    s_ij = t_ij + scale · q_i·k_j        over the pairs j of i where t_ij is finite
    a_ij = softmax_j(s_ij)              (a query without such a pair gets 0)
    o_i  = Σ_j a_ij v_j

``t`` is the logit term beside ``q·k`` (scaled X-LogSMask term plus a learned
bias). A pair with ``t = -inf`` (outside the head's stored support under
``outside_support='hard'``) weighs exactly 0 on every path, so it is simply
left out of that head's pattern: each head runs over its own support only
(on Cora ``Â^1`` holds 1 % of the union of ``Â^1..Â^4``).

The heads are stacked block-diagonally into one ``(H·Nq) x (H·Nk)`` CSR
matrix. On the CPU the default implementation is a pair of fused compiled
kernels over that pattern (:mod:`~xmask_cli.model.attention.csr_fused`: each row's
logits, softmax and weighted sum in one pass instead of a dozen tensors of
``P`` entries written and read back); elsewhere, and with ``impl='sparse'``, one call of each
``torch.sparse`` primitive serves every head:
``torch.sparse.sampled_addmm`` for the logits on the pattern, a segment
softmax over the CSR rows, and CSR @ dense for the values; the backward
(hand-written, :class:`_CsrAttention`) uses the same three, plus the
transposed pattern for ``dK`` and ``dV``. The pattern (:class:`CsrPlan`)
depends only on the pairs and on which logit terms are finite, so it is
memoised by the caller across steps while those stay the same.

Computation is in float32 (or float64 if given): sparse CPU kernels have no
bfloat16, and the softmax of log-mask logits belongs in float32 anyway.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from xmask_cli.model.attention.csr_fused import fused_backward, fused_forward

__all__ = ["CSR_IMPLS", "CsrPlan", "csr_plan", "csr_attention", "csr_tensor", "crow_of", "transpose_pattern"]

#: Implementations of :func:`csr_attention` (see its ``impl``).
CSR_IMPLS = ("auto", "fused", "sparse")


@dataclass
class CsrPlan:
    """The stacked per-head CSR pattern of a pair list (see the module docstring).

    Attributes:
        n_query, n_key, n_heads: ``Nq``, ``Nk`` and the number of stacked heads.
        pick: ``[P]`` index into the flattened ``[E, H]`` logit term of each stacked entry.
        crow, col: CSR of the ``(n_heads·Nq) x (n_heads·Nk)`` pattern, rows sorted, columns sorted per row.
        row: ``[P]`` stacked row of each entry (for segment reductions).
        lengths: ``[n_heads·Nq]`` entries per stacked row.

    The transposed pattern (for ``dK`` and ``dV``) costs a sort, so it is
    made on the first backward only (:meth:`transposed`): evaluation and
    the query path's no-grad chunks never pay for it.
    """

    n_query: int
    n_key: int
    n_heads: int
    pick: Tensor
    crow: Tensor
    col: Tensor
    row: Tensor
    lengths: Tensor
    _transposed: tuple[Tensor, Tensor, Tensor] | None = None

    @property
    def nnz(self) -> int:
        """Stacked entries ``P`` (pairs summed over heads)."""
        return int(self.col.numel())

    def transposed(self) -> tuple[Tensor, Tensor, Tensor]:
        """``(perm_t, crow_t, col_t)``: entries in transposed order and the transposed CSR (made once)."""
        if self._transposed is None:
            self._transposed = transpose_pattern(self.row, self.col, self.n_heads * self.n_key)
        return self._transposed


def crow_of(sorted_rows: Tensor, n_rows: int) -> tuple[Tensor, Tensor]:
    """CSR row pointers and per-row counts of sorted row ids."""
    lengths = torch.bincount(sorted_rows, minlength=n_rows)
    crow = torch.zeros(n_rows + 1, dtype=torch.long, device=sorted_rows.device)
    torch.cumsum(lengths, 0, out=crow[1:])
    return crow, lengths


def transpose_pattern(row: Tensor, col: Tensor, n_cols: int) -> tuple[Tensor, Tensor, Tensor]:
    """``(perm, crow_t, col_t)`` of a row-sorted pattern ``(row, col)``: its entries in transposed order and
    the transposed CSR (``n_cols`` rows). A stable sort keeps the rows sorted within each transposed row."""
    perm = torch.argsort(col, stable=True)
    crow_t, _ = crow_of(col.index_select(0, perm), n_cols)
    return perm, crow_t, row.index_select(0, perm)


def csr_plan(edge_index: Tensor, n_query: int, n_key: int, heads: tuple[int, ...], num_heads: int,
             finite: Tensor | None) -> CsrPlan:
    """Build the stacked CSR pattern of ``heads`` over the pairs ``edge_index``.

    Args:
        edge_index: ``[2, E]`` pairs, row = query (``< n_query``), col = key (``< n_key``).
        heads: the heads to stack (0-based, in this order).
        num_heads: ``H``, the width of the ``[E, H]`` logit term ``pick`` indexes.
        finite: ``[E, len(heads)]`` bool, True where that head's logit term is
            finite (the pair is in its support); None: every pair in every head.
    """
    device = edge_index.device
    row, col = edge_index[0].long(), edge_index[1].long()
    E, S = row.numel(), len(heads)
    key = row * n_key + col
    # Cache pairs come row-major sorted already; sort only when they are not.
    order = None if E < 2 or bool((key[1:] >= key[:-1]).all()) else torch.argsort(key, stable=True)
    if order is not None:
        row, col = row.index_select(0, order), col.index_select(0, order)
    eids = torch.arange(E, device=device) if order is None else order
    head_ids = torch.tensor(heads, dtype=torch.long, device=device)
    if finite is None:
        keep_e = eids.repeat(S)
        keep_h = torch.arange(S, device=device).repeat_interleave(E)
        pos = torch.arange(E, device=device).repeat(S)
    else:
        fin = finite if order is None else finite.index_select(0, order)
        keep_h, pos = fin.t().nonzero(as_tuple=True)  # head-major, then pair order: stacked rows stay sorted
        keep_e = eids.index_select(0, pos)
    srow = keep_h * n_query + row.index_select(0, pos)
    scol = keep_h * n_key + col.index_select(0, pos)
    pick = keep_e * num_heads + head_ids.index_select(0, keep_h)
    crow, lengths = crow_of(srow, S * n_query)
    return CsrPlan(n_query, n_key, S, pick, crow, scol, srow, lengths)


def csr_tensor(crow: Tensor, col: Tensor, values: Tensor, shape: tuple[int, int]) -> Tensor:
    """A CSR tensor of a pattern already known valid (no invariant check)."""
    with warnings.catch_warnings():  # "CSR support is in beta": said once per process, not actionable here
        warnings.simplefilter("ignore")
        return torch.sparse_csr_tensor(crow, col, values, shape, check_invariants=False)


def _row_softmax(s: Tensor, plan: CsrPlan) -> Tensor:
    """Softmax of the entries ``s [P]`` over each stacked CSR row (all entries finite)."""
    n_rows = plan.n_heads * plan.n_query
    top = torch.full((n_rows,), float("-inf"), dtype=s.dtype, device=s.device)
    top.scatter_reduce_(0, plan.row, s, "amax")
    e = (s - top.index_select(0, plan.row)).exp_()
    total = torch.segment_reduce(e, "sum", lengths=plan.lengths, unsafe=True)
    return e.div_(total.index_select(0, plan.row))


class _CsrAttention(torch.autograd.Function):
    """Stacked CSR attention with a hand-written backward (see the module docstring)."""

    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, v: Tensor, term: Tensor, plan: CsrPlan, scale: float,
                dropout_p: float, fused: bool) -> Tensor:
        ctx.plan, ctx.scale, ctx.fused, ctx.dropout_p = plan, scale, fused, dropout_p
        if fused:
            # The seed comes from torch's generator: torch.manual_seed repeats the dropout draws.
            seed = int(torch.randint(0, 2**62, (1,)).item()) if dropout_p > 0 else 0
            out, a = fused_forward(plan.crow, plan.col, term, q, k, v, scale, dropout_p, seed)
            ctx.seed = seed
            ctx.save_for_backward(q, k, v, a)
            return out
        M, Nk = plan.n_heads * plan.n_query, plan.n_heads * plan.n_key
        s = torch.sparse.sampled_addmm(csr_tensor(plan.crow, plan.col, term, (M, Nk)), q, k.t(),
                                       beta=1.0, alpha=scale).values()
        a = _row_softmax(s, plan)
        keep = None
        w = a
        if dropout_p > 0:
            keep = torch.empty_like(a).bernoulli_(1.0 - dropout_p).div_(1.0 - dropout_p)
            w = a * keep
        out = csr_tensor(plan.crow, plan.col, w, (M, Nk)) @ v
        ctx.save_for_backward(q, k, v, a, keep)
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        plan, scale = ctx.plan, ctx.scale
        if ctx.fused:
            q, k, v, a = ctx.saved_tensors
            grads = fused_backward(plan.crow, plan.col, a, q, k, v, grad_out, scale, ctx.dropout_p, ctx.seed,
                                   plan.n_heads)  # (dq, dk, dv, d_s)
            return (*grads, None, None, None, None)
        q, k, v, a, keep = ctx.saved_tensors
        M, Nk = plan.n_heads * plan.n_query, plan.n_heads * plan.n_key
        grad_out = grad_out.contiguous()
        pattern = csr_tensor(plan.crow, plan.col, a, (M, Nk))
        d_w = torch.sparse.sampled_addmm(pattern, grad_out, v.t(), beta=0.0).values()  # dO·v_j on the pattern
        d_a = d_w if keep is None else d_w * keep
        dq: Tensor | None = None
        dk: Tensor | None = None
        dv: Tensor | None = None
        perm_t, crow_t, col_t = plan.transposed()
        if ctx.needs_input_grad[2]:
            w = a if keep is None else a * keep
            dv = csr_tensor(crow_t, col_t, w.index_select(0, perm_t), (Nk, M)) @ grad_out
        # Softmax backward per row: a * (dA - Σ_j a_j dA_j).
        row_dot = torch.segment_reduce(a * d_a, "sum", lengths=plan.lengths, unsafe=True)
        d_s = a * (d_a - row_dot.index_select(0, plan.row))
        if ctx.needs_input_grad[0]:
            dq = (csr_tensor(plan.crow, plan.col, d_s, (M, Nk)) @ k).mul_(scale)
        if ctx.needs_input_grad[1]:
            dk = (csr_tensor(crow_t, col_t, d_s.index_select(0, perm_t), (Nk, M)) @ q).mul_(scale)
        return dq, dk, dv, d_s, None, None, None, None


def csr_attention(q: Tensor, k: Tensor, v: Tensor, term: Tensor | None, plan: CsrPlan, heads: tuple[int, ...],
                  scale: float, dropout_p: float = 0.0, picked: Tensor | None = None,
                  impl: str = "auto") -> Tensor:
    """Aggregate ``[Nq, len(heads), d_h]`` of ``heads`` over their own supports (autograd-capable).

    Args:
        q: ``[Nq, H, d_h]``; k, v: ``[Nk, H, d_h]`` (all heads; ``heads`` are taken out).
        term: ``[E, H]`` logit term beside ``scale·q·k`` (``-inf`` outside a
            head's support), or None (0 everywhere).
        plan: :func:`csr_plan` of the same pairs, ``heads`` and finiteness.
        scale: ``1/sqrt(d_h)``.
        dropout_p: dropout on the attention weights (0 in evaluation).
        picked: ``term`` already taken at the plan's entries (``[P]``, ``term.reshape(-1)[plan.pick]``);
            ``term`` is then ignored (a caller reusing one parameter-free term across steps).
        impl: ``fused`` (the compiled CPU kernels of :mod:`~xmask_cli.model.attention.csr_fused`), ``sparse`` (the
            ``torch.sparse`` primitives, any device) or ``auto`` (fused on the CPU, sparse elsewhere).
            Both compute the same numbers; attention dropout draws its masks differently.
    """
    if impl not in CSR_IMPLS:
        raise ValueError(f"impl must be one of {CSR_IMPLS}, got {impl!r}")
    fused = impl == "fused" or (impl == "auto" and q.device.type == "cpu")
    if fused and q.device.type != "cpu":
        raise ValueError("the fused CSR kernels run on the CPU only: use impl='sparse' on another device")
    dtype = torch.promote_types(q.dtype, torch.float32)
    S, nq, nk, d = len(heads), plan.n_query, plan.n_key, q.size(-1)
    idx = torch.tensor(heads, dtype=torch.long, device=q.device)

    def stack(t: Tensor, n: int) -> Tensor:  # [n, H, d] -> [S·n, d], head-major like the plan's rows
        return t.index_select(1, idx).to(dtype).transpose(0, 1).reshape(S * n, d)

    if picked is not None:
        vals = picked.to(dtype)
    elif term is None:
        vals = torch.zeros(plan.nnz, dtype=dtype, device=q.device)
    else:
        vals = term.to(dtype).reshape(-1).index_select(0, plan.pick)
    with torch.autocast(device_type=q.device.type, enabled=False):
        out = _CsrAttention.apply(stack(q, nq), stack(k, nk), stack(v, nk), vals, plan, scale, dropout_p, fused)
    return out.view(S, nq, d).transpose(0, 1)
