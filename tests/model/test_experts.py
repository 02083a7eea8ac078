"""M3Dphormer masks and routed experts against brute-force constructions."""
import numpy as np
import pytest
import torch

from xmask_cli.model.attention.dualmode import dual_attention
from xmask_cli.model.experts import EXPERTS, RoutedAttention, hierarchical_tokens

DIM, HEADS = 8, 2

# 8 nodes, 2 parts of 4, 3 classes; nodes 0, 2, 5, 6 are for training.
EDGES = [(0, 1), (1, 2), (2, 3), (3, 0), (3, 4), (4, 5), (5, 6), (6, 7), (7, 4)]
PART = [0, 0, 0, 0, 1, 1, 1, 1]
LABELS = [0, 1, 0, 2, 1, 1, 2, 0]
TRAIN = [0, 2, 5, 6]
N, P, C = 8, 2, 3


def _local_ei(with_some_loops=True):
    pairs = [(i, j) for i, j in EDGES] + [(j, i) for i, j in EDGES]
    if with_some_loops:
        pairs += [(1, 1), (4, 4)]  # the rest get added
    return torch.tensor(pairs).T


def _masks(labels=LABELS, train=TRAIN, part=PART, local=None):
    train_t = torch.tensor(train)
    return hierarchical_tokens(N, _local_ei() if local is None else local, torch.tensor(part), train_t,
                               torch.tensor(labels)[train_t], C)


def _pair_set(ei):
    pairs = [tuple(p) for p in ei.T.tolist()]
    assert len(pairs) == len(set(pairs)), "duplicate pairs"
    return set(pairs)


def test_masks_match_brute_force():
    m = _masks()
    assert (m.num_nodes, m.num_parts, m.num_classes, m.num_tokens) == (N, P, C, N + P + C)
    cluster_tok = {p: N + p for p in range(P)}
    class_tok = {c: N + P + c for c in range(C)}
    virtual = list(range(N, N + P + C))

    local = {tuple(p) for p in _local_ei().T.tolist()} | {(i, i) for i in range(N)} | {(t, t) for t in virtual}
    cluster = {(i, cluster_tok[PART[i]]) for i in range(N)}
    cluster |= {(cluster_tok[p], i) for i in range(N) for p in range(P) if PART[i] == p}
    cluster |= {(t, t) for t in virtual}
    glob = {(i, class_tok[c]) for i in range(N) for c in range(C)}
    glob |= {(class_tok[c], i) for i in TRAIN for c in range(C) if LABELS[i] == c}
    glob |= {(t, t) for t in virtual}

    assert _pair_set(m.local) == local
    assert _pair_set(m.cluster) == cluster
    assert _pair_set(m.global_) == glob
    assert m.pairs["global"] is m.global_
    # The given local pairs come first, in order, so a bias over them lines up.
    given = _local_ei()
    assert torch.equal(m.local[:, : given.size(1)], given)
    padded = m.pad_local(torch.ones(given.size(1), HEADS))
    assert padded.shape == (m.local.size(1), HEADS) and padded[given.size(1):].abs().sum() == 0
    assert m.virtual_labels.tolist() == list(range(C))
    assert m.class_tokens.tolist() == [class_tok[c] for c in range(C)]
    assert m.cluster_tokens.tolist() == [cluster_tok[p] for p in range(P)]
    # Every token has at least one pair in every mask (its softmax is defined).
    for ei in m.pairs.values():
        assert set(ei[0].tolist()) == set(range(N + P + C))


def test_pool_matches_numpy():
    m = _masks()
    x = torch.randn(N, 5, dtype=torch.float64)
    pooled = m.pool(x).numpy()
    xn = x.numpy()
    expect = [xn[[i for i in range(N) if PART[i] == p]].mean(0) for p in range(P)]
    for c in range(C):
        rows = [i for i in TRAIN if LABELS[i] == c]
        expect.append(xn[rows].mean(0) if rows else np.zeros(5))
    np.testing.assert_allclose(pooled, np.concatenate([xn, np.stack(expect)]), rtol=1e-12)


