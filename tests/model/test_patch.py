"""The image level of the one model: patch embedding, class token vs the grid mask, positions, equivariances."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from xmask_cli.model.batches import DenseBatch
from xmask_cli.model.network import ModelConfig, XMaskNet


def grid_powers(rows: int, cols: int, k: int) -> np.ndarray:
    """``[K, N, N]`` dense ``Â^1..Â^K`` of the 4-neighbour grid, built from coordinates (not from grid_edges)."""
    n = rows * cols
    r, c = np.divmod(np.arange(n), cols)
    a = ((np.abs(r[:, None] - r[None]) + np.abs(c[:, None] - c[None])) == 1).astype(np.float64)
    ai = a + np.eye(n)
    d = ai.sum(1) ** -0.5
    a_hat = d[:, None] * ai * d[None]
    return np.stack([np.linalg.matrix_power(a_hat, i) for i in range(1, k + 1)])


def image_model(**kw) -> XMaskNet:
    base = dict(in_dim=1, out_dim=10, hidden=32, heads=4, layers=2, task="image", encoder="patch",
                image_size=(8, 8), patch_size=2, readout="cls", dropout=0.0)
    base.update(kw)
    torch.manual_seed(0)
    return XMaskNet(ModelConfig(**base)).eval()


POWERS = torch.from_numpy(grid_powers(4, 4, 4)).float()[None]  # [1, K, 16, 16]


def permute_patches(x: torch.Tensor, perm: np.ndarray, p: int = 2) -> torch.Tensor:
    """Move patch perm[j] of every image to position j (row-major patches of side p)."""
    b, c, h, w = x.shape
    rows, cols = h // p, w // p
    patches = x.reshape(b, c, rows, p, cols, p).permute(0, 2, 4, 1, 3, 5).reshape(b, rows * cols, c, p, p)
    patches = patches[:, torch.as_tensor(perm)]
    return patches.reshape(b, rows, cols, c, p, p).permute(0, 3, 1, 4, 2, 5).reshape(b, c, h, w)


def test_patch_tokens_are_row_major_linear_maps_of_the_patches():
    m = image_model(in_dim=3, image_size=(6, 4), readout="mean")
    x = torch.randn(2, 3, 6, 4)
    tokens = m.encoder(x)  # [2, 6, 32]: a 3x2 grid
    w = m.encoder.proj.weight.detach().reshape(32, -1).numpy()
    bias = m.encoder.proj.bias.detach().numpy()
    xn = x.numpy()
    for node in range(6):
        r, c = divmod(node, 2)  # row-major: node r * cols + c
        patch = xn[:, :, 2 * r:2 * r + 2, 2 * c:2 * c + 2].reshape(2, -1)
        np.testing.assert_allclose(tokens[:, node].detach().numpy(), patch @ w.T + bias, rtol=1e-5, atol=1e-5)


def test_class_token_has_no_structural_term_and_patches_read_log_powers():
    m = image_model()
    x = torch.randn(3, 1, 8, 8)
    with torch.no_grad():
        _, terms = m.encode_dense(x, POWERS, return_terms=True)
    s = terms[0]["structural"][0].numpy()  # [H, 17, 17]
    d_h = 32 // 4
    assert np.all(s[:, 0, :] == 0) and np.all(s[:, :, 0] == 0)
    a = grid_powers(4, 4, 4)
    want = np.log(a + 1e-30) / math.sqrt(d_h)  # head h reads Â^(h+1) (paper scaling)
    want = np.where(a > 0, want, -np.inf)  # -inf outside the head's support (outside_support 'hard')
    np.testing.assert_allclose(s[:, 1:, 1:], want.astype(np.float32), rtol=1e-5, atol=1e-4)
    att = terms[0]["attention"][0].numpy()
    np.testing.assert_allclose(att.sum(-1), 1.0, atol=1e-5)
    # Head 1 (Â^1): a corner patch attends to itself, its two grid neighbours and the class token only.
    corner = att[0, 1]  # patch 0
    outside = [j for j in range(16) if j not in (0, 1, 4)]
    # Exactly 0 outside the support (-inf there).
    assert corner[[1 + j for j in outside]].max() == 0 and corner[[0, 1, 2, 5]].min() > 1e-4


def test_permuting_images_in_a_batch_permutes_the_outputs():
    m = image_model(positional="learned")
    x = torch.randn(7, 1, 8, 8)
    perm = torch.tensor([3, 0, 6, 1, 5, 2, 4])
    with torch.no_grad():
        out, out_p = m(DenseBatch(x=x, powers=POWERS)), m(DenseBatch(x=x[perm], powers=POWERS))
    torch.testing.assert_close(out_p, out[perm], rtol=1e-5, atol=1e-5)


def test_only_positions_or_the_mask_tell_where_a_patch_is():
    x = torch.randn(4, 1, 8, 8)
    perm = np.random.default_rng(0).permutation(16)
    xp = permute_patches(x, perm)
    # Without mask and positions attention is a set operation: the class token's output ignores the layout.
    bag = image_model(use_bias=False)
    with torch.no_grad():
        torch.testing.assert_close(bag(DenseBatch(x=xp, powers=POWERS)), bag(DenseBatch(x=x, powers=POWERS)),
                                   rtol=1e-4, atol=1e-5)
        for m in (image_model(), image_model(use_bias=False, positional="learned")):  # mask, or positions
            diff = (m(DenseBatch(x=xp, powers=POWERS)) - m(DenseBatch(x=x, powers=POWERS))).abs().max()
            assert diff > 1e-3


def test_mean_readout_and_a_batch_of_grid_copies_match_the_broadcast_grid():
    m = image_model(readout="mean")
    x = torch.randn(3, 1, 8, 8)
    with torch.no_grad():
        shared = m(DenseBatch(x=x, powers=POWERS))
        copied = m(DenseBatch(x=x, powers=POWERS.expand(3, -1, -1, -1).clone()))
    torch.testing.assert_close(shared, copied)
    assert shared.shape == (3, 10)


def test_image_switches_are_checked():
    with pytest.raises(ValueError, match="model.encoder=patch, model.readout=cls and model.positional are for image"):
        ModelConfig(in_dim=1, out_dim=2, encoder="patch", image_size=(8, 8), patch_size=2)
    with pytest.raises(ValueError, match="model.readout=cls and model.positional are for image datasets"):
        ModelConfig(in_dim=1, out_dim=2, readout="cls")
    with pytest.raises(ValueError, match="does not divide"):
        image_model(patch_size=3)
