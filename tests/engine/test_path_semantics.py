"""Path semantics through the node engine: partitions, subgraphs, full graph, refusals.

- A METIS partition batch of Amazon Computers (13752 nodes, truncated
  large-graph powers, 32 parts), exactly as :class:`NodeTask` builds it: the
  sparse partition path equals the same partition computed densely (outputs and
  gradients, 1e-4 relative, ``d_h`` 16 and 32, both ``mask_scale``s, logits
  spread by >= 5 units), and an independent float64 numpy reference.
- Plain heads (``use_bias=False``, ``k_h = 0``) on the partition, subgraph and
  full-graph paths: unmasked attention over the partition / subgraph / graph.
- ``outside_support='eps'`` and a learned bias on a plain head: partition
  batches are refused (``PathRefused``; ``train`` exits 2), ``auto`` picks dense.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from tests.model.semantics import (
    LOGIT_STD,
    RTOL,
    aggregate,
    assert_same_grads,
    log_mask,
    max_rel,
    numpy_heads,
    rel,
    run_with_grads,
    spread_logits,
)
from xmask_cli.cache import StructureCache
from xmask_cli.cli import app
from xmask_cli.config import NodeSection
from xmask_cli.config_resolve import resolve
from xmask_cli.data.load import load_graphs
from xmask_cli.data.registry import get_dataset
from xmask_cli.engine.node_batches import NodeBatch
from xmask_cli.engine.splits import node_split
from xmask_cli.engine.tasks.node import NodeTask
from xmask_cli.model.attention.path import PathRefused
from xmask_cli.model.network import ModelConfig, XMaskNet, sparse_refusal

#: Powers Â^1, Â^2 only, no SPD / spectra: the structure these tests read, prepared in seconds. The tests pick
#: the path themselves (partition mode, learned biases), so prepare computes every section the structure names.
FAST = ["structure.spd.enabled=false", "structure.spectrum.enabled=false", "structure.powers.k=2",
        "prepare.compute=all"]


@dataclass
class Part:
    """One partition batch of a NodeTask and the same partition as a dense grid."""

    task: NodeTask
    batch: NodeBatch
    x: torch.Tensor  # [n, F]
    block: torch.Tensor  # [1, K, n, n]

    @property
    def a(self) -> np.ndarray:
        return self.block[0].double().numpy()


def _node_task(name: str, shared_data: Path, cache_dir: Path, overrides: list[str], **kw) -> NodeTask:
    summary = _prepare(name, shared_data, cache_dir, overrides)
    graphs = load_graphs(get_dataset(name), data_root=shared_data, cache_dir=cache_dir, offline=True)
    split = node_split(graphs.spec.split, graphs.dataset[0], seed=0)
    node = {k: kw.pop(k) for k in list(kw) if k in NodeSection.__dataclass_fields__}  # the node section's keys
    return NodeTask(summary.path, graphs, split, node=NodeSection(**node), **kw)


def _prepare(name: str, shared_data: Path, cache_dir: Path, overrides: list[str]):
    from xmask_cli.prepare import prepare_dataset

    return prepare_dataset(resolve(name, FAST + overrides), data_root=shared_data, cache_dir=cache_dir, offline=True)


@pytest.fixture(scope="module")
def computers(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Part:
    task = _node_task("computers", shared_data, tmp_path_factory.mktemp("computers"),
                      ["structure.partition.parts=32"], mode="partition")
    assert task.num_nodes == 13752 and task.mode == "partition" and len(task.eval_batches) == 32
    batch = max(task.eval_batches, key=lambda b: b.nodes.numel())
    nodes = batch.nodes.numpy()
    # The batch's pairs are exactly the cached (truncated) pairs with both ends in the part.
    row, col, values = StructureCache(task.cache_path).powers(0)
    inside = np.zeros(task.num_nodes, dtype=bool)
    inside[nodes] = True
    keep = inside[row] & inside[col]
    ei = batch.edge_index.numpy()
    assert sorted(zip(nodes[ei[0]], nodes[ei[1]])) == sorted(zip(row[keep], col[keep]))
    # The same partition as one dense grid, from the batch's own pairs.
    n, K = len(nodes), batch.values.size(1)
    block = torch.zeros(1, K, n, n)
    block[0, :, batch.edge_index[0], batch.edge_index[1]] = batch.values.T
    # Union-support pairs outside head 1's support (2-hop pairs): -inf for head 1 on both paths.
    assert (batch.values[:, 0] == 0).any()
    return Part(task, batch, task.x[batch.nodes].float(), block)


def _model(in_dim: int, d_h: int, mask_scale: str = "paper", **kw) -> XMaskNet:
    torch.manual_seed(0)
    cfg = ModelConfig(in_dim=in_dim, out_dim=10, hidden=2 * d_h, heads=2, layers=1, dropout=0.0, task="node",
                      mask_scale=mask_scale, **{"head_powers": (1, 2), **kw})
    return XMaskNet(cfg)


def _partition_path(part: Part):
    b = part.batch
    return lambda m, x: m.forward_sparse(x, b.edge_index, b.values)  # what NodeTask._forward runs on it


def _dense_path(part: Part):
    return lambda m, x: m.forward_dense(x[None], part.block)[0]


@pytest.mark.parametrize("mask_scale", ["paper", "none"])
@pytest.mark.parametrize("d_h", [16, 32])
def test_partition_path_equals_dense_partition(computers: Part, d_h: int, mask_scale: str) -> None:
    model = _model(computers.task.in_dim, d_h, mask_scale)
    assert spread_logits(model, computers.x) >= LOGIT_STD
    out_s, grad_s = run_with_grads(model, computers.x, _partition_path(computers))
    out_d, grad_d = run_with_grads(model, computers.x, _dense_path(computers))
    assert rel(out_s, out_d) < RTOL
    assert_same_grads(grad_d, grad_s)


def test_partition_equals_numpy_reference(computers: Part) -> None:
    d_h = 32
    model = _model(computers.task.in_dim, d_h)
    assert spread_logits(model, computers.x) >= LOGIT_STD
    s = 1 / math.sqrt(d_h)
    want = numpy_heads(model, computers.x, [log_mask(computers.a[0], s), log_mask(computers.a[1], s)])
    got = aggregate(model, computers.x, "sparse", edge_index=computers.batch.edge_index, values=computers.batch.values)
    assert max_rel(got, want) < RTOL


@pytest.mark.parametrize("kw", [{"use_bias": False}, {"head_powers": (2, 0)}], ids=["no-logmask", "mixed"])
def test_plain_heads_attend_over_the_whole_partition(computers: Part, kw: dict) -> None:
    d_h = 16
    model = _model(computers.task.in_dim, d_h, **kw)
    assert spread_logits(model, computers.x) >= LOGIT_STD
    masks = [None, None] if not model.cfg.use_bias else [log_mask(computers.a[1], 1 / math.sqrt(d_h)), None]
    want = numpy_heads(model, computers.x, masks)
    got = aggregate(model, computers.x, "sparse", edge_index=computers.batch.edge_index, values=computers.batch.values)
    assert max_rel(got, want) < RTOL
    out_s, grad_s = run_with_grads(model, computers.x, _partition_path(computers))
    out_d, grad_d = run_with_grads(model, computers.x, _dense_path(computers))
    assert rel(out_s, out_d) < RTOL
    assert_same_grads(grad_d, grad_s)


def test_eps_refuses_partitions(computers: Part) -> None:
    model = _model(computers.task.in_dim, 16, outside_support="eps")
    with pytest.raises(ValueError, match="model.outside_support=eps"):
        model.forward_sparse(computers.x, computers.batch.edge_index, computers.batch.values)
    t = computers.task
    with pytest.raises(PathRefused, match="outside_support=eps"):
        NodeTask(t.cache_path, t.graphs, t.split, dense_only=sparse_refusal(model.cfg),
                 node=NodeSection(mode="partition"))
    with pytest.raises(PathRefused, match="dense_max_nodes"):  # auto: the 13752-node grid does not fit
        NodeTask(t.cache_path, t.graphs, t.split, dense_only=sparse_refusal(model.cfg), node=NodeSection(mode="auto"))


# ------------------------------------------------------------------ Cora
@pytest.fixture(scope="module")
def cora_dir(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache_dir = tmp_path_factory.mktemp("cora")
    _prepare("cora", shared_data, cache_dir, ["structure.partition.parts=0"])
    return cache_dir


@pytest.mark.parametrize("kw", [{"use_bias": False}, {"head_powers": (0, 2)}], ids=["no-logmask", "mixed"])
def test_plain_heads_on_subgraphs_see_the_subgraph(shared_data: Path, cora_dir: Path, kw: dict) -> None:
    """Subgraph batches slice the cached global powers; plain heads attend over every node of the subgraph."""
    task = _node_task("cora", shared_data, cora_dir, ["structure.partition.parts=0"], mode="subgraph",
                      subgraph_size=700)
    nodes = task.batcher.draw(0, 0)
    batch = task.batcher.batch(nodes)
    dense = StructureCache(task.cache_path).dense_powers(0).astype(np.float64)  # the whole graph's Â^k
    a = dense[:, nodes][:, :, nodes]
    d_h = 16
    x = task.x[batch.nodes].float()
    model = _model(task.in_dim, d_h, **kw)
    assert spread_logits(model, x) >= LOGIT_STD
    masks = [None, None] if not model.cfg.use_bias else [None, log_mask(a[1], 1 / math.sqrt(d_h))]
    got = aggregate(model, x, "dense", powers=batch.powers)
    assert max_rel(got, numpy_heads(model, x, masks)) < RTOL


@pytest.mark.parametrize("kw", [{"use_bias": False}, {"head_powers": (0, 2)}], ids=["no-logmask", "mixed"])
def test_full_graph_dense_and_sparse_tasks_agree_with_plain_heads(shared_data: Path, cora_dir: Path, kw: dict) -> None:
    over = ["structure.partition.parts=0"]
    dense = _node_task("cora", shared_data, cora_dir, over, mode="full", attention="dense")
    sparse = _node_task("cora", shared_data, cora_dir, over, mode="full", attention="sparse")
    model = _model(dense.in_dim, 16, **kw).eval()
    assert spread_logits(model, dense.x.float()) >= LOGIT_STD
    assert rel(sparse.predict(model), dense.predict(model)) < RTOL


def test_train_refuses_eps_on_partitions_with_exit_2(shared_data: Path, tmp_path: Path) -> None:
    args = ["train", "--preset", "node-level", "--data-root", str(shared_data), "--cache-dir", str(tmp_path / "cache"),
            "--runs-dir", str(tmp_path / "runs"), "--set", "model.outside_support=eps", "--set", "node.mode=partition",
            "--set", "structure.partition.parts=4", "--set", "model.heads=2"]
    for o in FAST:
        args += ["--set", o]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1 and "model.outside_support=eps" in lines[0] and "Traceback" not in r.stderr


@pytest.mark.parametrize("kw", [{"use_bias": False}, {"head_powers": (0, 2)}, {}], ids=["no-logmask", "mixed", "hard"])
def test_query_batches_equal_the_dense_full_graph(shared_data: Path, cora_dir: Path, kw: dict) -> None:
    """Whole-graph query batches (two blocks, so the key sets grow) give the dense full-graph numbers, plain heads too."""
    over = ["structure.partition.parts=0"]
    dense = _node_task("cora", shared_data, cora_dir, over, mode="full", attention="dense")
    query = _node_task("cora", shared_data, cora_dir, over, mode="query", query_chunk_pairs=50_000)
    assert query.mode == "query"
    torch.manual_seed(0)
    cfg = ModelConfig(in_dim=dense.in_dim, out_dim=7, hidden=32, heads=2, layers=2, dropout=0.0, task="node",
                      **{"head_powers": (1, 2), **kw})
    model = XMaskNet(cfg).eval()
    assert spread_logits(model, dense.x.float()) >= LOGIT_STD
    assert rel(query.predict(model), dense.predict(model)) < RTOL
    if kw.get("use_bias", True) is False:  # eps changes nothing without the log mask: still allowed
        return
    eps = XMaskNet(dataclasses.replace(cfg, outside_support="eps"))
    with pytest.raises(ValueError, match="outside_support=eps"):
        query.predict(eps)


# ------------------------------------------------------------------ learned biases, full Cora
#: SPD, RRWP (4 steps), Laplacian and magnetic spectra on top of FAST: what the GTLM biases read.
EXTRAS = ["structure.partition.parts=0", "structure.spd.enabled=true", "structure.spectrum.enabled=true",
          "structure.rrwp.enabled=true", "structure.rrwp.steps=4", "structure.magnetic.enabled=true"]


def test_full_graph_dense_and_sparse_agree_with_every_learned_bias(shared_data: Path,
                                                                    tmp_path_factory: pytest.TempPathFactory) -> None:
    """X-LogSMask plus SPD, RRWP, magnetic and eigen biases on every head, all with random non-zero weights, logits
    spread by >= 5: the dense grid and the sparse pairs of full Cora give the same predictions (the GTLM preset's
    node-level path; ``auto`` picks either by density)."""
    cache_dir = tmp_path_factory.mktemp("cora-extras")
    torch.manual_seed(0)
    cfg = ModelConfig(in_dim=1433, out_dim=7, hidden=32, heads=2, layers=1, dropout=0.0, task="node",
                      head_powers=(1, 2), rrwp_dim=5,
                      biases=tuple({"type": t} for t in ("spd", "rrwp", "magnetic", "eigen")))
    tasks = {a: _node_task("cora", shared_data, cache_dir, EXTRAS, mode="full", attention=a, needs=cfg.needs)
             for a in ("dense", "sparse")}
    assert tasks["dense"].in_dim == cfg.in_dim and cfg.needs == {"spd", "rrwp", "spectrum", "magnetic"}
    model = XMaskNet(cfg).eval()
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in model.learned.parameters():  # learned biases start at 0 (plain attention): make them act
            p.copy_(torch.randn(p.shape, generator=gen) * 0.7)
    assert spread_logits(model, tasks["dense"].x.float()) >= LOGIT_STD
    dense = tasks["dense"].predict(model)
    assert rel(tasks["sparse"].predict(model), dense) < RTOL
    # The learned terms carry weight: without them the predictions move.
    plain = XMaskNet(dataclasses.replace(cfg, biases=()))
    plain.load_state_dict(model.state_dict(), strict=False)
    assert rel(tasks["dense"].predict(plain.eval()), dense) > 1e-2
