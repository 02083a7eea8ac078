"""XMaskNet with M3Dphormer attention experts: ties to the plain model, attention modes, routing, config, equivariance."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.model.graphs import PATH_TRIANGLE, TWO_PARTS, norm_powers, union_pairs
from tests.model.semantics import cora_union_pairs, scale_qk
from xmask_cli.model.experts import hierarchical_tokens
from xmask_cli.model.network import ModelConfig, XMaskNet

F, HIDDEN, HEADS = 5, 8, 2


def _cfg(**kw) -> ModelConfig:
    base = dict(in_dim=F, out_dim=3, hidden=HIDDEN, heads=HEADS, layers=2, dropout=0.0, task="node",
                experts=("local", "cluster", "global"))
    return ModelConfig(**{**base, **kw})


def _random_graph(n: int, p: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    upper = np.triu(rng.random((n, n)) < p, 1)
    return (upper | upper.T).astype(float)


class Graph:
    """A small graph with features, local pairs (support of Â^1..Â^K with their values), parts, labels."""

    def __init__(self, a: np.ndarray, parts: int, classes: int, seed: int = 0, k: int = HEADS):
        n = len(a)
        gen = torch.Generator().manual_seed(seed)
        self.n, self.classes = n, classes
        self.x = torch.randn(n, F, generator=gen)
        self.edge_index, values = union_pairs(norm_powers(a, k))  # includes every self pair
        self.values = values.float()
        self.part = torch.arange(n) * parts // n  # contiguous parts, none empty
        self.y = torch.randint(0, classes, (n,), generator=gen)
        self.train = torch.randperm(n, generator=gen)[: max(2, n // 2)].sort().values

    def masks(self):
        return hierarchical_tokens(self.n, self.edge_index, self.part, self.train, self.y[self.train], self.classes)

    def tokens(self):
        m = self.masks()
        return m.pool(self.x), m


# ---------------------------------------------------------------- local expert == X-LogSMask model
def test_local_expert_alone_is_the_xlogsmask_model():
    g = Graph(PATH_TRIANGLE, parts=2, classes=3, seed=1)
    torch.manual_seed(0)
    plain = XMaskNet(_cfg(experts=())).eval()
    routed = XMaskNet(_cfg(experts=("local",))).eval()
    state = {}
    for key, value in plain.state_dict().items():
        parts = key.split(".")
        if parts[0] == "blocks" and parts[2] == "attn":
            key = ".".join(parts[:3] + ["attn", "local"] + parts[3:])
        state[key] = value
    routed.load_state_dict(state)  # strict: exactly the same parameters, renamed
    x, masks = g.tokens()
    assert masks.num_given_local == g.edge_index.size(1)
    with torch.no_grad():
        want = plain.forward_sparse(g.x, g.edge_index, g.values)
        got = routed.forward_tokens(x, masks, g.values)
    assert got.shape == (g.n + 2 + 3, 3)
    torch.testing.assert_close(got[: g.n], want, atol=1e-5, rtol=1e-5)
    # The structural term matters: without it the outputs move.
    plain_nobias = XMaskNet(_cfg(experts=(), use_bias=False)).eval()
    plain_nobias.load_state_dict(plain.state_dict())
    with torch.no_grad():
        assert not torch.allclose(plain_nobias.forward_sparse(g.x, g.edge_index), want, atol=1e-4)


# ---------------------------------------------------------------- dual == sparse == dense
def test_expert_attention_modes_agree():
    g = Graph(_random_graph(14, 0.3, seed=2), parts=2, classes=3, seed=2)
    x, masks = g.tokens()
    assert (masks.num_parts, masks.num_classes) == (2, 3)
    torch.manual_seed(0)
    ref = XMaskNet(_cfg(expert_attention="sparse")).eval()
    # Non-zero gates, so every expert and both routing levels contribute unevenly.
    with torch.no_grad():
        for block in ref.blocks:
            for gate in (block.attn.gate1, block.attn.gate2):
                gate.weight.normal_(0, 0.5)
                gate.bias.normal_(0, 0.5)
    outs = {}
    for mode in ("sparse", "dense", "dual"):
        model = XMaskNet(_cfg(expert_attention=mode)).eval()
        model.load_state_dict(ref.state_dict())
        with torch.no_grad():
            outs[mode] = model.forward_tokens(x, masks, g.values)
            if mode == "dual":
                # Planned regions: every region with pairs dense (threshold 0), or dense and sparse ones.
                outs["dual-dense"] = model.forward_tokens(x, masks, g.values, regions=masks.plan(HIDDEN // HEADS, 4, 0.0))
                mixed = masks.plan(HIDDEN // HEADS, 256, 0.6)
                assert {r.dense for regions in mixed.values() for r in regions} == {True, False}
                outs["dual-mixed"] = model.forward_tokens(x, masks, g.values, regions=mixed)
    assert torch.isfinite(outs["sparse"]).all()
    for mode, out in outs.items():
        torch.testing.assert_close(out, outs["sparse"], atol=1e-5, rtol=1e-5, msg=mode)


# ---------------------------------------------------------------- routing at init
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_bilevel_routing_starts_local(norm):
    g = Graph(TWO_PARTS, parts=2, classes=3, seed=3)
    x, masks = g.tokens()
    torch.manual_seed(0)
    model = XMaskNet(_cfg(norm=norm, layers=3)).eval()
    with torch.no_grad():
        weights = model.routing_weights(x, masks, g.values)
    assert len(weights) == 3
    want = torch.tensor([0.5, 0.25, 0.25]).expand(masks.num_tokens, 3)
    for w in weights:
        assert w.shape == (masks.num_tokens, 3)
        torch.testing.assert_close(w, want, atol=0, rtol=0)


def test_routing_weights_are_the_ones_the_forward_uses():
    g = Graph(TWO_PARTS, parts=2, classes=3, seed=3)
    x, masks = g.tokens()
    torch.manual_seed(0)
    model = XMaskNet(_cfg(layers=2)).eval()
    with torch.no_grad():
        for block in model.blocks:
            for gate in (block.attn.gate1, block.attn.gate2):
                gate.weight.normal_(0, 0.5)
    seen = []
    hooks = [block.attn.register_forward_pre_hook(lambda mod, args, kw: seen.append(mod.routing_weights(args[0])),
                                                  with_kwargs=True) for block in model.blocks]
    with torch.no_grad():
        model.forward_tokens(x, masks, g.values)
        for h in hooks:
            h.remove()
        weights = model.routing_weights(x, masks, g.values)
    assert len(seen) == len(weights) == 2
    for got, want in zip(weights, seen):
        torch.testing.assert_close(got, want, atol=0, rtol=0)
        torch.testing.assert_close(got.sum(1), torch.ones(masks.num_tokens))
    assert not torch.allclose(weights[1], weights[1][:1].expand_as(weights[1]))  # per token
    # Like the forward, a biased model needs the local values (no silent bias-free weights).
    with pytest.raises(ValueError, match="local_values"):
        model.routing_weights(x, masks)


# ---------------------------------------------------------------- config refusals
def test_model_config_refusals():
    with pytest.raises(ValueError, match="node"):
        _cfg(task="graph")
    with pytest.raises(ValueError, match="experts"):
        _cfg(experts=("local", "regional"))
    with pytest.raises(ValueError, match="experts"):
        _cfg(experts=("local", "local"))
    with pytest.raises(ValueError, match="biases"):
        _cfg(biases=({"type": "spd"},))
    with pytest.raises(ValueError, match="routing"):
        _cfg(routing="deep")
    with pytest.raises(ValueError, match="expert_attention"):
        _cfg(expert_attention="flash")
    with pytest.raises(ValueError, match="experts"):
        XMaskNet(_cfg(experts=())).encode_tokens(torch.zeros(3, F), Graph(PATH_TRIANGLE, 2, 3).masks())
    _cfg(experts=["global", "local"])  # any non-empty subset, any order, as a list too


# ---------------------------------------------------------------- permutation equivariance
def test_permuting_real_nodes_permutes_outputs():
    g = Graph(_random_graph(12, 0.35, seed=4), parts=3, classes=3, seed=4)
    torch.manual_seed(0)
    model = XMaskNet(_cfg(expert_attention="sparse")).eval()
    with torch.no_grad():
        for block in model.blocks:
            for gate in (block.attn.gate1, block.attn.gate2):
                gate.weight.normal_(0, 0.5)
    perm = torch.randperm(g.n, generator=torch.Generator().manual_seed(5))  # new node i = old node perm[i]
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(g.n)
    # Shuffle the pair order too: nothing may depend on it.
    order = torch.randperm(g.edge_index.size(1), generator=torch.Generator().manual_seed(6))
    pe = inv[g.edge_index][:, order]
    pv = g.values[order]
    ptrain = inv[g.train]
    masks = g.masks()
    pmasks = hierarchical_tokens(g.n, pe, g.part[perm], ptrain, g.y[g.train], g.classes)
    for mode in ("sparse", "dual"):
        m = XMaskNet(_cfg(expert_attention=mode)).eval()
        m.load_state_dict(model.state_dict())
        with torch.no_grad():
            out = m.forward_tokens(masks.pool(g.x), masks, g.values)
            pout = m.forward_tokens(pmasks.pool(g.x[perm]), pmasks, pv)
        torch.testing.assert_close(pout[: g.n], out[perm], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(pout[g.n:], out[g.n:], atol=1e-5, rtol=1e-5)  # virtual tokens keep their ids
    # The real nodes' outputs do depend on the node: not trivially equivariant.
    assert not torch.allclose(out[perm], out[: g.n], atol=1e-4)


# ---------------------------------------------------------------- the same at realistic size
@pytest.fixture(scope="module")
def cora_tokens(tmp_path_factory):
    """Full Cora: features, Â^1..Â^2 local pairs, 32 contiguous parts, the public training labels."""
    data, edge_index, values = cora_union_pairs(tmp_path_factory.mktemp("cora"), HEADS)
    n = int(data.num_nodes)
    part = torch.arange(n) * 32 // n
    train = data.train_mask.nonzero().squeeze(1)
    masks = hierarchical_tokens(n, edge_index, part, train, data.y[train], 7)
    return data.x, masks, values


def test_expert_attention_modes_agree_on_cora_at_trained_scale(cora_tokens):
    """Whole M3Dphormer model (3 experts, 2 blocks, uneven gates) on full Cora, each block's experts' q/k scaled
    so its local logits spread by several units: dual and dense equal sparse in outputs and gradients."""
    x_real, masks, values = cora_tokens
    x0 = masks.pool(x_real)
    cfg = dict(in_dim=x_real.size(1), out_dim=7, hidden=32, heads=HEADS, layers=2, dropout=0.0, task="node",
               experts=("local", "cluster", "global"))
    torch.manual_seed(0)
    ref = XMaskNet(ModelConfig(**cfg, expert_attention="sparse")).eval()
    ei = masks.pairs["local"]
    routed = {"pairs": masks.pairs, "bias": ref.token_path.token_bias(masks, values, ref.bias), "mode": "sparse",
              "regions": None}

    def local_std(block, h) -> float:
        local = block.attn.attn["local"]
        q, k, _ = local.split_heads(h)
        return float(((q[ei[0]] * k[ei[1]]).sum(-1) / local.head_dim ** 0.5).std(0).min())

    with torch.no_grad():
        h = ref.encoder(x0)
        for block in ref.blocks:  # block by block: each one's input depends on the blocks before
            for gate in (block.attn.gate1, block.attn.gate2):
                gate.weight.normal_(0, 0.5)
                gate.bias.normal_(0, 0.5)
            # Every expert of the block scaled alike, until its local logits spread.
            assert 5.0 <= scale_qk(list(block.attn.attn.values()), lambda: local_std(block, h)) <= 10.0  # noqa: B023 (called at once)
            h = block(h, routed=routed)
    target = torch.randn(x0.size(0), 7, generator=torch.Generator().manual_seed(1))

    def run(mode, regions=None):
        model = XMaskNet(ModelConfig(**cfg, expert_attention=mode)).eval()
        model.load_state_dict(ref.state_dict())
        x = x0.clone().requires_grad_()
        out = model.forward_tokens(x, masks, values, regions=regions)
        ((out - target) ** 2).sum().backward()
        skip = {n for n, _ in model.named_parameters() if n.endswith(".k.bias")}  # 0 up to round-off (softmax shift)
        return out.detach(), {"x": x.grad, **{n: p.grad for n, p in model.named_parameters() if n not in skip}}

    want, want_grads = run("sparse")
    mixed = masks.plan(32 // HEADS, 256, 0.05)
    assert {r.dense for regions in mixed.values() for r in regions} == {True, False}
    for mode, regions in (("dual", None), ("dual", mixed), ("dense", None)):
        got, grads = run(mode, regions)
        assert float((got - want).abs().max()) <= 1e-4 * float(want.abs().max()), mode
        for name, g in want_grads.items():
            assert float((grads[name] - g).abs().max()) <= 1e-4 * float(g.abs().max()), (mode, name)
