"""Graph-level training on the bundled MUTAG: learning, selection, checkpoints, resume."""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest
import torch

from xmask_cli.config_resolve import resolve
from xmask_cli.data.load import GraphSet, load_graphs
from xmask_cli.data.registry import get_dataset
from xmask_cli.engine.batching.features import node_features
from xmask_cli.engine.runs.folder import RunDir, aggregate, without_timing
from xmask_cli.engine.scoring.splits import Split, graph_split
from xmask_cli.engine.tasks import graph as graph_mod
from xmask_cli.engine.tasks.graph import GraphTask, graph_labels, size_readout_scale, train_graph_level
from xmask_cli.engine.training.loop import TrainConfig
from xmask_cli.errors import UsageError
from xmask_cli.model.network import ModelConfig, XMaskNet
from xmask_cli.prepare import prepare_dataset
from xmask_cli.results import RunSummary

# Split seed 1 has a balanced-ish validation set (majority rate 10/18), so beating it is informative.
SPLIT_SEED = 1
FAST = TrainConfig(epochs=60, lr=1e-2, warmup_epochs=2, patience=60, batch_size=32, seed=0)


@dataclass
class Mutag:
    cache_path: str
    graphs: GraphSet
    split: Split
    model_cfg: ModelConfig


@pytest.fixture(scope="module")
def mutag(tmp_path_factory: pytest.TempPathFactory) -> Mutag:
    cache_dir = tmp_path_factory.mktemp("mutag_cache")
    summary = prepare_dataset(resolve("graph-level"), cache_dir=cache_dir, offline=True)
    graphs = load_graphs(get_dataset("mutag"), data_root=None, cache_dir=cache_dir, offline=True)
    split = graph_split(graphs.spec.split, graphs.dataset, seed=SPLIT_SEED)
    in_dim = node_features(graphs)[0].size(1)
    # The sum readout scaled as the engine does (Experiment.model_config).
    model_cfg = ModelConfig(in_dim=in_dim, out_dim=2, hidden=16, heads=2, layers=1, dropout=0.0,
                            readout_scale=size_readout_scale(graphs.num_nodes, split.train))
    return Mutag(summary.path, graphs, split, model_cfg)


@pytest.fixture(scope="module")
def learned(mutag: Mutag, tmp_path_factory: pytest.TempPathFactory) -> tuple[RunSummary, RunDir]:
    run = RunDir(tmp_path_factory.mktemp("runs") / "mutag" / "0")
    summary = train_graph_level(mutag.cache_path, mutag.graphs, mutag.split, mutag.model_cfg, FAST, run)
    return summary, run


def _evaluate(mutag: Mutag, state: dict, part: str, batch_size: int) -> float:
    """Accuracy of the model ``state`` on ``part``, through the task's own (unshuffled) evaluation batches."""
    model = XMaskNet(mutag.model_cfg)
    model.load_state_dict(state)
    task = GraphTask(mutag.cache_path, mutag.graphs, mutag.split, "accuracy", batch_size, seed=0, device="cpu")
    return task.score(model, part)


def _majority_rate(labels: np.ndarray) -> float:
    return float(np.bincount(labels).max() / len(labels))


def test_node_features_are_the_bundled_atom_labels(mutag: Mutag) -> None:
    # The bundled MUTAG ships MUTAG_node_labels.txt: features are its 7 atom types, one-hot, per graph.
    from xmask_cli.data.load import EMBEDDED_ROOT

    raw = EMBEDDED_ROOT / "MUTAG" / "raw"
    labels = np.loadtxt(raw / "MUTAG_node_labels.txt", dtype=np.int64)
    graph_of = np.loadtxt(raw / "MUTAG_graph_indicator.txt", dtype=np.int64) - 1
    feats = node_features(mutag.graphs)
    assert len(feats) == mutag.graphs.num_graphs == len(graph_labels(mutag.graphs))
    assert mutag.graphs.feature_info().kind == "dataset" and feats[0].size(1) == 7
    for g in (0, 1, 57, 187):
        want = labels[graph_of == g] - labels.min()
        assert torch.equal(feats[g].sum(1), torch.ones(len(want)))
        assert torch.equal(feats[g].argmax(1), torch.from_numpy(want))


