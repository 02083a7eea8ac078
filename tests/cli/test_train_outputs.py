"""``xmask train`` checks every folder and file it will write before any work: a runs folder that is a file,
read-only or not writable exits 5, a folder planted under one of a run's file names exits 2 naming it; neither
loads the dataset (the cache stays empty) nor leaves anything that blocks the next run."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_helpers import one_error_line, run

ARGS = ["--preset", "graph-level", "--set", "model.hidden=8", "--set", "model.layers=1", "--set", "train.epochs=1",
        "--device", "cpu", "--name", "r"]


def _train(runs: Path, cache: Path, *extra: str):
    return run("train", *ARGS, "--runs-dir", str(runs), "--cache-dir", str(cache), *extra)


def _no_work(cache: Path) -> None:
    """Nothing was loaded or prepared: the cache folder holds no file."""
    assert not cache.exists() or not any(p.is_file() for p in cache.rglob("*"))


def test_a_runs_dir_that_is_a_file_is_exit_5_before_any_work(tmp_path):
    (tmp_path / "runs").write_text("not a folder\n")
    for runs in (tmp_path / "runs", tmp_path / "runs" / "deeper"):
        r = _train(runs, tmp_path / "cache")
        line = one_error_line(r)
        assert r.exit_code == 5 and f"runs folder {runs / 'r'}" in line and "is a file, not a folder" in line
        assert "--runs-dir" in line
    assert (tmp_path / "runs").read_text() == "not a folder\n"
    _no_work(tmp_path / "cache")


@pytest.mark.parametrize("resume", [False, True])
def test_a_runs_dir_on_a_read_only_mount_is_exit_5_before_any_work(tmp_path, read_only_tmpfs, resume):
    def killed_run(root: Path) -> None:  # a run killed before its first checkpoint: config.json only
        (root / "runs" / "r" / "0").mkdir(parents=True)
        (root / "runs" / "r" / "0" / "config.json").write_text("{}")

    ro = read_only_tmpfs(killed_run if resume else lambda root: None)
    r = _train(ro / "runs", tmp_path / "cache", *(["--resume"] if resume else []))
    line = one_error_line(r)
    assert r.exit_code == 5 and "read-only file system" in line and str(ro / "runs" / "r") in line
    _no_work(tmp_path / "cache")


@pytest.mark.parametrize("where, name", [("r/0", "summary.json"), ("r/0", "best.pt"), ("r/0", ".lock"),
                                         ("r", "aggregate.json")])
def test_a_folder_planted_at_a_run_file_s_name_is_exit_2_naming_it(tmp_path, where, name):
    planted = tmp_path / "runs" / where / name
    planted.mkdir(parents=True)
    (planted / "keep.txt").write_text("mine\n")
    for extra in ([], ["--overwrite"], ["--resume"]):
        r = _train(tmp_path / "runs", tmp_path / "cache", "--seeds", "0-1", *extra)
        line = one_error_line(r)
        assert r.exit_code == 2 and f"{planted} is a folder, not a file" in line, line
    assert (planted / "keep.txt").read_text() == "mine\n"
    _no_work(tmp_path / "cache")