def test_class_without_training_node_pools_zero():
    train = [0, 2, 3]  # labels 0, 0, 2: no training node of class 1
    m = _masks(train=train)
    pooled = m.pool(torch.randn(N, 4))
    assert pooled[N + P + 1].abs().sum() == 0
    rows = m.global_[1][m.global_[0] == N + P + 1]
    assert rows.tolist() == [N + P + 1]  # only itself


def test_no_label_leakage():
    m = _masks()
    rng = np.random.default_rng(0)
    non_train = [i for i in range(N) if i not in TRAIN]
    # Other labels for non-training nodes: same masks.
    labels2 = list(LABELS)
    for i in non_train:
        labels2[i] = int(rng.integers(0, C))
    m2 = _masks(labels=labels2)
    for name in EXPERTS:
        assert torch.equal(m.pairs[name], m2.pairs[name])
    # Other features for non-training nodes: class tokens pool the same.
    x = torch.randn(N, 6)
    x2 = x.clone()
    x2[non_train] = torch.randn(len(non_train), 6) * 10
    torch.testing.assert_close(m.pool(x)[m.class_tokens], m.pool(x2)[m.class_tokens], atol=0, rtol=0)
    # Every pair into a class token's softmax comes from a training node of that class (or itself).
    row, col = m.global_
    for c, tok in enumerate(m.class_tokens.tolist()):
        keys = set(col[row == tok].tolist()) - {tok}
        assert keys == {i for i in TRAIN if LABELS[i] == c}
    # Only class tokens attend to real nodes in the global mask.
    assert set(row[col < N].tolist()) <= set(m.class_tokens.tolist())


def _expert_outputs(layer, h, pairs):
    return {name: layer.attn[name].forward_sparse(h, pairs[name]) for name in layer.experts}


