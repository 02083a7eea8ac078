"""The bias stack: each bias on its heads and layers, summed where two share a head, the same placement sparse."""
from __future__ import annotations

import torch

from tests.model.biases.refs import DIRECTED, S, all_pairs, pad, randomize, ref_extras, sparse
from xmask_cli.model.biases.stack import BiasSpec, BiasStack


# ------------------------------------------------------------------ BiasStack
def test_bias_stack_heads_and_layers():
    items = [ref_extras(*DIRECTED)]
    ex, mask = pad(items)
    stack = BiasStack([BiasSpec("spd", heads=(2, 4)), BiasSpec("eigen", layers=(2,))], num_heads=4, num_layers=2)
    randomize(stack, 10)
    spd_mod = stack.layers[0][0]
    assert spd_mod.num_heads == 2
    out = stack(0, ex, mask=mask)
    alone = spd_mod(ex, mask=mask)
    assert out.shape == (1, 4, 5, 5)
    assert not out[:, 0].any() and not out[:, 2].any()
    assert torch.equal(out[:, 1], alone[:, 0]) and torch.equal(out[:, 3], alone[:, 1])
    assert stack.has(0) and stack.has(1)
    out2 = stack(1, ex, mask=mask)
    eig = stack.layers[1][1](ex, mask=mask)
    want = eig.clone()
    spd2 = stack.layers[1][0](ex, mask=mask)
    want[:, 1] += spd2[:, 0]
    want[:, 3] += spd2[:, 1]
    torch.testing.assert_close(out2, want)
    # sparse: same placement on the last axis
    r, c = all_pairs(5)
    ei, sx = sparse(items, [(r, c)])
    torch.testing.assert_close(stack(0, sx, edge_index=ei), out[0][:, r, c].T)
    assert stack.head_types(1) == [["eigen"], ["spd", "eigen"], ["eigen"], ["spd", "eigen"]]

    only2 = BiasStack([BiasSpec("rrwp", layers=(2,), width=4)], num_heads=4, num_layers=2, rrwp_dim=S)
    assert not only2.has(0) and only2.has(1)
    assert only2(0, ex, mask=mask) is None
    assert len(only2.layers[0]) == 0
