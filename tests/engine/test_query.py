"""Whole-graph query batches: the same numbers as the full-graph sparse path, memory bounded by the chunk."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from tests.engine.tasks.test_node import Toy
from xmask_cli.config import NodeSection
from xmask_cli.engine.query import Support, closure, encode_queries
from xmask_cli.engine.tasks.node import NodeTask
from xmask_cli.model.attention.structural import StructuralAttention
from xmask_cli.model.network import ModelConfig, XMaskNet
from xmask_cli.structure.powers import Truncation, adjacency_powers, union_pairs

N = 3000


@pytest.fixture(scope="module")
def graph() -> Support:
    """3,000 nodes, clustered (communities plus random edges), Â^1..Â^3 truncated as large graphs are."""
    rng = np.random.default_rng(0)
    comm = rng.integers(0, 30, N)
    order = np.argsort(comm, kind="stable")
    starts = np.searchsorted(comm[order], np.arange(30))
    sizes = np.bincount(comm, minlength=30)
    src = rng.integers(0, N, 12 * N)
    # Most edges inside a community, some across: supports overlap unevenly, as on co-purchase graphs.
    inside = order[starts[comm[src]] + rng.integers(0, sizes[comm[src]])]
    dst = np.where(rng.random(12 * N) < 0.8, inside, rng.integers(0, N, 12 * N))
    a = sp.coo_matrix((np.ones(len(src)), (src, dst)), shape=(N, N)).tocsr()
    a = ((a + a.T) > 0).astype(np.float64)
    a.setdiag(0)
    a.eliminate_zeros()
    mats = adjacency_powers(a, 3, truncation=Truncation(tau=1e-6, topk=48))
    row, col, vals = union_pairs(mats)
    return Support.from_coo(row, col, vals, N)


def _trained_scale(model: XMaskNet, scale: float) -> None:
    """Spread q·k as training does: scale the query and key projections."""
    with torch.no_grad():
        for block in model.blocks:
            block.attn.q.weight.mul_(scale)
            block.attn.k.weight.mul_(scale)


def _model(layers: int, seed: int = 0, **kw) -> XMaskNet:
    torch.manual_seed(seed)
    cfg = ModelConfig(in_dim=12, out_dim=5, hidden=64, heads=4, head_powers=(1, 2, 3, 3), layers=layers,
                      task="node", dropout=0.0, **kw)
    return XMaskNet(cfg)


def _qk_std(model: XMaskNet, x: torch.Tensor, s: Support) -> float:
    row = np.repeat(np.arange(s.num_nodes), np.diff(s.indptr))
    with torch.no_grad():
        h = model.encoder(x)
    att = model.blocks[0].attn
    q = att.q(h).view(-1, att.num_heads, att.head_dim)
    k = att.k(h).view(-1, att.num_heads, att.head_dim)
    return float((q[row] * k[s.col]).sum(-1).std().detach())


def _full_sparse(model: XMaskNet, x: torch.Tensor, s: Support) -> torch.Tensor:
    row = np.repeat(np.arange(s.num_nodes), np.diff(s.indptr))
    ei = torch.from_numpy(np.stack([row, s.col]))
    return model.forward_sparse(x, ei, torch.from_numpy(s.values))


@pytest.mark.parametrize("layers,mask_scale", [(1, "paper"), (2, "none")])
def test_query_batches_equal_the_full_graph_sparse_path(graph: Support, layers: int, mask_scale: str) -> None:
    model = _model(layers, mask_scale=mask_scale).eval()
    _trained_scale(model, 6.0)
    x = torch.randn(N, 12, generator=torch.Generator().manual_seed(1))
    assert _qk_std(model, x, graph) >= 5  # trained-scale logits, not initialisation
    with torch.no_grad():
        ref = _full_sparse(model, x, graph)
        everyone = model.head(encode_queries(model, x, graph, np.arange(N), chunk_pairs=20_000))
        # A subset of queries, two chunk budgets: the numbers do not depend on the batching.
        q = np.sort(np.random.default_rng(2).choice(N, 700, replace=False))
        few = model.head(encode_queries(model, x, graph, q, chunk_pairs=3_000))
        few_one_chunk = model.head(encode_queries(model, x, graph, q, chunk_pairs=10**9))
    scale = float(ref.abs().max())
    assert float((everyone - ref).abs().max()) <= 1e-4 * scale
    assert float((few - ref[q]).abs().max()) <= 1e-4 * scale
    assert float((few_one_chunk - few).abs().max()) <= 1e-5 * scale


def test_query_gradients_equal_the_full_graph_sparse_path(graph: Support) -> None:
    model = _model(2, seed=3, mask_scale="paper")
    _trained_scale(model, 6.0)
    model.eval()  # no dropout: the two paths must see the same function
    x = torch.randn(N, 12, generator=torch.Generator().manual_seed(4))
    y = torch.randint(0, 5, (N,), generator=torch.Generator().manual_seed(5))
    q = np.sort(np.random.default_rng(6).choice(N, 400, replace=False))

    def grads(out: torch.Tensor) -> list[torch.Tensor]:
        model.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(out, y[q]).backward()
        return [p.grad.clone() for p in model.parameters()]

    ref = grads(_full_sparse(model, x, graph)[q])
    # A small budget: many chunks per layer, so the backward recomputes them (checkpointing).
    got = grads(model.head(encode_queries(model, x, graph, q, chunk_pairs=4_000)))
    total = float(torch.cat([g.flatten() for g in ref]).norm())
    for a, b in zip(got, ref):
        # The key bias's gradient is 0 in exact arithmetic (softmax ignores a per-query shift): floor the scale.
        assert float((a - b).norm()) <= 1e-4 * max(float(b.norm()), 1e-3 * total)


def test_closure_is_the_keys_of_the_keys(graph: Support) -> None:
    q = np.array([5, 17, 2999])
    s0, s1, s2 = closure(graph, q, 2)
    dense = sp.csr_matrix((np.ones(graph.num_pairs), graph.col, graph.indptr), shape=(N, N))
    one = np.union1d(q, dense[q].indices)
    assert np.array_equal(s2, q) and np.array_equal(s1, one)
    assert np.array_equal(s0, np.union1d(one, dense[one].indices))


def test_pair_tensors_are_bounded_by_the_chunk_not_the_graph(graph: Support, monkeypatch) -> None:
    seen: list[int] = []
    original = StructuralAttention.forward_pairs

    def spy(self, x_query, x_key, edge_index, bias=None, return_terms=False, **kw):
        seen.append(int(edge_index.size(1)))
        assert x_key.size(0) <= edge_index.size(1)  # only the chunk's own keys are projected
        return original(self, x_query, x_key, edge_index, bias, return_terms, **kw)

    monkeypatch.setattr(StructuralAttention, "forward_pairs", spy)
    model = _model(1)
    x = torch.randn(N, 12)
    budget = 5_000
    out = model.head(encode_queries(model, x, graph, np.arange(N), chunk_pairs=budget))
    out.sum().backward()  # the backward recomputes chunks: still within the budget
    widest = int(np.diff(graph.indptr).max())
    assert max(seen) <= max(budget, widest) < graph.num_pairs // 10
    assert sum(seen) >= 2 * graph.num_pairs  # every pair once forward, once recomputed


# ------------------------------------------------------------------ the task
@pytest.fixture(scope="module")
def large(tmp_path_factory: pytest.TempPathFactory) -> Toy:
    # A low large.min_nodes / dense_max_nodes makes this graph "large", as Computers is.
    return Toy(tmp_path_factory.mktemp("node_query"), 400, 0.02,
               ["structure.partition.parts=4", "structure.large.min_nodes=50", "structure.large.topk=24"], seed=2)


def test_auto_beyond_the_memory_budget_is_whole_graph_query_batches(large: Toy) -> None:
    # A budget under this graph's full-graph step (node.memory_gb) sends auto to query batches, as on ogbn-arxiv.
    task = NodeTask(large.path, large.graphs, large.split,
                    node=NodeSection(mode="auto", dense_max_nodes=100, query_batch=64, memory_gb=1e-4))
    assert task.full_step is not None and task.full_step.total > 1e-4 * 2**30
    assert task.mode == task.eval_mode == "query" and task.attention == "sparse"
    batches = list(task.train_batches(0))
    ids = np.concatenate([b.nodes.numpy() for b in batches])
    # Every training node once per epoch, in batches of 64, drawn from (seed, epoch).
    assert sorted(ids.tolist()) == sorted(large.split.train.tolist()) and max(len(b.nodes) for b in batches) == 64
    again = np.concatenate([b.nodes.numpy() for b in task.train_batches(0)])
    assert np.array_equal(ids, again) and not np.array_equal(ids, np.concatenate(
        [b.nodes.numpy() for b in task.train_batches(1)]))
    # Partition batches stay an option; learned pair biases fall back to them under auto.
    assert NodeTask(large.path, large.graphs, large.split, node=NodeSection(mode="partition")).mode == "partition"


def test_task_predictions_equal_the_full_sparse_task(large: Toy) -> None:
    query = NodeTask(large.path, large.graphs, large.split, node=NodeSection(mode="query", query_chunk_pairs=500))
    full = NodeTask(large.path, large.graphs, large.split, node=NodeSection(mode="full", attention="sparse"))
    torch.manual_seed(0)
    model = XMaskNet(ModelConfig(in_dim=query.in_dim, out_dim=query.out_dim, task="node", hidden=32, heads=4,
                                 layers=2, dropout=0.0))
    _trained_scale(model, 5.0)
    a, b = query.predict(model), full.predict(model)
    assert float((a - b).abs().max()) <= 1e-4 * float(b.abs().max())
    assert query.score(model, "val") == full.score(model, "val")
    assert query.query_stats.max_chunk_pairs <= max(500, int(np.diff(query.batcher.support.indptr).max()))


def test_cli_trains_whole_graph_query_batches_and_stops_on_validation(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from xmask_cli.cli import app

    r = CliRunner().invoke(app, [
        "--format", "json", "train", "--dataset", "cora", "--device", "cpu", "--runs-dir", str(tmp_path / "runs"),
        "--cache-dir", str(tmp_path / "cache"), "--set", "structure.spd.enabled=false",
        "--set", "structure.spectrum.enabled=false", "--set", "structure.powers.k=2", "--set", "model.heads=2", "--set", "model.head_powers=[1,2]",
        "--set", "model.hidden=16", "--set", "structure.partition.parts=0", "--set", "node.mode=query",
        "--set", "node.query_batch=64", "--set", "train.epochs=500", "--set", "train.patience=2",
        "--set", "train.warmup_epochs=1", "--set", "train.lr=2e-2"])
    assert r.exit_code == 0, r.stderr
    run = json.loads(r.stdout)["runs"][0]
    folder = Path(run["run_dir"])
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    config = json.loads((folder / "config.json").read_text())
    assert config["node"]["mode"] == "query" and config["node"]["query_batch"] == 64
    # Patience ended it long before the cap, 2 epochs after the best validation epoch.
    assert run["stopped_early"] and run["epochs_run"] == len(rows) < 500
    vals = [row["val_accuracy"] for row in rows]
    # The selection rule: the best validation accuracy, ties by the lower validation loss, then the later epoch.
    best = max(range(len(rows)), key=lambda i: (vals[i], -rows[i]["val_loss"], i))
    assert run["best_epoch"] == best and len(rows) == best + 1 + 2
    # Selection read validation: the reported state is the best-validation epoch's.
    assert run["metrics"]["val"] == pytest.approx(vals[best])


def test_sparse_features_encode_as_the_dense_ones(graph: Support) -> None:
    rng = np.random.default_rng(7)
    dense = (rng.random((N, 12)) < 0.05).astype(np.float32)  # bag-of-words
    model = _model(1, input_dropout=0.5).eval()  # eval: no dropout, so both see the same function
    q = np.sort(rng.choice(N, 300, replace=False))
    with torch.no_grad():
        a = encode_queries(model, torch.from_numpy(dense), graph, q)
        b = encode_queries(model, sp.csr_matrix(dense), graph, q)
    assert float((a - b).abs().max()) <= 1e-5 * float(a.abs().max())
    # Training: dropout acts on stored entries only, each kept one scaled by 1 / (1 - p).
    model.train()
    x = torch.sparse_coo_tensor(torch.tensor([[0, 0, 1], [1, 4, 2]]), torch.ones(3), (2, 12))
    h = model.embed(x) - model.encoder.bias
    w = model.encoder.weight.t()
    kept = [s for s in ([], [1], [4], [1, 4]) if torch.allclose(h[0], 2 * w[s].sum(0), atol=1e-6)]
    assert kept, "row 0 must be a 1/(1-p)-scaled sum of a subset of its stored columns"


def test_outside_a_heads_support_is_minus_inf_on_the_query_path(graph: Support, monkeypatch) -> None:
    # Head 1 reads Â^1: a pair stored for Â^2/Â^3 only must weigh exactly 0 for it (hard mask), and the
    # self pair never. Queries whose chunk-local numbering differs from the global one: the bias must
    # tell the self pair apart by global ids, not by the chunk's query and key indices.
    model = _model(1, seed=11).eval()
    x = torch.randn(N, 12, generator=torch.Generator().manual_seed(12))
    q = np.array([100, 2000, 2999])
    seen = []
    original = StructuralAttention.forward_pairs

    def spy(self, *args, **kw):
        out, terms = original(self, *args, **{**kw, "return_terms": True})
        seen.append(terms["attention"])
        return out

    monkeypatch.setattr(StructuralAttention, "forward_pairs", spy)
    with torch.no_grad():
        encode_queries(model, x, graph, q)
    pos, _ = graph.positions(q)
    outside = torch.from_numpy(graph.values[pos, 0] == 0)
    assert bool(outside.any()) and bool((~outside).any())
    assert torch.all(seen[0][outside, 0] == 0) and torch.all(seen[0][~outside, 0] > 0)