@pytest.mark.parametrize("mode", ["sparse", "dense", "dual"])
def test_routing_at_init(mode):
    torch.manual_seed(0)
    m = _masks()
    layer = RoutedAttention(DIM, HEADS).eval()
    h = torch.randn(m.num_tokens, DIM)
    with torch.no_grad():
        w = layer.routing_weights(h)
        torch.testing.assert_close(w, torch.tensor([0.5, 0.25, 0.25]).expand_as(w))
        regions = m.plan(DIM // HEADS, max_region_queries=3) if mode == "dual" else None
        out = layer(h, m.pairs, mode=mode, regions=regions)
        e = _expert_outputs(layer, h, m.pairs)
    torch.testing.assert_close(out, 0.5 * e["local"] + 0.25 * e["cluster"] + 0.25 * e["global"], atol=1e-5, rtol=0)


def test_routing_formula_and_subsets():
    torch.manual_seed(1)
    h = torch.randn(10, DIM)
    layer = RoutedAttention(DIM, HEADS)
    with torch.no_grad():
        for gate in (layer.gate1, layer.gate2):
            gate.weight.normal_()
            gate.bias.normal_()
        a1 = torch.sigmoid(h @ layer.gate1.weight.T + layer.gate1.bias)
        a2 = torch.sigmoid(h @ layer.gate2.weight.T + layer.gate2.bias)
        expect = torch.cat([a1, (1 - a1) * a2, (1 - a1) * (1 - a2)], 1)
        torch.testing.assert_close(layer.routing_weights(h), expect)
    cases = {
        ("local",): [1.0], ("global",): [1.0],
        ("local", "cluster"): [0.5, 0.5], ("global", "local"): [0.5, 0.5],
        ("cluster", "global"): [0.5, 0.5],
    }
    for experts, w0 in cases.items():
        sub = RoutedAttention(DIM, HEADS, experts=experts)
        assert sub.experts == tuple(e for e in EXPERTS if e in experts)
        torch.testing.assert_close(sub.routing_weights(h), torch.tensor(w0).expand(10, len(w0)))
    for routing in ("flat", "none"):
        sub = RoutedAttention(DIM, HEADS, routing=routing)
        torch.testing.assert_close(sub.routing_weights(h), torch.full((10, 3), 1 / 3))
    with pytest.raises(ValueError):
        RoutedAttention(DIM, HEADS, experts=())
    with pytest.raises(ValueError):
        RoutedAttention(DIM, HEADS, experts=("local", "far"))


def test_subset_forward_uses_its_experts_only():
    torch.manual_seed(2)
    m = _masks()
    layer = RoutedAttention(DIM, HEADS, experts=("local", "global")).eval()
    h = torch.randn(m.num_tokens, DIM)
    with torch.no_grad():
        out = layer(h, {"local": m.local, "global": m.global_})
        e = _expert_outputs(layer, h, m.pairs)
    torch.testing.assert_close(out, 0.5 * e["local"] + 0.5 * e["global"], atol=1e-6, rtol=0)


def test_gradients_dual_equal_sparse_with_bias():
    torch.manual_seed(3)
    m = _masks()
    layer = RoutedAttention(DIM, HEADS)
    with torch.no_grad():  # non-trivial routing
        for gate in (layer.gate1, layer.gate2):
            gate.weight.normal_()
    h0 = torch.randn(m.num_tokens, DIM)
    bias0 = {name: torch.randn(ei.size(1), HEADS) for name, ei in m.pairs.items()}
    regions = m.plan(DIM // HEADS, max_region_queries=3)

    def run(mode):
        layer.zero_grad()
        h = h0.clone().requires_grad_()
        out = layer(h, m.pairs, bias0, mode=mode, regions=regions)
        (out ** 2).sum().backward()
        return out.detach(), [h.grad] + [p.grad.clone() for p in layer.parameters()]

    out_s, g_s = run("sparse")
    out_d, g_d = run("dual")
    torch.testing.assert_close(out_d, out_s, atol=1e-5, rtol=0)
    for a, b in zip(g_d, g_s):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_permutation_equivariance():
    torch.manual_seed(4)
    perm = torch.tensor([3, 7, 0, 5, 1, 6, 2, 4])  # new node k is old node perm[k]
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(N)
    m = _masks()
    local = _local_ei()
    m2 = hierarchical_tokens(N, inv[local], torch.tensor(PART)[perm], inv[torch.tensor(TRAIN)],
                             torch.tensor(LABELS)[torch.tensor(TRAIN)], C)
    layer = RoutedAttention(DIM, HEADS).eval()
    with torch.no_grad():
        for gate in (layer.gate1, layer.gate2):
            gate.weight.normal_()
    x = torch.randn(N, DIM)
    token_perm = torch.cat([perm, torch.arange(N, N + P + C)])
    with torch.no_grad():
        out = layer(m.pool(x), m.pairs)
        out2 = layer(m2.pool(x[perm]), m2.pairs)
        out3 = layer(m2.pool(x[perm]), m2.pairs, mode="dual", regions=m2.plan(DIM // HEADS, 3))
    torch.testing.assert_close(out2, out[token_perm], atol=1e-5, rtol=0)
    torch.testing.assert_close(out3, out[token_perm], atol=1e-5, rtol=0)


def test_planned_regions_on_token_masks():
    m = _masks()
    regions = m.plan(head_dim=4, max_region_queries=64)
    for _name, regs in regions.items():
        queries = torch.cat([r.queries for r in regs]).sort().values
        assert torch.equal(queries, torch.arange(m.num_tokens))
    # Real nodes -> class tokens is a full block: dense.
    real = [r for r in regions["global"] if int(r.queries.max()) < N]
    assert real and all(r.dense and r.density == 1.0 for r in real)
    # And dual over the planned regions is forward_sparse.
    torch.manual_seed(5)
    layer = RoutedAttention(DIM, HEADS).eval()
    h = torch.randn(m.num_tokens, DIM)
    with torch.no_grad():
        for name in EXPERTS:
            a = layer.attn[name]
            torch.testing.assert_close(dual_attention(a, h, m.pairs[name], regions=regions[name]),
                                       a.forward_sparse(h, m.pairs[name]), atol=1e-5, rtol=0)
