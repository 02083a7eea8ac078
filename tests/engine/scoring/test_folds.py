"""Errica et al.'s protocol: stratified outer folds with an inner holdout, end to end on a tiny MUTAG run."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.cli_helpers import one_error_line, run
from xmask_cli.engine.scoring.folds import outer_folds, read_fold_file, write_fold_files
from xmask_cli.errors import ConfigError

TINY = ["--set", "model.hidden=16", "--set", "model.layers=1", "--set", "train.epochs=2",
        "--set", "train.warmup_epochs=0", "--set", "train.lr=1e-2"]


def _labels(n0=125, n1=63, n2=0):
    """MUTAG's class sizes (125 / 63) by default, in a shuffled order."""
    y = np.array([0] * n0 + [1] * n1 + [2] * n2)
    return np.random.default_rng(1).permutation(y)


@pytest.mark.parametrize("k", [2, 3, 10])
def test_folds_are_disjoint_cover_every_graph_once_as_test_and_are_stratified(k):
    y = _labels(n2=40)
    folds = outer_folds(y, k, seed=0)
    assert len(folds) == k
    tests = np.concatenate([f.test for f in folds])
    assert np.array_equal(np.sort(tests), np.arange(len(y)))  # each graph is test exactly once
    for f in folds:
        parts = [set(f.train.tolist()), set(f.val.tolist()), set(f.test.tolist())]
        assert not (parts[0] & parts[1] or parts[0] & parts[2] or parts[1] & parts[2])
        assert sum(map(len, parts)) == len(y)  # train + holdout + test = every graph
        # The holdout is 10 % of the outer training part (scikit-learn rounds the test share up).
        assert len(f.val) == int(np.ceil(0.1 * (len(y) - len(f.test))))
        for c in np.unique(y):
            share = np.mean(y == c)
            # Stratified: every part's class counts are the overall share, up to rounding (one graph).
            for part, slack in ((f.test, 1), (f.val, 1), (f.train, 2)):  # train = the rest less the holdout
                assert abs(np.sum(y[part] == c) - share * len(part)) <= slack + 1e-9, (k, c)


def test_the_same_seed_gives_the_same_folds_and_another_seed_others():
    y = _labels()
    a, b, c = outer_folds(y, 10, seed=3), outer_folds(y, 10, seed=3), outer_folds(y, 10, seed=4)
    for fa, fb in zip(a, b):
        for part in ("train", "val", "test"):
            assert np.array_equal(getattr(fa, part), getattr(fb, part))
    assert any(not np.array_equal(fa.test, fc.test) for fa, fc in zip(a, c))


def test_fold_files_round_trip(tmp_path):
    folds = outer_folds(_labels(), 3, seed=0)
    paths = write_fold_files(folds, tmp_path / "folds")
    assert [p.name for p in paths] == ["fold-0.json", "fold-1.json", "fold-2.json"]
    for f, p in zip(folds, paths):
        back = read_fold_file(p)
        assert back.name == f.name == f"fold-{paths.index(p)}-of-3"
        for part in ("train", "val", "test"):
            assert np.array_equal(getattr(back, part), getattr(f, part))


def test_a_class_smaller_than_k_is_refused():
    with pytest.raises(ConfigError, match="fewer than the 10 folds"):
        outer_folds(np.array([0] * 50 + [1] * 5), 10, seed=0)


@pytest.fixture(scope="module")
def two_folds(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("folds")
    r = run("--format", "json", "train", "--preset", "graph-level", *TINY, "--folds", "2", "--seeds", "0-1",
            "--device", "cpu", "--runs-dir", str(root / "runs"), "--cache-dir", str(root / "cache"))
    assert r.exit_code == 0, r.stderr
    return root, json.loads(r.stdout)


def test_a_two_fold_two_seed_run_end_to_end(two_folds):
    root, out = two_folds
    runs = root / "runs" / "mutag-graph"
    assert [(r["seed"], r["fold"]) for r in out["runs"]] == [(0, 0), (0, 1), (1, 0), (1, 1)]  # json: every fold
    for r in out["runs"]:
        folder = runs / str(r["seed"]) / f"fold-{r['fold']}"
        assert r["run_dir"] == str(folder) and (folder / "best.pt").is_file()
        split = read_fold_file(runs / str(r["seed"]) / "folds" / f"fold-{r['fold']}.json")
        # The run trained and scored the fold its file records.
        saved = json.loads((folder / "config.json").read_text())
        assert saved["split"]["test"] == split.test.tolist() and saved["split"]["val"] == split.val.tolist()
        assert saved["config"]["data"]["fold"] == r["fold"] and saved["config"]["data"]["folds"] == 2
        assert r["split"]["test"] == len(split.test)
    # MUTAG: 188 graphs, each test once per seed.
    for seed in (0, 1):
        tests = [read_fold_file(runs / str(seed) / "folds" / f"fold-{i}.json").test for i in (0, 1)]
        assert sorted(np.concatenate(tests).tolist()) == list(range(188))
    # Aggregates: over every (seed, fold) run, and over each seed's folds.
    tests = [r["metrics"]["test"] for r in out["runs"]]
    assert out["aggregate"]["test"]["mean"] == pytest.approx(np.mean(tests))
    assert out["aggregate"]["test"]["std"] == pytest.approx(np.std(tests))
    assert out["folds"]["per_seed"]["1"]["test"]["mean"] == pytest.approx(np.mean(tests[2:]))
    assert json.loads((runs / "aggregate.json").read_text())["aggregate"] == out["aggregate"]


def test_the_folds_are_the_same_for_another_model_with_the_same_seed(two_folds, tmp_path):
    root, _ = two_folds
    r = run("--format", "json", "train", "--preset", "graph-level", *TINY, "--set", "model.layers=2", "--folds", "2",
            "--set", "train.epochs=1", "--device", "cpu", "--runs-dir", str(tmp_path / "runs"),
            "--cache-dir", str(root / "cache"))
    assert r.exit_code == 0, r.stderr
    for i in (0, 1):
        a = (root / "runs" / "mutag-graph" / "0" / "folds" / f"fold-{i}.json").read_text()
        assert (tmp_path / "runs" / "mutag-graph" / "0" / "folds" / f"fold-{i}.json").read_text() == a


def test_eval_reproduces_a_fold(two_folds):
    root, out = two_folds
    rec = out["runs"][3]
    e = run("--format", "json", "eval", rec["run_dir"], "--split", "test", "--device", "cpu",
            "--cache-dir", str(root / "cache"))
    assert e.exit_code == 0, e.stderr
    ev = json.loads(e.stdout)
    assert ev["metrics"]["test"] == rec["metrics"]["test"] == ev["recorded"]["test"]


@pytest.mark.parametrize("args, needle", [
    (["--preset", "ogbg-molhiv", "--folds", "10"], "official split"),
    (["--preset", "cora", "--folds", "10"], "graph-level protocol"),
    (["--preset", "graph-level", "--folds", "1"], "--folds"),
    (["--preset", "graph-level", "--set", "data.folds=3", "--set", "data.fold=3"], "data.fold"),
])
def test_folds_where_they_do_not_apply_are_exit_2(args, needle, tmp_path):
    r = run("train", *args, "--cache-dir", str(tmp_path / "c"), "--runs-dir", str(tmp_path / "runs"))
    assert r.exit_code == 2, r.stderr
    assert needle in one_error_line(r)