def test_learns_above_majority(mutag: Mutag, learned: tuple[RunSummary, RunDir]) -> None:
    summary, _ = learned
    y = graph_labels(mutag.graphs).numpy()
    val_majority = _majority_rate(y[mutag.split.val])
    test_majority = _majority_rate(y[mutag.split.test])
    # 0.25 above majority on 18 graphs is 5 graphs more than a constant predictor gets right.
    assert summary["metrics"]["val"] >= val_majority + 0.25
    assert summary["metrics"]["test"] > test_majority
    assert 0 <= summary["best_epoch"] < summary["epochs_run"] == FAST.epochs


def test_evaluate_reproduces_recorded_metrics(mutag: Mutag, learned: tuple[RunSummary, RunDir]) -> None:
    summary, run = learned
    best = torch.load(run.path / RunDir.BEST, weights_only=True)
    assert best["epoch"] == summary["best_epoch"]
    for part in ("train", "val", "test"):
        value = _evaluate(mutag, best["model"], part, FAST.batch_size)
        assert value == summary["metrics"][part]
    # The best epoch's logged validation metric is the one the restored state reproduces.
    rows = run.read_metrics()
    assert rows[summary["best_epoch"]]["val_accuracy"] == summary["metrics"]["val"]
    assert max(r["val_accuracy"] for r in rows) == summary["metrics"]["val"]


def test_run_files(mutag: Mutag, learned: tuple[RunSummary, RunDir]) -> None:
    summary, run = learned
    lines = (run.path / RunDir.METRICS).read_text().splitlines()
    assert len(lines) == summary["epochs_run"]
    assert [json.loads(line)["epoch"] for line in lines] == list(range(summary["epochs_run"]))
    last = torch.load(run.path / RunDir.LAST, weights_only=True)
    assert last["epoch"] == summary["epochs_run"] - 1
    on_disk = json.loads((run.path / RunDir.SUMMARY).read_text())
    assert on_disk == summary.to_json()  # the summary fit returns is the one it wrote
    assert on_disk["split"]["train"] == len(mutag.split.train)
    assert (on_disk["split"]["val"], on_disk["split"]["test"]) == (18, 18)
    assert set(on_disk["metrics"]) == {"train", "val", "test"}
    config = run.load_config()
    assert Split.from_dict(config["split"]).val.tolist() == mutag.split.val.tolist()
    assert config["model"]["hidden"] == 16 and config["train"]["lr"] == FAST.lr
    assert sorted(p.name for p in run.path.iterdir()) == sorted(
        [RunDir.CONFIG, RunDir.METRICS, RunDir.LAST, RunDir.BEST, RunDir.SUMMARY, RunDir.CURVES])


