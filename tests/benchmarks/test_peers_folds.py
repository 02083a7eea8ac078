"""benchmarks/peers_folds.py and ``peers.py --folds --resume``: a fold killed mid-run goes on from its per-epoch
checkpoint as an uninterrupted run would, finished folds are kept from the JSON result, and a fold recorded at
another budget or on another split is trained again."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from tests.benchmarks import load_script

DATA = Path(os.environ.get("XMASK_TEST_DATA", Path(__file__).resolve().parents[3] / "shared" / "datasets"))


@pytest.fixture(scope="module")
def peers():
    return load_script("peers")


@pytest.fixture(scope="module")
def folds():
    return load_script("peers_folds")


def _toy(n: int = 40) -> tuple[list, torch.Tensor]:
    """``n`` small random graphs whose label is whether they have more than 4 nodes (learnable, two classes)."""
    from torch_geometric.data import Data

    gen = torch.Generator().manual_seed(0)
    graphs = []
    for i in range(n):
        k = 3 + i % 4
        ei = torch.randint(0, k, (2, 2 * k), generator=gen)
        graphs.append(Data(x=torch.rand(k, 3, generator=gen), edge_index=ei, y=torch.tensor([int(k > 4)]),
                           num_nodes=k))
    return graphs, torch.tensor([int(g.y) for g in graphs])


def test_a_fold_killed_mid_run_resumes_from_its_checkpoint_as_if_never_stopped(folds, tmp_path, monkeypatch):
    data, labels = _toy()
    args = (data, labels, "GIN", 0, 3, 1, 6, 100)
    whole = folds.run_graph_fold(*args)  # no checkpoint: the uninterrupted run
    ckpt = tmp_path / "fold.pt"
    real_epoch, calls = folds.common.graph_epoch, [0]

    def dies_in_epoch_3(*a, **k):
        calls[0] += 1
        if calls[0] == 4:
            raise KeyboardInterrupt  # killed during the fourth epoch: three are checkpointed
        return real_epoch(*a, **k)

    monkeypatch.setattr(folds.common, "graph_epoch", dies_in_epoch_3)
    with pytest.raises(KeyboardInterrupt):
        folds.run_graph_fold(*args, checkpoint=ckpt)
    assert ckpt.is_file() and torch.load(ckpt, weights_only=True)["epoch"] == 2
    monkeypatch.setattr(folds.common, "graph_epoch", real_epoch)
    calls[0] = 0
    resumed = folds.run_graph_fold(*args, checkpoint=ckpt)
    assert not ckpt.exists()  # removed once the fold is done
    for key in ("metrics", "best_epoch", "epochs_run", "split", "epochs", "patience"):
        assert resumed[key] == whole[key], key
    assert whole["epochs_run"] == 6


def _run(peers, out: Path, *extra: str) -> int:
    return peers.main(["--only", "graph", "--folds", "3", "--seeds", "0", "--graph-datasets", "MUTAG",
                       "--graph-epochs", "2", "--graph-patience", "2", "--threads", "1", "--data-root", str(DATA),
                       "--out", str(out), "--checkpoint-dir", str(out.parent / "ckpt"), *extra])


def _key(r: dict) -> tuple:
    return r["model"], r["seed"], r["fold"]


@pytest.mark.skipif(not (DATA / "MUTAG").exists() and not (DATA / "TUDataset").exists(), reason="needs MUTAG")
def test_resume_keeps_finished_folds_and_trains_the_rest(peers, tmp_path, monkeypatch):
    whole = tmp_path / "whole" / "MUTAG-peers.json"
    assert _run(peers, whole) == 0
    want = {_key(r): r for r in json.loads(whole.read_text())["runs"]}
    assert len(want) == 6  # two models x three folds

    out = tmp_path / "cut" / "MUTAG-peers.json"
    real, trained = peers.run_graph_fold, []

    def killed_after_one(*a, **k):
        if trained:
            raise KeyboardInterrupt  # the session ends during the second fold
        trained.append(a[2:6])
        return real(*a, **k)

    monkeypatch.setattr(peers, "run_graph_fold", killed_after_one)
    with pytest.raises(KeyboardInterrupt):
        _run(peers, out)
    assert [_key(r) for r in json.loads(out.read_text())["runs"]] == [("GIN", 0, 0)]  # saved as it finished

    def counted(*a, **k):
        trained.append(a[2:6])
        return real(*a, **k)

    trained.clear()
    monkeypatch.setattr(peers, "run_graph_fold", counted)
    assert _run(peers, out, "--resume") == 0
    got = json.loads(out.read_text())["runs"]
    assert len(trained) == 5 and ("GIN", 0, 3, 0) not in trained  # the finished fold is not trained again
    assert {_key(r) for r in got} == set(want)
    for r in got:  # the same numbers as the uninterrupted sweep
        w = want[_key(r)]
        assert (r["metrics"], r["best_epoch"], r["epochs_run"], r["split"]) == \
            (w["metrics"], w["best_epoch"], w["epochs_run"], w["split"])

    trained.clear()
    assert _run(peers, out, "--resume", "--graph-patience", "1") == 0  # another budget: nothing is kept
    assert len(trained) == 6


def test_finished_fold_refuses_a_damaged_or_foreign_record(folds):
    from xmask_cli.engine.folds import outer_folds

    _, labels = _toy()
    split = folds.common.split_info(outer_folds(labels, 3, 0)[1], 0)
    good = {"dataset": "T", "model": "GIN", "seed": 0, "fold": 1, "folds": 3, "epochs": 6, "patience": 2,
            "metrics": {"train": 0.9, "val": 0.8, "test": 0.7}, "best_epoch": 2, "epochs_run": 5, "split": split}
    find = lambda runs: folds.finished_fold(runs, labels, "T", "GIN", 0, 3, 1, 6, 2)  # noqa: E731
    assert find([good]) is good
    bad = [{**good, "metrics": {**good["metrics"], "test": 1.5}},  # not an accuracy
           {**good, "split": {**split, "test": split["test"] + 1}},  # another split
           {**good, "epochs_run": 7},  # beyond the budget
           {**good, "best_epoch": 5},  # selected after the last epoch run
           {**good, "patience": 3}]  # another budget
    for r in bad:
        assert find([r]) is None
