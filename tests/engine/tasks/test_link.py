"""Link prediction: learns on Cora, resumes exactly, draws negatives from (seed, epoch) only."""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.engine.pair_graphs import POWERS_ONLY, random_graph
from xmask_cli.data.load import load_graphs
from xmask_cli.data.registry import get_dataset
from xmask_cli.engine.batching.pair_structure import prepare_pair_structure
from xmask_cli.engine.runs.folder import RunDir, without_timing
from xmask_cli.engine.scoring.mrr import link_mrr
from xmask_cli.engine.scoring.splits import edge_split
from xmask_cli.engine.tasks.link import LinkTask
from xmask_cli.engine.training.loop import TrainConfig, fit, train_task
from xmask_cli.errors import UsageError
from xmask_cli.model.network import ModelConfig, XMaskNet


def test_link_learns_on_cora(tmp_path: Path) -> None:
    graphs = load_graphs(get_dataset("cora"), data_root=None, cache_dir=tmp_path, offline=True)
    n = int(graphs.num_nodes[0])
    split = edge_split(graphs.edge_index[0], n, seed=0)
    path = prepare_pair_structure("cora", split.train_edge_index, n, POWERS_ONLY, tmp_path)
    # dense_max_nodes=0: the sparse path, several times faster than dense at N = 2708 on a CPU.
    task = LinkTask(path, graphs.dataset[0].x, split, dataset="Cora", seed=0, dense_max_nodes=0)
    model_cfg = ModelConfig(in_dim=task.in_dim, out_dim=1, task="link", hidden=32, heads=2, layers=1,
                            dropout=0.0, head_powers=(1, 2))
    cfg = TrainConfig(epochs=15, lr=3e-3, warmup_epochs=1, patience=15, seed=0)
    summary = train_task(task, model_cfg, cfg, tmp_path / "run")

    rng = np.random.default_rng(0)
    p, m = split.val_pos.shape[1], split.num_neg_per_pos
    random_mrr = link_mrr(rng.random(p), rng.random(p * m), "shared", m)
    assert summary["metrics"]["val"] > 3 * random_mrr, (summary["metrics"], random_mrr)
    assert summary["split"] == {"name": "edge-85-5-10", "seed": 0, "train": split.train_pos.shape[1],
                                "val": p, "test": split.test_pos.shape[1]}
    d = task.describe()
    assert len(json.dumps(d)) < 2000  # identity only, not the edge arrays
    assert d["split"] == {"name": "edge-85-5-10", "seed": 0, "num_neg_per_pos": 1, "fractions": [0.85, 0.05, 0.1]}
    assert d["link"]["protocol"] == "shared" and d["link"]["path"] == "sparse"


class Killed(RuntimeError):
    pass


def test_link_resume_matches_uninterrupted(tmp_path: Path) -> None:
    n = 60
    split = edge_split(random_graph(n, 0.1, seed=3), n, seed=1, num_neg_per_pos=2)
    path = prepare_pair_structure("toy", split.train_edge_index, n, POWERS_ONLY, tmp_path)
    x = torch.from_numpy(np.random.default_rng(3).normal(size=(n, 6)).astype(np.float32))
    # batch_size: several re-encoding steps per epoch; dropout: the torch RNG state must be restored too.
    task = LinkTask(path, x, split, dataset="toy", protocol="per-positive", seed=4, batch_size=40)
    assert task.structure.dense
    model_cfg = ModelConfig(in_dim=6, out_dim=1, task="link", hidden=16, heads=2, layers=1, dropout=0.2,
                            head_powers=(1, 2))
    cfg = TrainConfig(epochs=6, lr=1e-2, warmup_epochs=2, patience=6, seed=3)
    a = train_task(task, model_cfg, cfg, tmp_path / "a")

    def kill_after_epoch_2(row: dict) -> None:
        if row["epoch"] == 2:
            raise Killed

    with pytest.raises(Killed):
        train_task(task, model_cfg, cfg, tmp_path / "b", log=kill_after_epoch_2)
    assert not (tmp_path / "b" / RunDir.SUMMARY).exists()
    torch.manual_seed(12345)  # whatever the process did meanwhile must not matter
    np.random.seed(54321)
    b = train_task(task, model_cfg, cfg, tmp_path / "b", resume=True)

    assert b == a
    run_a, run_b = RunDir(tmp_path / "a"), RunDir(tmp_path / "b")
    assert without_timing(run_b.read_metrics()) == without_timing(run_a.read_metrics())
    for name in (RunDir.BEST, RunDir.LAST):
        sa, sb = run_a.load_checkpoint(name)["model"], run_b.load_checkpoint(name)["model"]
        assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)

    # Another protocol is another task: resume refuses it.
    other = LinkTask(path, x, split, dataset="toy", protocol="shared", seed=4, batch_size=40)
    with pytest.raises(UsageError, match="cannot resume .* in link.protocol"):
        fit(other, XMaskNet(model_cfg), cfg, tmp_path / "b", model_config=asdict(model_cfg), resume=True)


def test_training_negatives_depend_on_seed_and_epoch_only(tmp_path: Path) -> None:
    n = 30
    split = edge_split(random_graph(n, 0.2, seed=4), n, seed=0)
    path = prepare_pair_structure("toy", split.train_edge_index, n, POWERS_ONLY, tmp_path)
    task = LinkTask(path, torch.randn(n, 3), split, dataset="toy", seed=7)
    (pos, neg), = list(task.train_batches(3))
    (pos2, neg2), = list(task.train_batches(3))
    assert torch.equal(neg, neg2) and torch.equal(pos, pos2)
    assert not torch.equal(neg, next(iter(task.train_batches(4)))[1])
    assert neg.shape == pos.shape and bool((neg[0] != neg[1]).all())
    train = {tuple(sorted(e)) for e in split.train_pos.T.tolist()}
    assert not any(tuple(sorted(e)) in train for e in neg.T.tolist())
    with pytest.raises(ValueError, match="fractions"):
        LinkTask(path, torch.randn(n, 3), split, dataset="toy", fractions=(0.8, 0.1, 0.1))
