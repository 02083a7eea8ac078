"""The memoised X-LogSMask mask: reused while its inputs are the same tensors, unmodified, rebuilt when they
change, its values against the formula written out densely in numpy (float64)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tests.model.graphs import adjacency, padded, union_pairs
from xmask_cli.model.network import ModelConfig, XMaskNet

HIDDEN, HEADS = 8, 2


def _model() -> XMaskNet:
    return XMaskNet(ModelConfig(in_dim=3, out_dim=2, hidden=HIDDEN, heads=HEADS, layers=2, task="graph",
                                graph_layout="padded")).eval()


def _graphs() -> tuple[torch.Tensor, torch.Tensor]:
    """A 4-path and a triangle, padded to 4 nodes: powers ``[2, 2, 4, 4]``, mask ``[2, 4]``."""
    return padded([adjacency(4, [(0, 1), (1, 2), (2, 3)]), adjacency(3, [(0, 1), (1, 2), (0, 2)])], HEADS)


def _dense(powers: torch.Tensor, mask: torch.Tensor, eps: float) -> np.ndarray:
    """Head ``h`` reads ``Â^{h+1}``: ``log(p + eps) / sqrt(d_h)`` at real pairs in the support (the self pair
    always), ``-inf`` off it, 0 at a padded query's real keys, ``-inf`` at every padded key."""
    p, m = powers.double().numpy(), mask.numpy()
    B, _, N, _ = p.shape
    out = np.zeros((B, HEADS, N, N))
    for b, h, i, j in np.ndindex(out.shape):
        if not m[b, j]:
            out[b, h, i, j] = -np.inf
        elif m[b, i]:
            v = p[b, h, i, j]
            out[b, h, i, j] = (math.log(v + eps) if v > 0 or i == j else -np.inf) / math.sqrt(HIDDEN // HEADS)
    return out


def _check(got: torch.Tensor | None, powers: torch.Tensor, mask: torch.Tensor, eps: float) -> None:
    assert got is not None
    np.testing.assert_allclose(got.double().numpy(), _dense(powers, mask, eps), rtol=1e-6)


def test_dense_mask_is_the_formula_and_is_reused_while_its_inputs_are_unchanged() -> None:
    model, (powers, mask) = _model(), _graphs()
    first = model._dense_attn_mask(powers, mask, torch.float64)
    _check(first, powers, mask, model.cfg.eps)
    assert np.isneginf(_dense(powers, mask, model.cfg.eps)).any()  # the case has pairs off the support
    # The same powers tensor and an equal mask (compared by value): the same mask object, not rebuilt.
    assert model._dense_attn_mask(powers, mask.clone(), torch.float64) is first


@pytest.mark.parametrize("change", ["in-place", "other tensor", "mask", "dtype"])
def test_dense_mask_is_rebuilt_when_an_input_changes(change: str) -> None:
    model, (powers, mask) = _model(), _graphs()
    dtype = torch.float64
    first = model._dense_attn_mask(powers, mask, dtype)
    if change == "in-place":
        powers[0].mul_(0.5)  # the same tensor written in place: its _version moves
    elif change == "other tensor":
        powers = powers.clone()
    elif change == "mask":
        mask = mask.clone()
        mask[0, 3] = False  # the path's last node now padding
    else:
        dtype = torch.float32
    again = model._dense_attn_mask(powers, mask, dtype)
    assert again is not first
    assert again is not None and again.dtype == dtype
    _check(again, powers, mask, model.cfg.eps)


def test_dense_mask_needs_powers_with_the_bias() -> None:
    model, (_, mask) = _model(), _graphs()
    with pytest.raises(ValueError, match="needs `powers`"):
        model._dense_attn_mask(None, mask, torch.float32)


def test_sparse_bias_is_the_formula_at_the_pairs_reused_and_rebuilt() -> None:
    """``log(v + eps)`` per head at each pair (``-inf`` at a zero off the diagonal), reused while ``edge_index``
    and ``values`` are the same tensors, unmodified."""
    model = _model()
    assert model.bias is not None
    ei, values = union_pairs(padded([adjacency(4, [(0, 1), (1, 2), (2, 3)])], HEADS)[0][0].numpy())

    def expected() -> np.ndarray:
        v, off = values.numpy(), (ei[0] != ei[1]).numpy()
        return np.array([[math.log(v[e, h] + model.cfg.eps) if v[e, h] > 0 or not off[e] else -np.inf
                          for h in range(HEADS)] for e in range(len(v))])

    first = model._sparse_bias(model.bias, ei, values, "blocks")
    np.testing.assert_allclose(first.double().numpy(), expected(), rtol=1e-6)
    assert np.isneginf(expected()).any()  # two-hop pairs are off Â^1's support
    assert model._sparse_bias(model.bias, ei, values, "blocks") is first
    assert model._sparse_bias(model.bias, ei, values.clone(), "blocks") is not first  # another tensor
    values[1:].mul_(0.25)  # in place: rebuilt, and the values follow
    again = model._sparse_bias(model.bias, ei, values, "blocks")
    assert again is not first
    np.testing.assert_allclose(again.double().numpy(), expected(), rtol=1e-6)


def test_while_exporting_the_mask_is_computed_not_memoised_and_equals_the_formula(monkeypatch) -> None:
    """A traced program must compute its mask from its inputs: nothing read from or written to the memo."""
    model, (powers, mask) = _model(), _graphs()
    eager = model._dense_attn_mask(powers, mask, torch.float64)
    full = torch.ones_like(mask)
    eager_full = model._dense_attn_mask(powers, full, torch.float64)
    model.memo.dense.clear()
    monkeypatch.setattr(torch.compiler, "is_exporting", lambda: True)
    got = model._dense_attn_mask(powers, mask, torch.float64)
    assert got is not eager and torch.equal(got, eager)
    _check(got, powers, mask, model.cfg.eps)
    # All real: the padding term is added (zeros) instead of skipped; the numbers are the shortcut's.
    got_full = model._dense_attn_mask(powers, full, torch.float64)
    assert torch.equal(got_full, eager_full)
    assert model.memo.dense == {}
