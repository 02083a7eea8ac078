"""What every learned bias shares: the extras lookup, slicing a pair MLP into chunks, and the dense / sparse
finishing (layout, zero on padded pairs and on the diagonal), against hand-built tensors."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from xmask_cli.model.biases import base
from xmask_cli.model.biases.base import extra, finish_dense, finish_sparse, in_chunks, linear_at


def test_extra_reads_a_mapping_or_an_attribute_and_names_what_is_missing():
    t = torch.ones(2)
    assert extra({"spd": t}, "spd") is t and extra(SimpleNamespace(spd=t), "spd") is t
    with pytest.raises(ValueError, match="needs `rrwp` in the batch; prepare the cache with its structure section"):
        extra({"spd": t}, "rrwp")


def test_in_chunks_cuts_about_chunk_floats_per_slice_and_concatenates_in_order(monkeypatch):
    monkeypatch.setattr(base, "CHUNK_FLOATS", 12)
    calls = []

    def fn(a: int, b: int) -> torch.Tensor:
        calls.append((a, b))
        return torch.arange(a, b).repeat(2, 1)  # [2, b - a]

    with torch.no_grad():
        out = in_chunks(fn, 10, per_item=5, dim=1)  # 12 // 5 = 2 items per slice
    assert calls == [(0, 2), (2, 4), (4, 6), (6, 8), (8, 10)]
    assert torch.equal(out, torch.arange(10).repeat(2, 1))
    calls.clear()
    assert torch.equal(in_chunks(fn, 3, per_item=4, dim=1), torch.arange(3).repeat(2, 1))  # fits: one call
    assert calls == [(0, 3)]
    calls.clear()
    in_chunks(fn, 3, per_item=100, dim=1)  # an item above the budget: one item per slice, never zero
    assert calls == [(0, 1), (1, 2), (2, 3)]


def test_in_chunks_gradients_through_checkpointed_slices_equal_one_pass(monkeypatch):
    w = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    x = torch.randn(9, 4, dtype=torch.float64)
    grads = []
    with torch.enable_grad():
        for floats in (1 << 24, 2):
            monkeypatch.setattr(base, "CHUNK_FLOATS", floats)
            in_chunks(lambda a, b: torch.tanh(x[a:b] @ w), 9, per_item=1, dim=0).square().sum().backward()
            grads.append(w.grad.clone())
            w.grad = None
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-12, atol=1e-12)


def test_finish_dense_puts_heads_first_and_zeroes_padding_and_the_diagonal():
    out = torch.arange(1, 1 + 2 * 3 * 3 * 2, dtype=torch.float32).reshape(2, 3, 3, 2)  # [B, N, N, H]
    mask = torch.tensor([[True, True, True], [True, True, False]])
    got = finish_dense(out, mask, zero_diagonal=True)
    assert got.shape == (2, 2, 3, 3)
    for b in range(2):
        for h in range(2):
            for i in range(3):
                for j in range(3):
                    real = bool(mask[b, i]) and bool(mask[b, j]) and i != j
                    assert got[b, h, i, j] == (out[b, i, j, h] if real else 0)
    assert torch.equal(finish_dense(out, None, zero_diagonal=False), out.permute(0, 3, 1, 2))
    full = torch.ones(2, 3, dtype=torch.bool)
    assert torch.equal(finish_dense(out, full, zero_diagonal=False), out.permute(0, 3, 1, 2))


def test_finish_sparse_zeroes_self_pairs_only_when_asked():
    out = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    ei = torch.tensor([[0, 1, 2], [1, 1, 0]])  # the middle pair is a self pair
    assert torch.equal(finish_sparse(out, ei, zero_diagonal=True), torch.tensor([[1.0, 2.0], [0.0, 0.0], [5.0, 6.0]]))
    assert finish_sparse(out, ei, zero_diagonal=False) is out


def test_linear_at_gives_the_linear_layer_and_refuses_another():
    first = torch.nn.Linear(3, 4)
    mlp = torch.nn.Sequential(first, torch.nn.ReLU(), torch.nn.Linear(4, 2))
    assert linear_at(mlp, 0) is first and linear_at(mlp, 2).out_features == 2
    with pytest.raises(TypeError, match="layer 1 of Sequential is a ReLU"):
        linear_at(mlp, 1)
