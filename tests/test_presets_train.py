"""Every shipped preset resolves, builds its model and trains: one optimizer step, on its dataset or a small stand-in
of the same level and path.

The stand-ins are the bundled sets (Cora for node and link presets, MUTAG for graph presets, digits for image
presets) and a small edge file. A stand-in keeps the path the preset takes on its own dataset: where the real
graph is larger than ``node.dense_max_nodes`` (sparse full-graph attention), beyond ``node.memory_gb`` (``auto``
then means query or partition batches) or larger than ``structure.large.min_nodes`` (sparse, truncated storage),
the threshold is lowered below the stand-in's so the same branch runs. Nothing else changes but the batch size (8 graphs or images): the model and its
settings are the preset's.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.cli_helpers import one_error_line, run
from tests.engine.conftest import _one_torch_thread  # noqa: F401  (autouse: one torch thread)
from xmask_cli.config_resolve import list_presets, packaged_presets_dir, resolve
from xmask_cli.data.registry import get_dataset
from xmask_cli.engine.experiment import Experiment, check_config
from xmask_cli.engine.loop import seed_everything
from xmask_cli.engine.node_memory import full_step_memory, step_shape
from xmask_cli.engine.plan import resolve_level
from xmask_cli.model.network import XMaskNet

PRESETS = sorted(p.stem for p in packaged_presets_dir().glob("*.yaml"))

#: Node counts of the node-level datasets (PyG's loaders; Planetoid, Amazon, Coauthor, WikiCS papers).
NODES = {"Cora": 2708, "CiteSeer": 3327, "PubMed": 19717, "Computers": 13752, "Photo": 7650, "CS": 18333,
         "Physics": 34493, "WikiCS": 11701, "ogbn-arxiv": 169343, "ogbn-products": 2449029}
#: Stand-in per level, and the stand-in graph's node count where it matters.
STAND_IN = {"node": "Cora", "link": "Cora", "graph": "MUTAG", "image": "digits"}
CORA_NODES = 2708
#: A threshold below the stand-in's size: lowering it sends the stand-in down the large-graph branch.
BELOW_CORA = 2000
#: A ``node.memory_gb`` below any stand-in's full-graph step: ``auto`` then takes batches, as on the sets below.
TINY_BUDGET = 1e-4
#: Node sets whose full-graph step is over the default ``node.memory_gb`` under their presets
#: (:func:`test_the_ogbn_presets_are_over_the_budget` computes why); every other one fits it.
BEYOND_BUDGET = {"ogbn-arxiv", "ogbn-products"}
#: Graphs or images in the one training batch.
SMALL_BATCH = 8


def _edge_file(folder: Path) -> Path:
    """A small edge-attribute file: 60 nodes on a ring with chords, one regression target per edge."""
    rng = np.random.default_rng(0)
    rows = [(i, (i + 1) % 60) for i in range(60)] + [(i, (i + 7) % 60) for i in range(0, 60, 3)]
    path = folder / "edges.csv"
    path.write_text("src,dst,target\n" + "".join(f"{u},{v},{rng.normal():.4f}\n" for u, v in rows))
    return path


def _level(name: str) -> str:
    cfg = resolve(name)
    return "edge" if cfg.task.level == "edge" else resolve_level(cfg)


def stand_in_overrides(name: str, folder: Path) -> list[str]:
    """``--set`` overrides that run preset ``name`` on its stand-in, on the path it takes on its own dataset."""
    cfg = resolve(name)
    level = _level(name)
    if level == "edge":
        return [f"edge.file={_edge_file(folder)}"]
    real = get_dataset(cfg.data.dataset).name
    sets = [f"data.dataset={STAND_IN[level]}"]
    if level in ("graph", "image"):
        sets.append(f"train.batch_size={SMALL_BATCH}")  # one step's cost; batches take the same path at any size
    if level in ("node", "link") and real in NODES:
        n = NODES[real]
        if n > cfg.node.dense_max_nodes >= CORA_NODES:
            sets.append(f"node.dense_max_nodes={BELOW_CORA}")
        if level == "node" and real in BEYOND_BUDGET:
            sets.append(f"node.memory_gb={TINY_BUDGET}")
        if n > cfg.structure.large.min_nodes >= CORA_NODES:
            sets.append(f"structure.large.min_nodes={BELOW_CORA}")
    return sets


def test_the_stand_ins_keep_the_large_graph_branch():
    """Computers (13,752 nodes, auto -> full-graph sparse steps, sparse storage) and ogbn-arxiv (auto -> query
    batches) run the same branches on Cora."""
    sets = stand_in_overrides("computers", Path("."))
    assert f"node.dense_max_nodes={BELOW_CORA}" in sets and f"structure.large.min_nodes={BELOW_CORA}" in sets
    assert f"node.memory_gb={TINY_BUDGET}" not in sets
    assert f"node.memory_gb={TINY_BUDGET}" in stand_in_overrides("ogbn-arxiv", Path("."))
    assert not any(s.startswith("node.") for s in stand_in_overrides("cora", Path(".")))


@pytest.mark.parametrize("name", ["ogbn-arxiv", "ogbn-products"])
def test_the_ogbn_presets_are_over_the_budget(name: str):
    """Their activations alone (no stored pair counted) are over the default node.memory_gb: auto takes query
    batches there. The node counts and widths are the datasets' (OGB's pages)."""
    cfg = resolve(name)
    nodes, width, classes = {"ogbn-arxiv": (169343, 128, 40), "ogbn-products": (2449029, 100, 47)}[name]
    lower = full_step_memory(nodes, 0, {k: 0 for k in range(1, 5)}, 2, step_shape(cfg.model, classes), width)
    assert not lower.fits(cfg.node.memory_gb) and cfg.node.mode == "auto"


def test_the_trained_presets_are_exactly_the_listed_ones():
    # `xmask presets ls` lists the shipped folder (no XMASK_PRESETS in tests): each listed preset trains below,
    # and nothing else (the recipes in benchmarks/presets/ are not shipped).
    assert set(PRESETS) == set(list_presets()) and len(PRESETS) >= 30


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    """One structure cache for the module: presets with the same structure share their stand-in's cache."""
    return tmp_path_factory.mktemp("preset-cache")


