"""The SPD bias: its buckets by hand, dense and sparse outputs equal to its table at each pair's bucket."""
from __future__ import annotations

import numpy as np
import torch

from tests.model.biases.refs import DIRECTED, TWO_COMP, all_pairs, pad, randomize, ref_extras, sparse
from xmask_cli.model.biases import SpdBias


# ------------------------------------------------------------------------ SPD
def test_spd_buckets_hand_values():
    mod = SpdBias(2, max_distance=3)
    d = torch.tensor([0, 1, 2, 3, 4, 9, -1, -2, -5])
    assert mod.buckets(d).tolist() == [0, 1, 2, 3, 4, 4, 4, 5, 5]
    assert mod.table.weight.shape == (6, 2) and not mod.table.weight.any()
    # the self bucket is fixed at 0: it receives no gradient
    mod.table.weight.data.normal_()
    mod.table.weight.data[0] = 0
    mod.table(mod.buckets(d)).pow(2).sum().backward()
    assert not mod.table.weight.grad[0].any() and mod.table.weight.grad[1:].abs().sum() > 0


def test_spd_dense_sparse_equal_table():
    items = [ref_extras(*TWO_COMP, max_distance=2), ref_extras(*DIRECTED, max_distance=2)]
    ex, mask = pad(items)
    mod = SpdBias(3, max_distance=2)
    randomize(mod, 0)
    table = mod.table.weight.detach().numpy()
    out = mod(ex, mask=mask).detach().numpy()
    assert out.shape == (2, 3, 7, 7)

    def bucket(d):  # hand rule: 1..D own, beyond / -1 -> D+1, -2 -> D+2
        return 0 if d == 0 else d if 1 <= d <= 2 else 3 if d > 2 or d == -1 else 4

    for b, it in enumerate(items):
        n = len(it["spd"])
        for i in range(7):
            for j in range(7):
                want = np.zeros(3) if i >= n or j >= n or i == j else table[bucket(int(it["spd"][i, j]))]
                np.testing.assert_allclose(out[b, :, i, j], want, atol=1e-7)
    assert (items[0]["spd"] == -1).any() and (items[0]["spd"] == -2).any()
    r, c = all_pairs(7)
    ei, sx = sparse(items[:1], [(r, c)])
    np.testing.assert_allclose(mod(sx, edge_index=ei).detach().numpy(), out[0][:, r, c].T, atol=1e-7)
