"""Run files read back are untrusted: a damaged summary, config, metrics or fold file is exit 6, named."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.cli_helpers import one_error_line, run
from tests.engine.training.test_loop import ToyTask
from xmask_cli.engine.runs.folder import RunDir
from xmask_cli.engine.scoring.folds import outer_folds, read_fold_file, write_fold_files
from xmask_cli.engine.training.loop import TrainConfig, fit
from xmask_cli.errors import RunNotFoundError

NESTED = "[" * 100_000 + "]" * 100_000
TINY = ["--set", "model.hidden=8", "--set", "model.heads=2", "--set", "model.layers=1", "--set", "train.epochs=1",
        "--set", "train.warmup_epochs=0"]


@pytest.fixture
def toy_run(tmp_path) -> Path:
    folder = tmp_path / "runs" / "toy" / "0"
    torch.manual_seed(0)
    fit(ToyTask(), torch.nn.Linear(2, 1), TrainConfig(epochs=2, lr=0.05, warmup_epochs=0, seed=0), folder,
        model_config={"toy": 1})
    return folder


@pytest.mark.parametrize("name, text, needle", [
    ("summary.json", NESTED, "is damaged (nested more than 64 levels deep)"),
    ("summary.json", "[1, 2, 3]", "is damaged (not a JSON object but an array)"),
    ("summary.json", '{"metrics": [0.5]}', "is damaged ('metrics' is an array, not what xmask writes there)"),
    ("summary.json", '{"metrics": {"val": 1}, "best_epoch": "3"}', "is damaged ('best_epoch' is a string"),
    ("metrics.jsonl", '{"epoch": 0}\n' + NESTED + "\n", "line 2 is damaged (nested more than 64 levels deep)"),
    ("metrics.jsonl", '{"epoch": "0"}\n', "line 1 is damaged ('epoch' is a string"),
    ("metrics.jsonl", '{"epoch": 0, "val_mae": "x"}\n', "row 1 is damaged ('val_mae' is not a number)"),
])
def test_runs_compare_of_a_damaged_run_file_is_exit_6_naming_it(toy_run, name, text, needle):
    (toy_run / name).write_text(text)
    r = run("runs", "compare", str(toy_run))
    assert r.exit_code == 6, r.stderr
    line = one_error_line(r)
    assert str(toy_run / name) in line and needle in line


def test_a_summary_that_is_a_fifo_does_not_hang_compare(toy_run):
    import os

    (toy_run / "summary.json").unlink()
    os.mkfifo(toy_run / "summary.json")
    r = run("runs", "compare", str(toy_run))  # not a finished run: a FIFO is no summary
    assert r.exit_code == 6 and f"{toy_run}: no finished run here" in one_error_line(r)
    with pytest.raises(RunNotFoundError, match="summary.json is damaged \\(not a regular file\\)"):
        RunDir(toy_run).read_summary()  # and read directly, it is refused without blocking


def test_a_damaged_fold_file_is_exit_6_naming_it(tmp_path):
    y = np.array([0] * 30 + [1] * 30)
    (path,) = write_fold_files(outer_folds(y, 2, seed=0)[:1], tmp_path / "folds")
    assert read_fold_file(path).test.tolist() == outer_folds(y, 2, seed=0)[0].test.tolist()
    for text, needle in ((NESTED, "nested more than"), ('{"fold": 0, "folds": 2, "train": [1], "val": [2]}',
                                                        "no 'test' field"),
                         ('{"fold": 0, "folds": 2, "train": ["a"], "val": [], "test": []}', "'train' is an array")):
        path.write_text(text)
        with pytest.raises(RunNotFoundError, match=needle) as info:
            read_fold_file(path)
        assert str(info.value).startswith(f"{path} is damaged")
    with pytest.raises(RunNotFoundError, match="is missing"):
        read_fold_file(tmp_path / "folds" / "fold-9.json")


def test_a_damaged_metrics_file_refuses_resume_with_exit_6(toy_run):
    (toy_run / "metrics.jsonl").write_text(NESTED + "\n")
    with pytest.raises(RunNotFoundError, match="metrics.jsonl line 1 is damaged"):
        RunDir(toy_run).read_metrics()


@pytest.fixture(scope="module")
def mutag_run(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("damaged")
    r = run("--format", "json", "train", "--preset", "graph-level", *TINY, "--device", "cpu",
            "--runs-dir", str(root / "runs"), "--cache-dir", str(root / "cache"))
    assert r.exit_code == 0, r.stderr
    return Path(json.loads(r.stdout)["runs"][0]["run_dir"]), root / "cache"


@pytest.mark.parametrize("name, text, needle", [
    ("summary.json", NESTED, "is damaged (nested more than 64 levels deep)"),
    ("summary.json", '{"metrics": {"test": null}}', "is damaged ('metrics' is an object"),
    ("config.json", NESTED, "is damaged (nested more than 64 levels deep)"),
    ("config.json", "[1, 2, 3]", "is damaged (not a JSON object but an array)"),
])
def test_eval_of_a_damaged_run_file_is_exit_6_naming_it(mutag_run, tmp_path, name, text, needle):
    src, cache = mutag_run
    folder = tmp_path / "copy" / "0"
    shutil.copytree(src, folder)
    (folder / name).write_text(text)
    r = run("eval", str(folder), "--device", "cpu", "--cache-dir", str(cache))
    assert r.exit_code == 6, r.stderr
    line = one_error_line(r)
    assert str(folder / name) in line and needle in line


def _damage_best(folder: Path) -> None:
    run_dir = RunDir(folder)
    run_dir.save_checkpoint({**run_dir.load_checkpoint(RunDir.BEST), "val": "x"}, RunDir.BEST)


def _damage_precision(folder: Path) -> None:
    saved = json.loads((folder / "config.json").read_text())
    saved["train"]["precision"] = 16
    (folder / "config.json").write_text(json.dumps(saved))


@pytest.mark.parametrize("name, damage, needle", [
    ("best.pt", _damage_best, "is damaged ('val' is not a number)"),
    ("config.json", _damage_precision, "is damaged ('train.precision' is 16"),
])
def test_eval_of_a_damaged_field_is_exit_6_naming_the_file(mutag_run, tmp_path, name, damage, needle):
    src, cache = mutag_run
    folder = tmp_path / "copy" / "0"
    shutil.copytree(src, folder)
    damage(folder)
    r = run("eval", str(folder), "--device", "cpu", "--cache-dir", str(cache))
    assert r.exit_code == 6, r.stderr
    line = one_error_line(r)
    assert str(folder / name) in line and needle in line
