"""``xmask ablate --folds K``: every variant through train's fold sweep on the same outer folds, the paired
differences from ``full`` per fold, a killed ablation resumed to the numbers of an uninterrupted one, and the
settings ``xmask train --folds`` refuses refused alike."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from xmask_cli.ablate import run_ablation
from xmask_cli.cli import app
from xmask_cli.engine.runs import sweep
from xmask_cli.engine.training import loop

TINY = ["model.hidden=8", "model.heads=2", "model.layers=2", "train.epochs=2", "train.warmup_epochs=1",
        "train.patience=50", "structure.spd.enabled=false", "structure.spectrum.enabled=false"]
VARIANTS = ["full", "no-logmask", "no-multihead"]
FOLDS = [f"0/fold-{i}" for i in range(3)]


@pytest.fixture(scope="module")
def folds(tmp_path_factory) -> tuple[Path, object]:
    """One uninterrupted 3-fold ablation of three variants, seed 0."""
    root = tmp_path_factory.mktemp("ablate-folds")
    result = run_ablation("graph-level", TINY, seeds=[0], folds=3, variants=VARIANTS, out_dir=root / "abl",
                          cache_dir=root / "cache")
    return root, result


def _summary(root: Path, variant: str, key: str) -> dict:
    return json.loads((root / "abl" / "runs" / f"mutag-graph-{variant}" / key / "summary.json").read_text())


def test_every_variant_runs_the_same_outer_folds(folds):
    root, result = folds
    assert result.folds == 3 and [r.variant for r in result.rows] == VARIANTS
    assert all(r.status == "ok" and list(r.runs) == FOLDS for r in result.rows)
    fold_files = {v: [json.loads((root / "abl" / "runs" / f"mutag-graph-{v}" / "0" / "folds" / f"fold-{i}.json")
                                 .read_text()) for i in range(3)] for v in VARIANTS}
    assert fold_files["no-logmask"] == fold_files["full"] == fold_files["no-multihead"]
    # The three test parts are disjoint and cover MUTAG's 188 graphs; each holdout lies in its fold's rest.
    tests = [np.array(f["test"]) for f in fold_files["full"]]
    assert np.array_equal(np.sort(np.concatenate(tests)), np.arange(188))
    for f in fold_files["full"]:
        assert not set(f["val"]) & set(f["test"]) and not set(f["train"]) & set(f["val"] + f["test"])
    # What each run recorded as its split is the same for every variant.
    for key in FOLDS:
        splits = {json.dumps(_summary(root, v, key)["split"], sort_keys=True) for v in VARIANTS}
        assert len(splits) == 1
        assert {(_summary(root, v, key)["fold"], _summary(root, v, key)["folds"]) for v in VARIANTS} == \
            {(int(key[-1]), 3)}


def test_full_is_what_train_folds_gives(folds, tmp_path):
    """The ``full`` row's folds are ``xmask train --folds 3``'s, number for number (one fold code path)."""
    root, result = folds
    r = CliRunner().invoke(app, ["--format", "json", "train", "--preset", "graph-level",
                                 *sum((["--set", s] for s in TINY), []), "--folds", "3", "--seeds", "0",
                                 "--runs-dir", str(tmp_path), "--cache-dir", str(root / "cache"), "--device", "cpu"])
    assert r.exit_code == 0, r.stderr
    trained = {f"{run['seed']}/fold-{run['fold']}": run["metrics"] for run in json.loads(r.stdout)["runs"]}
    assert trained == result.rows[0].runs


def test_paired_deltas_match_the_runs_own_summaries(folds):
    root, result = folds
    full = np.array([_summary(root, "full", k)["metrics"]["test"] for k in FOLDS])
    table = list(csv.DictReader((root / "abl" / "ablation.csv").open()))
    on_disk = json.loads((root / "abl" / "ablation.json").read_text())
    assert on_disk == json.loads(json.dumps(result.to_json()))
    for i, row in enumerate(result.rows):
        test = np.array([_summary(root, row.variant, k)["metrics"]["test"] for k in FOLDS])
        assert (row.test_mean, row.test_std) == pytest.approx((test.mean(), test.std(ddof=0)), abs=1e-12)
        if row.variant == "full":
            assert row.paired is None and on_disk["rows"][i]["paired"] is None
            continue
        d = test - full
        p = row.paired
        assert list(p.values) == FOLDS and np.allclose(list(p.values.values()), d, atol=1e-12)
        assert (p.mean, p.std) == pytest.approx((d.mean(), d.std(ddof=0)), abs=1e-12)
        assert (p.above, p.below, p.ties) == (int((d > 0).sum()), int((d < 0).sum()), int((d == 0).sum()))
        assert on_disk["rows"][i]["paired"]["values"] == pytest.approx(dict(zip(FOLDS, d)), abs=1e-12)
        # ablation.csv: the summary row carries the paired mean and std, each fold's row its own difference.
        mine = {r["run"]: r for r in table if r["variant"] == row.variant}
        assert list(mine) == ["all", *FOLDS]
        assert (float(mine["all"]["paired_delta"]), float(mine["all"]["paired_std"])) == \
            pytest.approx((d.mean(), d.std()), abs=1e-9)
        assert (int(mine["all"]["above"]), int(mine["all"]["below"])) == (p.above, p.below)
        assert [float(mine[k]["paired_delta"]) for k in FOLDS] == pytest.approx(d, abs=1e-9)
        assert [(mine[k]["seed"], mine[k]["fold"]) for k in FOLDS] == [("0", "0"), ("0", "1"), ("0", "2")]


def test_a_killed_ablation_resumes_to_the_uninterrupted_numbers(folds, tmp_path, monkeypatch):
    """Killed during no-logmask's fold 1: the rerun reads full back, trains no epoch of fold 0, goes on
    with fold 1's second epoch and trains fold 2; every number equals the uninterrupted ablation's."""
    root, whole = folds
    real = sweep.train_seeds
    trained: list[tuple[str, int | None, int]] = []

    def watched(kill: bool):
        def train_seeds(cfg, seeds, **kw):
            fold = [None]

            def on_run_start(seed, f, epochs):
                fold[0] = f

            def on_epoch(seed, row):
                trained.append((cfg.run.name, fold[0], row["epoch"]))
                if kill and (cfg.run.name, fold[0], row["epoch"]) == ("mutag-graph-no-logmask", 1, 0):
                    raise KeyboardInterrupt  # the session ends once fold 1's first epoch is checkpointed
            return real(cfg, seeds, on_run_start=on_run_start, on_epoch=on_epoch, **kw)
        return train_seeds

    def ablate():
        return run_ablation("graph-level", TINY, seeds=[0], folds=3, variants=VARIANTS[:2], out_dir=tmp_path / "abl",
                            cache_dir=root / "cache")

    monkeypatch.setattr(sweep, "train_seeds", watched(kill=True))
    with pytest.raises(KeyboardInterrupt):
        ablate()
    assert not (tmp_path / "abl" / "ablation.json").exists()
    trained.clear()
    monkeypatch.setattr(sweep, "train_seeds", watched(kill=False))
    resumed = ablate()
    assert trained == [("mutag-graph-no-logmask", 1, 1), ("mutag-graph-no-logmask", 2, 0),
                       ("mutag-graph-no-logmask", 2, 1)]
    assert [r.reused for r in resumed.rows] == [(0,), ()]
    for got, want in zip(resumed.rows, whole.rows[:2]):
        assert got.runs == want.runs and got.paired == want.paired
        assert (got.test_mean, got.test_std, got.val_mean) == (want.test_mean, want.test_std, want.val_mean)


def _invoke(command: str, args: list[str]) -> tuple[int, str]:
    r = CliRunner().invoke(app, [command, *args])
    return r.exit_code, r.stderr


@pytest.mark.parametrize("args", [
    ["--preset", "graph-level", "--folds", "1"],
    ["--preset", "graph-level", "--set", "data.folds=1"],
    ["--preset", "node-level", "--dataset", "cora", "--folds", "3"],
    ["--preset", "ogbg-molhiv", "--folds", "3"],
    ["--preset", "graph-level", "--folds", "70"],  # MUTAG's smaller class holds 63 graphs
])
def test_what_train_refuses_ablate_refuses_in_its_words(args, tmp_path, monkeypatch):
    """One ``error:`` line, exit 2, train's sentence (the command's name aside); no training, no ablation folder.
    (Too many folds for a class is found once the labels are read, by ``full``'s sweep, as train finds it.)"""
    runs = ["--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"), "--seeds", "0"]
    code, train_err = _invoke("train", [*args, *runs, "--set", "train.epochs=1"])
    monkeypatch.setattr(loop, "train_task", lambda *a, **k: pytest.fail("trained"))
    ablate = [*args, "--out", str(tmp_path / "abl"), "--cache-dir", str(tmp_path / "cache"), "--seeds", "0"]
    code_a, ablate_err = _invoke("ablate", [*ablate, "--set", "train.epochs=1"])
    errors = [line for line in ablate_err.splitlines() if not line.startswith("ablation ")]  # progress lines aside
    assert code == code_a == 2 and len(errors) == 1 and errors[0].startswith("error: ")
    assert errors == [line.replace("xmask train", "xmask ablate") for line in train_err.splitlines()]
    assert not (tmp_path / "abl").exists() and not (tmp_path / "runs").exists()
