"""Learned structural biases in the network: zero at initialisation (plain attention), one-node graphs,
permutation equivariance, dense = sparse, head labels, refused specs, chunked pair MLPs, and the biases entering
after the scaling. Each bias's kernel against numpy: ``test_<type>.py`` beside this file; the references:
:mod:`tests.model.biases.refs`.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.model.biases.refs import ALL, DIRECTED, TWO_COMP, K, S, all_pairs, pad, randomize, ref_extras, sparse
from tests.model.graphs import norm_powers
from xmask_cli.model.biases import MagneticBias, RrwpBias, SpdBias
from xmask_cli.model.biases.stack import BiasSpec, BiasStack
from xmask_cli.model.network import ModelConfig, XMaskNet


# ------------------------------------------------------- networks and extras
def graph_inputs(cases, seed: int = 0, features: int = 3):
    items = [ref_extras(n, e) for n, e in cases]
    ex, mask = pad(items)
    n_max = mask.size(1)
    powers = torch.zeros(len(items), K, n_max, n_max)
    for b, it in enumerate(items):
        n = len(it["spd"])
        powers[b, :, :n, :n] = torch.from_numpy(norm_powers(it["adj"], K)).float()
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(len(items), n_max, features, generator=gen) * mask[..., None]
    return items, x, powers, mask, ex


def union(items, x, mask, pair_fn):
    """Sparse inputs of the padded batch: x rows of real nodes, pairs from ``pair_fn(item)``, values, batch."""
    pairs = [pair_fn(it) for it in items]
    ei, sx = sparse(items, pairs)
    xs = x[mask]
    values = []
    for it, (r, c) in zip(items, pairs):
        values.append(norm_powers(it["adj"], K)[:, r, c].T)
    batch = torch.repeat_interleave(torch.arange(len(items)), mask.sum(1))
    return xs, ei, torch.from_numpy(np.concatenate(values)).float(), batch, sx


def support_pairs(it):
    r, c = np.nonzero((norm_powers(it["adj"], K) != 0).any(0))
    return r, c


def net(biases, seed=0, **kw) -> XMaskNet:
    torch.manual_seed(seed)
    args = dict(in_dim=3, out_dim=2, hidden=16, heads=4, layers=2, dropout=0.0, rrwp_dim=S, biases=biases,
                head_powers=(1, 2, 0, 3))  # head 3 reads no Â (K = 3 here)
    args.update(kw)
    return XMaskNet(ModelConfig(**args)).eval()


COMBOS = [
    (BiasSpec("spd"),), (BiasSpec("rrwp", width=6),), (BiasSpec("magnetic", width=4),), (BiasSpec("eigen"),),
    tuple(BiasSpec(t, width=4) for t in ALL),
    (BiasSpec("spd", heads=(2, 4)), BiasSpec("magnetic", heads=(1,), layers=(2,), width=4),
     BiasSpec("eigen", heads=(3, 4), layers=(1,)), BiasSpec("rrwp", layers=(1,), width=4)),
]


@pytest.mark.parametrize("biases", COMBOS, ids=["spd", "rrwp", "magnetic", "eigen", "all", "placed"])
@pytest.mark.parametrize("task", ["node", "graph"])
def test_zero_init_equals_plain(biases, task):
    items, x, powers, mask, ex = graph_inputs([TWO_COMP, DIRECTED])
    with_b = net(biases, task=task)
    plain = net((), seed=1, task=task)
    missing, unexpected = plain.load_state_dict(with_b.state_dict(), strict=False)
    assert not missing and unexpected and all(k.startswith("learned.") for k in unexpected)
    with torch.no_grad():
        assert torch.equal(with_b.forward_dense(x, powers, mask, extras=ex), plain.forward_dense(x, powers, mask))
        # Head 3 is plain (k = 0) and has learned biases: the sparse path needs every pair of each graph.
        xs, ei, vals, batch, sx = union(items, x, mask, lambda it: all_pairs(len(it["spd"])))
        got = with_b.forward_sparse(xs, ei, vals, batch, extras=sx)
        assert torch.equal(got, plain.forward_sparse(xs, ei, vals, batch))
        # On the support pairs only, a learned bias on the plain head cannot be given at every pair: refused.
        xs, ei, vals, batch, sx = union(items, x, mask, support_pairs)
        with pytest.raises(ValueError, match="plain head"):
            with_b.forward_sparse(xs, ei, vals, batch, extras=sx)


@pytest.mark.parametrize("biases", COMBOS, ids=["spd", "rrwp", "magnetic", "eigen", "all", "placed"])
def test_one_node_graph_equals_plain(biases):
    # one node: SPD 0 (self bucket), walks I, magnetic / eigen the lone eigenpair (1, [1]) the cache stores
    ex = {"spd": torch.zeros(1, 1, 1, dtype=torch.int16), "rrwp": torch.zeros(1, S, 1, 1),
          "eig_vals": torch.ones(1, 1), "eig_vecs": torch.ones(1, 1, 1), "eig_mask": torch.ones(1, 1, dtype=torch.bool),
          "mag_vals": torch.ones(1, 1), "mag_vecs": torch.ones(1, 1, 1, dtype=torch.complex64),
          "mag_mask": torch.ones(1, 1, dtype=torch.bool)}
    ex["rrwp"][0, 0] = 1.0
    x, powers = torch.randn(1, 1, 3), torch.ones(1, K, 1, 1)
    with_b = net(biases, task="node")
    randomize(with_b.learned, 7)
    plain = net((), seed=1, task="node")
    plain.load_state_dict(with_b.state_dict(), strict=False)
    with torch.no_grad():
        for layer in range(2):
            term = with_b._learned(layer, ex, mask=torch.ones(1, 1, dtype=torch.bool))
            if term is not None and not any(b.type == "eigen" for b in biases):
                assert not term.any()  # SPD / RRWP / magnetic: 0 on the diagonal
        want = plain.forward_dense(x, powers)
        torch.testing.assert_close(with_b.forward_dense(x, powers, extras=ex), want, atol=1e-6, rtol=0)
        # per node: vals / mask [N=1, m=1] (the batch's rows), vecs [N=1, m=1]
        sx = {k: (v[0] if k.endswith("vecs") else v) for k, v in ex.items() if k not in ("spd", "rrwp")}
        sx.update(spd=torch.zeros(1, dtype=torch.int16), rrwp=ex["rrwp"][0, :, 0, 0][None])
        ei = torch.zeros(2, 1, dtype=torch.long)
        got = with_b.forward_sparse(x[0], ei, torch.ones(1, K), extras=sx)
        torch.testing.assert_close(got, want[0], atol=1e-6, rtol=0)


def _permute(it: dict[str, np.ndarray], p: np.ndarray) -> dict[str, np.ndarray]:
    out = dict(it)
    out["spd"] = it["spd"][p][:, p]
    out["rrwp"] = it["rrwp"][:, p][:, :, p]
    out["adj"] = it["adj"][p][:, p]
    out["eig_vecs"], out["mag_vecs"] = it["eig_vecs"][p], it["mag_vecs"][p]
    return out


@pytest.mark.parametrize("task", ["node", "graph"])
def test_permutation_equivariance(task):
    items, x, powers, mask, ex = graph_inputs([DIRECTED])
    model = net(tuple(BiasSpec(t, width=4) for t in ALL), task=task)
    randomize(model.learned, 8)
    p = np.random.default_rng(3).permutation(5)
    perm_items = [_permute(items[0], p)]
    pex, pmask = pad(perm_items)
    ppowers = torch.from_numpy(norm_powers(perm_items[0]["adj"], K)).float()[None]
    np.testing.assert_allclose(ppowers.numpy(), powers[0][:, p][:, :, p][None].numpy(), atol=1e-6)
    with torch.no_grad():
        out = model.forward_dense(x, powers, mask, extras=ex)
        pout = model.forward_dense(x[:, p], ppowers, pmask, extras=pex)
        # the learned biases are active: the output differs from zero-bias
        plain = net((), seed=1, task=task)
        plain.load_state_dict(model.state_dict(), strict=False)
        assert (plain.forward_dense(x, powers, mask) - out).abs().max() > 1e-3
    if task == "node":
        torch.testing.assert_close(pout, out[:, p], atol=1e-5, rtol=1e-5)
    else:
        torch.testing.assert_close(pout, out, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("task", ["node", "graph"])
def test_dense_equals_sparse_all_pairs(task, dtype):
    items, x, powers, mask, ex = graph_inputs([TWO_COMP, DIRECTED, (1, [])])
    model = net(tuple(BiasSpec(t, width=4) for t in ALL), task=task, use_bias=False).to(dtype)
    randomize(model.learned, 9)
    xs, ei, _, batch, sx = union(items, x, mask, lambda it: all_pairs(len(it["spd"])))
    with torch.no_grad():
        dense = model.forward_dense(x.to(dtype), None, mask, extras=ex)
        got = model.forward_sparse(xs.to(dtype), ei, None, batch, extras=sx)
    assert got.dtype == dense.dtype == dtype  # a .double() model runs its learned biases in float64 too
    tol = 1e-5 if dtype == torch.float32 else 1e-6
    torch.testing.assert_close(got, dense[mask] if task == "node" else dense, atol=tol, rtol=tol)



def test_head_labels():
    model = net((BiasSpec("spd", heads=(2, 4)), BiasSpec("eigen", layers=(2,))))
    assert model.head_labels(0) == ["Â^1", "Â^2 + SPD", "none", "Â^3 + SPD"]
    assert model.head_labels(1) == ["Â^1 + Eigen", "Â^2 + SPD + Eigen", "Eigen", "Â^3 + SPD + Eigen"]
    plain = net((BiasSpec("magnetic", heads=(3,)), BiasSpec("rrwp", heads=(3,))), use_bias=False)
    assert plain.head_labels(0) == ["none", "none", "MagLap + RRWP", "none"]
    assert model.cfg.needs == {"spd", "spectrum"}


@pytest.mark.parametrize("make", [
    lambda: BiasStack([BiasSpec("spd", heads=(5,))], 4, 2),
    lambda: BiasStack([BiasSpec("spd", layers=(3,))], 4, 2),
    lambda: BiasSpec("graphormer"),
    lambda: BiasSpec("spd", heads=(0, 1)),
    lambda: BiasSpec("spd", heads=(2, 2)),
    lambda: BiasSpec("spd", heads=()),
    lambda: SpdBias(2, max_distance=0),
    lambda: XMaskNet(ModelConfig(in_dim=3, out_dim=2, heads=4, hidden=16, biases=({"type": "spd", "heads": [6]},))),
    lambda: ModelConfig(in_dim=3, out_dim=2, biases=({"type": "nope"},)),
], ids=["head5of4", "layer3of2", "unknown", "head0", "dup", "empty", "maxdist0", "net_head6", "cfg_unknown"])
def test_invalid_specs_raise(make):
    with pytest.raises(ValueError):
        make()


def test_missing_extras_raise():
    model = net((BiasSpec("spd"),))
    x, powers = torch.randn(1, 2, 3), torch.ones(1, K, 2, 2)
    with pytest.raises(ValueError, match="extras"):
        model.forward_dense(x, powers)
    with pytest.raises(ValueError, match="spd"):
        model.forward_dense(x, powers, extras={"rrwp": torch.zeros(1, S, 2, 2)})


@pytest.mark.parametrize("kind", ["rrwp", "magnetic"])
def test_chunked_pair_mlp_equals_whole(kind, monkeypatch):
    """Tiny chunks (checkpointed under autograd) give the same outputs and gradients as one pass."""
    from xmask_cli.model.biases import base as learned_bias

    items = [ref_extras(*TWO_COMP), ref_extras(*DIRECTED)]
    ex, mask = pad(items)
    r, c = all_pairs(5)
    ei, sx = sparse(items[1:], [(r, c)])
    mod = RrwpBias(2, in_dim=S, width=5) if kind == "rrwp" else MagneticBias(2, width=4)
    randomize(mod, 3)

    def run() -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        mod.zero_grad()
        dense, sparse_out = mod(ex, mask=mask), mod(sx, edge_index=ei)
        (dense.square().sum() + sparse_out.square().sum()).backward()
        return [dense.detach(), sparse_out.detach()], [p.grad.clone() for p in mod.parameters()]

    whole, whole_grads = run()
    calls = []
    real_checkpoint = learned_bias.checkpoint
    monkeypatch.setattr(learned_bias, "CHUNK_FLOATS", 1)  # one row / one pair per chunk
    monkeypatch.setattr(learned_bias, "checkpoint", lambda *a, **k: calls.append(1) or real_checkpoint(*a, **k))
    chunked, chunked_grads = run()
    assert len(calls) > 10  # really chunked and checkpointed
    for a, b in zip(whole + whole_grads, chunked + chunked_grads):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)  # gradients summed over chunks in another order



# ------------------------------------------------- GTLM conventions
@pytest.mark.parametrize("path", ["dense", "sparse"])
def test_learned_biases_enter_after_the_scaling(path):
    """GTLM Eq. 1: logits = q·k/√d_h + b. mask_scale (the X-LogSMask term's switch) does not touch b."""
    items, x, powers, mask, ex = graph_inputs([TWO_COMP, DIRECTED])
    xs, ei, vals, batch, sx = union(items, x, mask, lambda it: all_pairs(len(it["spd"])))
    outs = {}
    for mask_scale in ("paper", "none"):
        model = net((BiasSpec("spd"), BiasSpec("eigen")), task="node", use_bias=False, mask_scale=mask_scale)
        randomize(model.learned, 11)
        with torch.no_grad():
            if path == "dense":
                h, layers = model.encode_dense(x, None, mask, return_terms=True, extras=ex)
                learned = model._learned(0, ex, mask=mask)
                real = (mask[:, None, :, None] & mask[:, None, None, :]).expand_as(learned)
                got, want = layers[0]["structural"][real], learned[real]
                outs[mask_scale] = h[mask]
            else:
                h, layers = model.encode_sparse(xs, ei, None, return_terms=True, extras=sx, batch=batch)
                got, want = layers[0]["structural"], model._learned(0, sx, edge_index=ei)
                outs[mask_scale] = h
        assert want.abs().max() > 0.1
        torch.testing.assert_close(got, want)  # not divided by sqrt(d_h) under 'paper'
    torch.testing.assert_close(outs["paper"], outs["none"])
