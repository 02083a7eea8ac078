"""The packed graph layout (``model.graph_layout: packed``) against the padded one.

The packed path runs the token-wise layers on real rows only and attention per
group of similar-sized graphs; it must give the padded path's outputs and
gradients on a realistic batch: 32 PROTEINS graphs of mixed sizes (4 to ~200
nodes), ``Â^1..Â^4`` from numpy, weights scaled so the logits ``q·k/sqrt(d_h)``
spread by >= 5 (as after training), ``outside_support: hard``, in training mode
with dropout (the same seed must draw the same masks on both layouts).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from tests.model.semantics import LOGIT_STD, spread_logits
from xmask_cli.data.load import load_graphs
from xmask_cli.data.registry import get_dataset
from xmask_cli.model.batches import DenseBatch, LogPairs, PackedBatch
from xmask_cli.model.logsmask import log_powers
from xmask_cli.model.network import ModelConfig, XMaskNet
from xmask_cli.model.packing import PAIR_DENSITY, PAIR_MIN_NODES, pack_graphs, pair_attended
from xmask_cli.structure.graph import adjacency
from xmask_cli.structure.powers import power_pairs

K = 4
#: Outputs and gradients of the two layouts agree to this in float32, relative to each tensor's largest
#: entry (measured: outputs <= 5e-7, gradients <= 3e-6 here; kernels' summation orders differ by machine).
RTOL = {torch.float32: 1e-5, torch.float64: 1e-10}
GRAD_RTOL = {torch.float32: 2e-5, torch.float64: 1e-10}


@pytest.fixture(scope="module")
def proteins_batch(shared_data, tmp_path_factory) -> dict:
    """32 PROTEINS graphs from 4 to ~200 nodes, padded, with numpy ``Â^1..Â^4`` and random SPD-like distances."""
    graphs = load_graphs(get_dataset("PROTEINS"), data_root=shared_data, cache_dir=tmp_path_factory.mktemp("prot"),
                         offline=True)
    sizes = np.asarray(graphs.num_nodes)
    order = np.argsort(sizes, kind="stable")
    order = order[sizes[order] <= 200]
    ids = order[np.linspace(0, len(order) - 1, 32).astype(int)]  # spread over the size range
    feats = [graphs.dataset[int(i)].x.float() for i in ids]
    n_max = int(sizes[ids].max())
    B = len(ids)
    gen = torch.Generator().manual_seed(0)
    x = torch.zeros(B, n_max, feats[0].size(1))
    powers = torch.zeros(B, K, n_max, n_max)
    mask = torch.zeros(B, n_max, dtype=torch.bool)
    spd = torch.full((B, n_max, n_max), -2, dtype=torch.long)
    logp = []
    for b, (i, f) in enumerate(zip(ids, feats)):
        n = f.size(0)
        r, c, v = power_pairs(adjacency(graphs.edge_index[int(i)], n), K)
        a = np.zeros((K, n, n), dtype=np.float32)
        a[:, r, c] = np.asarray(v).T
        x[b, :n], powers[b, :, :n, :n], mask[b, :n] = f + 0.1 * torch.randn(f.shape, generator=gen), \
            torch.from_numpy(a), True
        d = torch.randint(-1, 9, (n, n), generator=gen)
        spd[b, :n, :n] = d.fill_diagonal_(0)
        logp.append(log_powers(torch.from_numpy(a), 1e-30, "hard", off_diagonal=~torch.eye(n, dtype=torch.bool)))
    assert len(set(sizes[ids].tolist())) > 20 and n_max > 150
    return {"x": x, "powers": powers, "mask": mask, "extras": {"spd": spd}, "log_powers": logp,
            "log_spec": (1e-30, "hard")}


def _pair(**kw) -> tuple[XMaskNet, XMaskNet]:
    """The same weights as a padded and a packed model (the preset's graph-level shape: hidden 64, 4 heads, 2 layers)."""
    cfg = ModelConfig(in_dim=3, out_dim=2, task="graph", hidden=64, heads=4, layers=2, dropout=0.1,
                      readout_scale=1 / 40, graph_layout="padded", **{"outside_support": "hard", **kw})
    torch.manual_seed(0)
    padded = XMaskNet(cfg)
    with torch.no_grad():
        for p in padded.parameters():
            if p.dim() == 2 and p.size(1) == len(padded.cfg.head_powers):  # learned bias tables: non-zero
                p.normal_(0.0, 1.0)
    packed = XMaskNet(dataclasses.replace(cfg, graph_layout="packed"))
    packed.load_state_dict(padded.state_dict())
    return padded, packed


def _typed(batch: dict) -> DenseBatch | PackedBatch:
    """The model batch of the fixture's fields: per-graph log-powers make a packed one, dense powers a dense one."""
    if "log_powers" in batch:
        logp = batch["log_powers"]
        return PackedBatch(x=batch["x"], mask=batch["mask"],
                           log_powers=logp if isinstance(logp, LogPairs) else tuple(logp),
                           log_spec=batch.get("log_spec"), extras=batch.get("extras"))
    return DenseBatch(x=batch["x"], powers=batch.get("powers"), mask=batch.get("mask"), extras=batch.get("extras"))


def _run(model: XMaskNet, batch: dict, seed: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.train()
    model.zero_grad()
    torch.manual_seed(seed)  # both layouts draw their dropout masks from here
    out = model(_typed(batch))
    weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(5)).to(out.dtype)
    (out * weight).sum().backward()
    return out.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _rel(a: torch.Tensor, b: torch.Tensor, floor: float = 0.0) -> float:
    return float((a - b).abs().max() / max(float(b.abs().max()), floor, 1e-30))


@pytest.mark.parametrize("kw, source, dtype", [
    ({}, "powers", torch.float32),  # the graph-level preset: X-LogSMask only, post-norm, sum readout
    # The same from the stream's per-graph cached log-powers, in float64: the layouts agree to 1e-10,
    # the same formula, not a near one.
    ({}, "log_powers", torch.float64),
    ({"biases": ({"type": "spd"},), "norm": "pre", "readout": "mean", "head_powers": (1, 0, 2, 4)}, "log_powers",
     torch.float32),
    ({"attn_dropout": 0.2, "readout": "max"}, "powers", torch.float32),  # SDPA's dropout: one group, the batch's layout
])
def test_packed_equals_padded_outputs_and_gradients(proteins_batch, kw, source, dtype) -> None:
    padded, packed = _pair(**kw)
    padded.to(dtype)
    real = proteins_batch["x"][proteins_batch["mask"]].to(dtype)
    sample = real[torch.randperm(real.size(0), generator=torch.Generator().manual_seed(1))[:400]]
    std = spread_logits(padded, sample)  # the q·k spread over pairs of 400 real nodes
    assert std >= LOGIT_STD
    packed.to(dtype).load_state_dict(padded.state_dict())
    batch_padded = {k: proteins_batch[k] for k in ("x", "powers", "mask", "extras")}
    batch_padded["x"] = batch_padded["x"].to(dtype)
    batch_packed = dict(batch_padded)
    if source == "log_powers":
        batch_packed = {**{k: proteins_batch[k] for k in ("mask", "extras", "log_powers", "log_spec")},
                        "x": batch_padded["x"]}
    out_a, grad_a = _run(padded, batch_padded, seed=3)
    out_b, grad_b = _run(packed, batch_packed, seed=3)
    assert out_a.dtype == dtype and _rel(out_b, out_a) < RTOL[dtype]
    assert grad_a.keys() == grad_b.keys()
    scale = max(float(g.abs().max()) for g in grad_a.values())
    for name in grad_a:
        # The key bias's gradient is analytically 0 (softmax ignores a per-row constant): compare it on the
        # scale of all gradients, every other one on its own.
        floor = 1e-3 * scale if name.endswith("attn.k.bias") else 0.0
        assert _rel(grad_b[name], grad_a[name], floor) < GRAD_RTOL[dtype], name
    if "attn_dropout" not in kw:  # the grouping is exercised, not one padded group
        assert len(pack_graphs(proteins_batch["mask"]).groups) > 1
    # Dropout acted (outputs differ from evaluation mode), so equal outputs mean equal masks.
    packed.eval()
    with torch.no_grad():
        assert _rel(packed(_typed(batch_packed)), out_b) > 1e-3


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_a_graph_alone_in_its_group_reads_its_cached_log_powers_as_they_are(proteins_batch, dtype) -> None:
    """The largest graph beside two tiny ones gets a group of its own, whose bias is its cached log-powers
    without a copy: the same numbers as the padded layout, and the cache is left untouched."""
    sizes = proteins_batch["mask"].sum(1)
    big, small = int(sizes.argmax()), sizes.argsort()[:2].tolist()
    ids = [small[0], big, small[1]]
    sub = {"x": proteins_batch["x"][ids].to(dtype), "mask": proteins_batch["mask"][ids],
           "powers": proteins_batch["powers"][ids], "extras": {"spd": proteins_batch["extras"]["spd"][ids]}}
    logp = [proteins_batch["log_powers"][i] for i in ids]
    before = [t.clone() for t in logp]
    groups = pack_graphs(sub["mask"]).groups
    assert [len(g.sizes) for g in groups] == [1, 2] and int(groups[0].graphs[0]) == 1
    for kw in ({}, {"mask_scale": "none"}):  # 'none' hands SDPA the cached tensor itself as the mask
        padded, packed = _pair(**kw)
        padded.to(dtype)
        packed.to(dtype).load_state_dict(padded.state_dict())
        batch_packed = {"x": sub["x"], "mask": sub["mask"], "extras": sub["extras"], "log_powers": logp,
                        "log_spec": proteins_batch["log_spec"]}
        out_a, grad_a = _run(padded, {k: sub[k] for k in ("x", "powers", "mask", "extras")}, seed=3)
        out_b, grad_b = _run(packed, batch_packed, seed=3)
        assert _rel(out_b, out_a) < RTOL[dtype]
        scale = max(float(g.abs().max()) for g in grad_a.values())
        for name in grad_a:
            floor = 1e-3 * scale if name.endswith("attn.k.bias") else 0.0
            assert _rel(grad_b[name], grad_a[name], floor) < GRAD_RTOL[dtype], name
    assert all(torch.equal(a, b) for a, b in zip(logp, before))


def test_log_powers_of_another_eps_are_refused(proteins_batch) -> None:
    _, packed = _pair()
    batch = {k: proteins_batch[k] for k in ("x", "mask", "log_powers")}
    with pytest.raises(ValueError, match="eps, outside_support"):
        packed(_typed({**batch, "log_spec": (1e-20, "hard")}))
    padded, _ = _pair()
    with pytest.raises(ValueError, match="padded layout"):
        padded(_typed({**batch, "log_spec": (1e-30, "hard")}))


def _log_pairs(batch: dict, outside: str) -> tuple[LogPairs, list[torch.Tensor]]:
    """The batch's stored pairs (where any ``Â^k`` is non-zero) as :class:`LogPairs`, and per graph its dense
    ``[K, n, n]`` log-powers under ``outside``: the two forms the packed path reads."""
    graph, row, col, vals, dense = [], [], [], [], []
    for b, n in enumerate(batch["mask"].sum(1).tolist()):
        a = batch["powers"][b, :, :n, :n]
        logp = log_powers(a.clone(), 1e-30, outside, off_diagonal=~torch.eye(n, dtype=torch.bool))
        r, c = (a != 0).any(0).nonzero(as_tuple=True)
        graph.append(torch.full_like(r, b))
        row.append(r)
        col.append(c)
        vals.append(logp[:, r, c].T)
        dense.append(logp)
    return LogPairs(torch.cat(graph), torch.cat(row), torch.cat(col), torch.cat(vals).contiguous()), dense


@pytest.mark.parametrize("kw", [
    {},  # the graph-level preset
    {"head_powers": (1, 0, 2, 4), "biases": ({"type": "spd"},)},  # a head without the mask, a learned bias
    {"outside_support": "eps", "mask_scale": "none"},  # log(eps) outside the support, the bias unscaled
])
def test_log_pairs_give_the_per_graph_log_powers_numbers_exactly(proteins_batch, kw) -> None:
    """The stream's flat pairs and the per-graph dense log-powers: the same outputs and gradients, bit for bit,
    on 32 PROTEINS graphs at trained-scale logits, dropout on, several attention groups."""
    _, packed = _pair(**kw)
    outside = kw.get("outside_support", "hard")
    pairs, dense = _log_pairs(proteins_batch, outside)
    assert pairs.values.size(0) < int(proteins_batch["mask"].sum(1).pow(2).sum())  # some pairs are outside
    assert len(pack_graphs(proteins_batch["mask"]).groups) > 1
    common = {k: proteins_batch[k] for k in ("x", "mask", "extras")}
    spec = (1e-30, outside)
    out_a, grad_a = _run(packed, {**common, "log_powers": dense, "log_spec": spec}, seed=3)
    packed.zero_grad()
    torch.manual_seed(3)
    out_b = packed(PackedBatch(x=common["x"], mask=common["mask"], log_powers=pairs, log_spec=spec,
                               extras=common["extras"]))
    weight = torch.randn(out_b.shape, generator=torch.Generator().manual_seed(5))
    (out_b * weight).sum().backward()
    assert torch.equal(out_b.detach(), out_a)
    for name, p in packed.named_parameters():
        if p.grad is not None:
            assert torch.equal(p.grad, grad_a[name]), name


@pytest.mark.parametrize("kw, drop_diagonal", [
    ({}, False),  # the graph-level preset
    ({"head_powers": (1, 0, 2, 4)}, True),  # a head without the mask (over every node), no stored diagonal
])
def test_large_sparse_graphs_on_their_pairs_give_the_dense_grid_numbers(proteins_batch, kw, drop_diagonal) -> None:
    """Graphs attended over their stored pairs (the CSR kernel) against every graph on its dense grid:
    the same outputs and gradients, ``-inf`` outside each head's support on the grid and absent on the pairs."""
    _, packed = _pair(**kw)
    pairs, _ = _log_pairs(proteins_batch, "hard")
    if drop_diagonal:  # then the grid's diagonal holds log(0 + eps): the pairs add each node's own pair
        keep = pairs.row != pairs.col
        pairs = LogPairs(*(t[keep] for t in (pairs.graph, pairs.row, pairs.col, pairs.values)))
    mask = proteins_batch["mask"]
    counts = torch.bincount(pairs.graph, minlength=mask.size(0))
    on_pairs = pair_attended(mask.sum(1), counts, density=0.5, min_nodes=40)
    packed.packed_path.pair_density = 0.5
    assert int(on_pairs.sum()) >= 3 and int((~on_pairs & (mask.sum(1) > 0)).sum()) >= 10  # both kinds
    batch = {k: proteins_batch[k] for k in ("x", "mask")}

    def run(min_nodes: int | None, log_pairs: LogPairs) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        packed.packed_path.pair_min_nodes = min_nodes
        return _run(packed, {**batch, "log_powers": log_pairs, "log_spec": (1e-30, "hard")}, seed=3)

    out_a, grad_a = run(None, pairs)
    out_b, grad_b = run(40, pairs)
    assert _rel(out_b, out_a) < RTOL[torch.float32]
    scale = max(float(g.abs().max()) for g in grad_a.values())
    for name in grad_a:
        floor = 1e-3 * scale if name.endswith("attn.k.bias") else 0.0
        assert _rel(grad_b[name], grad_a[name], floor) < GRAD_RTOL[torch.float32], name
    # The comparison can fail: one stored pair fewer in a pair-attended graph moves the outputs.
    g = int(on_pairs.nonzero()[0])
    first = int(((pairs.graph == g) & (pairs.row != pairs.col)).nonzero()[0])
    fewer = LogPairs(*(torch.cat([t[:first], t[first + 1:]]) for t in (pairs.graph, pairs.row, pairs.col,
                                                                       pairs.values)))
    out_c, _ = run(40, fewer)
    assert _rel(out_c, out_b) > 1e-6


def test_the_pair_settings_are_the_packed_parts_own(proteins_batch) -> None:
    """Where large sparse graphs leave their grid is the state of the network's packed part (``net.packed_path``):
    off, no graph attends over its pairs; on, exactly the graphs :func:`pair_attended` picks; each network its own."""
    _, packed = _pair()
    other = _pair()[1]
    pairs, _ = _log_pairs(proteins_batch, "hard")
    mask = proteins_batch["mask"]
    want = pair_attended(mask.sum(1), torch.bincount(pairs.graph, minlength=mask.size(0)), density=0.5, min_nodes=40)
    packed.eval()

    def pair_set():  # the packing's graphs attended over their pairs (None: every graph on its grid)
        with torch.no_grad():
            _, packing = packed.encode_packed(proteins_batch["x"], mask, log_powers=pairs, log_spec=(1e-30, "hard"))
        return packing.pairs

    packed.packed_path.pair_min_nodes = None
    assert pair_set() is None
    packed.packed_path.pair_min_nodes, packed.packed_path.pair_density = 40, 0.5
    got = pair_set()
    assert got is not None and torch.equal(got.graphs, want.nonzero().squeeze(1))
    assert (other.packed_path.pair_min_nodes, other.packed_path.pair_density) == (PAIR_MIN_NODES, PAIR_DENSITY)


@pytest.mark.parametrize("sorted_pairs", [True, False])
def test_diagonal_fill_merged_in_order_gives_the_sorted_plan(sorted_pairs) -> None:
    """The pair set's own-pair fill placed in row-major order against appending it and letting the CSR plan sort:
    the same stacked pattern and the same logit terms at it, entry for entry (a graph of 40 nodes, some
    diagonals stored, some not, ``-inf`` terms where a head's support ends)."""
    from xmask_cli.model.attention.csr import csr_plan
    from xmask_cli.model.packed_path import _with_diagonal

    gen = torch.Generator().manual_seed(7)
    m, heads = 40, 3
    dense = torch.rand(m, m, generator=gen) < 0.2
    dense[torch.arange(0, m, 3), torch.arange(0, m, 3)] = True  # every third node's own pair stored
    row, col = dense.nonzero(as_tuple=True)  # row-major
    values = torch.randn(row.numel(), heads, generator=gen)
    values[torch.rand(values.shape, generator=gen) < 0.3] = float("-inf")
    if not sorted_pairs:
        perm = torch.randperm(row.numel(), generator=gen)
        row, col, values = row[perm], col[perm], values[perm]
    has = torch.zeros(m, dtype=torch.bool)
    has[row[row == col]] = True
    missing = (~has).nonzero().squeeze(1)
    assert 0 < missing.numel() < m
    fill = torch.tensor([[0.5, float("-inf"), -1.0]])

    def plan_of(r, c, v):
        plan = csr_plan(torch.stack([r, c]), m, m, tuple(range(heads)), heads, torch.isfinite(v))
        return plan, v.reshape(-1).index_select(0, plan.pick)

    appended = (torch.cat([row, missing]), torch.cat([col, missing]), torch.cat([values, fill.expand(len(missing), -1)]))
    merged = _with_diagonal(row, col, values, missing, fill, m)
    (want, want_terms), (got, got_terms) = plan_of(*appended), plan_of(*merged)
    assert torch.equal(got.crow, want.crow) and torch.equal(got.col, want.col) and torch.equal(got.row, want.row)
    assert torch.equal(got_terms, want_terms)
    if sorted_pairs:  # merged in order: nothing left for the plan to sort
        key = merged[0] * m + merged[1]
        assert bool((key[1:] > key[:-1]).all())


@pytest.mark.parametrize("min_nodes", [None, 50])
def test_parts_as_spans_give_the_gathered_parts_numbers_exactly(proteins_batch, monkeypatch, min_nodes) -> None:
    """Attention parts read as views of their row spans and joined in row order, against each part gathered and
    the parts put back through the inverse permutation: the same outputs and gradients, bit for bit, with several
    dense groups, and with a pair set beside them (above 50 nodes: the seven largest graphs, the others on each side of the threshold in dense groups)."""
    import xmask_cli.model.packing as packing_module

    _, packed = _pair()
    pairs, _ = _log_pairs(proteins_batch, "hard")
    # The batch largest graph first, so the pair set's graphs (in batch order) are the packing's first rows.
    x, mask = proteins_batch["x"].flip(0), proteins_batch["mask"].flip(0)
    graph = mask.size(0) - 1 - pairs.graph
    order = torch.argsort(graph, stable=True)
    pairs = LogPairs(graph[order], pairs.row[order], pairs.col[order], pairs.values[order])
    packed.packed_path.pair_min_nodes, packed.packed_path.pair_density = min_nodes, 0.5
    batch = {"x": x, "mask": mask, "log_powers": pairs, "log_spec": (1e-30, "hard")}
    with torch.no_grad():
        _, packing = packed.encode_packed(batch["x"], batch["mask"], log_powers=pairs, log_spec=(1e-30, "hard"))
    assert packing.tiles is not None and len(packing.groups) > 1
    assert (packing.pairs is not None) == (min_nodes is not None)
    fast, fast_grad = _run(packed, batch, seed=3)
    monkeypatch.setattr(packing_module, "_tiles", lambda parts, n: None)  # every part gathered, as before
    slow, slow_grad = _run(packed, batch, seed=3)
    assert torch.equal(fast, slow)
    assert fast_grad.keys() == slow_grad.keys()
    for name in fast_grad:
        assert torch.equal(fast_grad[name], slow_grad[name]), name
