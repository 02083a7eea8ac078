"""``sparse_linears`` against dense ``torch.nn.functional.linear`` on the same features (float64).

Features with empty rows and empty columns (the first and last feature never set), maps of different
widths, with and without a bias: outputs and the weight and bias gradients equal the dense computation's;
the features get no gradient; a dense input is refused.
"""
from __future__ import annotations

import pytest
import torch

from xmask_cli.model.attention.sparse_linear import sparse_linears


def _features(n: int = 40, f: int = 30, density: float = 0.1) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    x = torch.rand(n, f, generator=g, dtype=torch.float64)
    x = x * (torch.rand(n, f, generator=g, dtype=torch.float64) < density)
    x[3] = 0  # an empty row
    x[:, 0] = 0
    x[:, -1] = 0  # empty columns at both ends (the transposed pattern must keep its full height)
    return x


def test_equals_dense_linear_outputs_and_gradients() -> None:
    x = _features()
    g = torch.Generator().manual_seed(1)
    weights = [torch.randn(o, x.size(1), generator=g, dtype=torch.float64, requires_grad=True) for o in (8, 5, 8)]
    biases = [torch.randn(8, generator=g, dtype=torch.float64, requires_grad=True), None,
              torch.randn(8, generator=g, dtype=torch.float64, requires_grad=True)]
    upstream = [torch.randn(x.size(0), w.size(0), generator=g, dtype=torch.float64) for w in weights]

    def grads(outs: list[torch.Tensor]) -> list[torch.Tensor]:
        params = weights + [b for b in biases if b is not None]
        return list(torch.autograd.grad(sum((o * u).sum() for o, u in zip(outs, upstream)), params))

    want = [torch.nn.functional.linear(x, w, b) for w, b in zip(weights, biases)]
    xs = x.to_sparse().requires_grad_(False)
    got = sparse_linears(xs, weights, biases)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    for a, b in zip(grads(got), grads(want)):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_refuses_dense_input() -> None:
    with pytest.raises(ValueError, match="sparse COO"):
        sparse_linears(_features(), [torch.zeros(2, 30, dtype=torch.float64)], [None])
