import numpy as np
import pytest
import torch

from tests.model.graphs import EPS, PATH_TRIANGLE, TWO_PARTS, norm_powers, union_pairs
from xmask_cli.model.logsmask import DenseStructure, SparseStructure, XLogSMaskBias


def _dense_batch(dtype=torch.float32):
    """Two graphs (6 and 8 nodes) padded to 8, K = 3."""
    p = np.zeros((2, 3, 8, 8))
    p[0, :, :6, :6] = norm_powers(PATH_TRIANGLE, 3)
    p[1] = norm_powers(TWO_PARTS, 3)
    mask = torch.zeros(2, 8, dtype=torch.bool)
    mask[0, :6] = True
    mask[1] = True
    return p, torch.from_numpy(p).to(dtype), mask


@pytest.mark.parametrize("outside", ["hard", "eps"])
def test_dense_default_heads_read_powers_one_to_h(outside):
    p, powers, mask = _dense_batch()
    bias = XLogSMaskBias(3, outside_support=outside)(DenseStructure(powers, mask))
    assert bias.shape == (2, 3, 8, 8) and bias.dtype == torch.float32
    want = np.log(p.astype(np.float32).astype(np.float64) + EPS)
    if outside == "hard":
        want = np.where(p > 0, want, -np.inf)
    np.testing.assert_allclose(bias[1].numpy(), want[1], rtol=1e-6)
    np.testing.assert_allclose(bias[0, :, :6, :6].numpy(), want[0, :, :6, :6], rtol=1e-6)
    # Absent pairs of a real graph: -inf under 'hard' (outside the support), log(eps) under 'eps'.
    assert bias[0, 0, 0, 5].item() == (-np.inf if outside == "hard" else pytest.approx(np.log(EPS), rel=1e-6))
    # Padding rows and columns are inert zeros.
    assert (bias[0, :, 6:, :] == 0).all() and (bias[0, :, :, 6:] == 0).all()


def test_dense_custom_head_powers_and_dict_batch():
    p, powers, mask = _dense_batch()
    bias = XLogSMaskBias(4, head_powers=[3, 1, 1, 2])({"powers": powers, "mask": mask})
    for h, k in enumerate([3, 1, 1, 2]):
        want = np.log(p[1, k - 1].astype(np.float32) + EPS)
        np.testing.assert_allclose(bias[1, h].numpy(), np.where(p[1, k - 1] > 0, want, -np.inf), rtol=1e-6)


def test_log_is_taken_in_float32_for_float16_powers():
    _, powers, mask = _dense_batch(torch.float16)
    bias = XLogSMaskBias(2, outside_support="eps")(DenseStructure(powers, mask))
    assert bias.dtype == torch.float32
    # In float16, 1e-30 would flush to 0 and log(0) = -inf.
    assert torch.isfinite(bias).all()
    assert np.isclose(bias[0, 0, 0, 5].item(), np.log(EPS), rtol=1e-6)


def test_float64_stays_float64():
    _, powers, mask = _dense_batch(torch.float64)
    assert XLogSMaskBias(2)(DenseStructure(powers, mask)).dtype == torch.float64


@pytest.mark.parametrize("outside", ["hard", "eps"])
def test_sparse_pairs(outside):
    p = norm_powers(PATH_TRIANGLE, 3)
    edge_index, values = union_pairs(p)
    bias = XLogSMaskBias(3, head_powers=[1, 2, 0], outside_support=outside)(SparseStructure(edge_index, values.float()))
    assert bias.shape == (edge_index.size(1), 3)
    row, col = edge_index.numpy()
    vals = p[[0, 1]][:, row, col].T
    want = np.log(vals.astype(np.float32) + EPS)
    if outside == "hard":  # pairs of the union (Â^3) support outside Â^1 / Â^2's own support
        assert (vals == 0).any()
        want = np.where(vals > 0, want, -np.inf)
    np.testing.assert_allclose(bias[:, :2].numpy(), want, rtol=1e-6)
    assert (bias[:, 2] == 0).all()  # k_h = 0: no log mask


def test_bad_configuration_is_refused():
    with pytest.raises(ValueError):
        XLogSMaskBias(3, head_powers=[1, 2])
    with pytest.raises(ValueError):
        XLogSMaskBias(2, head_powers=[-1, 1])
    with pytest.raises(ValueError):  # 0 turns a head's mask off; at least one head must keep one
        XLogSMaskBias(2, head_powers=[0, 0])
    _, powers, mask = _dense_batch()
    with pytest.raises(ValueError, match="K=3"):
        XLogSMaskBias(4)(DenseStructure(powers, mask))
    with pytest.raises(ValueError):
        XLogSMaskBias(2)({"powers": powers})
    with pytest.raises(ValueError, match="outside_support"):
        XLogSMaskBias(2, outside_support="soft")


def test_power_zero_turns_a_heads_mask_off():
    x, powers, mask = _dense_batch()
    got = XLogSMaskBias(3, head_powers=[2, 0, 1])(DenseStructure(powers, mask))
    want = XLogSMaskBias(2, head_powers=[2, 1])(DenseStructure(powers, mask))
    assert torch.equal(got[:, 1], torch.zeros_like(got[:, 1]))
    torch.testing.assert_close(got[:, [0, 2]], want)


@pytest.mark.parametrize("outside", ["hard", "eps"])
def test_log_powers_inplace_is_the_same_numbers_in_the_same_storage(outside):
    """The stream's in-place variant (no second [K, n, n] tensor for a large graph) gives the out-of-place bits."""
    from xmask_cli.model.logsmask import log_powers

    gen = torch.Generator().manual_seed(0)
    values = torch.rand(3, 40, 40, generator=gen)
    values[values < 0.6] = 0.0
    off = ~torch.eye(40, dtype=torch.bool)
    want = log_powers(values, 1e-30, outside, off_diagonal=off)
    scratch = values.clone()
    got = log_powers(scratch, 1e-30, outside, off_diagonal=off, inplace=True)
    assert got.data_ptr() == scratch.data_ptr() and torch.equal(got, want)
    assert bool(torch.isinf(want).any()) == (outside == "hard")
    with pytest.raises(ValueError, match="inplace"):
        log_powers(values.half(), 1e-30, outside, inplace=True)


def test_while_exporting_an_all_real_batch_takes_the_general_form_with_the_same_numbers(monkeypatch):
    """torch.export cannot branch on the mask's values: the general form (padding fill, a no-op here) must
    give the shortcut's numbers exactly, and the padded graph's fill must still happen."""
    p, powers, mask = _dense_batch()
    bias = XLogSMaskBias(3)
    full = mask.clone()
    full[0] = True
    eager = bias(DenseStructure(powers=powers, mask=full))
    eager_padded = bias(DenseStructure(powers=powers, mask=mask))
    monkeypatch.setattr(torch.compiler, "is_exporting", lambda: True)
    exporting = bias(DenseStructure(powers=powers, mask=full))
    assert torch.equal(exporting, eager)
    assert torch.isneginf(eager).any()  # off-support pairs: -inf survives the general form unchanged
    assert torch.equal(bias(DenseStructure(powers=powers, mask=mask)), eager_padded)
    assert (eager_padded[0, :, 6:, :] == 0).all() and (eager_padded[0, :, :, 6:] == 0).all()
