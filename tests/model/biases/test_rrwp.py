"""The RRWP bias: the MLP of numpy's random-walk matrices, zero on the diagonal and on padding; sparse = dense."""
from __future__ import annotations

import numpy as np

from tests.model.biases.refs import DIRECTED, TWO_COMP, S, all_pairs, pad, randomize, ref_extras, relu, sparse
from xmask_cli.model.biases import RrwpBias


# ----------------------------------------------------------------------- RRWP
def test_rrwp_is_mlp_of_walks():
    items = [ref_extras(*TWO_COMP), ref_extras(*DIRECTED)]
    ex, mask = pad(items)
    mod = RrwpBias(2, in_dim=S, width=5)
    randomize(mod, 1)
    w1, b1, w2, b2 = (t.detach().numpy().astype(np.float64) for t in
                      (mod.mlp[0].weight, mod.mlp[0].bias, mod.mlp[2].weight, mod.mlp[2].bias))
    out = mod(ex, mask=mask).detach().numpy()
    for b, it in enumerate(items):
        n = len(it["spd"])
        want = relu(it["rrwp"].transpose(1, 2, 0) @ w1.T + b1) @ w2.T + b2  # [n, n, H]
        want[np.arange(n), np.arange(n)] = 0
        np.testing.assert_allclose(out[b, :, :n, :n], want.transpose(2, 0, 1), atol=1e-5)
        assert not out[b, :, n:, :].any() and not out[b, :, :, n:].any()
    assert np.abs(out).max() > 0.1
    r, c = all_pairs(5)
    ei, sx = sparse(items[1:], [(r, c)])
    np.testing.assert_allclose(mod(sx, edge_index=ei).detach().numpy(), out[1][:, r, c].T, atol=1e-6)