def test_failed_atomic_write_keeps_old_file(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    run.save_checkpoint({"w": torch.ones(2)})
    with pytest.raises(Exception):  # noqa: B017  (pickle raises a type that differs across versions)
        run.save_checkpoint({"w": lambda: None})  # not picklable: fails mid-write
    assert [p.name for p in run.path.iterdir()] == [RunDir.LAST]
    assert torch.equal(run.load_checkpoint()["w"], torch.ones(2))


class Killed(RuntimeError):
    pass


def test_resume_matches_uninterrupted(mutag: Mutag, tmp_path: Path) -> None:
    # Dropout draws from the torch RNG, so equality needs its state restored too.
    model_cfg = replace(mutag.model_cfg, dropout=0.2)
    cfg = replace(FAST, epochs=6, patience=6, seed=3)
    args = (mutag.cache_path, mutag.graphs, mutag.split, model_cfg, cfg)
    a = train_graph_level(*args, tmp_path / "a")

    def kill_after_epoch_2(row: dict) -> None:
        if row["epoch"] == 2:
            raise Killed

    with pytest.raises(Killed):
        train_graph_level(*args, tmp_path / "b", log=kill_after_epoch_2)
    assert not (tmp_path / "b" / RunDir.SUMMARY).exists()
    torch.manual_seed(12345)  # whatever the process did meanwhile must not matter
    b = train_graph_level(*args, tmp_path / "b", resume=True)

    assert b == a
    run_a, run_b = RunDir(tmp_path / "a"), RunDir(tmp_path / "b")
    # Wall-clock keys (epoch seconds, input stall) aside, the rows are the same.
    assert without_timing(run_b.read_metrics()) == without_timing(run_a.read_metrics())
    for name in (RunDir.BEST, RunDir.LAST):
        sa, sb = run_a.load_checkpoint(name)["model"], run_b.load_checkpoint(name)["model"]
        assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_resume_refuses_a_different_run(mutag: Mutag, learned: tuple[RunSummary, RunDir]) -> None:
    _, run = learned
    for (model_cfg, cfg), key in (((mutag.model_cfg, replace(FAST, seed=1)), "train.seed"),
                                  ((replace(mutag.model_cfg, hidden=8), FAST), "model.hidden")):
        with pytest.raises(UsageError, match=f"cannot resume .* in {key}"):
            train_graph_level(mutag.cache_path, mutag.graphs, mutag.split, model_cfg, cfg, run.path, resume=True)


def test_early_stopping_restores_best(mutag: Mutag, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Scripted validation: best at epoch 1, then a tie and a drop -> patience 2 stops after epoch 3.
    script = iter([0.5, 0.9, 0.9, 0.8])
    state = {"scripted": True}

    def fake_metric(out: torch.Tensor, y: torch.Tensor) -> float:
        # After the scripted epochs, a fingerprint of the outputs identifies the model state.
        return next(script) if state["scripted"] else float(out.double().sum())

    def stop_script(row: dict) -> None:
        state["scripted"] = row["epoch"] < 3

    monkeypatch.setitem(graph_mod.METRICS, "accuracy", fake_metric)
    cfg = replace(FAST, epochs=20, patience=2)
    run = RunDir(tmp_path / "run")
    summary = train_graph_level(mutag.cache_path, mutag.graphs, mutag.split, mutag.model_cfg, cfg, run,
                                log=stop_script)
    assert (summary["best_epoch"], summary["epochs_run"], summary["stopped_early"]) == (1, 4, True)
    assert len(run.read_metrics()) == 4

    # The reported numbers come from the best state, not the last one (lr > 0: they differ).
    def fingerprint(name: str) -> float:
        return _evaluate(mutag, run.load_checkpoint(name)["model"], "val", cfg.batch_size)

    assert run.load_checkpoint(RunDir.BEST)["epoch"] == 1
    assert summary["metrics"]["val"] == fingerprint(RunDir.BEST) != fingerprint(RunDir.LAST)


def test_zero_lr_stops_after_patience(mutag: Mutag, tmp_path: Path) -> None:
    cfg = replace(FAST, lr=0.0, epochs=20, patience=2)
    args = (mutag.cache_path, mutag.graphs, mutag.split, mutag.model_cfg, cfg, tmp_path / "r")
    summary = train_graph_level(*args)
    # Validation metric and loss never move from epoch 0: an exact tie is no improvement, so the run ends after
    # 1 + patience epochs; it keeps the later of tied epochs (the selection rule's last tie-break).
    assert (summary["best_epoch"], summary["epochs_run"], summary["stopped_early"]) == (2, 3, True)
    # Resuming a run that already stopped trains nothing more and reports the same.
    assert train_graph_level(*args, resume=True) == summary
    assert len(RunDir(tmp_path / "r").read_metrics()) == 3


def test_aggregate_over_seeds(tmp_path: Path) -> None:
    runs = []
    for seed, val in enumerate([0.5, 0.7, 0.9]):
        run = RunDir(tmp_path / str(seed))
        run.write_summary({"metrics": {"val": val, "test": 1.0}})
        runs.append(run)
    agg = aggregate(runs)
    assert agg["val"]["values"] == [0.5, 0.7, 0.9]
    assert agg["val"]["mean"] == pytest.approx(0.7)
    assert agg["val"]["std"] == pytest.approx(np.std([0.5, 0.7, 0.9]))
    assert agg["test"] == {"mean": 1.0, "std": 0.0, "values": [1.0, 1.0, 1.0]}
    assert agg == aggregate([r.path for r in runs])


def test_loader_workers_give_the_same_batches(mutag: Mutag) -> None:
    args = (mutag.cache_path, mutag.graphs, mutag.split, "accuracy", 16, 5, "cpu")
    inline, workers = GraphTask(*args), GraphTask(*args, loader_workers=1)
    assert workers.train_stream.cache.in_memory is False  # workers read the file themselves
    for epoch in (0, 3):
        a, b = list(inline.train_batches(epoch)), list(workers.train_batches(epoch))
        assert len(a) == len(b) > 1
        for x, y in zip(a, b):
            assert torch.equal(x.index, y.index) and torch.equal(x.powers, y.powers) and torch.equal(x.x, y.x)


def test_packed_and_padded_layouts_train_to_the_same_metrics(mutag: Mutag, tmp_path: Path) -> None:
    """A short run, same seed: the packed layout (with the stream's cached log-powers) reproduces the padded one.

    Dropout on (both layouts draw the same masks), the preset's shape (hidden 64, 4 heads, 2 layers).
    """
    from xmask_cli.engine.training.loop import train_task

    cfg = replace(FAST, epochs=4, patience=4, seed=2, lr=1e-3)
    base = replace(mutag.model_cfg, hidden=64, heads=4, layers=2, dropout=0.1, head_powers=None)
    runs = {}
    for layout, log_mask in (("padded", None), ("packed", (base.eps, base.outside_support))):
        task = GraphTask(mutag.cache_path, mutag.graphs, mutag.split, "accuracy", 32, seed=2, device="cpu",
                         log_mask=log_mask)
        summary = train_task(task, replace(base, graph_layout=layout), cfg, tmp_path / layout)
        runs[layout] = (summary, without_timing(RunDir(tmp_path / layout).read_metrics()))
    (s_pad, rows_pad), (s_pack, rows_pack) = runs["padded"], runs["packed"]
    assert next(iter(GraphTask(mutag.cache_path, mutag.graphs, mutag.split, "accuracy", 32, seed=2, device="cpu",
                               log_mask=(base.eps, "hard")).train_batches(0))).powers is None  # the cached path ran
    assert len(rows_pad) == len(rows_pack) == 4
    for a, b in zip(rows_pad, rows_pack):
        assert a.keys() == b.keys()
        for key in a:
            if isinstance(a[key], float):
                assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-7), (a["epoch"], key)
            else:
                assert b[key] == a[key], (a["epoch"], key)
    for part in ("train", "val", "test"):
        assert s_pack["metrics"][part] == pytest.approx(s_pad["metrics"][part], rel=1e-6), part
    assert s_pack["best_epoch"] == s_pad["best_epoch"]


def test_the_stores_log_pairs_train_to_the_dense_powers_numbers(shared_data: Path, tmp_path: Path) -> None:
    """PROTEINS (graphs of 4 to 620 nodes), the preset's model with dropout: a few training steps and the
    validation outputs through the store's log pairs equal, bit for bit, those of the same model fed the
    cache's dense powers (per-graph reads, the log taken by the model's own X-LogSMask term)."""
    from xmask_cli.engine.runs.experiment import Experiment

    cfg = resolve("proteins")
    exp = Experiment.load(cfg, cache_dir=tmp_path / "cache", data_root=shared_data, offline=True)
    split = graph_split(exp.graphs.spec.split, exp.graphs.dataset, seed=0)
    split = replace(split, train=split.train[np.argsort(-exp.graphs.num_nodes[split.train])][:160])  # large ones
    spec = graph_mod.log_mask_of(cfg)
    assert spec is not None
    tasks = [GraphTask(exp.cache_path, exp.graphs, split, "accuracy", 32, 0, "cpu", node_struct="degree",
                       log_mask=log_mask) for log_mask in (spec, None)]
    torch.manual_seed(0)
    models = [XMaskNet(exp.model_config(tasks[0]))]
    models.append(XMaskNet(exp.model_config(tasks[1])))
    models[1].load_state_dict(models[0].state_dict())
    # Every graph on its dense grid: the pair path for large sparse graphs (only the log pairs feed it) agrees to
    # float rounding, not bit for bit (tests/model/test_packed_path.py compares it).
    models[0].packed_path.pair_min_nodes = None
    runs = []
    for task, model in zip(tasks, models):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        torch.manual_seed(1)
        model.train()
        losses = []
        for batch in task.train_batches(0):
            assert (batch.log_powers is None) == (task is tasks[1])
            opt.zero_grad()
            loss, _ = task.loss(model, batch)
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        runs.append((torch.stack(losses), task.outputs(model, "val")[0]))
    assert len(runs[0][0]) == 5 and runs[0][0].std() > 0
    assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])