def one_step(cfg, cache_dir: Path) -> tuple[Any, float, float]:
    """What ``xmask train`` does up to its first optimizer step: checks, data and cache, task, model; then one
    step on the first training batch. Returns the task, the loss before and after the step on that batch."""
    exp = Experiment.load(cfg, cache_dir=cache_dir)
    seed_everything(0)
    task = exp.task(0, "cpu")
    model = XMaskNet(exp.model_config(task))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = next(iter(task.train_batches(0)))
    model.eval()  # before and after in eval mode: the difference is the step's, not dropout's
    with torch.no_grad():
        before, _ = task.loss(model, batch)
    model.train()
    loss, n = task.loss(model, batch)
    assert n > 0 and torch.isfinite(loss)
    loss.backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    opt.step()
    model.eval()
    with torch.no_grad():
        after, _ = task.loss(model, batch)
    return task, float(before), float(after)


@pytest.mark.parametrize("name", PRESETS)
def test_preset_builds_and_trains_one_step(name: str, cache_dir: Path, tmp_path: Path):
    cfg = resolve(name, stand_in_overrides(name, tmp_path))
    level = _level(name)
    assert check_config(cfg)[0] == level
    task, before, after = one_step(cfg, cache_dir)
    assert np.isfinite(after) and after != before  # the step changed the model
    if level == "node":
        # The node batching the preset takes on its own dataset ran here too.
        real = get_dataset(resolve(name).data.dataset).name
        if cfg.model.experts:
            assert task.mode == "full"
        elif cfg.node.mode != "auto":
            assert task.mode == cfg.node.mode
        else:
            assert task.mode == ("query" if real in BEYOND_BUDGET else "full")


def test_experts_with_a_batched_node_mode_are_refused_when_the_config_resolves(tmp_path):
    """Attention experts attend over the whole graph's tokens: subgraph, query or partition batches are refused
    at resolve time (exit 2, naming both keys), before any data is read."""
    for mode in ("subgraph", "query", "partition"):
        r = run("train", "--preset", "m3d-cora", "--set", f"node.mode={mode}", "--cache-dir", str(tmp_path / "c"),
                "--runs-dir", str(tmp_path / "runs"))
        assert r.exit_code == 2, r.stderr
        line = one_error_line(r)
        assert "node.mode" in line and "model.experts" in line and mode in line
        assert not (tmp_path / "c").exists()
