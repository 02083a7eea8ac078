"""Learned structural biases (SPD, RRWP, magnetic, eigen) against independent computations.

References are built here from the raw edge lists with numpy / networkx
(hop distances, ``D^-1 A`` walks, ``numpy.linalg.eigh`` of the Laplacians,
``numpy.linalg.pinv``), never through the cache or :mod:`xmask_cli.engine.extras`.
"""
from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
import torch

from tests.model.graphs import norm_powers
from xmask_cli.model.bias_stack import BiasSpec, BiasStack
from xmask_cli.model.biases import EigenBias, MagneticBias, RrwpBias, SpdBias
from xmask_cli.model.network import ModelConfig, XMaskNet
from xmask_cli.structure.spectrum import magnetic_laplacian

S = 4  # walk channels I, P, P^2, P^3
K = 3  # powers Â^1..Â^3
ALL = ("spd", "rrwp", "magnetic", "eigen")


# ----------------------------------------------------------------- references
def ref_extras(n: int, edges: list[tuple[int, int]], max_distance: int = 2, q: float = 0.25) -> dict[str, np.ndarray]:
    """Dense extras of one graph (edges directed as given; SPD, walks, spectrum undirected)."""
    a_dir = np.zeros((n, n))
    for u, v in edges:
        a_dir[u, v] = 1.0
    a = np.maximum(a_dir, a_dir.T)
    g = nx.Graph()
    g.add_nodes_from(range(n))
    g.add_edges_from(edges)
    spd = np.full((n, n), -2, dtype=np.int64)
    for i, lengths in nx.all_pairs_shortest_path_length(g):
        for j, d in lengths.items():
            spd[i, j] = d if d <= max_distance else -1
    deg = a.sum(1)
    p = np.divide(a, deg[:, None], out=np.zeros_like(a), where=deg[:, None] > 0)
    rrwp = np.stack([np.linalg.matrix_power(p, s) for s in range(S)])
    dis = np.divide(1.0, np.sqrt(deg), out=np.zeros_like(deg), where=deg > 0)
    lap = np.eye(n) - dis[:, None] * a * dis[None, :]
    ev, eu = np.linalg.eigh(lap)
    mag = magnetic_laplacian(sp.csr_matrix(a_dir), q).toarray()
    mv, mu = np.linalg.eigh(mag)
    return {"spd": spd, "rrwp": rrwp, "eig_vals": ev, "eig_vecs": eu, "eig_mask": np.ones(n, bool),
            "mag_vals": mv, "mag_vecs": mu, "mag_mask": np.ones(n, bool), "adj": a}


def pad(items: list[dict[str, np.ndarray]]) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Padded dense extras (torch) and the node mask."""
    bsz, n = len(items), max(len(it["spd"]) for it in items)
    m = max(len(it["eig_vals"]) for it in items)
    out = {"spd": torch.full((bsz, n, n), -2, dtype=torch.int16), "rrwp": torch.zeros(bsz, S, n, n)}
    for pre, dt in (("eig", torch.float32), ("mag", torch.complex64)):
        out[f"{pre}_vals"] = torch.zeros(bsz, m)
        out[f"{pre}_vecs"] = torch.zeros(bsz, n, m, dtype=dt)
        out[f"{pre}_mask"] = torch.zeros(bsz, m, dtype=torch.bool)
    mask = torch.zeros(bsz, n, dtype=torch.bool)
    for b, it in enumerate(items):
        k = len(it["spd"])
        mask[b, :k] = True
        out["spd"][b, :k, :k] = torch.from_numpy(it["spd"])
        out["rrwp"][b, :, :k, :k] = torch.from_numpy(it["rrwp"])
        for pre, dt in (("eig", torch.float32), ("mag", torch.complex64)):
            mk = len(it[f"{pre}_vals"])
            out[f"{pre}_vals"][b, :mk] = torch.from_numpy(it[f"{pre}_vals"])
            out[f"{pre}_vecs"][b, :k, :mk] = torch.from_numpy(it[f"{pre}_vecs"]).to(dt)
            out[f"{pre}_mask"][b, :mk] = torch.from_numpy(it[f"{pre}_mask"])
    return out, mask


def sparse(items: list[dict[str, np.ndarray]], pairs: list[tuple[np.ndarray, np.ndarray]]):
    """Disjoint union: ``edge_index`` of the given per-graph pairs and the matching sparse extras."""
    m = max(len(it["eig_vals"]) for it in items)
    rows, cols, spd, rrwp, per_node = [], [], [], [], {f"{p}_{s}": [] for p in ("eig", "mag") for s in ("vals", "vecs", "mask")}
    off = 0
    for it, (r, c) in zip(items, pairs):
        n = len(it["spd"])
        rows.append(r + off)
        cols.append(c + off)
        spd.append(it["spd"][r, c])
        rrwp.append(it["rrwp"][:, r, c].T)
        for pre in ("eig", "mag"):
            mk = len(it[f"{pre}_vals"])
            vals = np.zeros((n, m))
            vals[:, :mk] = it[f"{pre}_vals"]
            vecs = np.zeros((n, m), dtype=it[f"{pre}_vecs"].dtype)
            vecs[:, :mk] = it[f"{pre}_vecs"]
            valid = np.zeros((n, m), bool)
            valid[:, :mk] = it[f"{pre}_mask"]
            per_node[f"{pre}_vals"].append(vals)
            per_node[f"{pre}_vecs"].append(vecs)
            per_node[f"{pre}_mask"].append(valid)
        off += n
    ex = {"spd": torch.from_numpy(np.concatenate(spd)).to(torch.int16),
          "rrwp": torch.from_numpy(np.concatenate(rrwp)).float()}
    for k, v in per_node.items():
        t = torch.from_numpy(np.concatenate(v))
        ex[k] = t.to(torch.complex64) if k == "mag_vecs" else (t if k.endswith("mask") else t.float())
    ei = torch.from_numpy(np.stack([np.concatenate(rows), np.concatenate(cols)])).long()
    return ei, ex


def all_pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    r, c = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    return r.ravel(), c.ravel()


def randomize(module: torch.nn.Module, seed: int) -> None:
    """Random non-zero parameters everywhere (the SPD self bucket stays 0, as ``padding_idx`` keeps it)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.7)
        for mod in module.modules():
            if isinstance(mod, SpdBias):
                mod.table.weight[0].zero_()


def relu(x):
    return np.maximum(x, 0.0)


# Directed: a 4-cycle 0->1->2->3->0 with a chord 0->2 and a pendant 4 -> 3.
DIRECTED = (5, [(0, 1), (1, 2), (2, 3), (3, 0), (0, 2), (4, 3)])
# Path of 4 plus a directed triangle: two components, distances beyond the cut-off 2.
TWO_COMP = (7, [(0, 1), (1, 2), (2, 3), (4, 5), (5, 6), (6, 4)])
# Symmetric star (both directions given): the eigenvalue 1 is repeated.
STAR = (5, [(0, j) for j in range(1, 5)] + [(j, 0) for j in range(1, 5)])


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
