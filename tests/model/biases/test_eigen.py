"""The eigen bias: numpy's pseudo-inverse of the normalized Laplacian (one or two components), padded
eigenpairs ignored; sparse = dense."""
from __future__ import annotations

import numpy as np

from tests.model.biases.refs import all_pairs, pad, randomize, ref_extras, sparse
from xmask_cli.model.biases import EigenBias


# ---------------------------------------------------------------------- eigen
def test_eigen_is_pseudo_inverse():
    conn = ref_extras(5, [(0, 1), (1, 2), (2, 3), (1, 3), (3, 4)])
    two = ref_extras(5, [(0, 1), (1, 2), (2, 0), (3, 4)])  # two components: two zero eigenvalues
    assert (np.abs(two["eig_vals"]) < 1e-8).sum() == 2
    ex, mask = pad([conn, two])
    mod = EigenBias(3)
    randomize(mod, 5)
    beta = mod.beta.detach().numpy()
    out = mod(ex, mask=mask).detach().numpy()
    for b, it in enumerate([conn, two]):
        lap = np.eye(5) - (lambda a, d: d[:, None] * a * d[None, :])(it["adj"], it["adj"].sum(1) ** -0.5)
        want = np.linalg.pinv(lap, hermitian=True)
        np.testing.assert_allclose(out[b], beta[:, None, None] * want[None], atol=2e-5)
    r, c = all_pairs(5)
    ei, sx = sparse([conn, two], [(r, c), (r, c)])
    got = mod(sx, edge_index=ei).detach().numpy()
    np.testing.assert_allclose(got, np.concatenate([out[0][:, r, c].T, out[1][:, r, c].T]), atol=1e-6)


def test_eigen_padded_eigenpairs_ignored():
    it = ref_extras(5, [(0, 1), (1, 2), (2, 3), (1, 3), (3, 4)])
    small = dict(it, eig_vals=it["eig_vals"][:3], eig_vecs=it["eig_vecs"][:, :3], eig_mask=np.ones(3, bool))
    ex, mask = pad([small, it])  # graph 0 carries 3 eigenpairs, padded to 5
    mod = EigenBias(1)
    randomize(mod, 6)
    out = mod(ex, mask=mask).detach().numpy()
    v, u = small["eig_vals"][1:], small["eig_vecs"][:, 1:]
    want = (u / v) @ u.T * mod.beta.item()
    np.testing.assert_allclose(out[0, 0], want, atol=1e-5)
