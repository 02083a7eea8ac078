"""Linear maps of sparse node features: ``x @ W^T + b`` for a sparse COO ``x``, as one CSR product.

``torch.nn.functional.linear`` on a COO tensor runs a general sparse ``addmm`` (on Cora's 2708 x 1433
bag-of-words, 1.3 % non-zero: ~2.3 ms a 64-wide map on one CPU thread), and its backward another. Here
the coalesced COO (row-major sorted already) is read as CSR without copying its pattern, the maps that
share the input are stacked into one product (the attention's q, k and v: one pass over ``x``), and
the weight gradient ``dW = g^T x`` is ``(x^T g)^T`` with ``x^T`` in CSR (one stable sort of the
columns a call). Features get no gradient: they are data.

Shapes:
    - **input:** ``x`` ``[N, F]`` sparse COO; weights ``[O_i, F]``, biases ``[O_i]`` or None
    - **output:** one ``[N, O_i]`` tensor per map
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from xmask_cli.model.attention.csr import crow_of, csr_tensor, transpose_pattern

__all__ = ["sparse_linears"]


class _CsrLinearF(torch.autograd.Function):
    """``X @ W^T`` for ``X`` given as COO parts (row-major sorted); gradient for ``W`` only."""

    @staticmethod
    def forward(ctx: Any, row: Tensor, col: Tensor, values: Tensor, n_rows: int, n_features: int,
                weight: Tensor) -> Tensor:
        ctx.save_for_backward(row, col, values)
        ctx.shape = (n_rows, n_features)
        x = csr_tensor(crow_of(row, n_rows)[0], col, values.to(weight.dtype), (n_rows, n_features))
        return x @ weight.t()

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        if not ctx.needs_input_grad[5]:
            return None, None, None, None, None, None
        row, col, values = ctx.saved_tensors
        n_rows, n_features = ctx.shape
        perm, crow_t, col_t = transpose_pattern(row, col, n_features)
        x_t = csr_tensor(crow_t, col_t, values.index_select(0, perm).to(grad_out.dtype), (n_features, n_rows))
        return None, None, None, None, None, (x_t @ grad_out.contiguous()).t()


def sparse_linears(x: Tensor, weights: Sequence[Tensor], biases: Sequence[Tensor | None]) -> list[Tensor]:
    """``[x @ W_i^T + b_i]`` for a sparse COO ``x``, in one CSR product over the stacked weights."""
    if not x.is_sparse:
        raise ValueError("sparse_linears reads a sparse COO tensor; use torch.nn.functional.linear on dense x")
    x = x.coalesce()
    idx = x.indices()
    weight = weights[0] if len(weights) == 1 else torch.cat(list(weights), 0)
    out = _CsrLinearF.apply(idx[0], idx[1], x.values(), x.size(0), x.size(1), weight)
    parts = list(out.split([w.size(0) for w in weights], dim=1))
    return [p if b is None else p + b for p, b in zip(parts, biases)]
