"""The magnetic-Laplacian bias: its kernel against numpy's eigh, phase / basis invariance, direction, padding,
and the DeepSet's mean pooling by hand."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.model.biases.refs import DIRECTED, STAR, pad, randomize, ref_extras, relu, sparse
from xmask_cli.model.biases import MagneticBias


# ------------------------------------------------------------------- magnetic
def _mag_batch(vals: np.ndarray, vecs: np.ndarray) -> dict[str, torch.Tensor]:
    return {"mag_vals": torch.from_numpy(vals).float()[None], "mag_vecs": torch.from_numpy(vecs).to(torch.complex64)[None],
            "mag_mask": torch.ones(1, len(vals), dtype=torch.bool)}


def _kernel_and_out(mod: MagneticBias, batch: dict[str, torch.Tensor]) -> tuple[np.ndarray, np.ndarray]:
    seen = {}
    def grab(module, inp, out):
        seen["x"] = inp[0].detach()

    hook = mod.mlp.register_forward_hook(grab)
    try:
        out = mod(batch).detach().numpy()
    finally:
        hook.remove()
    return seen["x"].numpy(), out


def _mag_module(seed: int) -> MagneticBias:
    mod = MagneticBias(3, width=4)
    randomize(mod, seed)
    return mod


def test_magnetic_kernel_matches_numpy():
    it = ref_extras(*DIRECTED)
    vals, vecs = it["mag_vals"], it["mag_vecs"]
    mod = _mag_module(2)
    phi = mod.phi(torch.from_numpy(vals).float()[None], torch.ones(1, len(vals), dtype=torch.bool))[0].detach().numpy()
    kernel = np.einsum("ik,kw,jk->ijw", vecs, phi, vecs.conj())  # V diag(phi_w) V^H
    x, out = _kernel_and_out(mod, _mag_batch(vals, vecs))
    w = phi.shape[1]
    np.testing.assert_allclose(x[0, ..., :w], kernel.real, atol=1e-5)
    np.testing.assert_allclose(x[0, ..., w:], kernel.imag, atol=1e-5)
    # real part symmetric, imaginary part flips sign under (i, j) swap, and is there (direction seen)
    np.testing.assert_allclose(x[0, ..., :w], x[0, ..., :w].transpose(1, 0, 2), atol=1e-6)
    np.testing.assert_allclose(x[0, ..., w:], -x[0, ..., w:].transpose(1, 0, 2), atol=1e-6)
    assert np.abs(x[0, ..., w:]).max() > 1e-2
    # output: the MLP of the features, zero diagonal
    h = relu(x[0] @ mod.mlp[0].weight.detach().numpy().T + mod.mlp[0].bias.detach().numpy())
    want = h @ mod.mlp[2].weight.detach().numpy().T + mod.mlp[2].bias.detach().numpy()
    want[np.arange(5), np.arange(5)] = 0
    np.testing.assert_allclose(out[0], want.transpose(2, 0, 1), atol=1e-5)
    # sparse == dense at the pairs (random pairs, repeated, in any order)
    rng = np.random.default_rng(0)
    r, c = rng.integers(0, 5, 30), rng.integers(0, 5, 30)
    ei, sx = sparse([it], [(r, c)])
    np.testing.assert_allclose(mod(sx, edge_index=ei).detach().numpy(), out[0][:, r, c].T, atol=1e-5)


@pytest.mark.parametrize("case", [DIRECTED, STAR, (4, [(0, 1), (1, 2), (2, 0)])], ids=["directed", "star", "tri_iso"])
def test_magnetic_phase_and_basis_invariance(case):
    it = ref_extras(*case)
    vals, vecs = it["mag_vals"], it["mag_vecs"]
    mod = _mag_module(3)
    _, out = _kernel_and_out(mod, _mag_batch(vals, vecs))
    rng = np.random.default_rng(1)
    phased = vecs * np.exp(1j * rng.uniform(0, 2 * np.pi, len(vals)))[None]
    np.testing.assert_allclose(_kernel_and_out(mod, _mag_batch(vals, phased))[1], out, atol=1e-5)
    # random unitary rotation inside every repeated eigenvalue's eigenspace
    rotated, groups = vecs.copy(), 0
    start = 0
    while start < len(vals):
        stop = start + 1
        while stop < len(vals) and abs(vals[stop] - vals[start]) < 1e-8:
            stop += 1
        k = stop - start
        if k > 1:
            groups += 1
            z = rng.normal(size=(k, k)) + 1j * rng.normal(size=(k, k))
            u, _ = np.linalg.qr(z)
            rotated[:, start:stop] = vecs[:, start:stop] @ u
        start = stop
    if case is not DIRECTED:
        assert groups >= 1
        assert np.abs(rotated - vecs).max() > 0.1
    np.testing.assert_allclose(_kernel_and_out(mod, _mag_batch(vals, rotated))[1], out, atol=1e-5)


def test_magnetic_sees_direction():
    n, edges = DIRECTED
    fwd = ref_extras(n, edges)
    rev = ref_extras(n, [(v, u) for u, v in edges])
    mod = _mag_module(4)
    _, out_f = _kernel_and_out(mod, _mag_batch(fwd["mag_vals"], fwd["mag_vecs"]))
    x_r, out_r = _kernel_and_out(mod, _mag_batch(rev["mag_vals"], rev["mag_vecs"]))
    assert np.abs(out_f - out_r).max() > 1e-3
    # the symmetric closure has no direction: imaginary part ~0
    sym = ref_extras(n, edges + [(v, u) for u, v in edges])
    x_s, _ = _kernel_and_out(mod, _mag_batch(sym["mag_vals"], sym["mag_vecs"]))
    assert np.abs(x_s[..., 4:]).max() < 1e-5
    assert np.abs(x_r[..., 4:]).max() > 1e-2


def test_magnetic_padding_invariant():
    """A graph padded beside a larger one (more nodes, more eigenpairs) gets its own bias, 0 on padding."""
    small, big = ref_extras(4, [(0, 1), (1, 2), (2, 0)]), ref_extras(*DIRECTED)
    mod = _mag_module(11)
    alone = mod(pad([small])[0]).detach()
    ex, mask = pad([small, big])
    assert ex["mag_mask"][0].tolist() == [True] * 4 + [False]
    both = mod(ex, mask=mask).detach()
    torch.testing.assert_close(both[0, :, :4, :4], alone[0], atol=1e-5, rtol=1e-5)
    assert not both[0, :, 4:].any() and not both[0, :, :, 4:].any()
    torch.testing.assert_close(both[1], mod(pad([big])[0]).detach()[0], atol=1e-5, rtol=1e-5)




# ------------------------------------------------- GTLM conventions
def test_deepset_pools_by_the_mean_of_valid_eigenvalues():
    """φ(λ_k) = ρ([ψ(λ_k), mean_j ψ(λ_j)]) over the valid eigenvalues, as GTLM's mean pooling; numpy by hand."""
    torch.manual_seed(0)
    mod = MagneticBias(2, width=5)
    randomize(mod, 4)
    vals = np.array([0.0, 0.3, 0.9, 1.4, 7.0])  # the last one is padding
    valid = np.array([True, True, True, True, False])

    def mlp(seq, z):
        w1, b1 = seq[0].weight.detach().double().numpy(), seq[0].bias.detach().double().numpy()
        w2, b2 = seq[2].weight.detach().double().numpy(), seq[2].bias.detach().double().numpy()
        return np.maximum(z @ w1.T + b1, 0) @ w2.T + b2

    psi = mlp(mod.phi.psi, vals[:, None]) * valid[:, None]
    pooled = psi[valid].mean(0)  # the mean over the 4 valid ones (a sum would be 4x this)
    want = mlp(mod.phi.rho, np.concatenate([psi, np.repeat(pooled[None], 5, 0)], 1)) * valid[:, None]
    got = mod.phi(torch.from_numpy(vals).float()[None], torch.from_numpy(valid)[None])[0].detach().double().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
